"""The work ``dlkit bench`` measures: gathering rows from a memory-mapped file, or a synthetic
CPU-bound kernel, one batch per step.

A :class:`Workload` is what both the sequential loop and the prefetch engine run:
``produce(step, out)`` fills a batch buffer and returns its row count, ``consume(out, count)``
plays the training step (it reads the whole batch and returns a checksum, so the two loops'
outputs can be compared) plus an optional synthetic cost.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlkit.core.gather import burn, checksum_rows, gather_rows, page_runs
from dlkit.errors import InputFormatError, InvalidArgumentError
from dlkit.files import open_regular
from dlkit.nextbatch.cursor import Cursor
from dlkit.nextbatch.sampler import SamplingPlan
from dlkit.prefetch.pool import BufferSpec

PAGE_BYTES = mmap.PAGESIZE


def calibrate_burn(seconds: float = 0.01, rounds: int = 5) -> float:
    """Iterations of ``dlkit.core.gather.burn`` per millisecond on this machine (best of
    ``rounds`` runs of about ``seconds`` each, so other load inflates it as little as possible)."""
    burn(1, 1)  # compile
    iterations = 1 << 16
    while True:
        start = time.perf_counter()
        burn(iterations, 1)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
        iterations *= 2
    best = elapsed
    for _ in range(rounds - 1):
        start = time.perf_counter()
        burn(iterations, 1)
        best = min(best, time.perf_counter() - start)
    return iterations / (best * 1e3)


def machine_parallelism(seconds: float = 0.5) -> float:
    """Control: the 2-thread speed-up of a pure ``nogil`` CPU kernel right now. Near 2 on an
    idle 2-core machine; near 1 when other work takes a core (then no sampler can scale)."""
    iterations = int(calibrate_burn() * seconds * 1e3 / 4)

    def work() -> None:
        for _ in range(4):
            burn(iterations, 1)

    started = time.perf_counter()
    work()
    one = time.perf_counter() - started
    threads = [threading.Thread(target=work) for _ in range(2)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 2 * one / (time.perf_counter() - started)


# --- the row file -----------------------------------------------------------------------------


def write_row_file(path: str | os.PathLike[str], rows: int, row_bytes: int,
                   chunk_rows: int = 8192) -> None:
    """A raw file of ``rows`` rows of ``row_bytes`` bytes: each row starts with its id as a
    little-endian uint64, the rest is a byte pattern of the id."""
    if rows < 1 or row_bytes < 8:
        raise InvalidArgumentError(f"need rows >= 1 and row_bytes >= 8, got {rows} and {row_bytes}")
    columns = np.arange(row_bytes, dtype=np.uint64)
    with open(path, "wb") as out:
        for first in range(0, rows, chunk_rows):
            ids = np.arange(first, min(rows, first + chunk_rows), dtype=np.uint64)
            block = ((ids[:, None] * np.uint64(7) + columns[None, :]) & np.uint64(0xFF)).astype(np.uint8)
            block[:, :8] = ids.astype("<u8").view(np.uint8).reshape(-1, 8)
            block.tofile(out)


class RowFile:
    """A read-only memory map of a raw row file as a ``[rows, row_bytes]`` uint8 array."""

    def __init__(self, path: str | os.PathLike[str], row_bytes: int):
        self.path = Path(path)
        self.row_bytes = row_bytes
        try:
            handle = os.fdopen(open_regular(self.path), "rb")
        except OSError as exc:
            raise InputFormatError(f"cannot read: {exc.strerror}", path=self.path) from None
        with handle:
            size = os.fstat(handle.fileno()).st_size
            if row_bytes < 1 or size < row_bytes:
                raise InputFormatError(
                    f"holds {size} bytes, not even one row of {row_bytes} bytes", path=self.path)
            self.num_rows = size // row_bytes
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        self.rows = np.frombuffer(self._map, dtype=np.uint8,
                                  count=self.num_rows * row_bytes).reshape(self.num_rows, row_bytes)

    def willneed(self, rows: np.ndarray) -> None:
        """``madvise(MADV_WILLNEED)`` the pages holding ``rows`` (merged into runs)."""
        starts = np.empty(rows.shape[0], dtype=np.int64)
        lengths = np.empty(rows.shape[0], dtype=np.int64)
        count = page_runs(rows, self.row_bytes, PAGE_BYTES, starts, lengths)
        limit = len(self._map)
        for start, length in zip(starts[:count].tolist(), lengths[:count].tolist()):
            self._map.madvise(mmap.MADV_WILLNEED, start, min(length, limit - start))

    def touch_all(self) -> None:
        """Read one byte per page, so the file is in the page cache before timing starts."""
        flat = self.rows.reshape(-1)
        int(flat[::PAGE_BYTES].sum())


# --- index orders -----------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexOrder:
    """The rows of each step: ``indices[offsets[s]:offsets[s+1]]`` is step ``s``'s batch."""

    offsets: np.ndarray
    indices: np.ndarray
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def num_steps(self) -> int:
        return int(self.offsets.shape[0]) - 1

    @property
    def max_batch(self) -> int:
        return int(np.diff(self.offsets).max(initial=0))


