"""The crash-safety half of :mod:`dlkit.atomic`: a lock file beside each target serialises
runs on it, and a journal lets the next run finish or undo what an interrupted one left
between two renames (:func:`settle`)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path

from dlkit.errors import OutputError
from dlkit.files import read_regular

# Names of the hidden entries beside a target (a leading dot and the target's name first)
TMP_MARK = ".dlkit-tmp-"
OLD_MARK = ".dlkit-old-"
LOCK_MARK = ".dlkit-lock"
PENDING_MARK = ".dlkit-pending-"
JOURNAL_MARK = ".dlkit-commit-"


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


def _run_journal(journal: Path) -> None:
    """Do (or finish) the renames a commit journal lists, then remove it and its markers."""
    try:
        plan = json.loads(read_regular(journal))
        renames = [(Path(a), Path(b)) for a, b in plan["renames"]]
        markers = [Path(m) for m in plan["markers"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise OutputError(f"unreadable commit journal of an interrupted run ({exc}); remove it "
                          "and check the outputs it names", path=journal) from None
    for tmp, target in renames:
        try:
            os.replace(tmp, target)
        except FileNotFoundError:  # renamed already, by the run this journal finishes
            continue
    for directory in dict.fromkeys(target.parent for _tmp, target in renames):
        fsync_directory(directory)
    os.unlink(journal)
    for marker in markers:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(marker)


def _lock_beside(target: Path) -> int:
    """Take the lock ``.<name>.dlkit-lock`` of the file ``target``; raise if another run
    holds it."""
    lock_path = target.parent / f".{target.name}{LOCK_MARK}"
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputError("another dlkit process is writing this file right now",
                              path=target) from None
        try:  # the previous holder may have unlinked it between our open and flock
            same = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def _unlock_beside(target: Path, fd: int) -> None:
    with contextlib.suppress(OSError):
        os.unlink(target.parent / f".{target.name}{LOCK_MARK}")
    os.close(fd)


def _settle_locked(target: Path) -> None:
    """Holding ``target``'s lock: finish every decided commit that names it (a journal its
    pending marker points to), then remove what interrupted runs left beside it."""
    directory = target.parent
    prefix = f".{target.name}"
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix + PENDING_MARK) and TMP_MARK not in name:
            marker = directory / name
            try:
                journal = Path(os.fsdecode(read_regular(marker)))
            except OSError:
                continue
            if journal.exists():
                _run_journal(journal)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(marker)
    for name in os.listdir(directory):
        if name.startswith(prefix + TMP_MARK) or (
                name.startswith(prefix + ".dlkit-") and TMP_MARK in name):
            with contextlib.suppress(OSError):
                os.unlink(directory / name)


def settle(path: str | os.PathLike[str]) -> None:
    """Before reading ``path``: finish a commit of it that a killed run decided but did not
    complete (see :class:`AtomicFiles`), and remove what killed runs left beside it. Quiet
    when there is nothing to do, when another run is writing it, or when its directory
    cannot be written."""
    target = Path(path)
    prefix = f".{target.name}.dlkit-"
    try:
        if not any(n.startswith(prefix) for n in os.listdir(target.parent)):
            return
        fd = _lock_beside(target)
    except OSError:
        return
    try:
        _settle_locked(target)
    finally:
        _unlock_beside(target, fd)
