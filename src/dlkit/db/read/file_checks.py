"""Every file of a database against ``manifest.json``: present, listed, regular, of its size,
and of its SHA-256, the files hashed on a thread pool while the caller runs the structure
checks (:func:`start_hashing`, then :func:`check_hashes` to collect)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dlkit.db import format as fmt
from dlkit.db.failures import Checks, Stop
from dlkit.db.manifest import FileEntry, HashJob, database_hash, list_files, parse_manifest
from dlkit.errors import DatabaseError
from dlkit.files import read_regular


@dataclass(frozen=True)
class Listing:
    """``manifest.json`` read once and checked against the directory, before any hash."""

    file_map: dict[str, FileEntry]
    recorded: bytes  # the database hash it records
    sized: list[str]  # listed, present, regular and of the listed size: the files to hash


def check_files(root: Path, checks: Checks, full: bool, present: list[str]) -> Listing:
    """Every file (``present``: :func:`list_files` of ``root``) against the manifest, all but
    the hashes."""
    try:
        raw_manifest = read_regular(root / fmt.MANIFEST_FILE)
    except FileNotFoundError:
        # the usual cause: a directory that is no database (yet), such as the Parquet input
        checks.fail(fmt.MANIFEST_FILE, "file.missing", "no such file: not a dlkit database? "
                    "(`dlkit preprocess` makes one)", fatal=True)
    except OSError as exc:
        checks.fail(fmt.MANIFEST_FILE, "file.missing", f"cannot read: {exc.strerror or exc}",
                    fatal=True)
    try:
        file_map, recorded = parse_manifest(raw_manifest, root / fmt.MANIFEST_FILE)
    except DatabaseError as exc:
        checks.fail(fmt.MANIFEST_FILE, "manifest.parse", exc.message, fatal=True)
    if database_hash(file_map) != recorded:
        checks.fail(fmt.MANIFEST_FILE, "manifest.database_hash", "the recorded database hash is "
                    "not SHA-256(CBOR_CANONICAL(file map))")
    on_disk = set(present)
    for rel in sorted(set(file_map) - on_disk):
        checks.fail(rel, "file.missing", "listed in manifest.json but absent")
    if full:
        for rel in sorted(on_disk - set(file_map)):
            checks.fail(rel, "file.unexpected", "present but not listed in manifest.json")
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                if p.is_symlink():
                    checks.fail(str(p.relative_to(root)), "file.symlink", "symbolic links are "
                                "not allowed in a database")
    sized = []
    for rel in sorted(set(file_map) & on_disk):
        try:
            info = (root / rel).stat()
        except OSError as exc:  # a dangling symlink
            checks.fail(rel, "file.type", f"cannot stat: {exc.strerror or exc}")
            continue
        if not stat.S_ISREG(info.st_mode):  # a FIFO would block the hash, a device never end
            checks.fail(rel, "file.type", "not a regular file")
            continue
        size = info.st_size
        if size != file_map[rel]["size"]:
            checks.fail(rel, "file.size", f"{size} bytes, manifest says {file_map[rel]['size']}")
        else:
            sized.append(rel)
    return Listing(file_map, recorded, sized)


def start_hashing(root: Path, listing: Listing,
                  progress: Callable[[int, int], object] | None = None) -> HashJob:
    """The hashing of the listed files, begun; ``progress(bytes, total)`` is called from the
    hashing threads as each block is read (``total``: every listed file's bytes)."""
    sizes = {rel: listing.file_map[rel]["size"] for rel in listing.sized}
    total = sum(sizes.values())
    return HashJob(root, sizes, progress=None if progress is None
                   else (lambda amount: progress(amount, total)))


def check_hashes(root: Path, checks: Checks, listing: Listing, job: HashJob) -> None:
    """Each file's SHA-256 against the manifest (waits for ``job``)."""
    try:
        actual = job.result()
    except OSError as exc:  # unreadable (permissions), or replaced since it was listed
        where = os.path.relpath(exc.filename, root) if exc.filename else fmt.MANIFEST_FILE
        checks.fail(where, "file.unreadable", f"cannot read: {exc.strerror or exc}",
                    fatal=True)
    file_map = listing.file_map
    for rel in listing.sized:
        if actual[rel]["sha256"] != file_map[rel]["sha256"]:
            checks.fail(rel, "file.sha256", "content differs from manifest.json "
                        f"(sha256 {actual[rel]['sha256'].hex()[:16]}..., manifest "
                        f"{file_map[rel]['sha256'].hex()[:16]}...)")


def require_directory(root: Path, checks: Checks) -> None:
    if not root.is_dir():
        checks.fail(".", "database.missing",
                    "not a directory" if root.exists() else "no such directory", fatal=True)


@dataclass
class FilesChecked:
    """The checks of :func:`begin_checks`: what failed so far (collected), the files present,
    the manifest (``None`` when a fatal failure stopped the checks) and the hashing under way."""

    checks: Checks
    present: list[str]
    listing: Listing | None
    hashing: HashJob | None


def begin_checks(root: Path, verify_hashes: bool,
                 progress: Callable[[int, int], object] | None = None) -> FilesChecked:
    """The directory and its files against the manifest, collecting every failure, then the
    hashes started on a thread pool (numpy and the standard library only: nothing here loads
    numba, so the files hash while the structure checks' kernels load)."""
    checks = Checks(collect=True, root=root)
    present: list[str] = []
    listing = None
    try:
        require_directory(root, checks)
        present = list_files(root)
        listing = check_files(root, checks, True, present)
    except Stop:
        return FilesChecked(checks, present, None, None)
    return FilesChecked(checks, present, listing,
                        start_hashing(root, listing, progress) if verify_hashes else None)
