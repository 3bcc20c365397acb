"""``dlkit bench`` as a user runs it: table, --json, the torch note, the error boundary."""

from __future__ import annotations

import json
import sys


from dlkit.cli.app import main

SMALL = ["bench", "--steps", "8", "--rows", "2000", "--row-bytes", "64", "--batch-size", "16",
         "--quiet"]


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


def test_bench_notes_that_torch_is_missing(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
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
