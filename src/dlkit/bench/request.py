"""What ``dlkit bench`` is asked to run: the workload kinds and one validated request."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from dlkit.errors import InvalidArgumentError
from dlkit.prefetch.config import PrefetchConfig

MAX_MS = 60_000.0  # synthetic cost per batch: a minute is beyond any step worth simulating


class WorkloadKind(str, enum.Enum):
    """What ``dlkit bench`` runs per batch (kept apart from the runner, with the request, so
    the CLI offering the choices does not load the bench's kernels)."""

    RELATIONAL = "relational"  # dlkit.Sampler batches of a database, to a training step
    GATHER = "gather"          # rows from a memory-mapped file, in `dlkit sample` order
    SYNTHETIC = "synthetic"    # a CPU-bound nogil kernel per batch, no data


@dataclass(frozen=True)
class BenchRequest:
    """Everything ``dlkit bench`` needs; the CLI only parses into this."""

    workload: WorkloadKind = WorkloadKind.GATHER  # `dlkit bench`'s default is RELATIONAL
    steps: int = 400                      # batches to time (gather: NextBatch_v2 calls)
    batch_size: int = 256                 # rows (relational: sequences) per batch
    db: str | None = None                 # relational: the database; None: the example
    prefetch: PrefetchConfig = field(default_factory=PrefetchConfig)
    compute_ms: float = 0.0               # synthetic nogil cost added to producing a batch
    consumer_ms: float = 0.0              # synthetic nogil cost added to consuming a batch
    madvise: bool = False                 # madvise(WILLNEED) the next batch's pages
    # the gather workload's data and order
    data: str | None = None               # raw row file; None: a temporary one
    rows: int = 131_072
    row_bytes: int = 512
    manifest: str | None = None           # None: an in-memory manifest over `rows` rows
    dataset: str | None = None
    world_size: int = 1
    rank: int = 0
    stage: str = "train"
    trace: str | None = None
    compare_torch: bool = True

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "workload", WorkloadKind(self.workload))
        except ValueError:
            raise InvalidArgumentError(
                f"workload must be gather or synthetic, or relational, got {self.workload!r}"
            ) from None
        for name in ("steps", "batch_size", "rows", "world_size"):
            if getattr(self, name) < 1:
                raise InvalidArgumentError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.row_bytes < 8:
            raise InvalidArgumentError(f"row_bytes must be at least 8, got {self.row_bytes}")
        for name in ("compute_ms", "consumer_ms"):
            if not 0 <= getattr(self, name) <= MAX_MS:  # not NaN, not infinite
                raise InvalidArgumentError(f"{name} must be from 0 to {MAX_MS:g} ms, got "
                                           f"{getattr(self, name)}")
        if self.trace is not None and self.manifest is None:
            raise InvalidArgumentError("--trace needs --manifest (the manifest the trace was "
                                       "made with)")
        if self.workload is WorkloadKind.SYNTHETIC and (self.trace or self.manifest or self.data):
            raise InvalidArgumentError("the synthetic workload reads no data: drop --data, "
                                       "--manifest and --trace, or use --workload gather")
        if self.workload is WorkloadKind.RELATIONAL and (self.trace or self.manifest or self.data):
            raise InvalidArgumentError("the relational workload samples its own batches: drop "
                                       "--data, --manifest and --trace, or use --workload gather")
        if self.db is not None and self.workload is not WorkloadKind.RELATIONAL:
            raise InvalidArgumentError("--db is the relational workload's database: drop it or "
                                       "use --workload relational")
