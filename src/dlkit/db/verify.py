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
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from dlkit.db.format import MANIFEST_FILE
from dlkit.db.manifest import list_files
from dlkit.db.reader import Failure, check_database


@dataclass
class VerifyReport:
    path: str
    ok: bool
    database_hash: str | None
    files: int
    bytes: int
    seconds: float
    failures: list[Failure] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "path": self.path, "ok": self.ok, "database_hash": self.database_hash,
            "files": self.files, "bytes": self.bytes, "seconds": self.seconds,
            "failures": [{"file": f.file, "check": f.check, "message": f.message}
                         for f in self.failures],
        }


def verify_database(path: str | os.PathLike[str]) -> VerifyReport:
    """Run every check on the database at ``path``; never raises for a corrupt database."""
    started = time.perf_counter()
    root = Path(path)
    failures = check_database(root, verify_hashes=True)
    files = list_files(root) if root.is_dir() else []
    if (root / MANIFEST_FILE).exists():
        files.append(MANIFEST_FILE)  # counted with the rest, as preprocess counts it
    total = sum((root / rel).stat().st_size for rel in files if (root / rel).is_file())
    recorded = None
    if not failures:
        from dlkit.db.manifest import parse_manifest

        _, digest = parse_manifest((root / MANIFEST_FILE).read_bytes())
        recorded = digest.hex()
    return VerifyReport(path=str(root), ok=not failures, database_hash=recorded,
                        files=len(files),
                        bytes=total, seconds=time.perf_counter() - started, failures=failures)
