"""``verify`` reads one version of a database, even while ``preprocess --overwrite`` swaps
another in; a path that is no database is refused at once (exit 5) without a tree walk."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dlkit.db import preprocess, verify_database
from dlkit.db.read import file_checks
from dlkit.db.write.embed import load_embedder
from dlkit.errors import DatabaseError
from tests.db.conftest import EXAMPLE


def _build(out: Path, dim: int, overwrite: bool = False) -> None:
    preprocess(EXAMPLE, out, overwrite=overwrite, embedder=load_embedder("hashed", dim),
               fsync=False)


def test_a_swap_after_the_manifest_was_read_is_not_reported_as_corruption(tmp_path,
                                                                           monkeypatch):
    """The new version is swapped in (and the old one deleted) after verify read the old
    manifest: reading files by path would hash the new ones against the old manifest."""
    db = tmp_path / "db"
    _build(db, 16)
    real, swaps = file_checks.start_hashing, []

    def swap_then_hash(*args, **kwargs):
        if not swaps:
            swaps.append(1)
            _build(db, 24, overwrite=True)
        return real(*args, **kwargs)

    monkeypatch.setattr(file_checks, "start_hashing", swap_then_hash)
    report = verify_database(db)
    assert swaps and report.ok, report.failures
    monkeypatch.setattr(file_checks, "start_hashing", real)
    assert report.database_hash == verify_database(db).database_hash  # the new version's


def test_a_database_replaced_under_every_attempt_is_busy_not_corrupt(tmp_path, monkeypatch):
    db = tmp_path / "db"
    _build(db, 16)
    real, dims = file_checks.start_hashing, iter([24, 16] * 10)

    def swap_every_time(*args, **kwargs):
        _build(db, next(dims), overwrite=True)
        return real(*args, **kwargs)

    monkeypatch.setattr(file_checks, "start_hashing", swap_every_time)
    with pytest.raises(DatabaseError, match="replaced while being verified") as caught:
        verify_database(db)
    assert caught.value.code == "DATABASE_BUSY"


WRITER = """
import sys
from dlkit.db import preprocess
from dlkit.db.write.embed import load_embedder
for i in range(int(sys.argv[3])):
    preprocess(sys.argv[1], sys.argv[2], overwrite=True, fsync=False,
               embedder=load_embedder("hashed", (16, 24)[i % 2]))
    print(i, flush=True)
"""


@pytest.mark.slow
def test_verify_during_a_loop_of_overwrites_never_reports_corruption(tmp_path):
    db = tmp_path / "db"
    _build(db, 16)
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER), str(EXAMPLE),
                               str(db), "12"], stdout=subprocess.PIPE, text=True)
    verified = 0
    # until the writer is done, bounded in time (not in verifications: on a loaded machine
    # 200 of them once ran out before the twelve builds did)
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline:
            try:
                report = verify_database(db)
            except DatabaseError as exc:
                assert exc.code == "DATABASE_BUSY"  # never DATABASE_CORRUPT
                continue
            assert report.ok, report.failures
            verified += 1
            if writer.poll() is not None:
                break
    finally:
        writer.kill() if writer.poll() is None else None
        out, _ = writer.communicate(timeout=120)
    assert writer.returncode == 0 and out.split()[-1] == "11" and verified >= 2


@pytest.mark.parametrize("what", ["root", "empty", "a file", "missing", "parquet input"])
def test_a_path_that_is_no_database_is_refused_at_once(tmp_path, monkeypatch, what, dlkit):
    path = {"root": Path("/"), "empty": tmp_path / "empty", "a file": tmp_path / "f",
            "missing": tmp_path / "nowhere", "parquet input": EXAMPLE}[what]
    (tmp_path / "empty").mkdir()
    (tmp_path / "f").write_text("x")

    def no_walk(*args, **kwargs):
        raise AssertionError("verify walked a foreign tree")

    monkeypatch.setattr(os, "walk", no_walk)
    with pytest.raises(DatabaseError, match="not a dlkit database") as caught:
        verify_database(path)
    assert caught.value.code == "NOT_A_DATABASE"
    result = dlkit("verify", path)
    assert result.returncode == 5 and result.stdout == ""
    assert result.stderr.startswith(f"error NOT_A_DATABASE: {path}: not a dlkit database")


def test_an_unreadable_manifest_is_a_read_problem_not_an_output_error(tmp_path, monkeypatch,
                                                                        dlkit):
    db = tmp_path / "db"
    _build(db, 16)
    real = os.lstat

    def denied(path, *args, **kwargs):
        if str(path).endswith("manifest.json"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", denied)
    result = dlkit("verify", db)
    assert result.returncode == 5
    assert result.stderr == (f"error DATABASE_UNREADABLE: {db}: cannot read its manifest.json: "
                             "Permission denied\n")
