"""Atomic file output: a reader sees the old file or the complete new one, never a mix.

Data goes to a hidden temporary file in the target's directory (same filesystem, so the final
``os.replace`` is atomic), is flushed and fsynced, then renamed over the target. On any
exception the temporary file is removed and the target is left as it was.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
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
