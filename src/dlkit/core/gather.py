"""Batch kernels for the prefetch engine: row gather, page runs, checksum, synthetic work.

All are ``nogil`` (see ``dlkit.core.jit``), so producer threads running them overlap with each
other and with the consumer. They trust their inputs: the caller checks that every row index is
below ``src.shape[0]`` and that ``out`` has room for ``rows.shape[0]`` rows.
"""

from __future__ import annotations

import numpy as np

from dlkit.core.jit import kernel
from dlkit.core.memory import prefetch

_ROWS_AHEAD = 8  # rows between a row's prefetch and its copy
_FNV_PRIME = np.uint64(0x100000001B3)
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)


@kernel
def gather_rows(src, rows, out):
    """``out[i, :] = src[rows[i], :]`` for every ``i`` (``src`` C-contiguous); returns the
    number of bytes copied.

    ``src`` is typically a read-only memory map (``[num_rows, width]``), so page faults on
    rows not yet in the page cache happen here, without the GIL.
    """
    width = src.shape[1]
    flat = src.reshape(-1)  # 1-D, for prefetch
    for i in range(rows.shape[0]):
        if i + _ROWS_AHEAD < rows.shape[0] and width > 0:
            # Rows are scattered: fetched ahead, their misses overlap with the copies.
            ahead = rows[i + _ROWS_AHEAD] * width
            prefetch(flat, ahead)
            prefetch(flat, ahead + width - 1)
        r = rows[i]
        for j in range(width):
            out[i, j] = src[r, j]
    return rows.shape[0] * width * src.itemsize


@kernel
def page_runs(rows, row_bytes, page_bytes, starts, lengths):
    """Merge the pages touched by ``rows`` (each ``row_bytes`` long) into sorted byte runs.

    Writes page-aligned ``(start, length)`` pairs into ``starts``/``lengths`` (each with room
    for ``rows.shape[0]`` runs) and returns how many were written: the ranges to pass to
    ``madvise(MADV_WILLNEED)`` for one batch.
    """
    n = rows.shape[0]
    if n == 0:
        return 0
    offsets = np.empty(n, dtype=np.int64)
    for i in range(n):
        offsets[i] = np.int64(rows[i]) * row_bytes
    offsets.sort()
    count = 0
    run_start = offsets[0] // page_bytes
    run_end = (offsets[0] + row_bytes - 1) // page_bytes + 1  # exclusive, in pages
    for i in range(1, n):
        first = offsets[i] // page_bytes
        last = (offsets[i] + row_bytes - 1) // page_bytes
        if first <= run_end:
            run_end = max(run_end, last + 1)
        else:
            starts[count] = run_start * page_bytes
            lengths[count] = (run_end - run_start) * page_bytes
            count += 1
            run_start = first
            run_end = last + 1
    starts[count] = run_start * page_bytes
    lengths[count] = (run_end - run_start) * page_bytes
    return count + 1


@kernel
def checksum_rows(block, count):
    """Checksum of the first ``count`` rows of a 2-D ``uint8`` block; reads every byte.

    Each row's byte sum (a vectorisable loop) is folded into an FNV-1a style hash in row
    order, so the result depends on which rows a batch holds and in what order.
    """
    h = _FNV_OFFSET
    for i in range(count):
        s = np.uint64(0)
        for j in range(block.shape[1]):
            s += np.uint64(block[i, j])
        h = (h ^ s) * _FNV_PRIME
    return h


@kernel
def burn(iterations, seed):
    """Synthetic CPU-bound work: ``iterations`` dependent xorshift64 steps (not vectorisable).

    Returns the sum of the states so the compiler cannot drop the loop; cost is linear in
    ``iterations`` and calibrated at run time (``dlkit.bench.workloads.calibrate_burn``).
    """
    x = np.uint64(seed) | np.uint64(1)
    acc = np.uint64(0)
    for _ in range(iterations):
        x ^= x << np.uint64(13)
        x ^= x >> np.uint64(7)
        x ^= x << np.uint64(17)
        acc += x
    return acc
