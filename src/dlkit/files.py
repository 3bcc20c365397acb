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

try:
    import resource
except ImportError:  # not on Windows: there is no per-process limit to raise
    resource = None  # type: ignore[assignment]

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


def open_file_limit() -> int | None:
    """How many descriptors this process may hold (its soft limit); None when unlimited or
    unknown."""
    if resource is None:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def raise_open_file_limit() -> bool:
    """Raise this process's soft limit of open files to its hard limit, as ``ulimit -n
    $(ulimit -Hn)`` would; whether it rose. Called when a map finds no descriptor left: a
    mixture of many large databases holds one per mapped file, and the usual soft limit
    (1024) sits far below the hard one a process may take without privileges."""
    if resource is None:
        return False
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard or soft == resource.RLIM_INFINITY:
        return False
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError):  # a hard limit above the kernel's nr_open (macOS: OPEN_MAX)
        return False
    return True
