"""Atomic output of ``preprocess`` (dlkit.atomic under a database build): killed runs leave no
database or a complete one; overwrite never leaves neither; leftovers of killed runs are
removed by the next run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from dlkit.atomic import AtomicDirectory, TargetKind
from dlkit.db import preprocess, verify_database
from dlkit.db.output import DATABASE
from dlkit.errors import OutputError
from tests.db.conftest import leftovers, write_db

pytestmark = pytest.mark.slow

SCRIPT = """
import sys
from dlkit.db import preprocess
preprocess(sys.argv[1], sys.argv[2], overwrite=sys.argv[3] == "1", batch_rows=4096)
"""


def _input(root: Path, n: int, salt: str) -> Path:
    rng = np.random.default_rng(len(salt))
    users = pa.table({"uid": np.arange(n // 10), "age": rng.normal(40, 9, n // 10)})
    events = pa.table({
        "eid": np.arange(n),
        "uid": rng.integers(0, n // 10, n),
        "t": pa.array(rng.integers(0, 10**15, n), pa.timestamp("us")),
        "kind": pa.array([("buy", "view", "cart")[i % 3] for i in range(n)]),
        "note": pa.array([f"{salt} note {i % 5000}" for i in range(n)]),
    })
    toml = """
[tables.users]
primary_key = "uid"
[tables.events]
primary_key = "eid"
time_column = "t"
foreign_keys = { uid = "users" }
types = { kind = "categorical", note = "text" }
[tasks.kind]
table = "events"
target = "kind"
"""
    return write_db(root, {"users": users, "events": [events.slice(0, n // 2), events.slice(n // 2)]}, toml)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("atomic")
    a = _input(root / "a", 120_000, "first")
    b = _input(root / "b", 120_000, "second")
    hash_a = preprocess(a, root / "ref-a", fsync=False, batch_rows=4096).database_hash
    hash_b = preprocess(b, root / "ref-b", fsync=False, batch_rows=4096).database_hash
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", SCRIPT, str(a), str(root / "timing"), "0"], check=True)
    duration = time.perf_counter() - started
    return a, b, hash_a, hash_b, duration


def _killed_run(src: Path, out: Path, overwrite: bool, delay: float) -> None:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(src), str(out), "1" if overwrite else "0"])
    try:
        proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_killed_preprocess_leaves_nothing_or_a_valid_database(inputs, tmp_path):
    a, _b, hash_a, _hash_b, duration = inputs
    rng = np.random.default_rng(2026)
    delays = sorted(rng.uniform(0.05, duration * 1.1, 6))
    outcomes = []
    for i, delay in enumerate(delays):
        out = tmp_path / f"run{i}" / "db"
        out.parent.mkdir()
        _killed_run(a, out, False, delay)
        if out.exists():
            report = verify_database(out)
            assert report.ok, report.failures
            assert report.database_hash == hash_a
            outcomes.append("complete")
        else:
            outcomes.append("none")
        # the next run cleans up whatever the killed run left beside the target
        preprocess(a, out, overwrite=True, fsync=False, batch_rows=4096)
        assert leftovers(out.parent) == []
        assert verify_database(out).ok
    assert "none" in outcomes  # at least one kill landed mid-build


def test_killed_overwrite_keeps_old_or_new(inputs, tmp_path):
    a, b, hash_a, hash_b, duration = inputs
    rng = np.random.default_rng(7)
    seen = set()
    for i, delay in enumerate(sorted(rng.uniform(0.05, duration * 1.1, 5))):
        out = tmp_path / f"run{i}" / "db"
        out.parent.mkdir()
        preprocess(a, out, fsync=False, batch_rows=4096)
        _killed_run(b, out, True, delay)
        report = verify_database(out)
        assert report.ok, report.failures
        assert report.database_hash in (hash_a, hash_b)
        seen.add("old" if report.database_hash == hash_a else "new")
        preprocess(b, out, overwrite=True, fsync=False, batch_rows=4096)
        assert leftovers(out.parent) == []
    assert "old" in seen


# ``dlkit preprocess`` whose build, once inside its temporary directory, says so on stdout
# and waits for stdin: the signal then lands mid-build, whatever the machine's speed.
MID_BUILD = """
import sys
from dlkit.cli import main
from dlkit.db.write import writer

build = writer._Builder.run


def run_when_told(self, out, root, fsync):
    print("building", flush=True)
    sys.stdin.readline()  # never answered: SIGTERM arrives while we wait
    return build(self, out, root, fsync)


