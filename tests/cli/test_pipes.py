"""Output through real pipes and files: 141 when the reader leaves before the end, 0 when it
read everything; tables and `show` neither cut nor wrapped off a terminal; no progress bars
in a file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.db.conftest import example_db  # noqa: F401 - the session fixture

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "fixtures" / "example_manifest.json"
DLKIT = [sys.executable, "-m", "dlkit"]


@pytest.fixture(scope="module")
def one_big_epoch(tmp_path_factory) -> Path:
    """The example manifest with an epoch of 12,500 steps (589 KB of text, more than a pipe
    holds): `--steps all` stays within one epoch."""
    manifest = json.loads(MANIFEST.read_text())
    manifest["datasets"]["example/train"]["cardinality"] = 100_000
    path = tmp_path_factory.mktemp("pipes") / "big.json"
    path.write_text(json.dumps(manifest))
    return path


def _sample(manifest: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([*DLKIT, "sample", str(manifest), "-d", "example/train", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _leave_after(process: subprocess.Popen, nbytes: int) -> tuple[int, bytes]:
    """Read ``nbytes`` of stdout (none: not even wait for output), close the pipe, and return
    the exit status and stderr."""
    assert process.stdout is not None and process.stderr is not None
    if nbytes:  # from the descriptor itself: a buffered read would take the whole pipe
        got = os.read(process.stdout.fileno(), nbytes)
        assert len(got) == nbytes
    process.stdout.close()
    err = process.stderr.read()
    return process.wait(timeout=300), err


@pytest.mark.parametrize("steps", ["all", "20000"])  # within one epoch, and beyond it
def test_a_reader_that_leaves_early_gets_141_and_no_checkpoint(one_big_epoch, tmp_path, steps):
    checkpoint = tmp_path / "cursor.ckpt"
    status, err = _leave_after(_sample(one_big_epoch, "-n", steps, "--checkpoint-out",
                                       str(checkpoint)), 1)
    assert (status, err) == (141, b"")
    assert not checkpoint.exists() and os.listdir(tmp_path) == []


def test_a_short_output_left_unread_is_141_too(tmp_path):
    """Five steps (about a hundred bytes, one write) sit whole in the pipe; the reader takes
    one byte and leaves."""
    checkpoint = tmp_path / "cursor.ckpt"
    status, err = _leave_after(_sample(MANIFEST, "-n", "5", "--checkpoint-out",
                                       str(checkpoint)), 1)
    assert (status, err) == (141, b"")
    assert not checkpoint.exists()


def test_a_reader_gone_before_the_first_write_is_141():
    status, err = _leave_after(_sample(MANIFEST, "-n", "1"), 0)
    assert (status, err) == (141, b"")


def test_a_reader_that_takes_everything_gets_0_and_the_checkpoint(tmp_path):
    checkpoint = tmp_path / "cursor.ckpt"
    process = _sample(MANIFEST, "-n", "5", "--checkpoint-out", str(checkpoint))
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert len(out.decode().splitlines()) == 5 and checkpoint.exists()


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_show_into_a_file_is_neither_wrapped_nor_cut(example_db, tmp_path):  # noqa: F811
    out = tmp_path / "show.txt"
    with out.open("wb") as f:
        result = subprocess.run([*DLKIT, "show", str(example_db), "-t", "review_rating",
                                 "-a", "3"], stdout=f, stderr=subprocess.PIPE, timeout=300,
                                env={k: v for k, v in os.environ.items() if k != "COLUMNS"})
    assert result.returncode == 0, result.stderr
    rows = [line for line in _lines(out.read_text()) if line.startswith("│")]
    data = json.loads(subprocess.run(
        [*DLKIT, "show", str(example_db), "-t", "review_rating", "-a", "3", "--json"],
        capture_output=True, check=True, timeout=300).stdout)
    # one table line per visited row (none wrapped onto a second line) ...
    assert len(rows) == len(data["rows"])
    # ... holding every cell whole: `column=value` as --json gives it, in the row's line
    for line, row in zip(rows, data["rows"], strict=True):
        for cell in row["cells"]:
            value = cell["value"]
            if isinstance(value, str) and not cell.get("is_target"):
                assert f"{cell['column']}=" in line and value in line, (line, cell)


def test_preprocess_writes_no_progress_bar_into_a_file(tmp_path):
    err = tmp_path / "err.txt"
    with err.open("wb") as f:
        result = subprocess.run([*DLKIT, "preprocess", str(REPO / "fixtures" / "example_db"),
                                 str(tmp_path / "db"), "--no-fsync"], stdout=subprocess.DEVNULL,
                                stderr=f, timeout=600)
    assert result.returncode == 0, err.read_text()
    text = err.read_text()
    assert "━" not in text.split("tables")[0] and "0:00:" not in text  # no bar, no elapsed time
    assert "database hash" in text
