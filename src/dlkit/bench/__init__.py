"""``dlkit bench``: the prefetch engine and the Sampler timed against a sequential loop.

An application of the engine, not part of it: ``request`` says what to run, ``workloads``
builds the work of one batch (rows gathered in a NextBatch order, or a synthetic kernel),
``runner`` times the gather and synthetic workloads, ``relational`` the Sampler's batches, and
``report`` holds what was measured. ``dlkit.prefetch`` knows nothing of any of it.
"""

from typing import TYPE_CHECKING

from dlkit._lazy import lazy_attributes

if TYPE_CHECKING:
    from dlkit.bench.report import BenchReport as BenchReport
    from dlkit.bench.report import RunResult as RunResult
    from dlkit.bench.report import slower_note as slower_note
    from dlkit.bench.request import BenchRequest as BenchRequest
    from dlkit.bench.request import WorkloadKind as WorkloadKind
    from dlkit.bench.runner import build_workload as build_workload
    from dlkit.bench.runner import measure as measure
    from dlkit.bench.runner import run_bench as run_bench

# imported on first use: the runner's kernels load numba (see dlkit._lazy)
__getattr__, __dir__, __all__ = lazy_attributes(__name__, {
    "dlkit.bench.report": ("BenchReport", "RunResult", "slower_note"),
    "dlkit.bench.request": ("BenchRequest", "WorkloadKind"),
    "dlkit.bench.runner": ("build_workload", "measure", "run_bench"),
})
