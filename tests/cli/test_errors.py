"""Errors and codes: usage errors are one line `error USAGE: ...` with exit 2 (never click's
boxed panel); absurd numbers are usage errors; an interrupt says in one line what stopped and
that nothing was left behind, or, after the commit, that the output is complete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from dlkit.errors import InvalidArgumentError
from dlkit.sampler.splits import SplitRatios
from tests.cli.helpers import assert_clean_failure, run_dlkit
from tests.nextbatch.helpers import manifest_dict

EXAMPLE = Path(__file__).resolve().parents[2] / "fixtures" / "example_db"
DOC = manifest_dict(70, 8, 16, seed=3)


@pytest.fixture(scope="module")
def db_path(tmp_path_factory):
    from dlkit.db import preprocess

    path = tmp_path_factory.mktemp("errors") / "db"
    preprocess(EXAMPLE, path, fsync=False)
    return path


@pytest.fixture()
def manifest_path(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(DOC))
    return path


USAGE_CASES = {
    "missing argument": (["sample"], "Missing argument"),
    "unknown option": (["sample", "m.json", "-d", "ds", "--bogus"], "No such option: --bogus"),
    "bad integer": (["sample", "m.json", "-d", "ds", "-r", "x"], "'x' is not an integer"),
    "bad choice": (["sample", "m.json", "-d", "ds", "--format", "xml"], "--format"),
    "missing option": (["batches", "db"], "Missing option '--task'"),
    "unknown command": (["smaple"], "No such command 'smaple'"),
    "bench bad number": (["bench", "--steps", "0"], "--steps"),
    "verify no argument": (["verify"], "Missing argument"),
    "schema infer extra": (["schema", "infer", "a", "b"], "unexpected extra argument"),
}


@pytest.mark.parametrize("case", sorted(USAGE_CASES))
def test_usage_errors_are_one_line_with_exit_2(case):
    args, fragment = USAGE_CASES[case]
    result = run_dlkit(*args)
    err = assert_clean_failure(result, "USAGE")
    assert result.returncode == 2 and result.stdout == b""
    assert err.startswith("error USAGE: ") and fragment in err
    assert not any(ch in err for ch in "╭╰│─"), err  # no panel
    assert "--help'" in err  # where to look


def test_help_and_version_still_exit_0():
    assert run_dlkit("--version").returncode == 0
    assert run_dlkit("sample", "--help").returncode == 0


@pytest.mark.parametrize("command", ["manifest", "batches"])
@pytest.mark.parametrize("ratios", ["1e308,1e308,0", "1e400,0,0", "nan,0.5,0.5", "2,-1,0"])
def test_absurd_split_ratios_are_usage_errors(db_path, tmp_path, command, ratios):
    args = {"manifest": ["--seed", 1, "-g", 4, "--out", tmp_path / "run.json"],
            "batches": ["--task", "review_rating", "--out", tmp_path / "b"]}[command]
    result = run_dlkit(command, db_path, "--split-ratios", ratios, *args)
    err = assert_clean_failure(result, "INVALID_ARGUMENT")
    assert result.returncode == 2 and "three non-negative numbers of at most 1 each" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", [(1e308, 1e308, 0.0), (10**400, 0, 0), (float("inf"), 0, 0)])
def test_split_ratios_never_overflow(value):
    with pytest.raises(InvalidArgumentError, match="non-negative numbers of at most 1"):
        SplitRatios.parse(value)


@pytest.mark.parametrize("command", ["sample", "batches", "bench"])
def test_a_rank_out_of_range_is_a_usage_error(db_path, manifest_path, tmp_path, command):
    args = {"sample": ["sample", manifest_path, "-d", "ds"],
            "batches": ["batches", db_path, "--task", "review_rating", "--out", tmp_path / "b"],
            "bench": ["bench", "--workload", "gather", "-q"]}[command]
    result = run_dlkit(*args, "-r", 4, "-w", 4)
    err = assert_clean_failure(result, "USAGE")
    assert result.returncode == 2 and "--rank 4 is out of range: ranks are 0 to 3" in err


def _terminate_self(*args, **kwargs):
    signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)


def test_an_interrupt_before_the_commit_is_one_line_and_leaves_nothing(dlkit, manifest_path,
                                                                        tmp_path, monkeypatch):
    from dlkit.nextbatch import export

    real = export.export_steps

    def interrupted(*args, **kwargs):
        summary = real(*args, **kwargs)  # everything written to the temporary files
        _terminate_self()
        return summary

    monkeypatch.setattr(export, "export_steps", interrupted)
    result = dlkit("sample", manifest_path, "-d", "ds", "--out", tmp_path / "i.txt",
                   "--trace", tmp_path / "t.cbor", "--checkpoint-out", tmp_path / "c.ckpt")
    assert result.returncode == 130
    assert result.stderr == ("error INTERRUPTED: dlkit sample was interrupted; it wrote no file "
                             "and left no temporary file\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_an_interrupt_after_the_commit_reports_the_complete_output(dlkit, manifest_path,
                                                                    tmp_path, monkeypatch):
    from dlkit.cli import sample

    monkeypatch.setattr(sample, "print_json", _terminate_self)
    result = dlkit("sample", manifest_path, "-d", "ds", "--out", tmp_path / "i.txt", "--json",
                   "--checkpoint-out", tmp_path / "c.ckpt")
    assert result.returncode == 0
    lines = result.stderr.splitlines()
    assert lines == [f"note: dlkit sample was interrupted after its output was complete: "
                     f"{tmp_path / 'i.txt'}, {tmp_path / 'c.ckpt'}"]
    assert (tmp_path / "i.txt").stat().st_size > 0 and (tmp_path / "c.ckpt").exists()


def test_an_interrupt_after_preprocess_committed_says_the_database_is_complete(
        dlkit, tmp_path, monkeypatch):
    from dlkit.cli import db as db_commands

    monkeypatch.setattr(db_commands, "print_json", _terminate_self)  # after the rename
    out = tmp_path / "db"
    result = dlkit("preprocess", EXAMPLE, out, "--json", "--no-fsync")
    assert result.returncode == 0
    assert result.stderr.splitlines()[-1] == (f"note: dlkit preprocess was interrupted after "
                                              f"its output was complete: {out}")
    assert dlkit("verify", out, "-q").returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db"]


def test_an_interrupt_between_preprocess_many_sources_names_the_databases_built(
        dlkit, tmp_path, monkeypatch):
    """Each database is a part of preprocess-many's output: one built before the interrupt
    is complete and named, but the run is not (exit 130; it said 0, "output complete")."""
    import shutil

    from dlkit.db.write import collection

    sources = tmp_path / "sources"
    for name in ("a", "b", "c"):
        shutil.copytree(EXAMPLE, sources / name)
    real = collection.preprocess_many

    def interrupted(*args, on_source, **kwargs):
        def after_one(result):
            on_source(result)
            _terminate_self()

        return real(*args, on_source=after_one, **kwargs)

    monkeypatch.setattr(collection, "preprocess_many", interrupted)
    out = tmp_path / "out"
    result = dlkit("preprocess-many", sources, out, "--no-fsync", "-q")
    assert result.returncode == 130, result.stderr
    built = [p for p in sorted(out.iterdir()) if (p / "manifest.json").is_file()]
    assert len(built) == 1 and dlkit("verify", built[0], "-q").returncode == 0
    assert result.stderr.splitlines()[-1] == (
        f"error INTERRUPTED: dlkit preprocess-many was interrupted; complete before it: "
        f"{built[0]}; the rest was not made")


# Run as ``python -m``: only that path kills the process by SIGINT when CPython flagged a
# KeyboardInterrupt as unhandled (its C entry point checks the flag after the program exits).
_BOOM = """
import sys

