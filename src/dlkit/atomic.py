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
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from dlkit.errors import OutputError


def fsync_directory(directory: Path) -> None:
    """Persist a rename inside ``directory`` (no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Open a binary stream whose content replaces ``path`` only if the block succeeds (a
    ``path`` that is a device or FIFO is written directly: it has no content to replace)."""
    target = Path(path)
    try:
        mode: int | None = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise OutputError(f"cannot write here: {exc.strerror or exc}", path=target) from exc
    if mode is not None and stat.S_ISDIR(mode):
        raise OutputError("is a directory", path=target)
    if mode is not None and not stat.S_ISREG(mode):
        # a device, FIFO or socket (-o /dev/stdout): nothing to replace, and replacing it
        # would destroy the node, so the bytes go straight to it
        try:
            with open(target, "wb") as stream:
                yield stream
        except OSError as exc:
            if isinstance(exc, OutputError):
                raise
            raise OutputError(f"write failed: {exc.strerror or exc}", path=target) from exc
        return
    if target.is_symlink():
        # replace the file the link names and keep the link (/dev/stdout into a file names
        # that file: replacing the link itself would put a file at /dev/stdout)
        target = Path(os.path.realpath(target))
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise OutputError(f"directory {directory} does not exist", path=target)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise OutputError(f"cannot create a file here: {exc.strerror}", path=target) from exc
    try:
        # mkstemp creates 0600 files; give the result the permissions a plain open() would.
        os.fchmod(fd, 0o666 & ~_current_umask())
        with os.fdopen(fd, "wb") as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp_name, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        # A broken pipe is never the temporary file's (a regular file): the block wrote to
        # stdout too (`dlkit sample --trace t | head`) and its reader left.
        if isinstance(exc, OSError) and not isinstance(exc, (OutputError, BrokenPipeError)):
            raise OutputError(f"write failed: {exc.strerror or exc}", path=target) from exc
        raise
    fsync_directory(directory)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically."""
    with atomic_writer(path) as stream:
        stream.write(data)


# -- directories ----------------------------------------------------------------------

TMP_MARK = ".dlkit-tmp-"
OLD_MARK = ".dlkit-old-"
LOCK_MARK = ".dlkit-lock"

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
    """What a target directory holds: its name in messages, and how to recognise an existing
    one that ``overwrite`` may replace (anything else is someone's data)."""

    name: str
    recognise: Callable[[Path], bool]


def check_target(target: Path, overwrite: bool, kind: TargetKind) -> None:
    """Refuse a target that exists, unless ``overwrite`` and it is a ``kind`` or empty."""
    if target.is_symlink():
        raise OutputError("is a symbolic link; refusing to replace it (give the directory "
                          "it names)", path=target)
    if target.exists() and not target.is_dir():
        raise OutputError("exists and is not a directory; refusing to replace it", path=target)
    if target.exists():
        if not kind.recognise(target) and any(target.iterdir()):
            raise OutputError(f"exists and is not a dlkit {kind.name}; refusing to replace it, "
                              "even with --overwrite", path=target)
        if not overwrite:
            raise OutputError("already exists (pass --overwrite to replace it)", path=target)


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
                                  "right now", path=self.target) from None
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

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if not self.committed and self.tmp is not None:
                shutil.rmtree(self.tmp, ignore_errors=True)
        finally:
            self._unlock()
            if not self.committed:
                self._remove_created()

    def commit(self, fsync: bool = True) -> None:
        """Move the finished temporary directory into place (see the module doc)."""
        assert self.tmp is not None
        if fsync:
            fsync_tree(self.tmp)
        try:
            if self.target.exists():
                check_target(self.target, self.overwrite, self.kind)
                if _renameat2(self.tmp, self.target, _RENAME_EXCHANGE):
                    self.committed = True
                    shutil.rmtree(self.tmp, ignore_errors=True)  # now holds the old target
                else:
                    old = self.parent / f".{self.name}{OLD_MARK}{secrets.token_hex(6)}"
                    os.rename(self.target, old)
                    os.rename(self.tmp, self.target)
                    self.committed = True
                    shutil.rmtree(old, ignore_errors=True)
            else:
                if not _renameat2(self.tmp, self.target, _RENAME_NOREPLACE):
                    os.rename(self.tmp, self.target)
                self.committed = True
        except OSError as exc:
            raise OutputError(f"cannot move the new {self.kind.name} into place: "
                              f"{exc.strerror or exc}", path=self.target) from exc
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
