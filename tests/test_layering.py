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


# --- db's rooms (docs: dlkit/db/__init__.py) --------------------------------------------------

DB_ROOMS = sorted(path.parent.name for path in (SRC / "db").glob("*/__init__.py"))
DB_GRAPH = import_graph.import_graph(SRC / "db", "dlkit.db")
# Bottom up: the format (every module directly in dlkit.db) 0; schema and read side by side;
# write on top; the dlkit.db namespace, which names the public things of all, above them.
ROOM_LEVEL = {"schema": 1, "read": 1, "write": 2, "db": 3}


def room_violations(graph) -> list[tuple[str, str]]:
    """Edges into a room above the source, or across to a room beside it (the format's
    modules may import one another)."""
    def level(node: str) -> int:
        return ROOM_LEVEL.get(node, 0)

    return sorted((source, target) for (source, target) in graph
                  if level(target) > level(source) or level(target) == level(source) > 0)


def test_db_has_the_known_rooms_and_edges():
    assert DB_ROOMS == ["read", "schema", "write"]  # a new room needs its place in ROOM_LEVEL
    assert ("write", "schema") in DB_GRAPH and ("read", "metadata_records") in DB_GRAPH
    assert ("metadata_records", "format") in DB_GRAPH  # the format's modules among themselves


def test_db_rooms_import_downward_only():
    assert room_violations(DB_GRAPH) == []


@pytest.mark.parametrize("source, target, refused", [
    ("read", "write", True), ("schema", "write", True), ("schema", "read", True),
    ("read", "schema", True), ("metadata_records", "read", True), ("format", "schema", True),
    ("write", "schema", False), ("read", "keys", False), ("keys", "format", False)])
def test_a_db_room_importing_upward_is_a_violation(source, target, refused, tmp_path):
    """The rule is not vacuous: a planted import of a room above or beside is refused, one
    downward is not."""
    db = tmp_path / "db"
    for room in DB_ROOMS:
        (db / room).mkdir(parents=True)
        (db / room / "__init__.py").write_text("")
    for module in ("format", "keys", "metadata_records"):
        (db / f"{module}.py").write_text("")
    planted = db / source / "planted.py" if source in DB_ROOMS else db / f"{source}.py"
    planted.write_text(f"def f():\n    from dlkit.db.{target} import x\n")
    graph = import_graph.import_graph(db, "dlkit.db")
    assert (source, target) in graph
    assert room_violations(graph) == ([(source, target)] if refused else [])
