"""``manifest.json``: every file's size and SHA-256, and the database hash.

The **file map** is a map from each file's path relative to the database directory (POSIX
``/`` separators, UTF-8 text) to ``{"size": <uint>, "sha256": <32-byte byte string>}``, over
every regular file in the directory tree except ``manifest.json`` itself (so it includes
``metadata.json``). The **database hash** is ``SHA-256(CBOR_CANONICAL(file map))`` with the
canonical CBOR of :mod:`dlkit.encoding` (map keys sorted canonically; sizes as
unsigned integers, digests as byte strings). It is what a run manifest cites as a dataset's
``hash``.

``manifest.json`` is the UTF-8 text of ``json.dumps(doc, indent=2, sort_keys=True) + "\\n"``
with ``doc = {"database_hash": hex, "files": {path: {"sha256": hex, "size": int}}, "format":
"dlkit-database-manifest", "format_version": FORMAT_VERSION}`` (hex: 64 lowercase digits). The
file must be byte-identical to that rendering of its own content (``verify`` checks this), so
no edit of it goes unnoticed either.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypedDict

from dlkit.db.format import FORMAT_VERSION, MANIFEST_FILE, MANIFEST_FORMAT
from dlkit.encoding import UINT64_MAX, cbor_sha256, is_utf8, parse_hex_digest
from dlkit.errors import DatabaseError
from dlkit.files import open_regular

HASH_BLOCK = 1 << 22


class FileEntry(TypedDict):
    """One file of the manifest's file map: its size in bytes and its SHA-256 digest."""

    size: int
    sha256: bytes


def sha256_file(path: Path, progress: Callable[[int], object] | None = None) -> tuple[int, bytes]:
    """``(size, digest)`` of a file, read in blocks (hashlib releases the GIL per block)."""
    h = hashlib.sha256()
    size = 0
    with os.fdopen(open_regular(path), "rb", buffering=0) as f:
        buf = bytearray(HASH_BLOCK)
        view = memoryview(buf)
        while True:
            n = f.readinto(buf)
            if not n:
                break
            h.update(view[:n])
            size += n
            if progress is not None:
                progress(n)
    return size, h.digest()


def list_files(root: Path) -> list[str]:
    """Relative POSIX paths of every file under ``root`` except the manifest, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        for fname in filenames:
            rel = fname if rel_dir == "." else f"{rel_dir}/{fname}".replace(os.sep, "/")
            if rel != MANIFEST_FILE:
                out.append(rel)
    return sorted(out)


def hash_files(root: Path, paths: list[str], progress: Callable[[int], object] | None = None,
               threads: int = 2) -> dict[str, FileEntry]:
    """The file map of ``paths`` under ``root`` (hashed on ``threads`` threads)."""
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        results = list(pool.map(lambda rel: sha256_file(root / rel, progress), paths))
    return {rel: {"size": size, "sha256": digest} for rel, (size, digest) in zip(paths, results)}


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# Hashing threads at most (each holds a HASH_BLOCK buffer: 64 MiB in all; memory bandwidth
# caps the speed well before).
MAX_HASH_THREADS = 16


class HashJob:
    """SHA-256 of files on a thread pool, started at once and collected later, so the caller
    works meanwhile (hashlib releases the GIL for each block). ``sizes`` maps each path
    (relative to ``root``) to its expected size: the largest files start first, so one large
    file (``graph.bin``) is not left to hash alone at the end. ``threads``: one per core the
    process may use (at most ``MAX_HASH_THREADS``) unless given."""

    def __init__(self, root: Path, sizes: dict[str, int], threads: int | None = None,
                 progress: Callable[[int], object] | None = None):
        self.paths = sorted(sizes)
        threads = threads or min(available_cores(), MAX_HASH_THREADS)
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads),
                                        thread_name_prefix="dlkit-hash")
        order = sorted(self.paths, key=lambda rel: -sizes[rel])
        self._futures = {rel: self._pool.submit(sha256_file, root / rel, progress)
                         for rel in order}

    def result(self) -> dict[str, FileEntry]:
        """The file map of every path (waits). A file that cannot be read raises its
        ``OSError``: the first such in path order, as :func:`hash_files` would."""
        try:
            out: dict[str, FileEntry] = {}
            for rel in self.paths:
                size, digest = self._futures[rel].result()
                out[rel] = {"size": size, "sha256": digest}
            return out
        finally:
            self.cancel()

    def cancel(self) -> None:
        """Stop: files not started are not read; the ones being hashed finish first."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def database_hash(file_map: dict[str, FileEntry]) -> bytes:
    return cbor_sha256({rel: {"size": e["size"], "sha256": e["sha256"]} for rel, e in file_map.items()})


def render_manifest(file_map: dict[str, FileEntry], db_hash: bytes) -> bytes:
    doc = {
        "database_hash": db_hash.hex(),
        "files": {rel: {"sha256": e["sha256"].hex(), "size": e["size"]}
                  for rel, e in file_map.items()},
        "format": MANIFEST_FORMAT,
        "format_version": FORMAT_VERSION,
    }
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8")


def parse_manifest(data: bytes, where: Path | str = MANIFEST_FILE) -> tuple[dict[str, FileEntry], bytes]:
    """``(file map, recorded database hash)``; raises :class:`DatabaseError` naming the problem."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except ValueError as exc:  # not UTF-8, not JSON, an integer of too many digits
        raise DatabaseError(f"not valid JSON: {exc}", path=where) from None
    except RecursionError:
        raise DatabaseError("not valid JSON: nested too deeply", path=where) from None
    if not isinstance(doc, dict) or set(doc) != {"database_hash", "files", "format", "format_version"}:
        raise DatabaseError("not a dlkit database manifest (wrong keys)", path=where)
    if doc["format"] != MANIFEST_FORMAT:
        raise DatabaseError(f"not a dlkit database manifest (format {doc['format']!r})",
                            path=where)
    if doc["format_version"] != FORMAT_VERSION:
        raise DatabaseError(f"database format version {doc['format_version']!r}; this dlkit "
                            f"reads version {FORMAT_VERSION}: build the database again with "
                            "`dlkit preprocess`", path=where)
    try:
        recorded = parse_hex_digest(doc["database_hash"], "database_hash")
    except ValueError as exc:
        raise DatabaseError(str(exc), path=where) from None
    files = doc["files"]
    if not isinstance(files, dict):
        raise DatabaseError("'files' must be an object", path=where)
    file_map: dict[str, FileEntry] = {}
    for rel, entry in files.items():
        if (not isinstance(entry, dict) or set(entry) != {"sha256", "size"}
                or isinstance(entry["size"], bool) or not isinstance(entry["size"], int)
                or not 0 <= entry["size"] <= UINT64_MAX):
            raise DatabaseError(f"entry for {rel!r} must be {{sha256, size}}", path=where)
        if rel.startswith("/") or ".." in rel.split("/") or "\\" in rel or rel == MANIFEST_FILE:
            raise DatabaseError(f"file name {rel!r} is not a plain relative path", path=where)
        if not is_utf8(rel):
            raise DatabaseError(f"file name {rel!r} is not UTF-8 text", path=where)
        try:
            digest = parse_hex_digest(entry["sha256"], f"sha256 of {rel}")
        except ValueError as exc:
            raise DatabaseError(str(exc), path=where) from None
        file_map[rel] = {"size": entry["size"], "sha256": digest}
    if render_manifest(file_map, recorded) != data:
        raise DatabaseError("not in canonical form (the file was edited)", path=where)
    return file_map, recorded
