"""No file is lost: outputs never replace a file without --overwrite, never write through a
symbolic link, are never one of the inputs, and `dlkit sample`'s outputs (indices, trace,
checkpoint) appear together or not at all, whatever signal ends the run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dlkit.atomic_journal import settle
from tests.cli.helpers import assert_clean_failure, run_dlkit
from tests.nextbatch.helpers import manifest_dict

DOC = manifest_dict(70, 8, 16, seed=3)
EXAMPLE = Path(__file__).resolve().parents[2] / "fixtures" / "example_db"
OUTPUT_FLAGS = ("--out", "--trace", "--checkpoint-out")


@pytest.fixture()
def manifest_path(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(DOC))
    return path


def _sample(manifest, *args, cwd=None):
    return run_dlkit("sample", manifest, "-d", "ds", "--steps", "2", "-q", *args, cwd=cwd)


# -- nothing replaced without --overwrite; never through a link -----------------------------


@pytest.mark.parametrize("flag", OUTPUT_FLAGS)
def test_sample_replaces_an_existing_output_only_with_overwrite(tmp_path, manifest_path, flag):
    target = tmp_path / "existing"
    target.write_bytes(b"precious")
    result = _sample(manifest_path, flag, target)
    err = assert_clean_failure(result, "OUTPUT_ERROR")
    assert result.returncode == 6 and f"{target}: already exists (pass --overwrite" in err
    assert target.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing", "run.json"]
    result = _sample(manifest_path, flag, target, "--overwrite")
    assert result.returncode == 0, result.stderr
    assert target.read_bytes() != b"precious"


@pytest.mark.parametrize("flag", OUTPUT_FLAGS)
def test_sample_never_writes_through_a_symbolic_link(tmp_path, manifest_path, flag):
    named = tmp_path / "named.txt"
    named.write_bytes(b"the file the link names")
    link = tmp_path / "link"
    link.symlink_to(named)
    err = assert_clean_failure(_sample(manifest_path, flag, link), "OUTPUT_ERROR")
    assert "is a symbolic link" in err and link.is_symlink()
    result = _sample(manifest_path, flag, link, "--overwrite")  # replaces the link itself
    assert result.returncode == 0, result.stderr
    assert not link.is_symlink() and link.stat().st_size > 0
    assert named.read_bytes() == b"the file the link names"


def _spellings(tmp_path: Path, path: Path) -> list[str]:
    """Other names of ``path``: relative with ./.., through a linked directory, a hard link."""
    (tmp_path / "alias").symlink_to(path.parent)
    hard = tmp_path / "hard.json"
    os.link(path, hard)
    return [f"{path.parent}/./../{path.parent.name}/{path.name}", str(tmp_path / "alias" / path.name),
            str(hard)]


@pytest.mark.parametrize("flag", OUTPUT_FLAGS)
@pytest.mark.parametrize("spelling", range(3))
def test_an_output_is_never_the_manifest_however_spelled(tmp_path, manifest_path, flag,
                                                         spelling):
    before = manifest_path.read_bytes()
    other = _spellings(tmp_path, manifest_path)[spelling]
    for extra in ((), ("--overwrite",)):
        err = assert_clean_failure(_sample(manifest_path, flag, other, *extra), "INVALID_ARGUMENT")
        assert "is the same file as the manifest" in err
    assert manifest_path.read_bytes() == before


def test_an_output_is_never_the_checkpoint_resumed_from(tmp_path, manifest_path):
    ckpt = tmp_path / "c.ckpt"
    assert _sample(manifest_path, "--checkpoint-out", ckpt).returncode == 0
    before = ckpt.read_bytes()
    result = run_dlkit("sample", manifest_path, "-d", "ds", "--resume", ckpt, "-q",
                       "--out", tmp_path / "." / "c.ckpt", "--overwrite")
    assert "is the same file as the checkpoint of --resume" in assert_clean_failure(
        result, "INVALID_ARGUMENT")
    assert ckpt.read_bytes() == before


def test_two_outputs_may_not_name_one_file(tmp_path, manifest_path):
    result = _sample(manifest_path, "--out", tmp_path / "x", "--trace", tmp_path / "." / "x")
    assert "--trace" in assert_clean_failure(result, "INVALID_ARGUMENT")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("outputs", [
    ("--trace", "/dev/stdout"), ("--checkpoint-out", "/dev/stdout"),
    ("--out", "/dev/stdout", "--trace", "/dev/stdout"), ("--format", "bin", "--trace", "/dev/fd/1"),
])
def test_no_output_shares_standard_output_with_the_indices(outputs, manifest_path):
    """The indices go to stdout (a pipe here): a trace or checkpoint named for the same
    stream would be mixed into them, byte by byte. Refused before anything is written."""
    result = _sample(manifest_path, *outputs)
    err = assert_clean_failure(result, "INVALID_ARGUMENT")
    assert "same file as" in err and result.stdout == b""


def test_no_output_is_the_file_standard_output_was_sent_to(tmp_path, manifest_path):
    target = tmp_path / "indices.txt"
    with target.open("wb") as stdout:
        result = subprocess.run([sys.executable, "-m", "dlkit", "sample", str(manifest_path),
                                 "-d", "ds", "-n", "2", "--trace", str(target), "--overwrite"],
                                stdout=stdout, stderr=subprocess.PIPE, timeout=300)
    err = result.stderr.decode()
    assert result.returncode == 2 and "error INVALID_ARGUMENT:" in err
    assert "standard output, where the indices go" in err
    assert target.read_bytes() == b""


def test_outputs_on_their_own_streams_and_the_null_device_are_taken(tmp_path, manifest_path):
    both_null = _sample(manifest_path, "--trace", "/dev/null", "--checkpoint-out", "/dev/null")
    assert both_null.returncode == 0, both_null.stderr.decode()
    assert len(both_null.stdout.decode().splitlines()) == 2  # the indices, untouched
    on_stderr = _sample(manifest_path, "--out", "/dev/stdout", "--trace", "/dev/stderr")
    assert on_stderr.returncode == 0, on_stderr.stderr.decode()
    import io

    import cbor2

    header = cbor2.CBORDecoder(io.BytesIO(on_stderr.stderr)).decode()
    assert header["type"] == "run_header"  # the trace went to its own stream, whole


def test_manifest_keeps_run_json_unless_overwrite(tmp_path, manifest_path):
    db = tmp_path / "db"
    assert run_dlkit("preprocess", EXAMPLE, db, "-q", "--no-fsync").returncode == 0
    work = tmp_path / "work"
    work.mkdir()
    (work / "run.json").write_text("mine")
    result = run_dlkit("manifest", db, "--seed", 1, "-g", 4, cwd=work)  # default --out run.json
    assert "run.json: already exists" in assert_clean_failure(result, "OUTPUT_ERROR")
    assert (work / "run.json").read_text() == "mine"
    named = work / "named.json"
    named.write_text("named")
    (work / "link.json").symlink_to(named)
    result = run_dlkit("manifest", db, "--seed", 1, "-g", 4, "-o", "link.json", cwd=work)
    assert "is a symbolic link" in assert_clean_failure(result, "OUTPUT_ERROR")
    result = run_dlkit("manifest", db, "--seed", 1, "-g", 4, "-o", "link.json", "--overwrite",
                       cwd=work)
    assert result.returncode == 0, result.stderr
    assert named.read_text() == "named" and not (work / "link.json").is_symlink()
    result = run_dlkit("manifest", db, "--seed", 1, "-g", 4, "--overwrite", cwd=work)
    assert result.returncode == 0 and json.loads((work / "run.json").read_text())["seed"] == 1
    listing = sorted(p.name for p in db.iterdir())
    result = run_dlkit("manifest", db, "--seed", 1, "-g", 4, "-o", db / "run.json")
    assert "inside the database" in assert_clean_failure(result, "INVALID_ARGUMENT")
    assert sorted(p.name for p in db.iterdir()) == listing
    # "-" names no file here (the command writes a file, never standard output)
    result = run_dlkit("manifest", db, "--seed", 1, "-g", 4, "-o", "-", cwd=work)
    assert "this command writes a file" in assert_clean_failure(result, "USAGE")
    assert result.returncode == 2 and not (work / "-").exists()


def test_schema_infer_never_replaces_its_input_or_writes_through_a_link(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    table = data / "users.parquet"
    table.write_bytes((EXAMPLE / "users.parquet").read_bytes())
    before = table.read_bytes()
    result = run_dlkit("schema", "infer", data, "-o", table, "--overwrite")
    assert "is the same file as the input users.parquet" in assert_clean_failure(
        result, "INVALID_ARGUMENT")
    assert table.read_bytes() == before
    (tmp_path / "link.toml").symlink_to(table)
    result = run_dlkit("schema", "infer", data, "-o", tmp_path / "link.toml")
    assert "is a symbolic link" in assert_clean_failure(result, "OUTPUT_ERROR")
    assert table.read_bytes() == before


# -- together or not at all ---------------------------------------------------------------

BIG = manifest_dict(400_000, 64, 65_536, seed=11)


def _run_args(manifest: Path, where: Path, epoch: int) -> list[str]:
    return [sys.executable, "-m", "dlkit", "sample", str(manifest), "-d", "ds", "-e", str(epoch),
            "--steps", "all", "-q", "--overwrite", "--out", str(where / "idx.txt"),
            "--trace", str(where / "t.cbor"), "--checkpoint-out", str(where / "c.ckpt")]


NAMES = ("c.ckpt", "idx.txt", "t.cbor")


def _state(where: Path) -> tuple[bytes, ...]:
    return tuple((where / name).read_bytes() for name in NAMES)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The old outputs (epoch 0) and the new ones (epoch 1) of the same output paths."""
    root = tmp_path_factory.mktemp("kills")
    manifest = root / "big.json"
    manifest.write_text(json.dumps(BIG))
    states = []
    for epoch in (0, 1):
        where = root / f"ref{epoch}"
        where.mkdir()
        started = time.perf_counter()
        subprocess.run(_run_args(manifest, where, epoch), check=True, timeout=300)
        states.append(_state(where))
    return manifest, states[0], states[1], time.perf_counter() - started


