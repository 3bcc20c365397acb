"""Large working arrays of preprocessing: in memory within a budget, scratch files beyond.

In memory, they are anonymous private maps with the kernel's default (small) pages, not
numpy's allocator: numpy asks for transparent huge pages on large arrays, and on the
virtual machines we measured, a first touch of fresh memory costs about four times more per
byte in huge pages than in 4 KiB pages (the host backs each huge page in full). These arrays
are written once, mostly in order, so huge pages would buy little back in TLB misses.
"""

from __future__ import annotations

import ctypes
import mmap
from pathlib import Path

import numpy as np

_MADV_POPULATE_WRITE = 23  # Linux 5.14+; older kernels refuse it (EINVAL)
_PAGE = mmap.PAGESIZE
_POPULATE_CHUNK = 4 << 20
_LIBC = ctypes.CDLL(None, use_errno=True)


def default_memory_budget() -> int:
    """Half of the memory available now (``/proc/meminfo``), at least 256 MiB."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return max(256 << 20, int(line.split()[1]) * 1024 // 2)
    except OSError:
        pass
    return 4 << 30


def empty_small_pages(dtype, shape) -> np.ndarray:
    """``np.empty(shape, dtype)`` in its own anonymous map of 4 KiB pages (page aligned;
    pages never touched cost nothing, the map goes with the last view of it)."""
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in (shape if isinstance(shape, tuple) else (shape,)))
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if nbytes < mmap.PAGESIZE:
        return np.empty(shape, dtype=dtype)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    return np.frombuffer(mmap.mmap(-1, nbytes, flags=flags), dtype=dtype).reshape(shape)


def populate(array: np.ndarray) -> bool:
    """Fault in every page of ``array`` (from :func:`empty_small_pages`) now, ahead of its
    first use: ``madvise(MADV_POPULATE_WRITE)`` costs about half as much CPU as the page faults
    it replaces, and the caller can spend it on a thread while a core is idle. It never
    changes the contents, so other threads may already be writing the array. Returns False
    (and does nothing) for file maps, small arrays and kernels without that advice (before
    Linux 5.14): the pages then fault in on first use, as they would have anyway."""
    if isinstance(array, np.memmap) or array.nbytes < _PAGE:
        return False
    address = array.ctypes.data
    start = address - address % _PAGE
    end = address + array.nbytes
    # In chunks: the advice holds the process's memory-map lock while it runs, and other
    # threads' mmap/munmap (large allocations) and page faults queue behind it.
    for chunk in range(start, end, _POPULATE_CHUNK):
        length = min(_POPULATE_CHUNK, end - chunk)
        if _LIBC.madvise(ctypes.c_void_p(chunk), ctypes.c_size_t(length),
                         _MADV_POPULATE_WRITE) != 0:
            return False
    return True


class Arrays:
    """Index arrays: in memory within ``budget`` bytes, memory-mapped scratch files beyond."""

    def __init__(self, scratch: Path, budget: int):
        self.scratch = scratch
        self.budget = budget
        self.used = 0
        self.count = 0

    def empty(self, dtype, shape) -> np.ndarray:
        dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in (shape if isinstance(shape, tuple) else (shape,)))
        nbytes = int(np.prod(shape)) * dtype.itemsize
        if nbytes == 0 or self.used + nbytes <= self.budget:
            self.used += nbytes
            return empty_small_pages(dtype, shape)
        self.scratch.mkdir(exist_ok=True)
        self.count += 1
        return np.lib.format.open_memmap(self.scratch / f"a{self.count}.npy", mode="w+",
                                         dtype=dtype, shape=shape)

    def zeros(self, dtype, shape) -> np.ndarray:
        """Like :meth:`empty`, zero-filled at no cost: a fresh anonymous map and a fresh
        scratch file both read as zeros until written (arrays under a page come from numpy's
        allocator and are zeroed here)."""
        array = self.empty(dtype, shape)
        if array.nbytes < _PAGE:
            array[...] = 0
        return array

    def release(self, array: np.ndarray) -> None:
        if not isinstance(array, np.memmap):
            self.used -= array.nbytes
