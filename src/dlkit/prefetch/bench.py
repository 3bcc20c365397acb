"""``dlkit bench``: the prefetch engine against a no-prefetch sequential loop, same process.

The default workload is what users run: :class:`dlkit.Sampler` train batches of a database
(``--db``, or the bundled example preprocessed into a temporary directory) feeding a consumer
that spends a training step's time on each (``--consumer-ms``, or by default as long as a
batch takes to build, measured first: the case prefetching is for). Timed, one after the
other: the sampler building each batch on demand (``num_prefetch=0``), then with ``--workers``
producer threads ``--buffers-ahead`` deep; with torch installed, a ``DataLoader`` whose
``--workers`` worker processes build the same steps (``Sampler.train_batch``). All must yield
the same batches. The report gives
the cores available and the machine's load beside the speedup, so a number below 1 explains
itself (threads that have no idle core to run on only add overhead).

For the gather and synthetic workloads :func:`run_bench` builds the workload of a
:class:`BenchRequest`, then times, one after the other and over the same steps:

1. the sequential loop: ``produce`` then ``consume`` for each step, no threads;
2. the engine: ``MultiIteratorPrefetcher`` with the request's ``PrefetchConfig``; the consumer
   pulls a lease, consumes it, releases it;
3. optionally ``torch.utils.data.DataLoader`` with worker processes, when torch is importable.

The consumer's *wait* per batch is the time from asking for a batch to having it (in the
sequential loop, the time to produce it). Every loop consumes each batch through the same
checksum kernel; the report says whether the engine (and torch) delivered the sequential loop's
batches (in the same order for the strict policy, as a multiset for best-effort).
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlkit.errors import InvalidArgumentError
from dlkit.nextbatch.cursor import Cursor
from dlkit.nextbatch.run_manifest import DataConfig, DatasetEntry, RunManifest, load_manifest
from dlkit.nextbatch.sampler import SamplingPlan
from dlkit.prefetch.config import (
    IteratorConfig,
    Policy,
    PrefetchConfig,
    WorkloadKind,
    strict_order,
)
from dlkit.prefetch.prefetcher import MultiIteratorPrefetcher
from dlkit.core.gather import burn
from dlkit.prefetch.workloads import (
    IndexOrder,
    RowFile,
    Workload,
    batch_bytes,
    batch_checksum,
    calibrate_burn,
    machine_load,
    gather_workload,
    sample_order,
    synthetic_workload,
    trace_order,
    write_row_file,
)

ProgressFn = Callable[[str, int, int], None]
BENCH_DATASET = "bench"
MAX_MS = 60_000.0  # synthetic cost per batch: a minute is beyond any step worth simulating


@dataclass(frozen=True)
class BenchRequest:
    """Everything ``dlkit bench`` needs; the CLI only parses into this."""

    workload: WorkloadKind = WorkloadKind.GATHER  # `dlkit bench`'s default is RELATIONAL
    steps: int = 400                      # batches to time (gather: NextBatch_v2 calls)
    batch_size: int = 256                 # rows (relational: sequences) per batch
    db: str | None = None                 # relational: the database; None: the example
    consumer_calibrated: bool = False     # relational: consumer_ms from the batch time
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


@dataclass(frozen=True)
class RunResult:
    name: str
    batches: int
    samples: int
    bytes: int
    seconds: float
    wait_p50_us: float
    wait_p99_us: float
    cpu_seconds: float = 0.0    # CPU time of the whole process during the loop

    @property
    def cores(self) -> float:
        """Average cores busy in this process during the loop (parallelism achieved)."""
        return self.cpu_seconds / self.seconds if self.seconds > 0 else 0.0

    @property
    def batches_per_s(self) -> float:
        return self.batches / self.seconds if self.seconds > 0 else 0.0

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "batches_per_s": self.batches_per_s,
                "samples_per_s": self.samples_per_s, "mb_per_s": self.mb_per_s,
                "cores": self.cores}


@dataclass(frozen=True)
class BenchReport:
    """Timings of one bench run. ``identical``: every timed loop delivered the sequential
    loop's batches; ``notes``: what was skipped and why."""

    workload: dict[str, Any]
    prefetch: PrefetchConfig
    sequential: RunResult
    engine: RunResult
    identical: bool
    torch: RunResult | None = None
    notes: tuple[str, ...] = ()
    machine: dict[str, Any] = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        base = self.sequential.batches_per_s
        return self.engine.batches_per_s / base if base > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        config = {k: (v.value if hasattr(v, "value") else v) for k, v in asdict(self.prefetch).items()}
        return {
            "workload": self.workload, "prefetch": config,
            "sequential": self.sequential.to_dict(), "engine": self.engine.to_dict(),
            "torch": None if self.torch is None else self.torch.to_dict(),
            "speedup": self.speedup,
            "torch_speedup": (self.torch.batches_per_s / self.sequential.batches_per_s
                              if self.torch and self.sequential.batches_per_s > 0 else None),
            "identical": self.identical, "notes": list(self.notes), "machine": self.machine,
        }