def _put_back(where: Path, state: tuple[bytes, ...]) -> None:
    for name, data in zip(NAMES, state):
        (where / name).write_bytes(data)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_sample_outputs_appear_together_whatever_kills_it(tmp_path, runs, sig):
    """Killed at random moments (no sleeps: the kill lands when a random timeout expires),
    the three outputs are all old or all new; a SIGKILL's leftovers (temporary files, locks,
    a commit journal) are gone once the next run, or ``settle``, has looked at them."""
    manifest, old, new, seconds = runs
    _put_back(tmp_path, old)
    rng = random.Random(int(sig))
    for _ in range(8):
        proc = subprocess.Popen(_run_args(manifest, tmp_path, 1), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        try:
            proc.wait(timeout=rng.uniform(0.0, 1.3 * seconds))
        except subprocess.TimeoutExpired:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=300)
        if sig == signal.SIGKILL:
            for name in NAMES:
                settle(tmp_path / name)
        state = _state(tmp_path)
        assert state in (old, new)
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(NAMES)
        if proc.returncode == -sig:
            pass  # before dlkit took the signal (Python starting) or after it gave it back
        elif proc.returncode != 0:
            # 130, never death by SIGINT after the message (CPython's flag for an unhandled
            # KeyboardInterrupt, which python -m obeys, is cleared: cli.app) nor a traceback
            assert proc.returncode == 130 and state == old, err
            line, = err.decode().splitlines()
            assert line == ("error INTERRUPTED: dlkit sample was interrupted; it wrote no file "
                            "and left no temporary file")
        if proc.returncode == 0:
            assert state == new
        _put_back(tmp_path, old)


