"""``dlkit import sql``: SQLite, DuckDB and a real PostgreSQL server give the database that the
same rows in Parquet give (same hash), with the catalog's keys and the flags' time columns."""

from __future__ import annotations

import json
import sys
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlkit.db import preprocess
from dlkit.db.metadata_records import DatabaseMetadata
from dlkit.db.schema.spec import parse_schema
from dlkit.db.schema.sql_schema import SqlSchemaOptions
from dlkit.db.write.sql_source import import_sql
from dlkit.errors import (
    DataError,
    InvalidArgumentError,
    MissingExtraError,
    SchemaError,
    SqlSourceError,
)
from tests.db.conftest import leftovers
from tests.db.write import sql_data

TIMES = SqlSchemaOptions(time_columns=sql_data.TIME_FLAGS)


def _metadata(path):
    return DatabaseMetadata.from_json(json.loads((path / "metadata.json").read_text()))


@pytest.fixture
def sqlite_url(tmp_path):
    return sql_data.make_sqlite(tmp_path / "shop.sqlite")


@pytest.fixture
def duckdb_url(tmp_path):
    return sql_data.make_duckdb(tmp_path / "shop.duckdb")


@pytest.fixture
def postgres_url(postgres_server):
    return sql_data.make_postgres(postgres_server.url(), f"s_{uuid.uuid4().hex[:12]}")


def _same_as_parquet(url, tmp_path):
    report = import_sql(url, tmp_path / "db", options=TIMES, fsync=False)
    assert report.schema_path == str(tmp_path / "db.dlkit.toml")
    assert (tmp_path / "db.dlkit.toml").read_text() == report.schema_text
    assert leftovers(tmp_path) == []  # the scratch Parquet is gone
    reference = sql_data.write_reference(tmp_path / "parquet")
    schema = parse_schema(report.schema_text)
    built = preprocess(reference, tmp_path / "ref", schema=schema, fsync=False)
    assert report.build.database_hash == built.database_hash
    db = _metadata(tmp_path / "db")
    assert [t.name for t in db.tables] == ["events", "items", "orders", "users"]
    assert report.build.num_edges == sql_data.expected_edges()
    by_name = {t.name: t for t in db.tables}
    assert by_name["users"].primary_key == "id" and by_name["items"].primary_key == "sku"
    assert by_name["orders"].time_column == "ts"
    assert [(f.column, f.parent_table) for f in by_name["orders"].foreign_keys] == [
        ("user_id", "users"), ("sku", "items")]
    assert {t.name: t.num_rows for t in db.tables} == {
        n: len(rows) for n, (_, rows) in sql_data.TABLES.items()}
    return report


def test_sqlite_import_is_the_parquet_build(sqlite_url, tmp_path):
    _same_as_parquet(sqlite_url, tmp_path)


def test_duckdb_import_is_the_parquet_build(duckdb_url, tmp_path):
    _same_as_parquet(duckdb_url, tmp_path)


def test_postgresql_import_is_the_parquet_build(postgres_url, tmp_path):
    assert "?host=/" in postgres_url  # the Unix-socket form
    _same_as_parquet(postgres_url, tmp_path)


def test_the_written_schema_builds_the_same_database_again(sqlite_url, tmp_path):
    first = import_sql(sqlite_url, tmp_path / "a", options=TIMES, fsync=False)
    again = import_sql(sqlite_url, tmp_path / "b", partial=first.schema_path, fsync=False)
    assert again.build.database_hash == first.build.database_hash
    assert again.schema_text.split("\n", 1)[1] == first.schema_text.split("\n", 1)[1]


def test_batch_rows_do_not_change_the_database(duckdb_url, tmp_path):
    a = import_sql(duckdb_url, tmp_path / "a", options=TIMES, batch_rows=1, fsync=False)
    b = import_sql(duckdb_url, tmp_path / "b", options=TIMES, fsync=False)
    assert a.build.database_hash == b.build.database_hash