writer._Builder.run = run_when_told
sys.argv = ["dlkit", *sys.argv[1:]]
main()
"""


def test_sigterm_cleans_up_at_once(inputs, tmp_path):
    a, *_ = inputs
    out = tmp_path / "db"
    proc = subprocess.Popen([sys.executable, "-c", MID_BUILD, "preprocess", str(a), str(out),
                             "-q"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "building\n"
        assert any("tmp" in n for n in leftovers(tmp_path))  # the build's directory exists
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode != 0
    assert not out.exists()
    assert leftovers(tmp_path) == []


def test_stale_leftovers_and_lock(tmp_path):
    target = tmp_path / "db"
    stale = tmp_path / ".db.dlkit-tmp-abc123"
    stale.mkdir()
    (stale / "graph.bin").write_bytes(b"partial")
    src = write_db(tmp_path / "in", {"a": pa.table({"k": [1, 2]})}, '[tables.a]\nprimary_key = "k"\n')
    holder = AtomicDirectory(target, DATABASE)
    with holder:  # another process holding the target's lock
        assert not stale.exists()  # removed while taking the lock
        code = ("import sys\nfrom dlkit.db import preprocess\n"
                "preprocess(sys.argv[1], sys.argv[2], fsync=False)")
        proc = subprocess.run([sys.executable, "-c", code, str(src), str(target)],
                              capture_output=True, text=True)
        assert proc.returncode != 0 and "another dlkit process" in proc.stderr
    assert leftovers(tmp_path) == []
    preprocess(src, target, fsync=False)
    assert verify_database(target).ok


def test_failed_build_removes_its_directory(tmp_path):
    src = write_db(tmp_path / "in", {"a": pa.table({"k": [1, 1]})}, '[tables.a]\nprimary_key = "k"\n')
    with pytest.raises(Exception, match="duplicate"):
        preprocess(src, tmp_path / "db", fsync=False)
    assert leftovers(tmp_path) == [] and not (tmp_path / "db").exists()


def test_a_failed_build_removes_the_directories_it_made_for_the_target(tmp_path):
    (tmp_path / "kept").mkdir()
    target = tmp_path / "kept" / "new" / "sub" / "db"
    with pytest.raises(RuntimeError), AtomicDirectory(target, DATABASE) as root:
        assert (tmp_path / "kept" / "new" / "sub").is_dir()
        (root / "f").write_bytes(b"x")
        raise RuntimeError("build failed")
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == []
    out = AtomicDirectory(target, DATABASE)
    with out as root:
        (root / "f").write_bytes(b"y")
        out.commit(fsync=False)
    assert (target / "f").read_bytes() == b"y"  # a committed build keeps them


def test_interrupted_fallback_overwrite_is_repaired(tmp_path, monkeypatch):
    """Without renameat2 the old database is moved aside first; a crash between the two
    renames is undone by the next run (the old one is put back)."""
    src = write_db(tmp_path / "in", {"a": pa.table({"k": [1, 2]})}, '[tables.a]\nprimary_key = "k"\n')
    target = tmp_path / "db"
    first = preprocess(src, target, fsync=False).database_hash
    aside = tmp_path / ".db.dlkit-old-deadbeef"
    os.rename(target, aside)  # the state right after the first fallback rename
    (tmp_path / ".db.dlkit-tmp-xyz").mkdir()
    with AtomicDirectory(target, DATABASE, overwrite=True):
        assert verify_database(target).database_hash == first
        assert not aside.exists()
    import dlkit.atomic as atomic

    monkeypatch.setattr(atomic, "_renameat2", lambda *a: False)
    src2 = write_db(tmp_path / "in2", {"a": pa.table({"k": [3]})}, '[tables.a]\nprimary_key = "k"\n')
    second = preprocess(src2, target, overwrite=True, fsync=False).database_hash
    assert second != first and verify_database(target).database_hash == second
    assert leftovers(tmp_path) == []


def test_an_output_of_another_kind_run_at_the_same_path_puts_the_database_back(tmp_path):
    """A database moved aside by an interrupted fallback overwrite is the user's data, whatever
    kind of output the next run at that path builds: it goes back, and is then refused."""
    src = write_db(tmp_path / "in", {"a": pa.table({"k": [1, 2]})}, '[tables.a]\nprimary_key = "k"\n')
    target = tmp_path / "db"
    first = preprocess(src, target, fsync=False).database_hash
    os.rename(target, tmp_path / ".db.dlkit-old-deadbeef")
    other = TargetKind("batches directory", lambda path: (path / "index.json").exists(),
                       lambda path: ["index.json"])
    with pytest.raises(OutputError, match="is not a dlkit batches directory"):
        with AtomicDirectory(target, other, overwrite=True):
            pass
    assert verify_database(target).database_hash == first and leftovers(tmp_path) == []


def test_refuses_to_overwrite_without_flag_even_at_commit(tmp_path):
    src = write_db(tmp_path / "in", {"a": pa.table({"k": [1]})}, '[tables.a]\nprimary_key = "k"\n')
    target = tmp_path / "db"
    out = AtomicDirectory(target, DATABASE)
    with pytest.raises(OutputError):
        with out as root:
            (root / "x").write_text("new")
            target.mkdir()  # someone else created the target meanwhile
            (target / "theirs").write_text("keep")
            out.commit(fsync=False)
    assert (target / "theirs").read_text() == "keep"
    assert leftovers(tmp_path) == []
    del src


def test_a_write_error_inside_the_build_names_the_output_not_the_hidden_directory(tmp_path):
    target = tmp_path / "out.db"
    hidden = None
    with pytest.raises(OutputError) as info, AtomicDirectory(target, DATABASE) as root:
        hidden = root
        (root / "tables").mkdir()
        raise OutputError("cannot write: No space left on device",
                          path=root / "tables" / "t.bin")
    assert str(info.value) == f"{target}/tables/t.bin: cannot write: No space left on device"
    assert hidden is not None and not hidden.exists()
    with pytest.raises(OSError) as raw, AtomicDirectory(target, DATABASE) as root:
        raise OSError(28, "No space left on device", str(root / "x.bin"))
    assert raw.value.filename == f"{target}/x.bin"
    assert os.listdir(tmp_path) == []
