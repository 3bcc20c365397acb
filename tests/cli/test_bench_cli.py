"""``dlkit bench`` as a user runs it: table, --json, the torch note, the error boundary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from dlkit.cli.app import main

SMALL = ["bench", "--workload", "gather", "--steps", "8", "--rows", "2000", "--row-bytes", "64",
         "--batch-size", "16", "--quiet"]


def run(argv, capsys):
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_bench_prints_a_table_with_the_speedup(capsys):
    code, out, err = run(SMALL + ["--no-torch", "--workers", "3", "--policy", "best-effort"], capsys)
    assert code == 0, err
    out = " ".join(out.split())  # rich wraps at the terminal width
    for text in ("sequential", "engine", "batches/s", "samples/s", "MB/s", "wait p50",
                 "wait p99", "speedup over the sequential loop", "output identical (same multiset): yes",
                 "3 producer threads, best-effort"):
        assert text in out


def test_bench_json(capsys):
    code, out, _ = run(SMALL + ["--json", "--no-torch", "--shard-mode", "contiguous",
                                "--buffers-ahead", "1"], capsys)
    assert code == 0
    report = json.loads(out)
    assert report["identical"] is True
    assert report["prefetch"]["shard_mode"] == "contiguous" and report["prefetch"]["buffer_size"] == 1
    for run_name in ("sequential", "engine"):
        assert report[run_name]["batches"] == 8
        assert set(report[run_name]) >= {"batches_per_s", "samples_per_s", "mb_per_s",
                                         "wait_p50_us", "wait_p99_us"}
    assert report["speedup"] > 0


def test_bench_synthetic_workload(capsys):
    code, out, _ = run(["bench", "--workload", "synthetic", "--steps", "6", "--compute-ms", "0.1",
                        "--quiet", "--json", "--no-torch"], capsys)
    assert code == 0 and json.loads(out)["workload"]["workload"] == "synthetic"


def test_the_torch_dataloader_comparison_runs_for_real():
    """With torch installed, its DataLoader (worker processes) reads the same batches. In a
    fresh interpreter: forking this one, where other tests started threads, could hang."""
    done = subprocess.run([sys.executable, "-m", "dlkit", *SMALL, "--json", "--workers", "2"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["identical"] is True
    assert report["torch"] is not None and report["torch"]["batches"] == 8
    assert report["torch_speedup"] > 0


def test_bench_notes_that_torch_is_missing(capsys, without_torch):
    code, out, err = run(SMALL, capsys)
    assert code == 0
    assert "torch is not installed: skipped" in " ".join(err.split())
    assert "torch DataLoader" not in out


def test_bench_live_progress_goes_to_stderr(capsys):
    code, out, err = run([a for a in SMALL if a != "--quiet"] + ["--json", "--no-torch"], capsys)
    assert code == 0
    json.loads(out)  # stdout stays clean JSON


def test_bench_usage_errors_are_one_red_line(capsys):
    code, _, err = run(["bench", "--trace", "t.cbor"], capsys)
    assert code == 2
    assert "INVALID_ARGUMENT" in err and "--trace needs --manifest" in err
    assert "Traceback" not in err


def test_bench_help_lists_every_knob(capsys):
    code, out, _ = run(["bench", "--help"], capsys)
    assert code == 0
    text = " ".join(out.split())
    for option in ("--workers", "--buffers-ahead", "--policy", "--batch-size", "--shard-mode",
                   "--compute-ms", "--consumer-ms", "--trace", "--json", "--torch"):
        assert option in text


# -- the default: the relational Sampler feeding a training step ------------------------------


def test_the_default_workload_is_the_relational_sampler_feeding_a_step():
    # A fresh interpreter: the torch DataLoader's worker processes are forks, and forking
    # this one, where other tests started threads, could hang.
    done = subprocess.run([sys.executable, "-m", "dlkit", "bench", "--steps", "6",
                           "--batch-size", "4", "--json", "-q", "--workers", "2"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    workload = report["workload"]
    assert workload["workload"] == "relational" and "bundled example" in workload["db"]
    assert workload["consumer_calibrated"] is True
    assert workload["consumer_ms"] == workload["batch_ms"] > 0  # a step as long as a batch
    assert report["identical"] is True  # the engine yields the on-demand Sampler's batches
    # ... and so does the DataLoader over the Sampler's step-addressed batches
    for run_name in ("sequential", "engine", "torch"):
        assert report[run_name]["batches"] == 6 and report[run_name]["samples"] == 24
    machine = report["machine"]
    assert machine["cores_available"] >= 1 and "load_1min" in machine


def test_a_given_database_and_step_time(capsys, tmp_path):
    from dlkit.bench.relational import EXAMPLE_DB
    from dlkit.db import preprocess

    preprocess(EXAMPLE_DB, tmp_path / "db", fsync=False)
    code, out, err = run(["bench", "--db", str(tmp_path / "db"), "--steps", "4", "-b", "2",
                          "--consumer-ms", "1.5", "--json", "-q", "--no-torch"], capsys)
    assert code == 0, err
    workload = json.loads(out)["workload"]
    assert workload["db"] == str(tmp_path / "db") and workload["consumer_ms"] == 1.5
    assert workload["consumer_calibrated"] is False


def test_the_table_names_cores_and_load(capsys):
    code, out, err = run(["bench", "--steps", "4", "-b", "2", "--no-torch", "-q"], capsys)
    assert code == 0, err
    out = " ".join(out.split())
    assert "relational workload: 4 Sampler train batches of 2 sequences" in out
    assert "cores available, load" in out and "as long as building a batch" in out


def test_a_speedup_below_one_explains_itself():
    from dlkit.bench.report import slower_note

    assert slower_note(1.2, {"cores_available": 2, "load_1min": 0.5}, 2) == []
    note, = slower_note(0.52, {"cores_available": 2, "load_1min": 5.25}, 3)
    assert "(0.52x)" in note and "3 producer threads" in note and "2 cores" in note
    assert "load of 5.25" in note


def test_relational_refuses_gather_inputs(capsys, tmp_path):
    code, _, err = run(["bench", "--workload", "relational", "--manifest",
                        str(tmp_path / "m.json"), "-q"], capsys)
    assert code == 2 and "drop --data, --manifest and --trace" in err


# -- interrupts, notes and warnings as a user meets them ----------------------------------------

# ``dlkit bench`` that says "measuring" on stdout once the bundled example is preprocessed into
# its temporary directory, then waits for stdin: the signal lands there, whatever the
# machine's speed. "kernel" turns the interrupt into what CPython raises when the signal's
# handler ran in ``_numba_unpickle``, called by a compiled kernel called by numba's
# dispatcher: a SystemError caused by a SystemError caused by the KeyboardInterrupt.
MEASURING = """
import sys

