"""Reading SQL catalogs (composite keys included) and writing what they say as dlkit.toml."""

from __future__ import annotations

import tomllib
import uuid

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.db.format import path_name_problem
from dlkit.db.schema.sql_catalog import (
    Dialect,
    SqlColumn,
    SqlForeignKey,
    SqlTable,
    connect,
    parse_sql_url,
)
from dlkit.db.schema.sql_schema import (
    SqlSchemaOptions,
    dlkit_table_name,
    merge_schema,
    render_toml,
)
from dlkit.errors import InvalidArgumentError

# Teams(year, team) <- Batting(player, year, team): a composite key and a composite reference
# whose columns are declared in another order than the parent's key.
COMPOSITE = {
    "sqlite": [
        'CREATE TABLE "Teams" (year INTEGER, team TEXT, wins INTEGER, PRIMARY KEY (year, team))',
        'CREATE TABLE "People" (pid TEXT PRIMARY KEY)',
        'CREATE TABLE "Batting" (pid TEXT REFERENCES "People", year INTEGER, team TEXT, '
        'hits INTEGER, FOREIGN KEY (team, year) REFERENCES "Teams" (team, year))',
    ],
}
COMPOSITE["postgresql"] = [s.replace("INTEGER", "BIGINT").replace(
    'REFERENCES "People"', 'REFERENCES "People" (pid)') for s in COMPOSITE["sqlite"]]
# DuckDB takes a composite reference only in the parent key's own column order
COMPOSITE["duckdb"] = [s.replace('(team, year) REFERENCES "Teams" (team, year)',
                                 '(year, team) REFERENCES "Teams" (year, team)')
                       for s in COMPOSITE["postgresql"]]

EXPECTED = (
    SqlTable("Batting", (SqlColumn("pid", "TEXT"), SqlColumn("year", "INTEGER"),
                         SqlColumn("team", "TEXT"), SqlColumn("hits", "INTEGER")), (),
             (SqlForeignKey(("pid",), "People", ("pid",)),
              SqlForeignKey(("team", "year"), "Teams", ("team", "year")))),
    SqlTable("People", (SqlColumn("pid", "TEXT"),), ("pid",), ()),
    SqlTable("Teams", (SqlColumn("year", "INTEGER"), SqlColumn("team", "TEXT"),
                       SqlColumn("wins", "INTEGER")), ("year", "team"), ()),
)


def _keys(catalog):
    return [(t.name, [c.name for c in t.columns], t.primary_key, t.foreign_keys)
            for t in catalog.tables]


def _catalog(url):
    conn = connect(url)
    try:
        return conn.catalog()
    finally:
        conn.close()


def _sqlite(tmp_path):
    import sqlite3

    db = sqlite3.connect(tmp_path / "c.sqlite")
    for statement in COMPOSITE["sqlite"]:
        db.execute(statement)
    db.commit()
    db.close()
    return f"sqlite:///{tmp_path / 'c.sqlite'}"


def _duckdb(tmp_path):
    import duckdb

    db = duckdb.connect(str(tmp_path / "c.duckdb"))
    for statement in COMPOSITE["duckdb"]:
        db.execute(statement)
    db.close()
    return f"duckdb:///{tmp_path / 'c.duckdb'}"


def test_sqlite_catalog_with_composite_keys(tmp_path):
    assert _keys(_catalog(_sqlite(tmp_path))) == _keys_of(EXPECTED)


def test_duckdb_catalog_with_composite_keys(tmp_path):
    batting = EXPECTED[0]
    ordered = SqlTable(batting.name, batting.columns, (), (
        batting.foreign_keys[0], SqlForeignKey(("year", "team"), "Teams", ("year", "team"))))
    assert _keys(_catalog(_duckdb(tmp_path))) == _keys_of((ordered, *EXPECTED[1:]))


def test_postgresql_catalog_with_composite_keys(postgres_server):
    from tests.db.write.sql_data import run_postgres

    schema = f"c_{uuid.uuid4().hex[:12]}"
    run_postgres(postgres_server.url(), [f'CREATE SCHEMA "{schema}"',
                                         f'SET search_path TO "{schema}"',
                                         *COMPOSITE["postgresql"]])
    catalog = _catalog(f"{postgres_server.url()}&schema={schema}")
    assert _keys(catalog) == _keys_of(EXPECTED)
    types = {c.name: c.sql_type for c in catalog.table("Teams").columns}
    assert types == {"year": "BIGINT", "team": "TEXT", "wins": "BIGINT"}


