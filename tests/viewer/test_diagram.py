"""Schema diagrams: every table and foreign key drawn, names that are markup in Mermaid, DOT
or HTML escaped, and Graphviz accepting what we write."""

from __future__ import annotations

import json
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlkit.db import open_database
from dlkit.db.schema.spec import load_schema
from dlkit.viewer.diagram import (
    DiagramEdge,
    DiagramTable,
    SchemaDiagram,
    diagram_of_metadata,
    diagram_of_schema,
)
from tests.db.conftest import EXAMPLE

EDGES = {("orders", "users"), ("orders", "products"), ("reviews", "users"),
         ("reviews", "products")}


def test_schema_and_database_give_the_same_picture(example_db):
    from_schema = diagram_of_schema(load_schema(EXAMPLE / "dlkit.toml"))
    with open_database(example_db) as db:
        from_db = diagram_of_metadata(db.metadata)
    for d in (from_schema, from_db):
        assert [t.name for t in d.tables] == ["users", "products", "orders", "reviews"]
        assert {(e.table, e.parent) for e in d.edges} == EDGES
        assert {t.name: t.tasks for t in d.tables}["reviews"] == ("review_rating: rating",)
    assert all(e.num_edges is None for e in from_schema.edges)
    edges = {(e.table, e.columns, e.parent): e.num_edges for e in from_db.edges}
    meta = json.loads((example_db / "metadata.json").read_text())
    for table in meta["tables"]:
        for fk in table["foreign_keys"]:
            assert edges[(table["name"], (fk["column"],), fk["parent_table"])] == fk["num_edges"]


def test_graphviz_draws_every_table_and_edge(example_db):
    with open_database(example_db) as db:
        svg = diagram_of_metadata(db.metadata).to_svg()
    for name in ("users (60 rows)", "products (40 rows)", "298 edges"):
        assert name in svg
    assert svg.count('class="edge"') == len(EDGES)


NAMES = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")),
                min_size=1, max_size=12)


@settings(max_examples=25, deadline=None)
@given(st.lists(NAMES, min_size=2, max_size=4, unique=True), NAMES)
def test_hostile_names_survive_every_format(names, column):
    tables = tuple(DiagramTable(n, (column,), None, 3, (f"{n}: {column}",)) for n in names)
    edges = (DiagramEdge(names[0], (column, '"x"'), names[1], 7),)
    d = SchemaDiagram('a "db" \\ <b>', tables, edges)
    dot = subprocess.run(["dot", "-Tjson"], input=d.to_dot().encode(), capture_output=True,
                         timeout=60, check=False)
    assert dot.returncode == 0, dot.stderr.decode()
    drawn = json.loads(dot.stdout)
    assert len(drawn["objects"]) == len(names) and len(drawn["edges"]) == 1
    mermaid = d.to_mermaid()
    # every label is one quoted string on its own line: no raw quote or newline escapes it
    for line in mermaid.splitlines()[1:]:
        if '["' in line:
            assert line.count('"') == 2 and line.endswith('"]')


def test_cli_draws_a_source_directory_and_a_database(example_db, tmp_path):
    from tests.cli.helpers import assert_clean_failure, run_dlkit

    mermaid = run_dlkit("schema", "diagram", EXAMPLE)
    assert mermaid.returncode == 0 and mermaid.stdout.decode().startswith("flowchart LR")
    out = tmp_path / "schema.svg"
    svg = run_dlkit("schema", "diagram", example_db, "-o", out)
    assert svg.returncode == 0 and out.read_text().lstrip().startswith("<?xml")
    again = run_dlkit("schema", "diagram", example_db, "-o", out)
    assert_clean_failure(again, "OUTPUT_ERROR")
    dot = run_dlkit("schema", "diagram", example_db, "--format", "dot")
    assert dot.stdout.decode().startswith('digraph "example-shop"')
    bad = run_dlkit("schema", "diagram", example_db, "--format", "png")
    assert_clean_failure(bad, "USAGE")
    as_json = json.loads(run_dlkit("schema", "diagram", example_db, "--json").stdout)
    assert {(e["table"], e["parent"]) for e in as_json["edges"]} == EDGES
    assert as_json["output"] is None


def test_cli_json_with_out_writes_the_file_and_names_it(example_db, tmp_path):
    """--json changes what stdout holds, never what is written: as without it, --out gets
    the diagram, and the JSON names it."""
    from tests.cli.helpers import run_dlkit

    out = tmp_path / "s.mmd"
    done = run_dlkit("schema", "diagram", example_db, "-o", out, "--json")
    assert done.returncode == 0, done.stderr.decode()
    doc = json.loads(done.stdout)
    assert doc["output"] == str(out)
    assert {(e["table"], e["parent"]) for e in doc["edges"]} == EDGES
    plain = tmp_path / "plain.mmd"
    assert run_dlkit("schema", "diagram", example_db, "-o", plain).returncode == 0
    assert out.read_bytes() == plain.read_bytes()
    assert out.read_text().startswith("flowchart LR")


def test_cli_never_writes_over_what_it_draws(example_db, tmp_path):
    """Not into the database drawn, nor over the dlkit.toml read (with --overwrite too)."""
    import shutil

    from tests.cli.helpers import assert_clean_failure, run_dlkit

    db = tmp_path / "db"
    shutil.copytree(example_db, db)
    metadata = (db / "metadata.json").read_bytes()
    into = run_dlkit("schema", "diagram", db, "-o", db / "metadata.json", "--overwrite")
    assert "inside the database" in assert_clean_failure(into, "INVALID_ARGUMENT")
    assert (db / "metadata.json").read_bytes() == metadata
    deeper = run_dlkit("schema", "diagram", db, "-o", db / "tables" / "x.svg")
    assert "inside the database" in assert_clean_failure(deeper, "INVALID_ARGUMENT")
    assert not (db / "tables" / "x.svg").exists()
    source = tmp_path / "source"
    shutil.copytree(EXAMPLE, source)
    schema = (source / "dlkit.toml").read_bytes()
    for drawn in (source, source / "dlkit.toml"):
        over = run_dlkit("schema", "diagram", drawn, "-o", source / "dlkit.toml", "--overwrite")
        assert "same file as the input" in assert_clean_failure(over, "INVALID_ARGUMENT")
        assert (source / "dlkit.toml").read_bytes() == schema
    table = (source / "users.parquet").read_bytes()
    over = run_dlkit("schema", "diagram", source, "-o", source / "users.parquet", "--overwrite")
    assert "same file as the input users.parquet" in assert_clean_failure(over,
                                                                           "INVALID_ARGUMENT")
    assert (source / "users.parquet").read_bytes() == table
    beside = run_dlkit("schema", "diagram", source, "-o", source / "schema.mmd")
    assert beside.returncode == 0 and (source / "schema.mmd").is_file()


@pytest.mark.parametrize("fmt", ["mermaid", "dot"])
def test_text_formats_need_no_graphviz(example_db, fmt, monkeypatch):
    import dlkit.viewer.diagram as diagram

    monkeypatch.setattr(diagram.shutil, "which", lambda _name: None)
    with open_database(example_db) as db:
        d = diagram_of_metadata(db.metadata)
    assert "users" in (d.to_mermaid() if fmt == "mermaid" else d.to_dot())
    with pytest.raises(diagram.InvalidArgumentError, match="apt-get install graphviz"):
        d.to_svg()
