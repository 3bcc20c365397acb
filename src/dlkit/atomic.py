"""Atomic output: a reader sees the old file or directory or the complete new one, never a mix.

**A file** (:func:`atomic_writer`): data goes to a hidden temporary file in the target's
directory (same filesystem, so the final ``os.replace`` is atomic), is flushed and fsynced,
then renamed over the target. On any exception the temporary file is removed and the target
is left as it was.

**A directory** (:class:`AtomicDirectory`; a :class:`TargetKind` says what it holds, a
database or ``dlkit batches`` output, and so which existing directory may be replaced):
``target`` is built in a temporary directory beside it, ``.<name>.dlkit-tmp-<random>``,
which is renamed into place only when complete:

* A lock file ``.<name>.dlkit-lock`` beside the target (``flock``, released by the kernel even
  when the process is killed) serialises runs on one target. Holding it, a run knows every
  other temporary directory of that target is left over from an interrupted run, and removes
  them before it starts. The lock file itself is removed at the end of a run.
* A new target is moved into place with ``renameat2(RENAME_NOREPLACE)`` (plain ``rename``
  where unavailable); an existing one (``overwrite``) is swapped in one step with
  ``renameat2(RENAME_EXCHANGE)``, so the target path always holds either the old or the new
  output, and the old one is deleted afterwards. Where the exchange is unavailable, the old
  output is first renamed to ``.<name>.dlkit-old-<random>``; a run interrupted between the
  two renames is repaired by the next run (the old output is put back).
* On any failure or interrupt the temporary directory is deleted; nothing else was touched.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import io
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from dlkit.atomic_journal import (
    JOURNAL_MARK,
    LOCK_MARK,
    OLD_MARK,
    PENDING_MARK,
    TMP_MARK,
    _lock_beside,
    _run_journal,
    _settle_locked,
    _unlock_beside,
    fsync_directory,
)
from dlkit.errors import OutputError
from dlkit.interrupts import deferred_interrupts, note_committed
from dlkit.outputs import _descriptor_name, output_kind


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# -- files ------------------------------------------------------------------------------



class AtomicFiles:
    """Output files that appear together, complete, or not at all.

    Each file is written to ``.<name>.dlkit-tmp-<token>`` beside its target (same directory,
    so the final rename is atomic), under a lock ``.<name>.dlkit-lock`` (``flock``, released
    by the kernel even when the process is killed) that also marks every other temporary file
    of that target as left over from an interrupted run, to be removed. ``commit()``:

    1. flushes and fsyncs every temporary file;
    2. writes the commit journal ``.<first>.dlkit-commit-<token>`` beside the first target,
       listing every (temporary, target) rename: from here on the commit is decided;
    3. renames the temporary files over their targets, in the order given;
    4. removes the journal.

    Catchable signals (Ctrl-C, SIGTERM, SIGHUP) wait until the commit is done, so they leave
    all the old files or all the new ones. A process killed outright (SIGKILL, power loss)
    during steps 2-4 leaves the journal; a ``.<name>.dlkit-pending-<token>`` marker beside
    each target, written before its temporary file, points to it, and the next dlkit run that
    takes the lock of any of these targets (or :func:`settle` on one) completes the renames
    before anything else. Without a journal, the temporary files are simply removed.

    One file needs no journal or marker: its single rename is atomic. Outputs that are
    streams (``/dev/stdout``, a FIFO; see :func:`output_kind`) are written directly and take
    no part in the commit.
    """

    def __init__(self, targets: Sequence[str | os.PathLike[str]], *, overwrite: bool = True):
        self.targets = [Path(t) for t in targets]
        self.overwrite = overwrite
        self.token = secrets.token_hex(6)
        self.streams: list[BinaryIO] = []
        self._files: list[tuple[Path, Path]] = []  # (temporary, target) of the "file" outputs
        self._markers: list[Path] = []
        self._tmp_streams: set[int] = set()
        self._locks: list[tuple[Path, int]] = []
        self._journal: Path | None = None
        self._decided = False  # the journal is on disk: the next run completes the commit
        self.committed = False

    def __enter__(self) -> list[BinaryIO]:
        # The bookkeeping (locks, markers, temporary files) is never cut in half by Ctrl-C or
        # SIGTERM: a file made but not yet recorded would outlive the cleanup.
        try:
            with deferred_interrupts():
                return self._enter()
        except BaseException:  # the held signal, delivered as the block ends: no __exit__
            self._discard()
            raise

    def _enter(self) -> list[BinaryIO]:
        target: Path | None = None  # the output being prepared, named by an error
        try:
            kinds = [output_kind(t, self.overwrite) for t in self.targets]
            files = [t for t, kind in zip(self.targets, kinds) if kind == "file"]
            for target in files:
                directory = target.parent
                if not directory.is_dir():
                    raise OutputError(f"directory {directory} does not exist", path=target)
            for target in sorted(files, key=lambda t: os.path.abspath(t)):
                self._locks.append((target, _lock_beside(target)))
                _settle_locked(target)
            if len(files) > 1:
                self._journal = files[0].parent / f".{files[0].name}{JOURNAL_MARK}{self.token}"
            for target, kind in zip(self.targets, kinds):
                if kind == "stream":
                    self.streams.append(self._open_stream(target))
                    continue
                if self._journal is not None:
                    marker = target.parent / f".{target.name}{PENDING_MARK}{self.token}"
                    _write_synced(marker, os.fsencode(os.path.abspath(self._journal)))
                    self._markers.append(marker)
                tmp = target.parent / f".{target.name}{TMP_MARK}{self.token}"
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                             0o666 & ~_current_umask())
                self._files.append((tmp, target))
                self.streams.append(_NamedWriter(io.FileIO(fd, "wb"), target))
                self._tmp_streams.add(id(self.streams[-1]))
        except BaseException as exc:
            self._discard()
            if isinstance(exc, OSError) and not isinstance(exc, OutputError):
                raise OutputError(f"cannot write here: {exc.strerror or exc}",
                                  path=target or exc.filename) from exc
            raise
        return self.streams

    @staticmethod
    def _open_stream(target: Path) -> BinaryIO:
        """A stream output: this process's own descriptor (``/dev/stdout``) is written where
        it stands, as if the command printed (reopening a redirected file would truncate
        it); anything else (a device, a FIFO) is opened."""
        _, own = _descriptor_name(target)
        try:
            if own is not None:
                return os.fdopen(os.dup(own), "wb")
            return open(target, "wb")  # noqa: SIM115 - closed by _discard / commit
        except OSError as exc:
            raise OutputError(f"cannot write here: {exc.strerror or exc}", path=target) from exc

    def commit(self, fsync: bool = True) -> None:
        """Make every output appear (see the class doc)."""
        first = self.targets[0] if self.targets else None
        failing = first  # the output an error names
        try:
            for target, stream in zip(self.targets, self.streams):
                failing = target
                stream.flush()
                if fsync and id(stream) in self._tmp_streams:
                    os.fsync(stream.fileno())
            for target, stream in zip(self.targets, self.streams):
                failing = target
                stream.close()
            failing = first
            with deferred_interrupts():
                if self._journal is not None:
                    journal = {"renames": [[os.path.abspath(tmp), os.path.abspath(target)]
                                           for tmp, target in self._files],
                               "markers": [os.path.abspath(m) for m in self._markers]}
                    _write_synced(self._journal, json.dumps(journal).encode())
                    self._decided = True
                    _run_journal(self._journal)
                elif self._files:
                    (tmp, target), = self._files
                    os.replace(tmp, target)
                    fsync_directory(target.parent)
                self.committed = True
                note_committed(*(t for t in self.targets))
        except OSError as exc:
            if isinstance(exc, OutputError) or isinstance(exc, BrokenPipeError):
                raise
            raise OutputError(f"write failed: {exc.strerror or exc}", path=failing) from exc

    def _discard(self) -> None:
        with deferred_interrupts():  # a second Ctrl-C does not stop the cleanup half-way
            self._release()

    def _release(self) -> None:
        for stream in self.streams:
            with contextlib.suppress(OSError):
                stream.close()
        if not self.committed and not self._decided:  # (decided: left for the next run)
            for tmp, _target in self._files:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            for marker in self._markers:
                with contextlib.suppress(OSError):
                    os.unlink(marker)
        for target, fd in reversed(self._locks):
            _unlock_beside(target, fd)
        self._locks = []

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._discard()


class _NamedWriter(io.BufferedWriter):
    """The temporary file of an output: a write that fails (a full disk) is an
    ``OutputError`` naming the output, not the hidden temporary file or nothing at all."""

    def __init__(self, raw: io.FileIO, target: Path):
        super().__init__(raw)
        self.target = target

    def _named(self, exc: OSError) -> OSError:
        if isinstance(exc, OutputError):
            return exc
        return OutputError(f"write failed: {exc.strerror or exc}", path=self.target)

    def write(self, data: Any) -> int:
        try:
            return super().write(data)
        except OSError as exc:
            raise self._named(exc) from exc

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as exc:
            raise self._named(exc) from exc


def _write_synced(path: Path, data: bytes) -> None:
    """``data`` in a new file ``path``, on disk before this returns (with its directory
    entry): a marker or journal must outlive a power loss that the renames it covers might."""
    tmp = path.parent / f"{path.name}{TMP_MARK}w"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:  # a short write (a nearly full disk) is continued, not cut
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:  # a full disk, say: leave no temporary file behind
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_directory(path.parent)


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str], *, overwrite: bool = True
                  ) -> Iterator[BinaryIO]:
    """Open a binary stream whose content replaces ``path`` only if the block succeeds.

    A device, FIFO or descriptor name (``/dev/stdout``) is written directly: it has no
    content to replace. A symbolic link is replaced itself, never the file it names, and
    only with ``overwrite``; so is an existing file (see :func:`output_kind`)."""
    files = AtomicFiles([path], overwrite=overwrite)
    with files as (stream,):
        try:
            yield stream
        except BaseException as exc:
            # A broken pipe is never the temporary file's (a regular file): the block wrote
            # to stdout too (`dlkit sample --trace t | head`) and its reader left.
            if isinstance(exc, OSError) and not isinstance(exc, (OutputError, BrokenPipeError)):
                raise OutputError(f"write failed: {exc.strerror or exc}", path=path) from exc
            raise
        files.commit()


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *,
                       overwrite: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically."""
    with atomic_writer(path, overwrite=overwrite) as stream:
        stream.write(data)


