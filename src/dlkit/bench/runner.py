"""``dlkit bench``'s runner: build a request's workload and time it, three ways.

For the gather and synthetic workloads :func:`run_bench` builds the workload of a
:class:`BenchRequest`, then times, one after the other and over the same steps:

1. the sequential loop: ``produce`` then ``consume`` for each step, no threads;
2. the engine: ``MultiIteratorPrefetcher`` with the request's ``PrefetchConfig``; the consumer
   pulls a lease, consumes it, releases it;
3. optionally ``torch.utils.data.DataLoader`` with worker processes, when torch is importable.

The relational workload (``dlkit.Sampler`` batches) is timed by :mod:`dlkit.bench.relational`.

The consumer's *wait* per batch is the time from asking for a batch to having it (in the
sequential loop, the time to produce it). Every loop consumes each batch through the same
checksum kernel; the report says whether the engine (and torch) delivered the sequential loop's
batches (in the same order for the strict policy, as a multiset for best-effort).
"""

from __future__ import annotations

import dataclasses
import hashlib
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from dlkit.bench.relational import measure_relational
from dlkit.bench.report import (
    TORCH_MISSING,
    BenchReport,
    ProgressFn,
    RunResult,
    progress_every,
    slower_note,
    timed_result,
)
from dlkit.bench.request import BenchRequest, WorkloadKind
from dlkit.bench.workloads import (
    IndexOrder,
    RowFile,
    Workload,
    calibrate_burn,
    gather_workload,
    machine_load,
    sample_order,
    synthetic_workload,
    trace_order,
    write_row_file,
)
from dlkit.errors import InvalidArgumentError
from dlkit.nextbatch.cursor import Cursor
from dlkit.nextbatch.run_manifest import DataConfig, DatasetEntry, RunManifest, load_manifest
from dlkit.nextbatch.sampler import SamplingPlan
from dlkit.prefetch.config import IteratorConfig, Policy, PrefetchConfig, strict_order
from dlkit.prefetch.prefetcher import MultiIteratorPrefetcher

BENCH_DATASET = "bench"


# --- building the workload --------------------------------------------------------------------


def _bench_manifest(rows: int, global_batch_size: int) -> RunManifest:
    digest = hashlib.sha256(f"dlkit-bench:{rows}".encode()).digest()
    return RunManifest(seed=0, global_batch_size=global_batch_size,
                       datasets={BENCH_DATASET: DatasetEntry(BENCH_DATASET, "1", rows, digest)},
                       data=DataConfig(sampler_block_size=min(rows, 65_536)))


def default_dataset(manifest: RunManifest, path: str) -> str:
    """The dataset to bench when none is named: the manifest's only one, or its only train
    dataset (``.../train``); otherwise the user must say which (a usage error listing them)."""
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


def _time_sequential(workload: Workload, order: list[int],
                     progress: ProgressFn) -> tuple[RunResult, list[int]]:
    out = workload.buffers.allocate()
    produce, consume = workload.produce, workload.consume
    waits, checksums, samples = [], [], 0
    every, total = progress_every(len(order)), len(order)
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
    return (timed_result("sequential", waits, samples, workload.row_bytes, seconds, cpu_seconds),
            checksums)


def _time_engine(workload: Workload, config: PrefetchConfig, total: int,
                 progress: ProgressFn) -> tuple[RunResult, list[int]]:
    base = IteratorConfig(workload.produce, stop=workload.num_steps, buffers=workload.buffers,
                          advise=workload.advise)
    consume = workload.consume
    waits, checksums, samples = [], [], 0
    every = progress_every(total)
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
    return timed_result(name, waits, samples, workload.row_bytes, seconds, cpu_seconds), checksums


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


def _time_torch(workload: Workload, config: PrefetchConfig, order: list[int],
                progress: ProgressFn) -> tuple[RunResult, list[int]] | None:
    """DataLoader with ``num_workers`` worker processes over the same steps, in the strict
    order; ``None`` when torch is not importable."""
    try:
        from torch.utils.data import DataLoader
    except ImportError:
        return None
    name = "torch DataLoader"
    # torch's stub wants a Dataset subclass; a map-style dataset is any object with
    # __getitem__ and __len__ (this one is defined without importing torch)
    loader: DataLoader[Any] = DataLoader(
        _StepDataset(workload), batch_size=None, sampler=order,  # type: ignore[arg-type]
        num_workers=config.num_workers, prefetch_factor=config.buffer_size,
        multiprocessing_context="fork")
    consume = workload.consume
    waits, checksums, samples, every, total = [], [], 0, progress_every(len(order)), len(order)
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
    return timed_result(name, waits, samples, workload.row_bytes, seconds, 0.0), checksums


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
    """Build the request's workload (temporary files are removed afterwards) and measure it;
    the report's notes say what was skipped and why the engine was slower, if it was."""
    with tempfile.TemporaryDirectory(prefix="dlkit-bench-") as tmp:
        if request.workload is WorkloadKind.RELATIONAL:
            report = measure_relational(request, Path(tmp), on_progress)
        else:
            workload = build_workload(request, Path(tmp))
            report = measure(workload, request.prefetch, compare_torch=request.compare_torch,
                             on_progress=on_progress)
    machine = machine_load()
    slower = slower_note(report.speedup, machine, request.prefetch.num_workers)
    return dataclasses.replace(report, machine=machine, notes=(*report.notes, *slower))
