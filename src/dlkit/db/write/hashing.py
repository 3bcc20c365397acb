"""Database files written once, in order, and SHA-256 hashed as they are written.

``preprocess`` writes every database file through a :class:`HashedFile` of a :class:`Hasher`.
``write`` only queues the buffer: one background thread hashes it (``hashlib`` releases the
GIL) while another writes it, each in submission order, so neither costs the producing
thread anything and the hash overlaps the disk. Written buffers must not be modified
afterwards (the writer only writes fresh arrays, or arrays it is done with); the bytes
queued are bounded (``max_backlog``) unless the caller says they live on anyway.

Where the file system allows it, files are written with ``O_DIRECT``, bypassing the page
cache: straight from the caller's memory where it is page aligned at an aligned file offset
(the build's working arrays and ``graph.bin``'s sections are), through one reused, aligned
staging buffer otherwise: a database is several times the size of
its input, and filling that many fresh page-cache pages costs more CPU than anything else
the build does (measured on our build VMs: ~3 s per GB, against ~0.7 s per GB for the
arrays themselves). A file's last partial block goes through the page cache. Without
``O_DIRECT`` support (tmpfs, some network file systems) the same code writes normally.
Setting ``DLKIT_DIRECT_IO=0`` in the environment turns ``O_DIRECT`` off (the bytes written
are the same either way): for file systems that accept it but are slower with it.

With ``sync`` set, every complete file is fsynced on a third thread, so the disk flushes
overlap the rest of the build instead of all waiting for the final commit. A write error
(disk full, ...) becomes an :class:`OutputError` naming the file, raised in the producing
thread at its next call.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import mmap
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dlkit.db.manifest import FileEntry
from dlkit.errors import OutputError

DEFAULT_BACKLOG = 64 << 20
CHUNK = 16 << 20
ALIGN = 4096  # O_DIRECT: buffer address, file offset and length in multiples of this
STAGE_BYTES = 4 << 20
_O_DIRECT = getattr(os, "O_DIRECT", 0)


def direct_io_allowed() -> bool:
    """False when the environment says ``DLKIT_DIRECT_IO=0`` (or ``false``, ``no``, ``off``)."""
    setting = os.environ.get("DLKIT_DIRECT_IO", "").strip().lower()
    return setting not in ("0", "false", "no", "off")


@dataclass(slots=True)
class _Pending:
    """A queued part: how many of the background threads still use it, its size in the
    backlog, and what to call once none does."""

    users: int
    nbytes: int
    released: Callable[[], None] | None = None


def _single_thread(name: str) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)


class Hasher:
    def __init__(self, root: Path, max_backlog: int = DEFAULT_BACKLOG, sync: bool = False,
                 direct: bool | None = None):
        self.root = root
        self.hashing = _single_thread("dlkit-sha256")
        self.writing = _single_thread("dlkit-write")
        self.syncing = _single_thread("dlkit-fsync") if sync else None
        self.synced: list[Future[None]] = []
        if direct is None:
            direct = direct_io_allowed()
        self.direct = direct and _O_DIRECT != 0
        # page aligned; used by the writing thread only
        self.stage_map = mmap.mmap(-1, STAGE_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.stage: np.ndarray | None = np.frombuffer(self.stage_map, dtype=np.uint8)
        self.max_backlog = max_backlog
        self.backlog = 0
        self.cond = threading.Condition()
        self.files: dict[str, HashedFile] = {}
        self.error: BaseException | None = None

    def open(self, rel: str) -> HashedFile:
        if rel in self.files:
            raise AssertionError(f"{rel} written twice")
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        f = HashedFile(self, rel, path)
        self.files[rel] = f
        return f

    def check(self) -> None:
        """Raise the background threads' first error, if any."""
        if self.error is not None:
            raise self.error

    def _queue(self, f: HashedFile, part: memoryview, bounded: bool,
               store: Callable[[memoryview], object] | None = None,
               released: Callable[[], None] | None = None) -> None:
        """Queue ``part`` for hashing (in stream order) and for ``store`` on the writing thread
        (default: the stream's next bytes); ``store`` given means written only, not hashed.
        ``released()`` is called once both threads are done with the part."""
        self.check()
        n = part.nbytes
        with self.cond:
            while bounded and self.backlog > 0 and self.backlog + n > self.max_backlog:
                self.cond.wait()
            self.backlog += n
        if store is not None:
            self.writing.submit(self._run, f, store, part, _Pending(1, n, released))
            return
        pending = _Pending(2, n, released)
        self.hashing.submit(self._run, f, f.h.update, part, pending)
        self.writing.submit(self._run, f, f._store, part, pending)

    def _run(self, f: HashedFile, job: Callable[[memoryview], object], part: memoryview,
             pending: _Pending) -> None:
        try:
            if self.error is None:
                job(part)
        except OSError as exc:
            self.error = OutputError(f"cannot write: {exc.strerror or exc}", path=f.path)
        except BaseException as exc:  # pragma: no cover - a bug; re-raised in the producer
            self.error = exc
        finally:
            with self.cond:
                pending.users -= 1
                done = pending.users == 0
                if done:
                    self.backlog -= pending.nbytes
                    self.cond.notify_all()
            if done and pending.released is not None:
                pending.released()

    def _close(self, f: HashedFile) -> None:
        self.check()
        self.writing.submit(self._run, f, f._finish, memoryview(b""), _Pending(1, 0))

    def _completed(self, path: Path) -> None:
        if self.syncing is not None:
            self.synced.append(self.syncing.submit(_fsync, path))

    def flush(self) -> None:
        """Wait until every part queued so far is hashed and written (files closed before
        are then complete on disk, and may be read back)."""
        for pool in (self.hashing, self.writing):
            pool.submit(lambda: None).result()
        self.check()

    def digests(self) -> dict[str, FileEntry]:
        """Wait for every queued job; the file map ``{rel: {size, sha256}}`` of closed files."""
        self.hashing.shutdown(wait=True)
        self.writing.shutdown(wait=True)
        self.check()
        out: dict[str, FileEntry] = {}
        for rel, f in self.files.items():
            if not f.closed:
                raise AssertionError(f"{rel} was not closed")
            out[rel] = {"size": f.size, "sha256": f.h.digest()}
        return out

    def close(self) -> None:
        """Stop (dropping queued jobs), wait for the fsyncs, release the files."""
        self.hashing.shutdown(wait=True, cancel_futures=True)
        self.writing.shutdown(wait=True, cancel_futures=True)
        if self.syncing is not None:
            self.syncing.shutdown(wait=True)
        for f in self.files.values():
            f.release()
        self.stage = None
        self.stage_map.close()
        for done in self.synced:
            try:
                done.result()
            except OSError as exc:
                raise OutputError(f"cannot fsync: {exc.strerror or exc}",
                                  path=exc.filename) from exc


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, view: memoryview, offset: int | None = None) -> None:
    """All of ``view`` at the file position, or at ``offset`` (which then moves nothing)."""
    while view.nbytes:
        written = os.write(fd, view) if offset is None else os.pwrite(fd, view, offset)
        view = view[written:]
        if offset is not None:
            offset += written


