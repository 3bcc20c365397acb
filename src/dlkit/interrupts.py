"""Interrupts and commits: knowing which outputs a command completed, and keeping catchable
signals out of a commit.

``dlkit.atomic`` notes every output it commits (``note_committed``) and runs each commit
inside ``deferred_interrupts``; the CLI records the commits of a command
(``recording_commits``) to tell an interrupt that came after its output was complete (exit
0, with a note) from one that came before (nothing was left behind). What a command commits
for its own use and removes again (``scratch_outputs``) is not its output.
"""

from __future__ import annotations

import contextlib
import contextvars
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

_commit_log: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "dlkit_commit_log", default=None)
_part_log: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "dlkit_part_log", default=None)


@contextlib.contextmanager
def _logging_to(log_var: contextvars.ContextVar[list[str] | None],
                log: list[str] | None) -> Iterator[None]:
    """Within the block, ``log_var`` is ``log``."""
    token = log_var.set(log)
    try:
        yield
    finally:
        log_var.reset(token)


@contextlib.contextmanager
def recording_commits() -> Iterator[list[str]]:
    """A list that every output committed inside the block is appended to (its path): the
    CLI tells an interrupt that came after the output was complete from one that came before."""
    log: list[str] = []
    with _logging_to(_commit_log, log):
        yield log


@contextlib.contextmanager
def recording_parts() -> Iterator[list[str]]:
    """A list that every part committed inside an ``outputs_in_parts`` block is appended to:
    the CLI tells an interrupt that left some parts of the output complete."""
    log: list[str] = []
    with _logging_to(_part_log, log):
        yield log


def outputs_in_parts() -> contextlib.AbstractContextManager[None]:
    """Outputs committed inside the block are parts of the command's output (the databases
    of ``preprocess-many``): an interrupt inside it finds the output unfinished, with those
    parts complete, not the whole output complete."""
    return _logging_to(_commit_log, _part_log.get())


def scratch_outputs() -> contextlib.AbstractContextManager[None]:
    """Outputs committed inside the block are a command's own scratch work (``dlkit bench``
    preprocessing the bundled example into a temporary directory it then reads), not what it
    was asked for: an interrupt after them still finds the command's output unfinished."""
    return _logging_to(_commit_log, None)


def note_committed(*paths: object) -> None:
    log = _commit_log.get()
    if log is not None:
        log.extend(str(p) for p in paths)


_DEFERRED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                          if hasattr(signal, name))


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP wait until the block has run: a commit (its renames and the
    bookkeeping saying it happened) is never cut in half by a catchable signal. The signal is
    then delivered to the handler that was in place. (Only the main thread can install
    handlers; elsewhere the block runs as it is.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[tuple[int, Any]] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        pending.append((signum, frame))

    previous = {}
    try:
        for signum in _DEFERRED_SIGNALS:
            previous[signum] = signal.signal(signum, hold)
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum, frame in pending[:1]:  # one delivery is enough: they all mean "stop"
            handler = previous.get(signum)
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, a scheduler's time limit) unwinds like Ctrl-C, so a command's
    temporary output is removed on the way out instead of left beside the target."""

    def interrupt(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread (an embedding program's): leave it alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
