"""The database directory as an atomic output (:class:`dlkit.atomic.AtomicDirectory`): how
an existing one is recognised, and what it holds, so that ``--overwrite`` replaces a database
and nothing else (not a file someone added to it)."""

from __future__ import annotations

from pathlib import Path

from dlkit.atomic import TargetKind
from dlkit.db.format import MANIFEST_FILE, MANIFEST_FORMAT
from dlkit.files import json_object_at


def is_database_dir(path: Path) -> bool:
    """A directory that looks like a dlkit database (its manifest names the format)."""
    doc = json_object_at(path / MANIFEST_FILE)
    return doc is not None and doc.get("format") == MANIFEST_FORMAT


def database_files(path: Path) -> list[str]:
    """The files a database holds by its manifest: the manifest and every file it lists."""
    doc = json_object_at(path / MANIFEST_FILE) or {}
    files = doc.get("files")
    return [MANIFEST_FILE, *(files if isinstance(files, dict) else ())]


DATABASE = TargetKind("database", is_database_dir, database_files)
