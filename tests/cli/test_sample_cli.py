"""``dlkit sample``, ``replay`` and ``verify-golden`` end to end."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dlkit.nextbatch import Cursor, SamplingPlan
from tests.cli.helpers import assert_clean_failure, run_dlkit
from tests.nextbatch.helpers import (
    change_a_position,
    concat,
    manifest_dict,
    manifest_of,
    one_case_golden,
)

DOC = manifest_dict(70, 8, 16, seed=3)


@pytest.fixture()
def manifest_path(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(DOC))
    return path


def expected_steps(ws, rank, stage="train", start=Cursor(), steps=None):
    plan = SamplingPlan.create(manifest_of(DOC), "ds", ws, rank, stage)
    return [s.tolist() for c in plan.iter_chunks(start, steps) for s in c.split()]


def test_txt_lines_bin_and_npy_agree(tmp_path, manifest_path):
    txt = run_dlkit("sample", manifest_path, "-d", "ds", "-w", "2", "-r", "1")
    assert txt.returncode == 0, txt.stderr
    lines = txt.stdout.decode().split("\n")[:-1]
    assert [[int(x) for x in line.split()] for line in lines] == expected_steps(2, 1)
    for fmt in ("bin", "npy"):
        out = tmp_path / f"o.{fmt}"
        assert run_dlkit("sample", manifest_path, "-d", "ds", "-w", "2", "-r", "1",
                         "--format", fmt, "--out", out).returncode == 0
        data = np.load(out) if fmt == "npy" else np.fromfile(out, dtype="<u8")
        assert data.dtype == np.uint64
        assert data.tolist() == sum(expected_steps(2, 1), [])


def test_eval_last_rank_gets_an_empty_line(manifest_path):
    result = run_dlkit("sample", manifest_path, "-d", "ds", "-w", "8", "-r", "7", "--stage", "eval",
                       "--start-index", "64")
    assert result.stdout.decode() == "\n"  # positions 71.. lie past N = 70


def test_checkpoint_resume_at_another_world_size_and_trace_replay(tmp_path, manifest_path):
    ckpt, trace = tmp_path / "c.ckpt", tmp_path / "t.cbor"
    first = run_dlkit("sample", manifest_path, "-d", "ds", "--steps", "3", "--checkpoint-out", ckpt,
                      "--trace", trace)
    assert first.returncode == 0, first.stderr
    replay = run_dlkit("replay", trace, "--manifest", manifest_path, "--json")
    assert replay.returncode == 0 and json.loads(replay.stdout)["steps"] == 3
    resumed = run_dlkit("sample", manifest_path, "-d", "ds", "-w", "4", "-r", "2", "--resume", ckpt,
                        "--steps", "20")
    lines = resumed.stdout.decode().split("\n")[:-1]
    assert [[int(x) for x in ln.split()] for ln in lines] == expected_steps(4, 2, start=Cursor(0, 24), steps=20)


def test_replay_against_another_manifest_reports_the_mismatch_in_json(tmp_path, manifest_path):
    trace = tmp_path / "t.cbor"
    assert run_dlkit("sample", manifest_path, "-d", "ds", "--steps", "2", "--trace",
                     trace).returncode == 0
    other = tmp_path / "other.json"
    other.write_text(json.dumps(DOC | {"seed": DOC["seed"] + 1}))
    replay = run_dlkit("replay", trace, "--manifest", other, "--json")
    assert replay.returncode == 3
    result = json.loads(replay.stdout)
    assert result["ok"] is False and result["code"] == "REPLAY_MISMATCH"
    assert "REPLAY_MISMATCH" in replay.stderr.decode()
    trace.write_bytes(trace.read_bytes()[:-3])  # truncated: a malformed input, not a mismatch
    broken = run_dlkit("replay", trace, "--manifest", manifest_path, "--json")
    assert broken.returncode == 5 and json.loads(broken.stdout)["code"] == "TRACE_INVALID"


def test_json_summary_and_steps_rolling_into_next_epoch(tmp_path, manifest_path):
    result = run_dlkit("sample", manifest_path, "-d", "ds", "--steps", "12", "--out", tmp_path / "o",
                       "--json")
    summary = json.loads(result.stdout)
    assert summary["steps"] == 12 and summary["cursor_end"] == {"epoch": 1, "global_index": 24}
    plan = SamplingPlan.create(manifest_of(DOC), "ds", 1, 0, "train")
    assert summary["total_samples_seen"] == len(concat(list(plan.iter_chunks(Cursor(), 12))))


def _run_with_closed(stream: str, *args) -> tuple[int, str]:
    """Run dlkit with our end of its stdout or stderr pipe closed before it writes, so its
    first write there fails with EPIPE (Python ignores SIGPIPE): `dlkit ... | head -c 0`."""
    proc = subprocess.Popen([sys.executable, "-m", "dlkit", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    getattr(proc, stream).close()
    other = (proc.stderr if stream == "stdout" else proc.stdout).read().decode()
    return proc.wait(timeout=300), other


@pytest.mark.parametrize("fmt", ["txt", "npy"])
def test_a_reader_that_leaves_stdout_stops_the_command_as_sigpipe_would(manifest_path, fmt,
                                                                         tmp_path):
    checkpoint = tmp_path / "after.ckpt"
    code, err = _run_with_closed("stdout", "sample", manifest_path, "-d", "ds", "--format", fmt,
                                 "--trace", tmp_path / "t.cbor", "--checkpoint-out", checkpoint)
    assert code == 128 + 13 and err == ""  # quiet: not blamed on the trace file either
    assert not checkpoint.exists()  # the run was cut short: no cursor claims otherwise


def test_a_reader_that_leaves_a_rich_table_stops_the_command(tmp_path):
    # rich's own handler would exit 1 (Console.on_broken_pipe)
    from tests.db.conftest import EXAMPLE

    assert run_dlkit("preprocess", EXAMPLE, tmp_path / "db", "-q", "--no-fsync").returncode == 0
    code, _ = _run_with_closed("stdout", "show", tmp_path / "db", "--task", "review_rating",
                               "--anchor", "3")
    assert code == 128 + 13


def test_a_reader_that_leaves_stderr_keeps_the_exit_code(tmp_path):
    changed = one_case_golden(tmp_path / "changed.json", change_a_position)
    code, out = _run_with_closed("stderr", "verify-golden", changed, "--json")
    assert code == 3 and json.loads(out)["ok"] is False
    assert _run_with_closed("stderr", "verify", tmp_path / "nowhere")[0] == 5


@pytest.mark.parametrize("option", ["--epoch", "--start-index", "--rank", "--world-size",
                                    "--cardinality"])
def test_numbers_beyond_uint64_are_usage_errors_naming_the_option(manifest_path, option):
    result = run_dlkit("sample", manifest_path, "-d", "ds", option, str(2**64))
    err = result.stderr.decode()
    assert result.returncode == 2 and option in err and "Traceback" not in err


@pytest.mark.parametrize("args, code", [
    (["-d", "nope"], "INVALID_DATASET_KEY"),
    (["-d", "ds", "--stage", "test"], "INVALID_STAGE_TYPE"),
    (["-d", "ds", "-w", "3"], "BATCH_SIZE_INCONSISTENT"),
    (["-d", "ds", "-w", "2", "-r", "2"], "USAGE"),  # checked before the sampler runs
    (["-d", "ds", "--cardinality", "71"], "CARDINALITY_MISMATCH"),
    (["-d", "ds", "--start-index", "70"], "GLOBAL_POSITION_EXCEEDS_CARDINALITY"),
    (["-d", "ds", "--steps", "0"], "INVALID_ARGUMENT"),
])
def test_bad_inputs_end_in_one_line_with_their_code(manifest_path, args, code):
    result = run_dlkit("sample", manifest_path, *args)
    assert_clean_failure(result, code)
    assert result.stdout == b""  # nothing emitted before the error


@pytest.mark.parametrize("text, fragment", [
    ("{oops", "not valid JSON"),
    (json.dumps(DOC | {"seed": 1.5}), "floating-point"),
    (json.dumps(DOC | {"paths": []}), "unknown key 'paths'"),
    (json.dumps(DOC | {"global_batch_size": -8}), "global_batch_size must lie"),
])
def test_malformed_manifest_is_one_line(tmp_path, text, fragment):
    path = tmp_path / "bad.json"
    path.write_text(text)
    err = assert_clean_failure(run_dlkit("sample", path, "-d", "ds"), "MANIFEST_INVALID")
    assert fragment in err and "bad.json" in err


def test_corrupt_checkpoint_and_trace_are_one_line(tmp_path, manifest_path):
    (tmp_path / "c.ckpt").write_bytes(b"\xa1\x6cdata_cursors")
    assert_clean_failure(run_dlkit("sample", manifest_path, "-d", "ds", "--resume", tmp_path / "c.ckpt"),
                         "CHECKPOINT_INVALID")
    (tmp_path / "t.cbor").write_bytes(b"\x00\x01garbage")
    assert_clean_failure(run_dlkit("replay", tmp_path / "t.cbor", "-m", manifest_path), "TRACE_INVALID")


def test_a_checkpoint_cursor_beyond_this_run_names_the_checkpoint(tmp_path, manifest_path):
    from dlkit.nextbatch.cursor import save_checkpoint

    save_checkpoint(tmp_path / "past.ckpt", {"ds": Cursor(0, 500)})  # the epoch has 70
    err = assert_clean_failure(run_dlkit("sample", manifest_path, "-d", "ds", "--resume",
                                         tmp_path / "past.ckpt"), "CHECKPOINT_INVALID")
    assert str(tmp_path / "past.ckpt") in err and "global_index 500" in err


def test_debug_shows_the_traceback(manifest_path):
    result = run_dlkit("--debug", "sample", manifest_path, "-d", "nope")
    assert result.returncode != 0 and "Traceback" in result.stderr.decode()


def test_verify_golden_default_run(tmp_path):
    result = run_dlkit("verify-golden", "--json")
    assert result.returncode == 0, result.stderr
    files = json.loads(result.stdout)["files"]
    assert len(files) >= 3 and all(f["streams_checked"] > 0 for f in files)


def test_verify_golden_checks_every_file_and_reports_each_failure(tmp_path):
    good = one_case_golden(tmp_path / "good.json")
    changed = one_case_golden(tmp_path / "changed.json", change_a_position)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    result = run_dlkit("verify-golden", broken, changed, good, "--json")
    assert result.returncode == 3, result.stderr  # a mismatch decides, wherever it is
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert [Path(f["path"]).name for f in report["files"]] == ["good.json"]
    assert [(Path(f["path"]).name, f["code"]) for f in report["failures"]] == [
        ("broken.json", "GOLDEN_INVALID"), ("changed.json", "GOLDEN_MISMATCH")]
    text = run_dlkit("verify-golden", broken, changed, good)
    lines = text.stderr.decode().splitlines()
    assert text.returncode == 3 and "ok good.json" in lines[0]
    assert [line.split(":")[0] for line in lines[1:]] == [
        "error GOLDEN_INVALID", "error GOLDEN_MISMATCH", "error GOLDEN_MISMATCH"]
    assert "broken.json" in lines[1] and "changed.json" in lines[2]
    assert lines[3].endswith("2 of 3 golden files failed (above)")
    alone = run_dlkit("verify-golden", broken, broken)  # given twice, checked once
    assert alone.returncode == 5 and len(alone.stderr.decode().splitlines()) == 1


def test_a_full_disk_on_stdout_is_one_line(manifest_path):
    with open("/dev/full", "wb") as full:
        result = subprocess.run([sys.executable, "-m", "dlkit", "sample", str(manifest_path),
                                 "-d", "ds", "-n", "3"], stdout=full, stderr=subprocess.PIPE,
                                timeout=300)
    result.stdout = b""
    err = assert_clean_failure(result, "OUTPUT_ERROR")
    assert "No space left on device" in err


def test_running_out_of_memory_is_one_line(dlkit, manifest_path, monkeypatch):
    """A micro-batch is materialised whole: one of billions of indices cannot be, and numpy
    says so (``MemoryError``) before anything is written."""
    from dlkit.nextbatch import export

    def refuse(*args, **kwargs):
        raise MemoryError("Unable to allocate 512. GiB for an array with shape (68719476736,)")

    monkeypatch.setattr(export, "export_steps", refuse)
    result = dlkit("sample", manifest_path, "-d", "ds", "-n", 1)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip() == ("error OUT_OF_MEMORY: out of memory: Unable to allocate "
                                     "512. GiB for an array with shape (68719476736,)")


@pytest.mark.parametrize("stage", ["eval", "infer", "train"])
def test_a_dataset_with_no_seeds_is_one_usage_line_not_a_mismatch(tmp_path, stage):
    """The manifest may declare cardinality 0 (an empty split): nothing mismatches, the
    dataset named has nothing to sample. A usage error, exit 2 (docs/cli.md)."""
    path = tmp_path / "h.json"
    path.write_text(json.dumps(manifest_dict(0, 8, 16, drop_last=True)))
    result = run_dlkit("sample", path, "-d", "ds", "--stage", stage)
    err = assert_clean_failure(result, "INVALID_ARGUMENT")
    assert result.returncode == 2 and result.stdout == b""
    assert f"dataset 'ds' of {path} has no seeds: nothing to sample" in err
    counted_zero = run_dlkit("sample", path, "-d", "ds", "--stage", stage, "--cardinality", "0")
    assert counted_zero.returncode == 2  # the data agrees: still nothing to sample


def test_rows_the_empty_manifest_does_not_declare_are_still_a_mismatch(tmp_path):
    path = tmp_path / "h.json"
    path.write_text(json.dumps(manifest_dict(0, 8, 16)))
    result = run_dlkit("sample", path, "-d", "ds", "--stage", "eval", "--cardinality", "3")
    assert_clean_failure(result, "CARDINALITY_MISMATCH")
    assert result.returncode == 4


@pytest.mark.parametrize("steps, summary", [
    (1, "wrote 1 step, 8 indices; next cursor: epoch 0, index 8"),
    (2, "wrote 2 steps, 16 indices; next cursor: epoch 0, index 16"),
])
def test_the_sample_summary_counts_in_the_right_number(tmp_path, steps, summary):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(manifest_dict(70, 8, 16, seed=3)))
    result = run_dlkit("sample", path, "-d", "ds", "-n", steps, "-o", tmp_path / "i.txt")
    assert result.returncode == 0, result.stderr
    assert summary in result.stderr.decode()


@pytest.mark.parametrize("steps, summary", [
    (1, "ok 1 record matches; 8 samples; final cursor epoch 0, index 8"),
    (3, "ok 3 records match; 24 samples; final cursor epoch 0, index 24"),
])
def test_the_replay_summary_counts_in_the_right_number(tmp_path, manifest_path, steps, summary):
    trace = tmp_path / "t.cbor"
    assert run_dlkit("sample", manifest_path, "-d", "ds", "-n", steps, "-q", "-o",
                     tmp_path / "i.txt", "--trace", trace).returncode == 0
    result = run_dlkit("replay", trace, "-m", manifest_path)
    assert result.returncode == 0, result.stderr
    assert summary in result.stderr.decode()


def test_one_sample_of_one_step_counts_it_as_one(tmp_path):
    """A one-seed dataset in eval: 1 step, 1 index (the singular of both nouns)."""
    path = tmp_path / "one.json"
    path.write_text(json.dumps(manifest_dict(1, 8, 16)))
    result = run_dlkit("sample", path, "-d", "ds", "--stage", "eval", "-o", tmp_path / "i.txt")
    assert result.returncode == 0, result.stderr
    assert "wrote 1 step, 1 index;" in result.stderr.decode()
