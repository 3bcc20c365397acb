"""The layering of dlkit's sub-packages, read from the import statements
(``scripts/import_graph.py``): arrows point down, and the engines do not know their users."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
import_graph = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(import_graph)

SRC = ROOT / "src" / "dlkit"
SUBPACKAGES = sorted(path.parent.name for path in SRC.glob("*/__init__.py"))
GRAPH = import_graph.import_graph(SRC)


# source -> the packages it must not import
FORBIDDEN = {
    "core": set(SUBPACKAGES),                                  # kernels only: the bottom
    "prefetch": {"nextbatch", "sampler", "db", "cli", "bench", "viewer"},  # an engine
    "db": {"sampler", "cli", "bench", "prefetch", "viewer"},
    "sampler": {"viewer", "cli", "bench"},
    "viewer": {"cli", "bench", "prefetch"},  # reads databases and the sampler's sequences
}


def violations(graph) -> list[tuple[str, str]]:
    """Forbidden edges, and every import of the CLI but ``python -m dlkit``'s."""
    return sorted((source, target) for (source, target) in graph
                  if target in FORBIDDEN.get(source, ()) or
                  (target == "cli" and source not in ("cli", "__main__")))


def test_the_graph_sees_the_known_packages_and_edges():
    assert {"core", "db", "nextbatch", "sampler", "prefetch", "cli"} <= set(SUBPACKAGES)
    assert ("cli", "sampler") in GRAPH and ("sampler", "core") in GRAPH  # it reads real imports
    assert ("__main__", "cli") in GRAPH


@pytest.mark.parametrize("source", sorted(FORBIDDEN))
def test_no_package_imports_what_its_layer_forbids(source):
    assert violations({edge: n for edge, n in GRAPH.items() if edge[0] == source}) == []


def test_nothing_but_main_imports_the_cli():
    assert violations({edge: n for edge, n in GRAPH.items() if edge[1] == "cli"}) == []


@pytest.mark.parametrize("source, target", [("core", "errors"), ("core", "db"),
                                            ("prefetch", "nextbatch"), ("db", "sampler"),
                                            ("sampler", "cli")])
def test_a_forbidden_edge_is_a_violation(source, target, tmp_path):
    """The rules are not vacuous: a planted import of each kind is found and refused
    (``core -> errors`` is allowed: errors is a module, not a package)."""
    package = tmp_path / "dlkit"
    for name in SUBPACKAGES:
        (package / name).mkdir(parents=True)
        (package / name / "__init__.py").write_text("")
    if target not in SUBPACKAGES:
        (package / f"{target}.py").write_text("")
    (package / source / "planted.py").write_text(f"def f():\n    from dlkit.{target} import x\n")
    graph = import_graph.import_graph(package)
    assert (source, target) in graph
    assert violations(graph) == ([] if target == "errors" else [(source, target)])


def test_the_graph_resolves_relative_and_lazy_imports(tmp_path):
    package = tmp_path / "dlkit"
    (package / "low").mkdir(parents=True)
    (package / "high").mkdir()
    (package / "__init__.py").write_text("__version__ = '1'\n")
    (package / "errors.py").write_text("")
    (package / "low" / "__init__.py").write_text("from ..errors import *\n")
    (package / "high" / "__init__.py").write_text(
        "from . import mod\nfrom dlkit import low, __version__\n")
    (package / "high" / "mod.py").write_text(
        "def f():\n    import dlkit.low.x\n    from ..low import y\n")
    assert import_graph.import_graph(package) == {
        ("low", "errors"): 1, ("high", "low"): 3, ("high", "dlkit"): 1}
    assert import_graph.render(import_graph.import_graph(package)).splitlines()[0].split() == [
        "high", "->", "dlkit", "1"]
