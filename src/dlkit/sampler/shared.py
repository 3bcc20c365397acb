"""Where the sampler's huge-page copies live: private memory, or one segment per machine.

The copies of the graph and the columns (``dlkit.sampler.hugepages``) make batches faster at
the price of their size in RAM. One process pays it once. Several ranks of one job on one
machine (torchrun's local ranks) would each pay it for the same database, so they share one
segment instead: a file in shared memory (``/dev/shm``) that the first local rank fills and
the others map read-only. The ranks coordinate through files only (no process group needed):

- ``build.lock``: held (``flock``, exclusive) by the rank filling the segment, and briefly by
  every rank joining or leaving, so joins, builds and the last leave never interleave;
- ``members``: every rank that maps the segment holds a shared ``flock`` on it while it does;
  the kernel drops a crashed rank's lock, so a rank that finds no other member knows it is
  the last, and a joiner that finds a segment without members knows it is stale;
- ``data``: the arrays, each at a 2 MiB-aligned offset, in an order every rank computes the
  same way from the same database; ``ready``: written once ``data`` is complete.

The last rank to leave removes the segment; a segment left by ranks that all crashed is
rebuilt by the next job that needs it (and stays in ``/dev/shm`` until then).
"""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import shutil
import weakref
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dlkit.errors import OutputError
from dlkit.sampler.hugepages import huge_page_copy, huge_page_empty

SEGMENT_ALIGN = 2 << 20  # each array starts on a 2 MiB boundary: a huge page of its own
SEGMENT_FORMAT = "dlkit-records-v1"  # bump when what a segment holds or its layout changes
SHM_DIR_VARIABLE = "DLKIT_SHM_DIR"


def _align(offset: int) -> int:
    return -(-offset // SEGMENT_ALIGN) * SEGMENT_ALIGN


def shm_root() -> Path:
    """Where segments are made: ``$DLKIT_SHM_DIR``, else ``/dev/shm``."""
    configured = os.environ.get(SHM_DIR_VARIABLE)
    return Path(configured) if configured else Path("/dev/shm")


class Memory(Protocol):
    """Where placed arrays live: ``empty`` and ``copy`` hand them out; ``fill`` is False
    where another process has filled them already (or nothing is filled: a sizer)."""

    @property
    def fill(self) -> bool: ...

    def empty(self, shape: int | tuple[int, ...], dtype: Any) -> np.ndarray: ...

    def copy(self, array: np.ndarray) -> np.ndarray: ...


class PrivateMemory:
    """Copies in this process's own anonymous huge-page memory."""

    fill = True
    kind = "private"

    def empty(self, shape: int | tuple[int, ...], dtype: Any) -> np.ndarray:
        return huge_page_empty(shape, dtype)

    def copy(self, array: np.ndarray) -> np.ndarray:
        return huge_page_copy(array)


class SegmentSizer:
    """Measures a segment: hands out arrays that take no memory and counts aligned bytes."""

    fill = False
    kind = "sizer"

    def __init__(self) -> None:
        self.size = 0

    def empty(self, shape: int | tuple[int, ...], dtype: Any) -> np.ndarray:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        dtype = np.dtype(dtype)
        self.size = _align(self.size) + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape,
                                               (0,) * len(shape), writeable=False)

    def copy(self, array: np.ndarray) -> np.ndarray:
        return self.empty(array.shape, array.dtype)


def _lock(path: Path, mode: int) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