from dlkit.bench import relational
from dlkit.cli import main

WHERE = sys.argv[1]


def wait_for_the_signal(db, request):
    print("measuring", flush=True)
    try:
        sys.stdin.readline()  # never answered: SIGINT arrives while we wait
    except KeyboardInterrupt as exc:
        if WHERE != "kernel":
            raise
        try:
            raise SystemError("<function _numba_unpickle at 0x1> returned a result with an "
                              "exception set") from exc
        except SystemError as inner:
            raise SystemError("CPUDispatcher(<function build_sequences at 0x2>) returned a "
                              "result with an exception set") from inner
    raise AssertionError("stdin closed before the signal")


relational._batch_ms = wait_for_the_signal
sys.argv = ["dlkit", *sys.argv[2:]]
main()
"""
INTERRUPTED = ("error INTERRUPTED: dlkit bench was interrupted; it wrote no file and left no "
               "temporary file\n")


def _interrupted_while_measuring(tmp_path, where, *args):
    """``dlkit bench *args`` (MEASURING) interrupted by SIGINT: its exit code and stderr; the
    temporary directory the command made is checked to be gone."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}  # where bench makes its directory
    proc = subprocess.Popen([sys.executable, "-c", MEASURING, where, "bench", "-n", "100000",
                             "--no-torch", "-q", *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "measuring\n"
        if not args:  # the example is complete before the signal
            built, = scratch.glob("dlkit-bench-*/example-db")
            assert (built / "manifest.json").is_file()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.communicate()
    assert out == ""
    assert list(scratch.iterdir()) == []  # the temporary directory went with it
    return proc.returncode, err


def test_an_interrupt_after_the_example_is_built_exits_130(tmp_path):
    # The example database bench builds for itself is scratch, not its output: the interrupt
    # is one before the output was complete (was: exit 0 and "note: ... interrupted after its
    # output was complete: /tmp/dlkit-bench-.../example-db").
    code, err = _interrupted_while_measuring(tmp_path, "python")
    assert (code, err) == (130, INTERRUPTED)


def test_an_interrupt_in_a_kernel_calling_python_exits_130(tmp_path, example_db):
    # CPython reports it as a SystemError caused by a SystemError caused by the interrupt
    # (was: that traceback, exit 1)
    code, err = _interrupted_while_measuring(tmp_path, "kernel", "--db", str(example_db))
    assert (code, err) == (130, INTERRUPTED)


def _slower_report(workload, config, **_):
    from dlkit.bench.report import BenchReport, RunResult

    sequential = RunResult("sequential", 10, 160, 10240, 1.0, 100.0, 200.0)
    engine = RunResult("engine", 10, 160, 10240, 4.0, 400.0, 800.0)  # a quarter as fast
    return BenchReport(workload.describe | {"workload": workload.name, "steps": 10}, config,
                       sequential, engine, True)


@pytest.mark.parametrize("as_json", [False, True])
def test_the_slower_note_is_kept_by_quiet_and_json(capsys, monkeypatch, as_json):
    from dlkit.bench import runner

    monkeypatch.setattr(runner, "measure", _slower_report)
    code, out, err = run(SMALL + ["--no-torch"] + (["--json"] if as_json else []), capsys)
    assert code == 0, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "note: the engine was slower than the sequential loop (0.25x): 2 producer threads")
    if as_json:
        assert json.loads(out)["notes"] == [lines[0].removeprefix("note: ")]


def test_a_task_without_seeds_warns_once_per_dataset_in_one_line(tmp_path):
    from tests.db.conftest import example_without_reviews

    db = example_without_reviews(tmp_path)
    done = subprocess.run([sys.executable, "-m", "dlkit", "bench", "--db", str(db),
                           "-n", "4", "--no-torch", "-q"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if not line.startswith("note: ")]
    expected = [f"warning: task 'review_rating' is skipped on rank 0: dataset "
                f"'example-shop/review_rating/{split}' has no seed" for split in ("train", "val")]
    assert lines == expected  # no file:line, no source line, each once