class HashedFile:
    """A stream; ``size`` counts the bytes queued, which all reach the file by ``digests``."""

    def __init__(self, hasher: Hasher, rel: str, path: Path):
        self.hasher = hasher
        self.rel = rel
        self.path = path
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        self.direct = hasher.direct
        try:
            self.fd = os.open(path, flags | (_O_DIRECT if self.direct else 0), 0o666)
        except OSError as exc:
            if not self.direct or exc.errno != errno.EINVAL:
                raise
            self.direct = False
            self.fd = os.open(path, flags, 0o666)
        self.carry = b""  # bytes after the last aligned block (direct mode)
        self.h = hashlib.sha256()
        self.size = 0
        self.stored = 0  # bytes of the stream the writing thread has handled
        self.ahead: list[tuple[int, int]] = []  # file ranges written out of order (aligned)
        self.closed = False

    def write(self, data: np.ndarray | bytes | bytearray | memoryview, bounded: bool = True,
              released: Callable[[], None] | None = None) -> None:
        """Queue ``data`` (not to be modified afterwards). ``bounded=False`` for arrays that
        live on anyway: queuing them costs no memory, so the caller need not wait.
        ``released()``, when given, is called (on a background thread) once the data is
        hashed and written: from then on the caller may reuse its memory."""
        if isinstance(data, np.ndarray):
            data = np.ascontiguousarray(data)
        # numpy's stubs give ndarray its __buffer__ from Python 3.12 on only
        view = memoryview(data).cast("B")  # type: ignore[arg-type, unused-ignore]
        starts = range(0, view.nbytes, CHUNK)
        for start in starts:
            # both threads take parts in order: the last part done means all are
            last = released if start == starts[-1] else None
            self.hasher._queue(self, view[start:start + CHUNK], bounded, released=last)
        self.size += view.nbytes
        if not starts and released is not None:
            released()

    def write_ahead(self, data: np.ndarray, offset: int) -> None:
        """Write ``data``, bytes the stream reaches later at file ``offset``, now and out of
        order: its whole blocks go to disk on the writing thread, unhashed; the stream's own
        :meth:`write` of the same bytes later hashes them in order and writes only the rest.
        For a producer that finishes a region early, so the disk need not wait for the
        stream. ``data`` must not change afterwards. Nothing is written ahead unless ``data``
        sits at the same position within a block in memory as in the file (page-aligned
        arrays at page-aligned offsets do), as ``O_DIRECT`` needs."""
        data = np.ascontiguousarray(data)
        if (data.ctypes.data - offset) % ALIGN:
            return
        skip = -offset % ALIGN
        length = (data.nbytes - skip) // ALIGN * ALIGN
        if length <= 0:
            return
        start = offset + skip
        self.ahead.append((start, start + length))
        part = data.data.cast("B")[skip:skip + length]
        self.hasher._queue(self, part, bounded=False,
                           store=lambda view: self._write_blocks(view, start))

    def _store(self, part: memoryview) -> None:
        """On the writing thread: write ``part``, the stream's next bytes, except what was
        written ahead (every write ahead of a range is queued before the stream's part)."""
        start = self.stored
        self.stored += part.nbytes
        end = self.stored
        pos = start
        for a, b in sorted(self.ahead):
            a, b = max(a, start), min(b, end)
            if a >= b:
                continue
            if a > pos:
                self._store_next(part[pos - start:a - start])
            if self.carry:  # only after a fall back from O_DIRECT: blocks leave no tail
                if self.direct:
                    self._stop_direct()
                _write_all(self.fd, memoryview(self.carry))
                self.carry = b""
            os.lseek(self.fd, b - a, os.SEEK_CUR)  # already on disk
            pos = b
        if pos < end:
            self._store_next(part[pos - start:])

    def _store_next(self, part: memoryview) -> None:
        """Write ``part`` at the file position (through the staging buffer when direct,
        keeping the unaligned tail for the next call)."""
        if not self.direct:
            if self.carry:
                _write_all(self.fd, memoryview(self.carry))
                self.carry = b""
            _write_all(self.fd, part)
            return
        data = np.frombuffer(part, dtype=np.uint8)
        pos = 0
        if not self.carry and data.ctypes.data % ALIGN == 0:
            # the file offset is aligned (no carry) and so is the memory (a page-aligned
            # array): the whole blocks go straight from it, no staging copy
            pos = data.size - data.size % ALIGN
            if pos:
                self._write_blocks(part[:pos])
        # numpy copies release the GIL (a memoryview copy would hold it for the whole block)
        stage = self.hasher.stage
        assert stage is not None, "the hasher is open while its files are"
        while pos < data.size:
            held = len(self.carry)
            stage[:held] = np.frombuffer(self.carry, dtype=np.uint8)
            take = min(STAGE_BYTES - held, data.size - pos)
            stage[held:held + take] = data[pos:pos + take]
            pos += take
            filled = held + take
            aligned = filled - filled % ALIGN
            block = stage[:aligned].data
            self._write_blocks(block)
            block.release()
            self.carry = stage[aligned:filled].tobytes()

    def _write_blocks(self, blocks: memoryview, offset: int | None = None) -> None:
        """Write whole aligned blocks (at the file position, or at ``offset``) with
        ``O_DIRECT``, or normally if the file system refuses them."""
        try:
            _write_all(self.fd, blocks, offset)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            self._stop_direct()
            _write_all(self.fd, blocks, offset)

    def _stop_direct(self) -> None:
        fcntl.fcntl(self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) & ~_O_DIRECT)
        self.direct = False

    def _finish(self, _part: memoryview) -> None:
        """On the writing thread, after every write: the tail, then close."""
        if self.carry:
            if self.direct:
                self._stop_direct()
            _write_all(self.fd, memoryview(self.carry))
            self.carry = b""
        os.close(self.fd)
        self.fd = -1
        self.hasher._completed(self.path)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.hasher._close(self)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> HashedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