# --- building the workload --------------------------------------------------------------------


def _bench_manifest(rows: int, global_batch_size: int) -> RunManifest:
    digest = hashlib.sha256(f"dlkit-bench:{rows}".encode()).digest()
    return RunManifest(seed=0, global_batch_size=global_batch_size,
                       datasets={BENCH_DATASET: DatasetEntry(BENCH_DATASET, "1", rows, digest)},
                       data=DataConfig(sampler_block_size=min(rows, 65_536)))


def default_dataset(manifest: RunManifest, path: str) -> str:
    """The dataset to bench when none is named: the manifest's only one, or its only train
    dataset (``.../train``); otherwise the user must say which (a usage error listing them)."""
    from dlkit.errors import InvalidArgumentError

    keys = list(manifest.datasets)
    if len(keys) == 1:
        return keys[0]
    train = [k for k in keys if k == "train" or k.endswith("/train")]
    if len(train) == 1:
        return train[0]
    raise InvalidArgumentError(
        f"{path} has {len(keys)} datasets and {len(train) or 'no'} train one"
        f"{'s' if len(train) != 1 else ''} among them; name one with --dataset: "
        + ", ".join(train or keys), code="USAGE")


def _index_order(request: BenchRequest) -> IndexOrder:
    if request.manifest is None:
        manifest = _bench_manifest(request.rows, request.batch_size * request.world_size)
        dataset = BENCH_DATASET
    else:
        manifest = load_manifest(request.manifest)
        if request.trace is not None:
            return trace_order(request.trace, manifest)
        dataset = (request.dataset if request.dataset is not None
                   else default_dataset(manifest, request.manifest))
    plan = SamplingPlan.create(manifest, dataset, request.world_size, request.rank, request.stage)
    return sample_order(plan, Cursor(0, 0), request.steps)


def build_workload(request: BenchRequest, workdir: Path) -> Workload:
    """The request's workload; a temporary row file (when needed) is created in ``workdir``."""
    per_ms = calibrate_burn() if request.compute_ms or request.consumer_ms else 0.0
    compute = int(request.compute_ms * per_ms)
    consumer = int(request.consumer_ms * per_ms)
    costs = {"compute_ms": request.compute_ms, "consumer_ms": request.consumer_ms}
    if request.workload is WorkloadKind.SYNTHETIC:
        workload = synthetic_workload(request.steps, request.batch_size,
                                      compute_iterations=compute, consumer_iterations=consumer)
        workload.describe.update(costs)
        return workload
    order = _index_order(request)
    if request.data is None:
        rows = request.rows
        if order.indices.shape[0]:
            rows = max(rows, int(order.indices.max()) + 1)
        path = workdir / "rows.bin"
        write_row_file(path, rows, request.row_bytes)
    else:
        path = Path(request.data)
    data = RowFile(path, request.row_bytes)
    data.touch_all()
    workload = gather_workload(data, order, compute_iterations=compute,
                               consumer_iterations=consumer)
    if not request.madvise:
        workload.advise = None
    workload.describe.update(costs, madvise=request.madvise, temporary_data=request.data is None)
    return workload


# --- the timed loops --------------------------------------------------------------------------


