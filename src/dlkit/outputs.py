"""Which paths a command may write: the rules every output path obeys before anything is
written (``dlkit.atomic`` then writes them atomically).

An output that names an open descriptor, a device, a FIFO or a socket is a *stream*, written
directly (it has no content to replace); anything else is a *file*, new or replaced whole,
and an existing one only with ``overwrite``. A symbolic link is never written through: with
``overwrite`` the link itself is replaced. No output may be one of the command's inputs or
another output, however the paths are spelled (file identity decides).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from dlkit.errors import OutputError

_OWN_DESCRIPTORS = re.compile(rf"^/(?:dev/fd|proc/self/fd|proc/{os.getpid()}/fd)/(\d+)$")


def _descriptor_name(path: str | os.PathLike[str]) -> tuple[bool, int | None]:
    """Whether ``path`` is, or is a chain of links through, a name of an open descriptor
    (``/dev/stdout``, ``/dev/fd/N``, ``/proc/self/fd/N``), and the number of this process's
    descriptor it names (None: another process's). Writing to it is writing to that stream,
    not replacing a file."""
    current = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on a chain of links
        if current in ("/dev/stdout", "/dev/stderr"):
            return True, 1 if current == "/dev/stdout" else 2
        own = _OWN_DESCRIPTORS.match(current)
        if own is not None:
            return True, int(own.group(1))
        if current.startswith("/proc/") and "/fd/" in current:
            return True, None
        if not os.path.islink(current):
            return False, None
        current = os.path.normpath(os.path.join(os.path.dirname(current),
                                                os.readlink(current)))
    return False, None


def _names_a_descriptor(path: Path) -> bool:
    return _descriptor_name(path)[0]


def output_kind(path: str | os.PathLike[str], overwrite: bool) -> str:
    """How an output at ``path`` is written: ``"stream"`` (a device, FIFO, socket or
    descriptor name, written directly: it has no content to replace) or ``"file"`` (a new
    file, or one replaced whole). Refuses, as an ``OutputError`` naming the path, a
    directory, an existing file without ``overwrite`` and a symbolic link without
    ``overwrite`` (with it, the link itself is replaced, never the file it names)."""
    target = Path(path)
    try:
        own = os.lstat(target)
    except FileNotFoundError:
        return "file"
    except OSError as exc:
        raise OutputError(f"cannot write here: {exc.strerror or exc}", path=target) from exc
    try:
        named = os.stat(target)
    except OSError:  # a dangling link
        named = None
    if named is not None and stat.S_ISDIR(named.st_mode):
        raise OutputError("is a directory", path=target)
    if _names_a_descriptor(target) or (named is not None and not stat.S_ISREG(named.st_mode)):
        return "stream"
    if stat.S_ISLNK(own.st_mode):
        if not overwrite:
            raise OutputError("is a symbolic link; refusing to write through it (pass "
                              "--overwrite to replace the link itself)", path=target)
        return "file"
    if not overwrite:
        raise OutputError("already exists (pass --overwrite to replace it)", path=target)
    return "file"


def _identity(path: str | os.PathLike[str], follow: bool = True) -> tuple[int, int] | None:
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def refuse_overlap(outputs: dict[str, Any], inputs: dict[str, Any]) -> None:
    """Refuse (``InvalidArgumentError``) an output that is one of the inputs, or another
    output, however either path is spelled: their file identities (device, inode) are
    compared (a link's own, for an output: only the link would be replaced), and the paths
    of outputs that do not exist yet. ``outputs`` and ``inputs``
    map a name for messages (``--trace``) to a path or None; outputs that are streams
    (``/dev/null``, ``/dev/stdout``) are left out: nothing of theirs is replaced."""
    from dlkit.errors import InvalidArgumentError

    seen: dict[object, str] = {}
    for name, path in inputs.items():
        if path is not None and (key := _identity(path)) is not None:
            seen.setdefault(key, name)
    for name, path in outputs.items():
        if path is None:
            continue
        try:
            named = os.stat(path)
        except OSError:
            named = None
        if named is not None and not stat.S_ISREG(named.st_mode):
            continue  # a device, FIFO or directory: output_kind streams or refuses it
        # What would be replaced: the file at ``path`` or, for a link, the link itself
        # (output_kind never lets anything write through one).
        absolute = os.path.abspath(path)
        keys: list[object] = [os.path.join(os.path.realpath(os.path.dirname(absolute)),
                                           os.path.basename(absolute))]
        if (key := _identity(path, follow=False)) is not None:
            keys.append(key)
        for known in keys:
            if known in seen:
                raise InvalidArgumentError(f"{name} {path} is the same file as {seen[known]}; "
                                           "give each output its own file")
        for known in keys:
            seen[known] = f"{name} ({path})"


def stream_identity(stream: Any) -> tuple[int, int] | None:
    """(device, inode) of the file an open stream writes to (None: in memory, or closed)."""
    try:
        st = os.fstat(stream.fileno())
    except (AttributeError, ValueError, OSError):
        return None
    return st.st_dev, st.st_ino


def _null_device() -> tuple[int, int] | None:
    return _identity(os.devnull)


def refuse_shared_stream(outputs: dict[str, Any], stdout: tuple[int, int] | None,
                         stdout_holds: str) -> None:
    """Refuse (``InvalidArgumentError``) an output that is the file standard output writes
    to while the command writes ``stdout_holds`` there (``stdout``: its (device, inode), or
    None when nothing goes to stdout), or the same stream as another output: device and
    inode are compared, of streams too (``/dev/stdout`` into a pipe), which
    :func:`refuse_overlap` leaves out. Two writers of one stream interleave their bytes; the
    null device alone takes any number of them."""
    from dlkit.errors import InvalidArgumentError

    null = _null_device()
    seen: dict[tuple[int, int], str] = {}
    if stdout is not None and stdout != null:
        seen[stdout] = f"standard output, where {stdout_holds} go"
    for name, path in outputs.items():
        if path is None or (key := _identity(path)) is None or key == null:
            continue
        if key in seen:
            raise InvalidArgumentError(f"{name} {path} is the same file as {seen[key]}; "
                                       "give each output its own file")
        seen[key] = f"{name} ({path})"
