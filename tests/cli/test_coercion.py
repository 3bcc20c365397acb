"""dlkit.cli.coercion converts every option of every command exactly as typer's Pydantic
conversion does: the same value, or the same error, word for word."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer._click import Context
from typer._click.exceptions import BadParameter
from typer._coercion import build_runtime_param

from dlkit.cli.coercion import PlainRuntimeParam
from tests.cli.test_help import commands

PARAMS = [(f"{name} {p.name}", command, p) for name, command in commands()
          for p in command.params if getattr(p, "type_descriptor", None) is not None
          and p.type_descriptor.file_annotation is None]

# Texts a user types: numbers in every spelling, signs, spaces, paths, names, choices' cases
texts = st.one_of(
    st.from_regex(r"[ +-]?[0-9_]{0,6}(\.[0-9]{0,3})?([eE][+-]?[0-9]{1,2})?[ ]?", fullmatch=True),
    st.sampled_from(["", "-", "all", "inf", "nan", "0x10", "1e3", "v3", "V3", "quota", "Recent",
                     "uniform", "json", "mermaid", ".", "/", "/tmp", "fixtures/example_db",
                     "no/such/path", "-1", "2^64", str(2**64), "18446744073709551615"]),
    st.text(max_size=8),
)


def _outcome(runtime, value, param, ctx):
    try:
        return ("value", repr(runtime.coerce(value, param=param, ctx=ctx)))
    except BadParameter as exc:
        return ("error", exc.format_message())
    except ValueError as exc:  # os.stat of a text with a NUL byte (argv never holds one)
        return ("raised", type(exc).__name__, str(exc))


def test_the_options_are_covered():
    names = {name for name, _, _ in PARAMS}
    assert {"sample steps", "preprocess memory_budget", "view bfs_child_width",
            "verify database", "batches task"} <= names


@pytest.mark.parametrize("name, command, param", PARAMS, ids=[n for n, _, _ in PARAMS])
@settings(max_examples=60, deadline=None)
@given(value=texts)
def test_every_option_converts_as_typer_does(name, command, param, value):
    descriptor = param.type_descriptor
    ctx = Context(command)
    plain = PlainRuntimeParam(annotation=descriptor.annotation,
                              parameter_info=descriptor.parameter_info)
    typer_own = build_runtime_param(descriptor)
    values = [value] if not (param.multiple or param.nargs == -1) else [(value,), (value, "x")]
    for v in values:
        assert _outcome(plain, v, param, ctx) == _outcome(typer_own, v, param, ctx), (name, v)


def test_a_command_runs_without_pydantic():
    code = ("import sys, runpy\n"
            "sys.argv = ['dlkit', 'sample', 'fixtures/example_manifest.json', '-d', "
            "'example/train', '-n', '2']\n"
            "try:\n    runpy.run_module('dlkit', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "import json\n"
            "sys.stderr.write('MODULES ' + json.dumps(sorted(sys.modules)))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert len(result.stdout.splitlines()) == 2, result.stderr
    modules = set(json.loads(result.stderr.rsplit("MODULES ", 1)[1]))
    assert "dlkit.nextbatch.export" in modules and "pydantic" not in modules