import dlkit.cli.app as cli


def interrupted_in_exec():
    # where a signal lands in code made by exec of a string (dataclasses, numba)
    exec("raise KeyboardInterrupt")


def kernel_interrupted():
    # what a signal handled while numba's dispatcher runs a kernel turns into
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as exc:
        raise SystemError("CPUDispatcher(<function k>) returned a result with an exception "
                          "set") from exc


register = cli._register_commands


def register_boom(command=None):
    register(command)
    cli.app.command("boom")(BOOM)


BOOM = {"exec": interrupted_in_exec, "kernel": kernel_interrupted}[sys.argv[1]]
cli._register_commands = register_boom
cli.main(["boom"])
"""


@pytest.mark.parametrize("where", ["exec", "kernel"])
def test_a_handled_interrupt_exits_130_under_python_m(tmp_path, where):
    (tmp_path / "boom_cli.py").write_text(_BOOM)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    result = subprocess.run([sys.executable, "-m", "boom_cli", where], capture_output=True,
                            text=True, env=env, cwd=tmp_path, timeout=120)
    assert result.returncode == 130, result  # not -SIGINT, not a traceback's 1
    assert result.stderr == ("error INTERRUPTED: dlkit boom was interrupted; it wrote no file "
                             "and left no temporary file\n")