def _keys_of(tables):
    return [(t.name, [c.name for c in t.columns], t.primary_key, t.foreign_keys)
            for t in tables]


def test_composite_keys_are_written_in_the_parents_key_order(tmp_path):
    catalog = _catalog(_sqlite(tmp_path))
    arrow = {"Batting": pa.schema([("pid", pa.string()), ("year", pa.int64()),
                                   ("team", pa.string()), ("hits", pa.int64())]),
             "People": pa.schema([("pid", pa.string())]),
             "Teams": pa.schema([("year", pa.int64()), ("team", pa.string()),
                                 ("wins", pa.int64())])}
    merged = merge_schema(catalog, arrow, {}, None, SqlSchemaOptions(), partial_source="flags",
                          default_name="baseball")
    assert 'primary_key = ["year", "team"]' in merged.text
    assert 'year_team = { columns = ["year", "team"], table = "Teams" }' in merged.text
    doc = tomllib.loads(merged.text)
    assert doc["tables"]["Batting"]["foreign_keys"] == {
        "pid": "People", "year_team": {"columns": ["year", "team"], "table": "Teams"}}
    assert list(doc["tables"]) == ["Batting", "People", "Teams"]


def test_a_foreign_key_to_other_columns_than_the_key_is_left_out_with_a_note():
    url = parse_sql_url("postgresql:///x")
    from dlkit.db.schema.sql_catalog import SqlCatalog

    catalog = SqlCatalog(url, (
        SqlTable("a", (SqlColumn("id", "INT"), SqlColumn("code", "TEXT")), ("id",), ()),
        SqlTable("b", (SqlColumn("code", "TEXT"),), (),
                 (SqlForeignKey(("code",), "a", ("code",)),)),
    ))
    arrow = {"a": pa.schema([("id", pa.int64()), ("code", pa.string())]),
             "b": pa.schema([("code", pa.string())])}
    merged = merge_schema(catalog, arrow, {}, None, SqlSchemaOptions(), partial_source="flags",
                          default_name="x")
    assert "foreign_keys" not in tomllib.loads(merged.text)["tables"]["b"]
    assert merged.notes == ["foreign key b(code) -> a left out: it refers to (code), not to "
                            "the primary key of a"]


@pytest.mark.parametrize("url, dialect, target, namespace", [
    ("sqlite:///rel/x.db", Dialect.SQLITE, "rel/x.db", None),
    ("postgresql://u:pw@h:5433/db?sslmode=disable&schema=s", Dialect.POSTGRESQL,
     "postgresql://u:pw@h:5433/db?sslmode=disable", "s"),
    ("postgres:///db?host=/tmp/sock", Dialect.POSTGRESQL, "postgresql:///db?host=/tmp/sock",
     "public"),
])
def test_urls(tmp_path, monkeypatch, url, dialect, target, namespace):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rel").mkdir()
    (tmp_path / "rel" / "x.db").write_bytes(b"")
    parsed = parse_sql_url(url)
    assert (parsed.dialect, parsed.target, parsed.namespace) == (dialect, target, namespace)
    assert "pw" not in parsed.display


def test_passwords_are_masked():
    parsed = parse_sql_url("postgresql:///db?host=/tmp/s&password=hunter2&user=me")
    assert "hunter2" not in parsed.display and "password=***" in parsed.display
    assert "password=hunter2" in parsed.target


def test_an_unknown_scheme_is_refused():
    with pytest.raises(InvalidArgumentError, match="expected sqlite:///PATH"):
        parse_sql_url("/just/a/path.db")


@given(st.text(min_size=1, max_size=200))
def test_every_name_maps_to_a_valid_dlkit_name(name):
    mapped = dlkit_table_name(name)
    assert path_name_problem(mapped) is None
    if path_name_problem(name) is None:
        assert mapped == name


_names = st.text(min_size=1, max_size=12)
_scalars = st.one_of(st.booleans(), st.integers(-(1 << 63), (1 << 63) - 1), _names,
                     st.floats(allow_nan=False))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(_names, inner, max_size=3)), max_leaves=8)


@given(st.dictionaries(_names, st.dictionaries(_names, st.dictionaries(_names, _values,
                                                                         max_size=3),
                                               max_size=3), max_size=3))
def test_rendered_toml_reads_back_as_the_same_document(tables):
    doc = {"format_version": 1, "name": "x", "tables": tables}
    assert tomllib.loads(render_toml(doc)) == doc
