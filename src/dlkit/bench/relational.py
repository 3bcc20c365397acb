"""``dlkit bench``'s default workload: :class:`dlkit.Sampler` train batches of a database.

What users run: batches of a database (``--db``, or the bundled example preprocessed into a
temporary directory) feeding a consumer that spends a training step's time on each
(``--consumer-ms``, or by default as long as a batch takes to build, measured first: the case
prefetching is for). Timed, one after the other: the sampler building each batch on demand
(``num_prefetch=0``), then with ``--workers`` producer threads ``--buffers-ahead`` deep; with
torch installed, a ``DataLoader`` whose ``--workers`` worker processes build the same steps
(``Sampler.train_batch``). All must yield the same batches. The report gives the cores
available and the machine's load beside the speedup, so a number below 1 explains itself
(threads that have no idle core to run on only add overhead).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dlkit.bench.report import TORCH_MISSING, BenchReport, ProgressFn, RunResult, progress_every
from dlkit.bench.request import BenchRequest
from dlkit.bench.workloads import batch_bytes, batch_checksum, calibrate_burn
from dlkit.core.gather import burn
from dlkit.errors import InvalidArgumentError

if TYPE_CHECKING:
    from dlkit.sampler.api import Sampler

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
    from dlkit.interrupts import scratch_outputs

    out = workdir / "example-db"
    with scratch_outputs():  # removed with workdir: not an output the user asked for
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
    waits, checksums, samples, size, every = [], [], 0, 0, progress_every(steps)
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

    def __init__(self, sampler: Sampler, steps: int):
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
        # torch's stub wants a Dataset subclass; a map-style dataset is any object with
        # __getitem__ and __len__ (this one is defined without importing torch)
        loader: DataLoader[Any] = DataLoader(
            _TrainSteps(sampler, steps), batch_size=None,  # type: ignore[arg-type]
            num_workers=config.num_workers, prefetch_factor=config.buffer_size,
            multiprocessing_context="fork")
        batches = iter(loader)
        try:
            return _train_loop("torch DataLoader", batches.__next__, request.batch_size,
                               steps, consumer_iterations, progress, count_cpu=False)
        finally:
            del batches  # stops the worker processes (the bound method went with the loop)