def test_partial_schema_adds_tasks_types_and_exclusions(sqlite_url, tmp_path):
    partial = tmp_path / "partial.toml"
    partial.write_text(
        'name = "shop"\nexclude_tables = ["events"]\n'
        '[tables.users]\ntime_column = "signup"\nexclude = ["name"]\n'
        'types = { country = "categorical" }\n'
        '[tables.orders]\ntime_column = "ts"\n'
        '[tasks.qty]\ntable = "orders"\ntarget = "qty"\nlabel_lag = "1d"\n')
    report = import_sql(sqlite_url, tmp_path / "db", partial=partial, fsync=False)
    db = _metadata(tmp_path / "db")
    assert db.database_id == "shop"
    assert [t.name for t in db.tables] == ["items", "orders", "users"]
    users = {t.name: t for t in db.tables}["users"]
    assert [c.name for c in users.columns] == ["country", "signup"]  # not "name"
    assert users.columns[0].stype_name == "categorical"
    assert [t.name for t in db.tasks] == ["qty"]
    assert 'label_lag = "1d"' in report.schema_text


def test_excluding_a_parent_drops_its_foreign_keys(sqlite_url, tmp_path):
    report = import_sql(sqlite_url, tmp_path / "db",
                        options=SqlSchemaOptions(exclude_tables=("items",)), fsync=False)
    orders = {t.name: t for t in _metadata(tmp_path / "db").tables}["orders"]
    assert [f.column for f in orders.foreign_keys] == ["user_id"]
    assert "sku" not in [c.name for c in orders.columns]
    assert any("orders(sku) -> items" in n for n in report.notes)


@pytest.mark.parametrize("text, message", [
    ('[tables.nope]\ntime_column = "x"\n', "no table 'nope' in the database"),
    ('[tables.users]\ntime_column = "joined"\n', "no column 'joined' in table 'users'"),
    ('[tables.users]\npath = "users.parquet"\n', "path is not allowed here"),
    ('exclude_tables = ["ghost"]\n', "no table 'ghost'"),
    ('[tables.users\n', "not valid TOML"),
])
def test_a_partial_schema_naming_what_the_catalog_lacks_is_an_error(sqlite_url, tmp_path,
                                                                      text, message):
    partial = tmp_path / "partial.toml"
    partial.write_text(text)
    with pytest.raises(SchemaError, match=message) as info:
        import_sql(sqlite_url, tmp_path / "db", partial=partial, fsync=False)
    assert str(partial) in str(info.value)
    assert not (tmp_path / "db").exists() and leftovers(tmp_path) == []


def test_a_bad_time_flag_names_the_column(sqlite_url, tmp_path):
    with pytest.raises(InvalidArgumentError, match="no column 'when' in table 'users'"):
        import_sql(sqlite_url, tmp_path / "db",
                   options=SqlSchemaOptions(time_columns=("users.when",)), fsync=False)
    with pytest.raises(InvalidArgumentError, match="expected TABLE.COLUMN"):
        import_sql(sqlite_url, tmp_path / "db",
                   options=SqlSchemaOptions(time_columns=("users",)), fsync=False)


def test_a_failed_build_leaves_no_scratch_and_no_schema(tmp_path):
    import sqlite3

    path = tmp_path / "bad.sqlite"
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE p (id INTEGER PRIMARY KEY);"
                     "CREATE TABLE c (pid INTEGER REFERENCES p (id));"
                     "INSERT INTO p VALUES (1); INSERT INTO c VALUES (1), (7);")
    db.commit()
    db.close()
    with pytest.raises(DataError, match="dangling"):
        import_sql(f"sqlite:///{path}", tmp_path / "db", on_dangling="error", fsync=False)
    assert leftovers(tmp_path) == [] and not (tmp_path / "db").exists()
    assert not (tmp_path / "db.dlkit.toml").exists()


def test_hostile_table_names_are_mapped(tmp_path):
    import sqlite3

    path = tmp_path / "odd.sqlite"
    db = sqlite3.connect(path)
    db.executescript('CREATE TABLE "order items" (id INTEGER PRIMARY KEY, n INTEGER);'
                     'CREATE TABLE "-x" (oid INTEGER REFERENCES "order items" (id));'
                     'INSERT INTO "order items" VALUES (1, 2); INSERT INTO "-x" VALUES (1);')
    db.commit()
    db.close()
    report = import_sql(f"sqlite:///{path}", tmp_path / "db", fsync=False)
    names = [t.name for t in _metadata(tmp_path / "db").tables]
    assert names == ["_x", "order_items"]
    assert report.build.num_edges == 1
    assert "table 'order items' is dlkit table 'order_items'" in report.notes


def test_two_names_mapped_to_one_are_refused(tmp_path):
    import sqlite3

    path = tmp_path / "odd.sqlite"
    db = sqlite3.connect(path)
    db.executescript('CREATE TABLE "a b" (x INTEGER); CREATE TABLE "a_b" (x INTEGER);')
    db.close()
    with pytest.raises(SchemaError, match="both become dlkit table 'a_b'"):
        import_sql(f"sqlite:///{path}", tmp_path / "db", fsync=False)


