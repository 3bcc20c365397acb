"""``dlkit verify``: prove a database intact.

First every file against ``manifest.json`` (present, listed, size, SHA-256, the recorded
database hash), then the full structure: everything ``open_database`` checks, plus the graph
(children in (time, id) order, ``child_times`` equal to the children's row times, the child
lists exactly the transpose of the parent lists, parents only in the foreign keys' tables,
``row_table`` agreeing with ``table_offsets``), the columns (bitmap padding bits zero, valid
counts as in the metadata, null cells zero), the texts (valid UTF-8) and the tasks (seeds are
exactly the rows with a non-null target, ascending; targets and observation times agree with
the table). Every failure names the file and the check.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

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
    total = sum((root / rel).stat().st_size for rel in files if (root / rel).is_file())
    recorded = None
    if not failures:
        from dlkit.db.manifest import parse_manifest

        _, digest = parse_manifest((root / "manifest.json").read_bytes())
        recorded = digest.hex()
    return VerifyReport(path=str(root), ok=not failures, database_hash=recorded,
                        files=len(files) + (1 if (root / "manifest.json").exists() else 0),
                        bytes=total, seconds=time.perf_counter() - started, failures=failures)