def sample_order(plan: SamplingPlan, cursor: Cursor, steps: int) -> IndexOrder:
    """The order ``dlkit sample`` gives: ``steps`` NextBatch_v2 calls of ``plan`` from ``cursor``."""
    counts, indices = [], []
    for chunk in plan.iter_chunks(cursor, steps):
        counts.append(chunk.counts)
        indices.append(chunk.indices)
    offsets = np.concatenate([[0], np.cumsum(np.concatenate(counts))]).astype(np.int64)
    return IndexOrder(offsets, np.concatenate(indices), {
        "order": "sample", "dataset": plan.dataset_key, "stage": plan.stage.value,
        "world_size": plan.world_size, "rank": plan.rank, "cursor_start": cursor.to_value()})


def trace_order(path: str | os.PathLike[str], manifest: Any) -> IndexOrder:
    """Replay a trace written by ``dlkit sample --trace``: every record is verified against
    ``manifest`` (``ReplayMismatchError`` on a difference), then its steps are regenerated."""
    from dlkit.nextbatch.trace import read_trace, replay_trace

    report = replay_trace(path, manifest)
    header = read_trace(path).header
    plan = SamplingPlan.create(manifest, header["dataset_key"], header["world_size"],
                               header["rank"], header["stage"])
    cursor = Cursor(**header["cursor_start"])
    order = sample_order(plan, cursor, report.records_checked) if report.records_checked else \
        IndexOrder(np.zeros(1, dtype=np.int64), np.empty(0, dtype=np.uint64))
    return IndexOrder(order.offsets, order.indices, {**order.source, "order": "trace",
                                                     "trace": str(path)})


# --- workloads --------------------------------------------------------------------------------


@dataclass
class Workload:
    """One batch per step ``0 .. num_steps-1``; see the module docstring."""

    name: str
    num_steps: int
    batch_size: int
    row_bytes: int
    buffers: BufferSpec
    produce: Callable[[int, dict[str, np.ndarray]], int]
    consume: Callable[[dict[str, np.ndarray], int], int]
    advise: Callable[[int], None] | None = None
    describe: dict[str, Any] = field(default_factory=dict)


def _consumer(consumer_iterations: int, field_name: str) -> Callable[[dict[str, np.ndarray], int], int]:
    if field_name == "rows":
        def consume(out: dict[str, np.ndarray], count: int) -> int:
            checksum = int(checksum_rows(out["rows"], count))
            if consumer_iterations:
                burn(consumer_iterations, count)
            return checksum
    else:
        def consume(out: dict[str, np.ndarray], count: int) -> int:
            if consumer_iterations:
                burn(consumer_iterations, count)
            return int(out[field_name][0])
    return consume


def gather_workload(data: RowFile, order: IndexOrder, *, compute_iterations: int = 0,
                    consumer_iterations: int = 0) -> Workload:
    """Gather each step's rows (in ``order``) from ``data`` into a pooled batch buffer."""
    if order.indices.shape[0] and int(order.indices.max()) >= data.num_rows:
        raise InvalidArgumentError(
            f"the index order reaches row {int(order.indices.max())} but {data.path} holds "
            f"only {data.num_rows} rows of {data.row_bytes} bytes")
    src, indices = data.rows, order.indices
    offsets = order.offsets.tolist()

    def produce(step: int, out: dict[str, np.ndarray]) -> int:
        first, last = offsets[step], offsets[step + 1]
        gather_rows(src, indices[first:last], out["rows"])
        if compute_iterations:
            burn(compute_iterations, step)
        return int(last - first)

    def advise(step: int) -> None:
        data.willneed(indices[offsets[step]:offsets[step + 1]])

    batch = max(1, order.max_batch)
    return Workload("gather", order.num_steps, batch, data.row_bytes,
                    BufferSpec({"rows": ((batch, data.row_bytes), np.uint8)}),
                    produce, _consumer(consumer_iterations, "rows"), advise,
                    describe={**order.source, "data": str(data.path), "rows": data.num_rows,
                              "row_bytes": data.row_bytes, "batch_size": batch})


def synthetic_workload(num_steps: int, batch_size: int, *, compute_iterations: int,
                       consumer_iterations: int = 0) -> Workload:
    """A CPU-bound ``nogil`` kernel per batch, no data."""
    def produce(step: int, out: dict[str, np.ndarray]) -> int:
        out["acc"][0] = burn(compute_iterations, step)
        return batch_size

    return Workload("synthetic", num_steps, batch_size, 0,
                    BufferSpec({"acc": ((1,), np.uint64)}), produce,
                    _consumer(consumer_iterations, "acc"), describe={"batch_size": batch_size})


# --- the relational workload: what users run --------------------------------------------------


def machine_load() -> dict[str, Any]:
    """The cores this process may run on and the machine's load: beside a speedup, they say
    why it is what it is (prefetch threads need idle cores to overlap with the consumer)."""
    try:
        available = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        available = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = None
    return {"cores_available": available, "cpu_count": os.cpu_count() or available,
            "load_1min": load}


def batch_checksum(batch: dict[str, np.ndarray]) -> int:
    """A checksum of every array of a batch (key order fixed): the loops' outputs compared."""
    import zlib

    checksum = 0
    for key in sorted(batch):
        array = np.ascontiguousarray(batch[key])
        checksum = zlib.crc32(key.encode(), checksum)
        checksum = zlib.crc32(array.data.cast("B"), checksum)
    return checksum


def batch_bytes(batch: dict[str, np.ndarray]) -> int:
    return int(sum(np.asarray(a).nbytes for a in batch.values()))
