"""What ``dlkit bench`` measured: one result per timed loop, the report, and its notes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from dlkit.prefetch.config import PrefetchConfig

ProgressFn = Callable[[str, int, int], None]


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
    loop's batches; ``notes``: what was skipped and why, and why the engine was slower than
    the sequential loop when it was."""

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


def progress_every(total: int) -> int:
    """Steps between progress reports: about a hundred per loop."""
    return max(1, total // 100)


def timed_result(name: str, waits: list[float], samples: int, row_bytes: int,
                 seconds: float, cpu_seconds: float) -> RunResult:
    """One loop's result from its consumer's waits (seconds each) and totals."""
    waits_us = np.asarray(waits) * 1e6 if waits else np.zeros(1)
    return RunResult(name, len(waits), samples, samples * row_bytes, seconds,
                     float(np.percentile(waits_us, 50)), float(np.percentile(waits_us, 99)),
                     cpu_seconds)


TORCH_MISSING = ("torch is not installed: skipped the torch.utils.data.DataLoader comparison "
                 "(it is optional; install torch to include it)")


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