class SharedSegment:
    """One machine-wide segment of ``size`` bytes named by ``key`` (see the module doc).

    ``join`` returns it mapped: ``fill`` is True in the one process that must fill it (it
    holds the build lock until ``publish``), False in those that map what it filled.
    ``empty`` and ``copy`` hand out the same arrays, in the same order, in every process.
    """

    kind = "shared"

    def __init__(self, directory: Path, size: int, fill: bool, build_fd: int | None,
                 members_fd: int, buffer: mmap.mmap):
        self.directory = directory
        self.size = size
        self.fill = fill
        self._build_fd = build_fd
        self._members_fd = members_fd
        self._buffer = buffer
        self._offset = 0
        self._closed = False
        self._finalizer = weakref.finalize(self, _leave, directory, members_fd, buffer)

    @classmethod
    def join(cls, key: str, size: int, root: Path | None = None) -> SharedSegment:
        directory = (root or shm_root()) / f"dlkit-{os.getuid()}-{key}"
        try:
            directory.mkdir(mode=0o700, parents=False, exist_ok=True)
            build_fd = _lock(directory / "build.lock", fcntl.LOCK_EX)
        except OSError as exc:
            raise OutputError(f"cannot make a shared segment: {exc.strerror or exc}",
                              path=directory) from None
        try:
            members_fd = os.open(directory / "members", os.O_RDWR | os.O_CREAT, 0o600)
            # Alone among the members (a crashed job's leftovers have none), a ready segment
            # is stale: build it anew.
            try:
                fcntl.flock(members_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                alone = True
            except BlockingIOError:
                alone = False
            fcntl.flock(members_fd, fcntl.LOCK_SH)
            ready = (directory / "ready").exists() and not alone
            data_path = directory / "data"
            if ready and data_path.stat().st_size != size:
                raise OutputError(f"shared segment holds {data_path.stat().st_size} bytes, "
                                  f"this database needs {size}: another dlkit version?",
                                  path=directory)
            if not ready:
                (directory / "ready").unlink(missing_ok=True)
                fd = os.open(data_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    os.ftruncate(fd, max(size, 1))
                    buffer = mmap.mmap(fd, max(size, 1), mmap.MAP_SHARED,
                                       mmap.PROT_READ | mmap.PROT_WRITE)
                finally:
                    os.close(fd)
                if hasattr(mmap, "MADV_HUGEPAGE"):
                    try:
                        buffer.madvise(mmap.MADV_HUGEPAGE)
                    except OSError:
                        pass  # ordinary pages: same contents
            else:
                fd = os.open(data_path, os.O_RDONLY)
                try:
                    buffer = mmap.mmap(fd, max(size, 1), mmap.MAP_SHARED, mmap.PROT_READ)
                finally:
                    os.close(fd)
        except BaseException:
            os.close(build_fd)
            raise
        segment = cls(directory, size, not ready, build_fd, members_fd, buffer)
        if ready:
            segment._unlock_build()
        return segment

    def empty(self, shape: int | tuple[int, ...], dtype: Any) -> np.ndarray:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        start = _align(self._offset)
        end = start + count * dtype.itemsize
        if end > self.size:
            raise RuntimeError(f"shared segment of {self.size} bytes overrun at {end}")
        self._offset = end
        return np.frombuffer(self._buffer, dtype=dtype, count=count, offset=start).reshape(shape)

    def copy(self, array: np.ndarray) -> np.ndarray:
        out = self.empty(array.shape, array.dtype)
        if self.fill:
            out[...] = array
            out.setflags(write=False)
        return out

    def publish(self) -> None:
        """The segment is complete: mark it ready and let the other ranks map it."""
        if self.fill:
            (self.directory / "ready").write_bytes(b"")
        self._unlock_build()

    def _unlock_build(self) -> None:
        if self._build_fd is not None:
            os.close(self._build_fd)
            self._build_fd = None

    def close(self) -> None:
        """Unmap; the last member removes the segment (arrays handed out must be dropped)."""
        if self._closed:
            return
        self._closed = True
        self._unlock_build()  # a build that failed: the next joiner rebuilds
        self._finalizer()


def _leave(directory: Path, members_fd: int, buffer: mmap.mmap) -> None:
    try:
        buffer.close()
    except BufferError:
        pass  # arrays still point into it: the mapping goes when they do
    build_fd = _lock(directory / "build.lock", fcntl.LOCK_EX)
    try:
        try:
            fcntl.flock(members_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            last = True
        except BlockingIOError:
            last = False
        if last:
            shutil.rmtree(directory, ignore_errors=True)
    finally:
        os.close(members_fd)
        os.close(build_fd)


def segment_key(database_hash: bytes, parts: str = "") -> str:
    """The name of a database's segment: its hash and what the segment holds."""
    digest = hashlib.sha256(bytes(database_hash) + f"|{SEGMENT_FORMAT}|{parts}".encode())
    return digest.hexdigest()[:32]