def test_sqlite_columns_of_mixed_kinds(tmp_path):
    import sqlite3

    path = tmp_path / "mixed.sqlite"
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE t (n NUMERIC, m);"
                     "INSERT INTO t VALUES (NULL, 1), (1, 'x'), (2.5, NULL);")
    db.close()
    with pytest.raises(SqlSourceError, match="column 'm' holds values of several kinds"):
        import_sql(f"sqlite:///{path}", tmp_path / "db", fsync=False)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("url, error, message", [
    ("mysql://host/db", InvalidArgumentError, "expected sqlite:///PATH"),
    ("sqlite://host/x.db", InvalidArgumentError, "a file URL has no host"),
    ("sqlite:///", InvalidArgumentError, "no file path"),
    ("duckdb:///no/such/file.duckdb", SqlSourceError, "no database file"),
])
def test_bad_urls(tmp_path, url, error, message):
    with pytest.raises(error, match=message):
        import_sql(url, tmp_path / "db", fsync=False)


def test_an_unreachable_server_is_one_error_without_the_password(tmp_path):
    url = f"postgresql://me:secret@/db?host={tmp_path}&connect_timeout=2"
    with pytest.raises(SqlSourceError, match="cannot connect to the PostgreSQL server") as info:
        import_sql(url, tmp_path / "db", fsync=False)
    assert "secret" not in str(info.value) and "\n" not in str(info.value)