WRAPPER = """
import os, signal, sys
kill_at = int(sys.argv.pop(1))
real = os.replace
count = [0]
def replace(src, dst, *a, **k):
    if ".dlkit-tmp-" in os.fspath(src) and ".dlkit-commit-" not in os.fspath(dst) \\
            and ".dlkit-pending-" not in os.fspath(dst):
        count[0] += 1
        if count[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, *a, **k)
os.replace = replace
from dlkit.cli.app import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize("kill_at", [1, 2, 3])
def test_a_kill_between_the_renames_is_completed_by_the_next_look(tmp_path, kill_at):
    """SIGKILL inside the commit, after ``kill_at - 1`` of the three renames: the commit was
    decided (its journal is on disk), so the next run on these files finishes it first."""
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps(DOC))
    where = tmp_path / "out"
    ref = tmp_path / "ref"
    where.mkdir()
    ref.mkdir()
    old_args = _run_args(manifest, where, 0)
    subprocess.run(old_args, check=True, timeout=300)
    old = _state(where)
    subprocess.run(_run_args(manifest, ref, 1), check=True, timeout=300)
    new = _state(ref)
    assert old != new and all(a != b for a, b in zip(old, new))
    args = _run_args(manifest, where, 1)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(WRAPPER), str(kill_at),
                           *args[3:]], capture_output=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    journals = [p for p in where.iterdir() if ".dlkit-commit-" in p.name]
    assert len(journals) == 1
    # the next run on these outputs (here: its first step, `settle`) completes the commit
    settle(where / NAMES[kill_at % 3])
    assert _state(where) == new
    for name in NAMES:
        settle(where / name)
    assert sorted(p.name for p in where.iterdir()) == sorted(NAMES)


def test_a_checkpoint_left_mid_commit_is_completed_before_resume_reads_it(tmp_path):
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps(DOC))
    where = tmp_path / "out"
    where.mkdir()
    subprocess.run(_run_args(manifest, where, 0), check=True, timeout=300)
    args = _run_args(manifest, where, 1)
    # the renames go in the order indices, trace, checkpoint: kill before the checkpoint's
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(WRAPPER), "3", *args[3:]],
                          capture_output=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL
    result = run_dlkit("sample", manifest, "-d", "ds", "--resume", where / "c.ckpt",
                       "--steps", "1", "--json", "--out", tmp_path / "next.txt")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["cursor_start"] == {"epoch": 2, "global_index": 0}


def test_out_dev_stdout_writes_where_stdout_stands_never_truncating_it(tmp_path,
                                                                      manifest_path):
    """`(echo first; dlkit sample -o /dev/stdout) > f`: the indices follow "first" in f, as
    if printed (reopening the redirected file would truncate it; replacing it, lose it)."""
    target = tmp_path / "f.txt"
    with open(target, "wb") as redirected:
        redirected.write(b"first\n")
        redirected.flush()
        result = subprocess.run([sys.executable, "-m", "dlkit", "sample", str(manifest_path),
                                 "-d", "ds", "--steps", "1", "-q", "-o", "/dev/stdout"],
                                stdout=redirected, stderr=subprocess.PIPE, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = target.read_text().splitlines()
    assert lines[0] == "first" and len(lines) == 2 and len(lines[1].split()) == 8


def test_a_checkpoint_may_be_advanced_in_place_with_overwrite(tmp_path, manifest_path):
    ckpt = tmp_path / "c.ckpt"
    assert _sample(manifest_path, "--checkpoint-out", ckpt).returncode == 0  # 2 steps
    args = ("sample", manifest_path, "-d", "ds", "--steps", "1", "-q", "--resume", ckpt,
            "--checkpoint-out", ckpt)
    assert "already exists" in assert_clean_failure(run_dlkit(*args), "OUTPUT_ERROR")
    assert run_dlkit(*args, "--overwrite").returncode == 0
    from dlkit.nextbatch.cursor import load_checkpoint

    assert load_checkpoint(ckpt)["ds"].global_index == 24  # 2 + 1 steps of 8