# -- directories ----------------------------------------------------------------------

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2


def _renameat2(src: Path, dst: Path, flags: int) -> bool:
    """True when done; False when the system lacks renameat2 or the flag; raises on real errors."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    res = fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags)
    if res == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(dst))


@dataclass(frozen=True)
class TargetKind:
    """What a target directory holds: its name in messages, how to recognise an existing
    one that ``overwrite`` may replace (anything else is someone's data), and the files a
    recognised one holds by its own record (relative POSIX paths): anything else in it
    was put there by someone, and is not replaced with it."""

    name: str
    recognise: Callable[[Path], bool]
    holds: Callable[[Path], Collection[str]]


def first_foreign(root: Path, expected: Collection[str]) -> str | None:
    """The first entry under ``root``, in sorted order, that is none of the ``expected``
    files nor a directory on the way to one (``experiments/`` for a directory): None when
    there is none."""
    wanted = set(expected)
    on_the_way = {"/".join(parts[:k]) for parts in (p.split("/") for p in wanted)
                  for k in range(1, len(parts))}

    def walk(directory: Path, prefix: str) -> str | None:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            raise OutputError(f"cannot list {prefix or '.'}: {exc.strerror or exc}",
                              path=root) from None
        for entry in entries:
            rel = prefix + entry.name
            if entry.is_dir(follow_symlinks=False):
                if rel not in on_the_way:
                    return rel + "/"
                found = walk(Path(entry.path), rel + "/")
                if found is not None:
                    return found
            elif rel not in wanted:
                return rel
        return None

    return walk(root, "")


def check_target(target: Path, overwrite: bool, kind: TargetKind) -> None:
    """Refuse a target that exists, unless ``overwrite`` and it is a ``kind`` holding
    nothing but its own files, or empty."""
    if target.is_symlink():
        raise OutputError("is a symbolic link; refusing to replace it (give the directory "
                          "it names)", path=target)
    if target.exists() and not target.is_dir():
        raise OutputError("exists and is not a directory; refusing to replace it", path=target)
    if target.exists():
        recognised = kind.recognise(target)
        if not recognised and any(target.iterdir()):
            raise OutputError(f"exists and is not a dlkit {kind.name}; refusing to replace it, "
                              "even with --overwrite", path=target)
        if not overwrite:
            raise OutputError("already exists (pass --overwrite to replace it)", path=target)
        foreign = first_foreign(target, kind.holds(target)) if recognised else None
        if foreign is not None:
            raise OutputError(f"holds {foreign}, which no dlkit {kind.name} has; refusing to "
                              "replace it and what was added, even with --overwrite (move "
                              "it out first)", path=target)


class AtomicDirectory:
    """Context manager yielding a temporary build directory for ``target``; ``commit()``."""

    def __init__(self, target: str | os.PathLike[str], kind: TargetKind,
                 overwrite: bool = False):
        self.target = Path(target).absolute()
        self.parent = self.target.parent
        self.name = self.target.name
        self.overwrite = overwrite
        self.kind = kind
        self.tmp: Path | None = None
        self._lock_fd: int | None = None
        self._lock_path = self.parent / f".{self.name}{LOCK_MARK}"
        self.committed = False
        # directories made for the target (innermost first), removed again unless committed
        self.created: list[Path] = []

    # -- locking and cleanup ------------------------------------------------------------

    def _lock(self) -> None:
        while True:
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise OutputError(f"another dlkit process is writing this {self.kind.name} "
                                  "right now", path=self.target, code="BUSY") from None
            # The file may have been unlinked by its previous holder between open and flock.
            try:
                same = os.stat(self._lock_path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._lock_fd = fd
                return
            os.close(fd)

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._lock_path)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _remove_created(self) -> None:
        for directory in self.created:
            with contextlib.suppress(OSError):  # not empty: someone else uses it now
                directory.rmdir()
        self.created = []

    def _leftovers(self, mark: str) -> list[Path]:
        prefix = f".{self.name}{mark}"
        return [p for p in self.parent.iterdir() if p.name.startswith(prefix)]

    def _recover(self) -> None:
        """Holding the lock: finish or undo what an interrupted run left beside the target."""
        olds = self._leftovers(OLD_MARK)
        if olds and not self.target.exists():
            # an overwrite interrupted between its two renames, perhaps by a run of another
            # kind of output: whatever the target held goes back
            os.rename(olds[0], self.target)
            olds = olds[1:]
        for stale in self._leftovers(TMP_MARK) + olds:
            shutil.rmtree(stale, ignore_errors=True)

    # -- context ------------------------------------------------------------------------

    def __enter__(self) -> Path:
        try:
            self.created = [p for p in (self.parent, *self.parent.parents) if not p.exists()]
            self.parent.mkdir(parents=True, exist_ok=True)
            self._lock()
        except OSError as exc:
            self._remove_created()
            if isinstance(exc, OutputError):
                raise
            raise OutputError(f"cannot write here: {exc.strerror or exc}",
                              path=self.target) from exc
        try:
            self._recover()
            check_target(self.target, self.overwrite, self.kind)
            self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.name}{TMP_MARK}", dir=self.parent))
            # mkdtemp makes 0700; a database or batches directory is shared
            os.chmod(self.tmp, 0o777 & ~_current_umask())
        except BaseException:
            if self.tmp is not None:
                shutil.rmtree(self.tmp, ignore_errors=True)
                self.tmp = None
            self._unlock()
            self._remove_created()
            raise
        return self.tmp

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if not self.committed and self.tmp is not None:
                if isinstance(exc, OSError):
                    self._name_the_target(exc, self.tmp)
                shutil.rmtree(self.tmp, ignore_errors=True)
        finally:
            self._unlock()
            if not self.committed:
                self._remove_created()

    def _name_the_target(self, exc: OSError, tmp: Path) -> None:
        """An error about a file in the hidden temporary directory (a full disk, say) names
        the output instead: ``out.db/tables/t/0.bin``, not ``.out.db.dlkit-tmp-x1/...``,
        which is gone once the error is shown."""
        hidden, shown = str(tmp), str(self.target)
        if isinstance(exc, OutputError):
            if exc.path is not None and exc.path.startswith(hidden):
                exc.path = shown + exc.path[len(hidden):]
            exc.message = exc.message.replace(hidden, shown)
            exc.args = (str(exc),)
        elif isinstance(exc.filename, str) and exc.filename.startswith(hidden):
            exc.filename = shown + exc.filename[len(hidden):]

    def commit(self, fsync: bool = True) -> None:
        """Move the finished temporary directory into place (see the module doc)."""
        assert self.tmp is not None
        if fsync:
            fsync_tree(self.tmp)
        stale: Path | None = None  # the old output, deleted once the new one is in place
        try:
            # a catchable signal waits for the swap and the note that it happened, so an
            # interrupt is reported as before or after the commit, never between
            with deferred_interrupts():
                if self.target.exists():
                    check_target(self.target, self.overwrite, self.kind)
                    if _renameat2(self.tmp, self.target, _RENAME_EXCHANGE):
                        stale = self.tmp  # now holds the old target
                    else:
                        stale = self.parent / f".{self.name}{OLD_MARK}{secrets.token_hex(6)}"
                        os.rename(self.target, stale)
                        os.rename(self.tmp, self.target)
                elif not _renameat2(self.tmp, self.target, _RENAME_NOREPLACE):
                    os.rename(self.tmp, self.target)
                self.committed = True
                note_committed(self.target)
        except OSError as exc:
            raise OutputError(f"cannot move the new {self.kind.name} into place: "
                              f"{exc.strerror or exc}", path=self.target) from exc
        if stale is not None:
            shutil.rmtree(stale, ignore_errors=True)
        if fsync:
            fsync_directory(self.parent)


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under ``root`` (data first, then the directories)."""
    dirs = []
    for dirpath, _dirnames, filenames in os.walk(root):
        dirs.append(dirpath)
        for fname in filenames:
            fd = os.open(os.path.join(dirpath, fname), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for d in reversed(dirs):
        fsync_directory(Path(d))