def test_a_missing_driver_names_the_extra(duckdb_url, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "duckdb", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'dlkit\[sql\]'"):
        import_sql(duckdb_url, tmp_path / "db", fsync=False)
    monkeypatch.setitem(sys.modules, "adbc_driver_postgresql", None)
    monkeypatch.setitem(sys.modules, "adbc_driver_postgresql.dbapi", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'dlkit\[sql\]'"):
        import_sql("postgresql:///x", tmp_path / "db", fsync=False)


def test_an_existing_output_is_refused_before_the_work(sqlite_url, tmp_path):
    (tmp_path / "db.dlkit.toml").write_text("keep")
    from dlkit.errors import OutputError

    with pytest.raises(OutputError, match="already exists"):
        import_sql(sqlite_url, tmp_path / "db", fsync=False)
    assert (tmp_path / "db.dlkit.toml").read_text() == "keep"


def test_cli_import_sql(dlkit, sqlite_url, tmp_path):
    out = tmp_path / "db"
    result = dlkit("import", "sql", sqlite_url, str(out), "--time", "orders.ts", "--json",
                   "--no-fsync", "--schema-out", str(tmp_path / "s.toml"))
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema_path"] == str(tmp_path / "s.toml") and doc["num_edges"] == \
        sql_data.expected_edges()
    bad = dlkit("import", "sql", "oracle://x/y", str(tmp_path / "db2"))
    assert bad.returncode == 2 and bad.stderr.startswith("error INVALID_ARGUMENT: ")
    assert len(bad.stderr.strip().splitlines()) == 1


# Composite keys: Teams(year, team) <- Batting(year, team), Batting(pid) -> People(pid).
TEAMS = [(2001, "BOS", 90), (2000, "NYA", 87), (2001, "NYA", 95), (2000, "BOS", 85)]
PEOPLE = [("p2",), ("p1",)]
BATTING = [("p1", 2000, "NYA", 10), ("p2", 2001, "BOS", 3), ("p1", None, "BOS", 7),
           ("p2", 2000, "BOS", None), (None, 2001, "NYA", 1), ("p1", 2001, "NYA", 4)]
COMPOSITE_DDL = [
    'CREATE TABLE "Teams" (year BIGINT, team VARCHAR, wins BIGINT, PRIMARY KEY (year, team))',
    'CREATE TABLE "People" (pid VARCHAR PRIMARY KEY)',
    'CREATE TABLE "Batting" (pid VARCHAR REFERENCES "People" (pid), year BIGINT, team VARCHAR, '
    'hits BIGINT, FOREIGN KEY (year, team) REFERENCES "Teams" (year, team))',
]


def _composite_rows():
    def values(rows):
        return ", ".join("(" + ", ".join(sql_data.sql_literal(v, "duckdb") for v in r) + ")"
                         for r in rows)
    return [f'INSERT INTO "Teams" VALUES {values(TEAMS)}',
            f'INSERT INTO "People" VALUES {values(PEOPLE)}',
            f'INSERT INTO "Batting" VALUES {values(BATTING)}']


def _composite_reference(directory):
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir()
    specs = {"Teams": (sorted(TEAMS), [("year", pa.int64()), ("team", pa.string()),
                                       ("wins", pa.int64())]),
             "People": (sorted(PEOPLE), [("pid", pa.string())]),
             "Batting": (sorted(BATTING, key=lambda r: tuple((v is not None, v) for v in r)),
                         [("pid", pa.string()), ("year", pa.int64()), ("team", pa.string()),
                          ("hits", pa.int64())])}
    for name, (rows, fields) in specs.items():
        pq.write_table(pa.table([pa.array([r[i] for r in rows], t)
                                 for i, (_, t) in enumerate(fields)],
                                names=[n for n, _ in fields]), directory / f"{name}.parquet")
    return directory


def _composite_import(url, tmp_path):
    report = import_sql(url, tmp_path / "db", fsync=False)
    assert 'primary_key = ["year", "team"]' in report.schema_text
    built = preprocess(_composite_reference(tmp_path / "parquet"), tmp_path / "ref",
                       schema=parse_schema(report.schema_text), fsync=False)
    assert report.build.database_hash == built.database_hash
    teams, people = {r[:2] for r in TEAMS}, {r[0] for r in PEOPLE}
    expected = sum(r[0] in people for r in BATTING) + sum(
        r[1] is not None and r[2] is not None and r[1:3] in teams for r in BATTING)
    assert report.build.num_edges == expected == 10


def test_composite_keys_from_duckdb(tmp_path):
    import duckdb

    path = tmp_path / "b.duckdb"
    with duckdb.connect(str(path)) as db:
        for statement in COMPOSITE_DDL + _composite_rows():
            db.execute(statement)
    _composite_import(f"duckdb:///{path}", tmp_path)


def test_composite_keys_from_sqlite(tmp_path):
    import sqlite3

    path = tmp_path / "b.sqlite"
    db = sqlite3.connect(path)
    for statement in COMPOSITE_DDL + _composite_rows():
        db.execute(statement.replace("BIGINT", "INTEGER").replace("VARCHAR", "TEXT"))
    db.commit()
    db.close()
    _composite_import(f"sqlite:///{path}", tmp_path)


def test_composite_keys_from_postgresql(postgres_server, tmp_path):
    schema = f"b_{uuid.uuid4().hex[:12]}"
    sql_data.run_postgres(postgres_server.url(), [
        f'CREATE SCHEMA "{schema}"', f'SET search_path TO "{schema}"',
        *(s.replace("VARCHAR", "TEXT") for s in COMPOSITE_DDL), *_composite_rows()])
    _composite_import(f"{postgres_server.url()}&schema={schema}", tmp_path)


def test_views_are_not_tables(tmp_path):
    import duckdb

    path = tmp_path / "v.duckdb"
    with duckdb.connect(str(path)) as db:
        db.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, x DOUBLE)")
        db.execute("INSERT INTO t VALUES (1, 0.5), (2, 1.5)")
        db.execute("CREATE VIEW v AS SELECT id * 2 AS y FROM t")
    report = import_sql(f"duckdb:///{path}", tmp_path / "db", fsync=False)
    assert [t.name for t in report.build.tables] == ["t"]


def test_an_interrupted_export_leaves_no_scratch(sqlite_url, tmp_path):
    from dlkit.db.write.report import Progress

    class Interrupting(Progress):
        def advance(self, amount: int) -> None:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        import_sql(sqlite_url, tmp_path / "db", progress=Interrupting(), fsync=False)
    assert leftovers(tmp_path) == [] and not (tmp_path / "db").exists()


def test_a_file_name_with_uri_characters(tmp_path):
    from urllib.parse import quote

    sql_data.make_sqlite(tmp_path / "shop #1?%.sqlite")
    url = "sqlite:///" + quote(str(tmp_path / "shop #1?%.sqlite"))  # percent-encoded
    report = import_sql(url, tmp_path / "db", options=TIMES, fsync=False)
    assert report.build.num_edges == sql_data.expected_edges()


def test_a_file_that_is_no_database(tmp_path):
    (tmp_path / "x.db").write_bytes(b"not a database at all" * 100)
    for scheme in ("sqlite", "duckdb"):
        engine = "SQLite" if scheme == "sqlite" else "DuckDB"
        with pytest.raises(SqlSourceError, match=f"cannot open the {engine} database"):
            import_sql(f"{scheme}:///{tmp_path / 'x.db'}", tmp_path / "db", fsync=False)


def test_postgresql_column_types(postgres_server, tmp_path):
    schema = f"t_{uuid.uuid4().hex[:12]}"
    sql_data.run_postgres(postgres_server.url(), [
        f'CREATE SCHEMA "{schema}"', f'SET search_path TO "{schema}"',
        "CREATE TABLE t (id uuid PRIMARY KEY, i integer, s smallint, r real, n numeric(10, 2), "
        "b boolean, d date, tz timestamptz, j jsonb, iv interval, v varchar(5))",
        "INSERT INTO t VALUES ('00000000-0000-0000-0000-000000000001', 1, 2, 1.5, 3.25, true, "
        "'2024-01-02', '2024-01-02 03:04:05+02', '{\"a\": 1}', '1 day', 'abc'), "
        "('00000000-0000-0000-0000-000000000002', NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
        "NULL, NULL, NULL)"])
    report = import_sql(f"{postgres_server.url()}&schema={schema}", tmp_path / "db",
                        options=SqlSchemaOptions(time_columns=("t.tz",)), fsync=False)
    (table,) = _metadata(tmp_path / "db").tables
    assert table.primary_key == "id" and table.primary_key_type == "string"
    types = {c.name: (c.arrow_type, c.stype_name) for c in table.columns}
    assert types == {"i": ("int32", "numeric"), "s": ("int16", "numeric"),
                     "r": ("float", "numeric"), "n": ("double", "numeric"),
                     "b": ("bool", "boolean"), "d": ("date32[day]", "timestamp"),
                     "tz": ("timestamp[us, tz=UTC]", "timestamp"),
                     "v": ("string", "text")}
    left_out = sorted(n.split(" ")[0] for n in report.notes if " left out: its type" in n)
    assert left_out == ["t.iv", "t.j"], report.notes  # interval, jsonb: not read by dlkit


_texts = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)),
                 max_size=8)
