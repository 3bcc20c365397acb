"""Whether standard output's reader took everything a command wrote.

A command whose output fits in a pipe's buffer (64 KiB on Linux) has written all of it before
``head -1`` reads its first line: the writes succeed, and only the reader knows it left early.
:func:`wait_until_read` waits, when stdout is a pipe, until the pipe is empty (the reader read
everything) or its reading end is closed (the reader left): the same wait a larger output
would spend blocked in ``write``.
"""

from __future__ import annotations

import fcntl
import os
import select
import stat
import struct
import termios
from typing import Any, BinaryIO, cast

_POLL_MS = 10  # how often an unread pipe is looked at again
READER_GONE_EXIT = 128 + 13  # as a shell reports a command SIGPIPE ended


def _unread_bytes(fd: int) -> int:
    buffer = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, buffer)
    return int(struct.unpack("i", buffer)[0])


def wait_until_read(fd: int) -> bool:
    """``False`` when ``fd`` is a pipe whose reader left before reading all of it; ``True``
    once it is empty, and at once for anything that is not a pipe (a file, a terminal)."""
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return True
        poller = select.poll()
        poller.register(fd, 0)  # POLLERR (the reader left) is reported whatever is asked
        while True:
            if _unread_bytes(fd) == 0:  # read whole, whether the reader is still there
                return True
            if any(events & select.POLLERR for _, events in poller.poll(_POLL_MS)):
                return _unread_bytes(fd) == 0
    except OSError:  # no such descriptor, or no FIONREAD here: nothing to wait for
        return True


class DeliveredStream:
    """A binary stream whose ``flush`` returns once the reader took every byte, and raises
    ``BrokenPipeError`` when it left before: what a command does after its output (commit a
    checkpoint) is done only when that output was read."""

    def __init__(self, stream: BinaryIO):
        self._stream = stream

    def write(self, data: Any) -> int:
        return self._stream.write(data)

    def flush(self) -> None:
        self._stream.flush()
        try:
            fd = self._stream.fileno()
        except (AttributeError, ValueError, OSError):  # in memory (a test's capture): no pipe
            return
        if not wait_until_read(fd):
            raise BrokenPipeError(32, "the reader of standard output left")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def delivered(stream: BinaryIO) -> BinaryIO:
    """``stream`` as a :class:`DeliveredStream`, typed as the binary stream it stands for."""
    return cast(BinaryIO, DeliveredStream(stream))
