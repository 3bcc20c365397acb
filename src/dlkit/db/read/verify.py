"""``dlkit verify``: prove a database intact.

First every file against ``manifest.json`` (present, listed, size, SHA-256, the recorded
database hash), then everything ``open_database`` checks, then the full checks, which hold
even when ``manifest.json`` was re-hashed over corrupt files (``docs/database_format.md``,
"Reader API", lists each with its check name). Each is one vectorised pass (numpy, or a
nogil kernel of :mod:`dlkit.core.integrity` / :mod:`dlkit.core.csr`), linear in the data:

- files: no symbolic link, no file beyond the set ``metadata.json`` implies (present or
  listed);
- ``metadata.json``: exactly the documented keys and JSON types (integers that are not
  booleans, finite ``mean``/``std``, ``no_time``, ``stypes``, stype names, ``on_dangling``);
  names (tables and tasks unique ignoring case, columns unique in a table, the primary key
  not a feature or foreign-key column, the time column a timestamp feature); categories of
  one kind, strictly ascending; counts that must add up (edges + nulls + dangling = rows per
  foreign key, null times, valid counts, seeds);
- ``graph.bin``: reserved header bytes and page padding zero; ``row_table`` agreeing with
  ``table_offsets``; children in (time, id) order with their row times; the child lists the
  transpose of the parent lists; each row's parents one per foreign key at most, in key
  order, each in its key's table; edges per table and per foreign key as in the metadata;
  ``row_times`` equal to the time column (``NO_TIME`` for a null or without one);
- primary keys unique, string keys valid UTF-8;
- columns: bitmap padding bits zero, valid counts as in the metadata, null cells zero,
  booleans 0/1, numeric values finite, ``mean``/``std`` those of the values;
- texts each valid UTF-8 on its own and distinct; every embedding finite;
- tasks: seeds exactly the rows with a non-null target, ascending; targets and observation
  times agree with the table.

Every failure names the file and the check; open_database runs none of the full checks.

**Speed.** ``manifest.json`` is read once; the files' hashes start on a thread pool (one
thread per core, largest file first) before the structure checks' kernels load numba, and
run beside those checks (:func:`dlkit.db.read.file_checks.begin_checks`,
:func:`dlkit.db.read.reader.inspect_database`); the failures still come in the order of a
sequential run. The transpose and child times are screened by a keyed hash of both CSR
directions' edges (:mod:`dlkit.core.integrity`); the exact checks run only to name a
difference. No check copies a file into anonymous memory.

**One version.** The directory is opened once and every file is read through that handle
(``/proc/self/fd/N/...``), so a concurrent ``preprocess --overwrite``, which swaps a new
directory in at the same path, never makes verify read the manifest of one version and a file
of the next. The swap deletes the old version's files, so reading it can still fail part way:
when checks fail and the path no longer names the directory that was read, verify starts
again on the new version (a few times at most) instead of reporting corruption.

**Not a database.** A path that is not a directory, or a directory without ``manifest.json``
(an empty one, ``/``, the Parquet input), is refused at once as ``NOT_A_DATABASE`` (exit 5),
without walking the tree; one whose ``manifest.json`` cannot be read, as
``DATABASE_UNREADABLE`` (exit 5).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlkit.db.failures import Failure
from dlkit.db.format import MANIFEST_FILE
from dlkit.db.read.file_checks import begin_checks
from dlkit.errors import DatabaseError

ATTEMPTS = 5  # versions read before giving up on a database that keeps being replaced


@dataclass
class VerifyReport:
    path: str
    ok: bool
    database_hash: str | None
    num_files: int  # as `dlkit info` names them: the files and bytes of the database
    size_bytes: int
    seconds: float
    failures: list[Failure] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "ok": self.ok, "database_hash": self.database_hash,
            "num_files": self.num_files, "size_bytes": self.size_bytes,
            "seconds": self.seconds,
            "failures": [{"file": f.file, "check": f.check, "message": f.message}
                         for f in self.failures],
        }


def require_database(root: Path) -> None:
    """Refuse at once a path that is no database (no tree walk: it may be ``/``):
    ``NOT_A_DATABASE`` for every command and API that opens one."""
    def refuse(problem: str) -> DatabaseError:
        return DatabaseError(f"not a dlkit database: {problem} (`dlkit preprocess` makes one)",
                             path=root, code="NOT_A_DATABASE")

    def unreadable(what: str, exc: OSError) -> DatabaseError:
        return DatabaseError(f"cannot read {what}: {exc.strerror or exc}", path=root,
                             code="DATABASE_UNREADABLE")

    try:
        info = os.stat(root)
    except FileNotFoundError:
        raise refuse("no such directory") from None
    except OSError as exc:
        raise unreadable("it", exc) from None
    if not stat.S_ISDIR(info.st_mode):
        raise refuse("not a directory")
    try:
        manifest = os.lstat(root / MANIFEST_FILE)
    except FileNotFoundError:
        raise refuse(f"it holds no {MANIFEST_FILE}") from None
    except OSError as exc:
        raise unreadable(f"its {MANIFEST_FILE}", exc) from None
    if not stat.S_ISREG(manifest.st_mode):
        raise refuse(f"its {MANIFEST_FILE} is not a regular file")


def _replaced(root: Path, fd: int) -> bool:
    """Whether ``root`` no longer names the directory open as ``fd`` (swapped or removed)."""
    held = os.fstat(fd)
    try:
        now = os.stat(root)
    except OSError:
        return True
    return (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino) or held.st_nlink == 0


def _verify_once(root: Path, shown: Path, started: float,
                 progress: Callable[[int, int], object] | None) -> VerifyReport:
    begun = begin_checks(root, verify_hashes=True, progress=progress)
    from dlkit.db.read.reader import inspect_database  # loads numba while the files hash

    found = inspect_database(root, begun=begun)
    total = 0
    for rel in found.files:
        try:
            info = (root / rel).lstat()
        except OSError:
            continue  # named among the failures
        if stat.S_ISREG(info.st_mode):
            total += info.st_size
    failures = found.failures
    recorded = found.database_hash.hex() if not failures and found.database_hash else None
    return VerifyReport(path=str(shown), ok=not failures, database_hash=recorded,
                        num_files=len(found.files), size_bytes=total,
                        seconds=time.perf_counter() - started, failures=failures)


def verify_database(path: str | os.PathLike[str],
                    progress: Callable[[int, int], object] | None = None) -> VerifyReport:
    """Run every check on the database at ``path``; never raises for a corrupt database.
    ``progress(bytes, total)`` is called, from the hashing threads, as each block of the
    files is hashed (the most of the work on a large database).

    Raises ``DatabaseError`` (code ``NOT_A_DATABASE``) for a path that is no database, and
    (code ``DATABASE_BUSY``) when the database was replaced under every attempt to read it.
    """
    started = time.perf_counter()
    root = Path(path)
    require_database(root)
    for _attempt in range(ATTEMPTS):
        try:
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise DatabaseError(f"cannot read it: {exc.strerror or exc}", path=root,
                                code="DATABASE_UNREADABLE") from None
        try:
            held = Path(f"/proc/self/fd/{fd}")
            view = held if held.is_dir() else root  # without /proc: by path (and the retry)
            report = _verify_once(view, root, started, progress)
            if report.ok or not _replaced(root, fd):
                return report
        finally:
            os.close(fd)
    raise DatabaseError(f"was replaced while being verified, {ATTEMPTS} times in a row; "
                        "verify it again once the writer is done", path=root,
                        code="DATABASE_BUSY")
