"""Package attributes load on first use: the CLI and ``import dlkit`` do not load numba, and
every public name still resolves to the object its module defines."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys

import pytest


def _modules_after(code: str) -> set[str]:
    script = code + "\nimport sys\nprint(' '.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout
    return set(out.split())


def test_the_cli_registers_every_command_without_loading_numba():
    loaded = _modules_after("from dlkit.cli.app import _register_commands, app\n"
                            "_register_commands()\n"
                            "assert len(app.registered_commands) >= 9, app.registered_commands")
    assert "numba" not in loaded and "dlkit.cli.relational" in loaded
    assert "numba" not in _modules_after("import dlkit, dlkit.errors, dlkit.sampler, dlkit.nextbatch")


@pytest.mark.parametrize("package", ["dlkit", "dlkit.nextbatch", "dlkit.sampler"])
def test_every_public_name_resolves_to_its_module_object(package):
    module = importlib.import_module(package)
    for name in module.__all__:
        value = getattr(module, name)
        assert value is not None
        # the same object as the defining module's, and cached in the package afterwards
        owner = importlib.import_module(getattr(value, "__module__", package) or package)
        if hasattr(owner, name):
            assert getattr(owner, name) is value
        assert name in vars(module)
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        _ = module.no_such_name


@pytest.mark.parametrize("package", ["dlkit", "dlkit.nextbatch", "dlkit.sampler"])
def test_static_imports_name_what_the_package_serves(package):
    """The ``TYPE_CHECKING`` imports (for type checkers and editors) and the lazy map are two
    statements of the same names: they must agree, and ``dir`` lists every name before use."""
    module = importlib.import_module(package)
    tree = ast.parse(open(module.__file__, encoding="utf-8").read())
    guarded = next(node for node in tree.body if isinstance(node, ast.If)
                   and getattr(node.test, "id", None) == "TYPE_CHECKING")
    static = {(imp.module, alias.name) for imp in guarded.body
              for alias in imp.names}
    eager = {name for name in module.__all__ if name in ("DlkitError", "__version__")}
    assert {name for _, name in static} == set(module.__all__) - eager
    for source, name in static:
        assert getattr(module, name) is getattr(importlib.import_module(source), name)
    fresh = _modules_after(f"import {package}\nassert set({package}.__all__) <= set(dir({package}))")
    assert "numba" not in fresh
