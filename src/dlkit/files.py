"""Opening input files that must be regular files.

A path given to dlkit (a schema, a manifest, a checkpoint, a database file) may name a FIFO,
a socket, a device or a directory instead. Reading a FIFO blocks until a writer comes, and a
device may never end, so every such read first opens without blocking and checks what the
path is; anything but a regular file (after symlinks) is an ``OSError`` that callers turn
into their own error naming the file.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from typing import Any

_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def open_regular(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of ``path``; raises ``OSError`` unless it is a regular file."""
    fd = os.open(path, _FLAGS)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            code, problem = ((errno.EISDIR, "is a directory") if stat.S_ISDIR(mode)
                             else (errno.EINVAL, "is not a regular file"))
            raise OSError(code, problem, str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_regular`)."""
    with os.fdopen(open_regular(path), "rb") as f:
        return f.read()


def json_object_at(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The JSON object in the regular file ``path``; None when there is none (no such file,
    unreadable, not JSON, or JSON but not an object): for recognising a directory by a file
    it holds, not for reporting what is wrong with it."""
    try:
        doc = json.loads(read_regular(path))
    except (OSError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None