_rows = st.lists(st.tuples(st.one_of(st.none(), st.integers(-(1 << 63), (1 << 63) - 1)),
                           # SQLite stores NaN as NULL and -0.0 as 0.0: neither is data here
                           st.one_of(st.none(), st.floats(allow_nan=False).filter(
                               lambda x: x != 0 or str(x) == "0.0")),
                           st.one_of(st.none(), _texts)), max_size=12)


@settings(max_examples=15)
@given(rows=_rows, refs=st.lists(st.one_of(st.none(), st.integers(-3, 15)), max_size=10))
def test_random_sqlite_tables_build_as_their_parquet_does(tmp_path_factory, rows, refs):
    """Any values of the three storage classes, nulls and dangling references: the import is
    the Parquet build of the same rows, and its edges are the references that match."""
    import sqlite3

    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp = tmp_path_factory.mktemp("random")
    db = sqlite3.connect(tmp / "r.sqlite")
    db.executescript("CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER, b REAL, c TEXT);"
                     "CREATE TABLE u (k INTEGER PRIMARY KEY, tid INTEGER REFERENCES t (id));")
    db.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", [(i, *r) for i, r in enumerate(rows)])
    db.executemany("INSERT INTO u VALUES (?, ?)", list(enumerate(refs)))
    db.commit()
    db.close()
    report = import_sql(f"sqlite:///{tmp / 'r.sqlite'}", tmp / "db", fsync=False)
    ref = tmp / "parquet"
    ref.mkdir()
    pq.write_table(pa.table({"id": pa.array(range(len(rows)), pa.int64()),
                             "a": pa.array([r[0] for r in rows], pa.int64()),
                             "b": pa.array([r[1] for r in rows], pa.float64()),
                             "c": pa.array([r[2] for r in rows], pa.string())}),
                   ref / "t.parquet")
    pq.write_table(pa.table({"k": pa.array(range(len(refs)), pa.int64()),
                             "tid": pa.array(refs, pa.int64())}), ref / "u.parquet")
    built = preprocess(ref, tmp / "ref", schema=parse_schema(report.schema_text), fsync=False)
    assert report.build.database_hash == built.database_hash
    assert report.build.num_edges == sum(1 for r in refs if r is not None and 0 <= r < len(rows))