def _every(total: int) -> int:
    return max(1, total // 100)


def _result(name: str, waits: list[float], samples: int, row_bytes: int,
            seconds: float, cpu_seconds: float) -> RunResult:
    waits_us = np.asarray(waits) * 1e6 if waits else np.zeros(1)
    return RunResult(name, len(waits), samples, samples * row_bytes, seconds,
                     float(np.percentile(waits_us, 50)), float(np.percentile(waits_us, 99)),
                     cpu_seconds)


def _time_sequential(workload: Workload, order: list[int],
                     progress: ProgressFn) -> tuple[RunResult, list[int]]:
    out = workload.buffers.allocate()
    produce, consume = workload.produce, workload.consume
    waits, checksums, samples = [], [], 0
    every, total = _every(len(order)), len(order)
    clock, cpu = time.perf_counter, time.process_time
    start, cpu_start = clock(), cpu()
    for done, step in enumerate(order, 1):
        asked = clock()
        count = produce(step, out)
        waits.append(clock() - asked)
        checksums.append(consume(out, count))
        samples += count
        if done % every == 0:
            progress("sequential", done, total)
    seconds, cpu_seconds = clock() - start, cpu() - cpu_start
    progress("sequential", total, total)
    return (_result("sequential", waits, samples, workload.row_bytes, seconds, cpu_seconds),
            checksums)


def _time_engine(workload: Workload, config: PrefetchConfig, total: int,
                 progress: ProgressFn) -> tuple[RunResult, list[int]]:
    base = IteratorConfig(workload.produce, stop=workload.num_steps, buffers=workload.buffers,
                          advise=workload.advise)
    consume = workload.consume
    waits, checksums, samples = [], [], 0
    every = _every(total)
    clock, cpu = time.perf_counter, time.process_time
    name = "engine"
    with MultiIteratorPrefetcher(base, config) as prefetcher:
        start, cpu_start = clock(), cpu()
        while True:
            asked = clock()
            try:
                lease = next(prefetcher)
            except StopIteration:
                break
            waits.append(clock() - asked)
            with lease:
                checksums.append(consume(lease.buffer, lease.value))
                samples += lease.value
            if len(waits) % every == 0:
                progress(name, len(waits), total)
        seconds, cpu_seconds = clock() - start, cpu() - cpu_start
    progress(name, total, total)
    return _result(name, waits, samples, workload.row_bytes, seconds, cpu_seconds), checksums


class _StepDataset:
    """Map-style dataset over the workload's steps for ``torch.utils.data.DataLoader``."""

    def __init__(self, workload: Workload):
        self.workload = workload

    def __len__(self) -> int:
        return self.workload.num_steps

    def __getitem__(self, step: int) -> dict[str, Any]:
        out = self.workload.buffers.allocate()
        count = self.workload.produce(step, out)
        return {"count": count, **out}


TORCH_MISSING = ("torch is not installed: skipped the torch.utils.data.DataLoader comparison "
                 "(it is optional; install torch to include it)")


def _time_torch(workload: Workload, config: PrefetchConfig, order: list[int],
                progress: ProgressFn) -> tuple[RunResult, list[int]] | None:
    """DataLoader with ``num_workers`` worker processes over the same steps, in the strict
    order; ``None`` when torch is not importable."""
    try:
        from torch.utils.data import DataLoader
    except ImportError:
        return None
    name = "torch DataLoader"
    loader = DataLoader(_StepDataset(workload), batch_size=None, sampler=order,
                        num_workers=config.num_workers, prefetch_factor=config.buffer_size,
                        multiprocessing_context="fork")
    consume = workload.consume
    waits, checksums, samples, every, total = [], [], 0, _every(len(order)), len(order)
    clock = time.perf_counter
    start = clock()  # worker processes' CPU time is not this process's: cores stays 0
    batches = iter(loader)
    while True:
        asked = clock()
        try:
            batch = next(batches)
        except StopIteration:
            break
        waits.append(clock() - asked)
        count = int(batch["count"])
        checksums.append(consume({k: np.asarray(v) for k, v in batch.items() if k != "count"},
                                 count))
        samples += count
        if len(waits) % every == 0:
            progress(name, len(waits), total)
    seconds = clock() - start
    progress(name, total, total)
    return _result(name, waits, samples, workload.row_bytes, seconds, 0.0), checksums


def _same(policy: Policy, a: Iterable[int], b: Iterable[int]) -> bool:
    return list(a) == list(b) if policy is Policy.STRICT else sorted(a) == sorted(b)


def measure(workload: Workload, config: PrefetchConfig, *, compare_torch: bool = True,
            on_progress: ProgressFn | None = None) -> BenchReport:
    """Time the sequential loop, the engine and (optionally) torch over ``workload``."""
    progress = on_progress or (lambda phase, done, total: None)
    base = IteratorConfig(workload.produce, stop=workload.num_steps)
    order = list(strict_order(base, config))
    if order:  # compile kernels and warm caches outside the timed loops
        warm = workload.buffers.allocate()
        workload.consume(warm, workload.produce(order[0], warm))
    sequential, expected = _time_sequential(workload, order, progress)
    engine, got = _time_engine(workload, config, len(order), progress)
    identical = _same(config.policy, expected, got)
    notes, torch_result = [], None
    if compare_torch:
        timed = _time_torch(workload, config, order, progress)
        if timed is None:
            notes.append(TORCH_MISSING)
        else:
            torch_result, torch_got = timed
            identical = identical and torch_got == expected
    return BenchReport(workload.describe | {"workload": workload.name, "steps": len(order)},
                       config, sequential, engine, identical, torch_result, tuple(notes))


def run_bench(request: BenchRequest, on_progress: ProgressFn | None = None) -> BenchReport:
    """Build the request's workload (temporary files are removed afterwards) and measure it."""
    import dataclasses

    with tempfile.TemporaryDirectory(prefix="dlkit-bench-") as tmp:
        if request.workload is WorkloadKind.RELATIONAL:
            report = measure_relational(request, Path(tmp), on_progress)
        else:
            workload = build_workload(request, Path(tmp))
            report = measure(workload, request.prefetch, compare_torch=request.compare_torch,
                             on_progress=on_progress)
    return dataclasses.replace(report, machine=machine_load())


def slower_note(speedup: float, machine: dict[str, Any], workers: int) -> list[str]:
    """Why the engine can be slower than the sequential loop, in the machine's numbers."""
    if speedup >= 1:
        return []
    load = machine.get("load_1min")
    return [f"the engine was slower than the sequential loop ({speedup:.2f}x): "
            f"{workers} producer threads and the consumer share "
            f"{machine.get('cores_available', '?')} cores under a load of "
            f"{'unknown' if load is None else f'{load:.2f}'} (1 min), so they had no idle core "
            "to overlap on, or a batch costs too little for threads to pay off"]


# --- the relational workload ------------------------------------------------------------------

EXAMPLE_DB = Path(__file__).resolve().parents[3] / "fixtures" / "example_db"
CALIBRATION_BATCHES = 5


def _relational_db(request: BenchRequest, workdir: Path) -> tuple[str, str]:
    """(database path, how to name it): ``--db``, or the bundled example preprocessed."""
    if request.db is not None:
        return request.db, request.db
    if not (EXAMPLE_DB / "dlkit.toml").is_file():
        raise InvalidArgumentError("the relational workload needs a database: give --db DIR "
                                   "(made by `dlkit preprocess`); this installation has no "
                                   "bundled example", code="USAGE")
    from dlkit.db import preprocess

    out = workdir / "example-db"
    preprocess(EXAMPLE_DB, out, fsync=False)
    return str(out), "the bundled example (fixtures/example_db)"


def _sampler_loop(name: str, db: str, request: BenchRequest, *, prefetch: bool, steps: int,
                  consumer_iterations: int, progress: ProgressFn
                  ) -> tuple[RunResult, list[int]]:
    """``steps`` train batches of a fresh Sampler, each consumed by the training step."""
    from dlkit.sampler import Sampler

    config = request.prefetch
    with Sampler(db, rank=0, world_size=1, batch_size=request.batch_size,
                 num_prefetch=config.num_workers * config.buffer_size if prefetch else 0,
                 num_threads=config.num_workers if prefetch else 1) as sampler:
        return _train_loop(name, sampler.next_train_batch, request.batch_size, steps,
                           consumer_iterations, progress)


def _train_loop(name: str, next_batch: Callable[[], dict[str, Any]], batch_size: int,
                steps: int, consumer_iterations: int, progress: ProgressFn,
                count_cpu: bool = True) -> tuple[RunResult, list[int]]:
    """``steps`` batches from ``next_batch``, each checksummed and followed by the training
    step; the consumer's wait is the time ``next_batch`` takes. ``count_cpu=False`` where the
    work runs in other processes (this process's CPU time would not show it)."""
    waits, checksums, samples, size, every = [], [], 0, 0, _every(steps)
    clock, cpu = time.perf_counter, time.process_time
    start, cpu_start = clock(), cpu()
    for done in range(1, steps + 1):
        asked = clock()
        batch = {key: np.asarray(value) for key, value in next_batch().items()}
        waits.append(clock() - asked)
        checksums.append(batch_checksum(batch))
        if consumer_iterations:
            burn(consumer_iterations, done)
        samples += batch_size
        size += batch_bytes(batch)
        if done % every == 0:
            progress(name, done, steps)
    seconds, cpu_seconds = clock() - start, cpu() - cpu_start
    progress(name, steps, steps)
    waits_us = np.asarray(waits) * 1e6
    return RunResult(name, steps, samples, size, seconds, float(np.percentile(waits_us, 50)),
                     float(np.percentile(waits_us, 99)),
                     cpu_seconds if count_cpu else 0.0), checksums


def _batch_ms(db: str, request: BenchRequest) -> float:
    """The median time to build one batch on demand (after a first one that compiles)."""
    from dlkit.sampler import Sampler

    with Sampler(db, rank=0, world_size=1, batch_size=request.batch_size,
                 num_prefetch=0) as sampler:
        sampler.next_train_batch()
        times = []
        for _ in range(CALIBRATION_BATCHES):
            start = time.perf_counter()
            sampler.next_train_batch()
            times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def measure_relational(request: BenchRequest, workdir: Path,
                       on_progress: ProgressFn | None = None) -> BenchReport:
    """The Sampler without and with prefetching, feeding the same training step."""
    progress = on_progress or (lambda phase, done, total: None)
    db, shown = _relational_db(request, workdir)
    batch_ms = _batch_ms(db, request)
    consumer_ms = request.consumer_ms if request.consumer_ms else batch_ms
    calibrated = not request.consumer_ms
    iterations = int(consumer_ms * calibrate_burn())
    steps = request.steps
    sequential, expected = _sampler_loop("sequential", db, request, prefetch=False,
                                         steps=steps, consumer_iterations=iterations,
                                         progress=progress)
    engine, got = _sampler_loop("engine", db, request, prefetch=True, steps=steps,
                                consumer_iterations=iterations, progress=progress)
    notes, torch_result, identical = [], None, expected == got
    if request.compare_torch:
        timed = _sampler_dataloader(db, request, steps, iterations, progress)
        if timed is None:
            notes.append(TORCH_MISSING)
        else:
            torch_result, torch_got = timed
            identical = identical and torch_got == expected
    describe = {"workload": "relational", "steps": steps, "db": shown,
                "batch_size": request.batch_size, "batch_ms": round(batch_ms, 3),
                "compute_ms": 0.0, "consumer_ms": round(consumer_ms, 3),
                "consumer_calibrated": calibrated}
    return BenchReport(describe, request.prefetch, sequential, engine, identical,
                       torch_result, tuple(notes))


class _TrainSteps:
    """Map-style dataset of a Sampler's train steps (``Sampler.train_batch``) for
    ``torch.utils.data.DataLoader``'s worker processes."""

    def __init__(self, sampler: Any, steps: int):
        self.sampler = sampler
        self.steps = steps

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, step: int) -> dict[str, np.ndarray]:
        return self.sampler.train_batch(step)


def _sampler_dataloader(db: str, request: BenchRequest, steps: int, consumer_iterations: int,
                        progress: ProgressFn) -> tuple[RunResult, list[int]] | None:
    """The same train steps through a DataLoader with ``num_workers`` worker processes (the
    usual way to overlap loading with training), each consumed by the training step; ``None``
    when torch is not importable."""
    try:
        from torch.utils.data import DataLoader
    except ImportError:
        return None
    from dlkit.sampler import Sampler

    config = request.prefetch
    with Sampler(db, rank=0, world_size=1, batch_size=request.batch_size,
                 num_prefetch=0) as sampler:
        loader = DataLoader(_TrainSteps(sampler, steps), batch_size=None,
                            num_workers=config.num_workers, prefetch_factor=config.buffer_size,
                            multiprocessing_context="fork")
        batches = iter(loader)
        try:
            return _train_loop("torch DataLoader", lambda: next(batches), request.batch_size,
                               steps, consumer_iterations, progress, count_cpu=False)
        finally:
            del batches  # stops the worker processes
