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
import os
import threading
import weakref
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from dlkit.errors import OutputError

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


def empty_small_pages(dtype: npt.DTypeLike, shape: int | tuple[int, ...]) -> np.ndarray:
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
    if isinstance(array, np.memmap) or array.nbytes < _PAGE or is_spilled(array):
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


_SPILLED: weakref.WeakSet[object] = weakref.WeakSet()  # the mappings of spilled arrays


def _mapping(array: np.ndarray) -> object:
    """The object that owns ``array``'s memory (the end of its chain of bases)."""
    owner: object = array
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    return owner.obj if isinstance(owner, memoryview) else owner


def is_spilled(array: np.ndarray) -> bool:
    """Whether ``array`` lives in a scratch file (:meth:`Arrays.empty` beyond the budget)."""
    owner = _mapping(array)
    return isinstance(owner, mmap.mmap) and owner in _SPILLED


class Arrays:
    """The build's large working arrays: in memory while the live ones fit ``budget`` bytes,
    spilled to memory-mapped scratch files beyond it.

    The budget counts the anonymous memory these arrays can occupy, live ones only: an
    in-memory array gives its bytes back when its memory is freed (the last view of it
    gone), so a table's arrays make room for the next table's. A spilled array lives in a
    file under ``scratch``, mapped shared and unlinked at once: its pages are the page
    cache's, which the kernel writes to disk and evicts under memory pressure, and its disk
    space goes with the mapping (a crash leaves nothing behind). Which arrays spill depends
    on the budget and the order of requests, never the bytes the build writes.
    """

    def __init__(self, scratch: Path, budget: int,
                 on_spill: Callable[[int], None] | None = None):
        self.scratch = scratch
        self.on_spill = on_spill  # called with the bytes spilled so far, after each spill
        self.budget = budget
        self.used = 0  # bytes of live in-memory arrays
        self.peak = 0
        self.spilled = 0  # bytes of every array ever spilled
        self.count = 0
        self._lock = threading.Lock()

    def empty(self, dtype: npt.DTypeLike, shape: int | tuple[int, ...]) -> np.ndarray:
        dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in (shape if isinstance(shape, tuple) else (shape,)))
        nbytes = int(np.prod(shape)) * dtype.itemsize
        if nbytes < _PAGE:
            return np.empty(shape, dtype=dtype)
        with self._lock:
            fits = self.used + nbytes <= self.budget
            if fits:
                self.used += nbytes
                self.peak = max(self.peak, self.used)
            else:
                self.spilled += nbytes
                self.count += 1
                number = self.count
        if fits:
            array = empty_small_pages(dtype, shape)
            weakref.finalize(_mapping(array), self._freed, nbytes)
            return array
        if self.on_spill is not None:
            self.on_spill(self.spilled)
        spilled: np.ndarray = _spill_file(self.scratch, number, nbytes).reshape(-1).view(dtype)
        return spilled.reshape(shape)

    def zeros(self, dtype: npt.DTypeLike, shape: int | tuple[int, ...]) -> np.ndarray:
        """Like :meth:`empty`, zero-filled at no cost: a fresh anonymous map and a fresh
        scratch file both read as zeros until written (arrays under a page come from numpy's
        allocator and are zeroed here)."""
        array = self.empty(dtype, shape)
        if array.nbytes < _PAGE:
            array[...] = 0
        return array

    def _freed(self, nbytes: int) -> None:
        with self._lock:
            self.used -= nbytes


def _spill_file(scratch: Path, number: int, nbytes: int) -> np.ndarray:
    """``nbytes`` of zeros in a new scratch file, mapped shared and already unlinked. The
    file's blocks are reserved first: a write to a mapped page the disk has no room for
    would kill the process (SIGBUS) instead of raising; a full disk is an error here."""
    scratch.mkdir(exist_ok=True)
    path = scratch / f"spill-{number}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.posix_fallocate(fd, 0, nbytes)
        except OSError as exc:
            raise OutputError(f"cannot reserve {nbytes} bytes of scratch space for working "
                              f"arrays beyond the memory budget: {exc.strerror or exc} (free "
                              "disk space, or raise --memory-budget)", path=scratch) from None
        mapped = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED)
    finally:
        os.close(fd)
        path.unlink()
    _SPILLED.add(mapped)
    return np.frombuffer(mapped, dtype=np.uint8)
