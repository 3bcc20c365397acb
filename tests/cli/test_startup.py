"""Start-up: commands that run no kernel never import Numba, and each command imports only its
own module. Every check runs the real entry point in a fresh interpreter and reads its
``sys.modules`` at exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from dlkit.cli.app import COMMAND_MODULES, _register_commands, app
from dlkit.nextbatch.export import INTERPRET_BELOW_INDICES

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "fixtures" / "example_manifest.json"

# Runs `python -m dlkit ARGS` and prints, at exit, the loaded modules as JSON on stderr's last
# line (None in sys.modules, a blocked import, is reported as "<blocked>").
_PROBE = """
import atexit, json, runpy, sys
def report():
    sys.stderr.write("\\nMODULES " + json.dumps(
        {name: "<blocked>" if module is None else "" for name, module in sys.modules.items()}))
atexit.register(report)
sys.argv = ["dlkit", *sys.argv[1:]]
runpy.run_module("dlkit", run_name="__main__")
"""


def modules_of(*args: str) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    # the help cache off: a help printed from it would load no command module at all, and
    # what is checked here is what rendering loads (test_help_cache.py checks a hit)
    env = {**os.environ, "DLKIT_HELP_CACHE": "0"}
    result = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True,
                            text=True, timeout=300, cwd=REPO, env=env)
    last = result.stderr.rstrip().rsplit("\n", 1)[-1]
    assert last.startswith("MODULES "), result.stderr
    return result, json.loads(last.removeprefix("MODULES "))


def test_importing_the_cli_loads_no_numba():
    code = ("import sys, dlkit.cli, dlkit.cli.app\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('numba', 'numpy', 'pyarrow', 'scipy', 'pydantic')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("args", [
    ("--version",),
    ("--help",),
    (),
    ("sample", "--help"),
    ("samlpe",),  # a mistyped command
    ("sample",),  # a missing argument
    ("sample", "x.json", "-d", "a", "--rank", "3"),
    ("sample", "x.json", "-d", "a", "--overwrite", "true"),
    ("replay", "no-such-trace", "-m", "no-such-manifest.json"),
    ("replay", "no-such-trace", "-m", str(MANIFEST)),
    ("verify", "--help"),
    ("schema", "infer", "--help"),
    ("import", "relbench", "--help"),
    ("bench", "--help"),
    ("show", "--help"),
])
def test_commands_that_run_no_kernel_never_import_numba(args):
    result, modules = modules_of(*args)
    assert "Traceback" not in result.stderr, result.stderr
    assert "numba" not in modules, (args, result.stderr)
    assert "pydantic" not in modules or args[-1:] != ("--help",), args


def test_version_and_help_load_neither_numpy_nor_other_commands():
    _, modules = modules_of("--version")
    assert not {"typer", "rich", "numpy"} & set(modules)
    _, modules = modules_of("sample", "--help")
    assert "dlkit.cli.sample" in modules
    assert not {"numpy", "pyarrow", "pydantic", "dlkit.cli.db", "dlkit.cli.bench",
                "dlkit.cli.relational"} & set(modules)


def test_small_work_runs_its_kernels_interpreted_without_numba(example_db, tmp_path):
    """verify, manifest and a short sample of a small database: interpreting their kernels
    costs less than loading numba (the outputs equal the compiled ones: the kernels' tests)."""
    for args in (("verify", str(example_db), "--quiet"),
                 ("manifest", str(example_db), "-s", "1", "-g", "8", "-o",
                  str(tmp_path / "run.json")),
                 ("sample", str(MANIFEST), "-d", "example/train", "-n", "2")):
        result, modules = modules_of(*args)
        assert result.returncode == 0, (args, result.stderr)
        assert "numba" not in modules, args
    assert len(result.stdout.splitlines()) == 2


def test_a_long_sample_loads_numba_without_scipy(tmp_path):
    steps = 10_000  # 80,000 indices: beyond what runs sooner interpreted
    assert steps * 8 >= INTERPRET_BELOW_INDICES
    out = tmp_path / "indices.txt"
    result, modules = modules_of("sample", str(MANIFEST), "-d", "example/train", "-n",
                                 str(steps), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert len(out.read_text().splitlines()) == steps
    assert "numba" in modules
    assert all(modules[name] == "<blocked>" for name in modules if name.split(".")[0] == "scipy")


def test_command_modules_name_every_command_once():
    _register_commands()
    group = typer.main.get_command(app)
    assert set(group.commands) == set(COMMAND_MODULES)
    for name, module in COMMAND_MODULES.items():
        callback = group.commands[name].callback
        if callback is not None:  # a group (schema, import) has none of its own
            assert callback.__module__ == module, name
