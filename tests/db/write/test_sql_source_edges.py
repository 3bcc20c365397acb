"""``dlkit import sql`` on what a new user's databases hold: foreign keys into other SQL
schemas, names that collide until one is excluded, times with zone offsets, views, and the
errors, codes and notes each of those gives."""

from __future__ import annotations

import datetime as dt
import sqlite3
import tomllib
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dlkit.db import preprocess
from dlkit.db.schema.spec import parse_schema
from dlkit.db.schema.sql_schema import SqlSchemaOptions
from dlkit.db.write.sql_source import import_sql
from dlkit.errors import InputFormatError, InvalidArgumentError, SchemaError
from tests.db.conftest import leftovers
from tests.db.write import sql_data


def _sqlite(path, script: str) -> str:
    db = sqlite3.connect(path)
    db.executescript(script)
    db.commit()
    db.close()
    return f"sqlite:///{path}"


def _postgres(server, statements: list[str]) -> str:
    """``statements`` run in a fresh SQL schema; the URL that reads that schema."""
    schema = f"e_{uuid.uuid4().hex[:12]}"
    sql_data.run_postgres(server.url(), [f'CREATE SCHEMA "{schema}"',
                                         f'SET search_path TO "{schema}"', *statements])
    return f"{server.url()}&schema={schema}"


# --- PostgreSQL: a foreign key into another SQL schema ------------------------------------


def _two_schemas(server, local_user: bool = True) -> tuple[str, str]:
    """Schema ``other`` holds "user"; the schema read holds orders, whose "user" refers to
    other."user", items -> orders, and (``local_user``) a "user" table of its own, which
    orders does not refer to. Returns (URL of the schema read, the other schema's name)."""
    other = f"o_{uuid.uuid4().hex[:12]}"
    sql_data.run_postgres(server.url(), [
        f'CREATE SCHEMA "{other}"',
        f'CREATE TABLE "{other}"."user" ("order" bigint PRIMARY KEY, name text)',
        f'INSERT INTO "{other}"."user" VALUES (1, \'a\'), (2, \'b\')'])
    own_user = ['CREATE TABLE "user" (id bigint PRIMARY KEY)',
                'INSERT INTO "user" VALUES (1), (5)'] if local_user else []
    url = _postgres(server, [
        *own_user,
        f'CREATE TABLE orders (id bigint PRIMARY KEY, "user" bigint REFERENCES "{other}"."user" '
        '("order"), amount double precision)',
        "CREATE TABLE items (id bigint PRIMARY KEY, order_id bigint REFERENCES orders (id))",
        "INSERT INTO orders VALUES (1, 1, 2.5), (2, 2, 1.0)",
        "INSERT INTO items VALUES (1, 1), (2, 1), (3, 2)"])
    return url, other


@pytest.mark.parametrize("local_user", [False, True])
def test_a_foreign_key_into_another_sql_schema_is_left_out_with_a_note(postgres_server,
                                                                        tmp_path, local_user):
    url, other = _two_schemas(postgres_server, local_user)
    report = import_sql(url, tmp_path / "db", fsync=False)
    assert [t.name for t in report.build.tables] == ["items", "orders", "user"][
        :2 + local_user]
    assert report.build.num_edges == 3  # items -> orders only; orders.user is no edge
    assert (f"foreign key orders(user) -> {other}.user left out: its table is in SQL schema "
            f"{other!r}, not the one imported; its columns excluded") in report.notes
    orders = tomllib.loads(report.schema_text)["tables"]["orders"]
    assert "foreign_keys" not in orders
    assert orders["exclude"] == ["user"]  # as for a foreign key to an excluded table


@pytest.mark.parametrize("how, tables", [
    ("flag", ["items"]), ("partial", ["items"]), ("column", ["items", "orders"])])
def test_excluding_what_holds_that_foreign_key_imports_the_rest(postgres_server, tmp_path,
                                                                how, tables):
    url, _ = _two_schemas(postgres_server, local_user=False)
    partial = tmp_path / "p.toml"
    partial.write_text({"flag": "", "partial": 'exclude_tables = ["orders"]\n',
                        "column": '[tables.orders]\nexclude = ["user"]\n'}[how])
    options = SqlSchemaOptions(exclude_tables=("orders",) if how == "flag" else ())
    report = import_sql(url, tmp_path / "db", partial=partial, options=options, fsync=False)
    assert [t.name for t in report.build.tables] == tables


def test_a_foreign_key_to_a_missing_table_is_left_out_with_a_note(tmp_path):
    url = _sqlite(tmp_path / "m.sqlite",  # SQLite takes a reference to a table it lacks
                  "CREATE TABLE c (id INTEGER PRIMARY KEY, pid INTEGER REFERENCES gone (id), "
                  "n INTEGER); INSERT INTO c VALUES (1, 7, 2);")
    report = import_sql(url, tmp_path / "db", fsync=False)
    assert ("foreign key c(pid) -> gone left out: the database has no such table; its columns "
            "excluded") in report.notes
    assert tomllib.loads(report.schema_text)["tables"]["c"]["exclude"] == ["pid"]


# --- names that collide until one is excluded --------------------------------------------


def test_two_tables_differing_in_case_import_once_one_is_excluded(postgres_server, tmp_path):
    url = _postgres(postgres_server, [
        'CREATE TABLE "Refs" (id int PRIMARY KEY)', "CREATE TABLE refs (id int PRIMARY KEY)",
        "INSERT INTO refs VALUES (1), (2)"])
    with pytest.raises(SchemaError, match="both become dlkit table"):
        import_sql(url, tmp_path / "a", fsync=False)
    report = import_sql(url, tmp_path / "b", fsync=False,
                        options=SqlSchemaOptions(exclude_tables=("Refs",)))
    assert [(t.name, t.rows) for t in report.build.tables] == [("refs", 2)]


def test_two_names_mapped_to_one_import_once_one_is_excluded(tmp_path):
    url = _sqlite(tmp_path / "odd.sqlite", 'CREATE TABLE "a b" (x INTEGER);'
                                           'CREATE TABLE "a_b" (x INTEGER);'
                                           'INSERT INTO "a b" VALUES (1), (2), (3);')
    partial = tmp_path / "p.toml"
    partial.write_text('exclude_tables = ["a_b"]\n')
    report = import_sql(url, tmp_path / "db", partial=partial, fsync=False)
    assert [(t.name, t.rows) for t in report.build.tables] == [("a_b", 3)]
    assert "table 'a b' is dlkit table 'a_b'" in report.notes


# --- SQLite times with a zone offset -----------------------------------------------------

TIMES = ["2024-01-02 03:04:05", "2024-01-02T03:04:05+05:00", "2024-01-02T03:04:05Z",
         "2024-01-02T03:04:05.250-01:30", "2024-01-02", None]


def test_sqlite_times_with_a_zone_offset_are_read_as_utc(tmp_path):
    url = _sqlite(tmp_path / "t.sqlite", "CREATE TABLE a (id INTEGER PRIMARY KEY, d DATETIME);")
    db = sqlite3.connect(tmp_path / "t.sqlite")
    db.executemany("INSERT INTO a VALUES (?, ?)", list(enumerate(TIMES)))
    db.commit()
    db.close()
    report = import_sql(url, tmp_path / "db", options=SqlSchemaOptions(time_columns=("a.d",)),
                        fsync=False)

    def utc(text):  # the standard library's reading: an offset moves it to UTC
        if text is None:
            return None
        value = dt.datetime.fromisoformat(text)
        return value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value

    expected = [utc(t) for t in TIMES]
    assert expected[1] == dt.datetime(2024, 1, 1, 22, 4, 5)  # the reference itself
    (tmp_path / "parquet").mkdir()
    pq.write_table(pa.table({"id": pa.array(range(len(TIMES)), pa.int64()),
                             "d": pa.array(expected, pa.timestamp("us"))}),
                   tmp_path / "parquet" / "a.parquet")
    built = preprocess(tmp_path / "parquet", tmp_path / "ref",
                       schema=parse_schema(report.schema_text), fsync=False)
    assert report.build.database_hash == built.database_hash


def test_a_time_text_that_is_no_iso_8601_is_an_input_error_naming_it(dlkit, tmp_path):
    url = _sqlite(tmp_path / "t.sqlite",
                  "CREATE TABLE a (id INTEGER PRIMARY KEY, d DATETIME);"
                  "INSERT INTO a VALUES (1, '2024-01-02'), (2, 'yesterday'), (3, 'never');")
    with pytest.raises(InputFormatError) as info:
        import_sql(url, tmp_path / "db", fsync=False)
    message = str(info.value)
    assert "table 'a'" in message and "column 'd'" in message and "'yesterday'" in message
    assert leftovers(tmp_path) == []
    result = dlkit("import", "sql", url, str(tmp_path / "db"), "--no-fsync")
    assert result.returncode == 5 and len(result.stderr.strip().splitlines()) == 1
    assert "'yesterday'" in result.stderr


# --- values given on the command line, files named in errors ----------------------------


@pytest.fixture
def shop(tmp_path):
    return sql_data.make_sqlite(tmp_path / "shop.sqlite")


@pytest.mark.parametrize("flags, message", [
    (["--time", "nope.x"], "--time nope.x: no table 'nope' in the database"),
    (["--time", "users.when"], "--time users.when: no column 'when' in table 'users'"),
    (["--time", "users"], "--time users: expected TABLE.COLUMN"),
    (["--exclude-table", "nope"], "--exclude-table nope: no table 'nope' in the database"),
    (["--exclude-table", "users", "--time", "users.signup"],
     "--time users.signup: table 'users' is excluded"),
])
def test_a_flag_naming_what_the_database_lacks_is_a_usage_error(dlkit, shop, tmp_path, flags,
                                                                 message):
    result = dlkit("import", "sql", shop, str(tmp_path / "db"), "--no-fsync", *flags)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error INVALID_ARGUMENT: {message}"), result.stderr
    assert "flags:" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    with pytest.raises(InvalidArgumentError):  # the library says the same
        import_sql(shop, tmp_path / "db", fsync=False, options=SqlSchemaOptions(
            time_columns=tuple(v for f, v in zip(flags[::2], flags[1::2]) if f == "--time"),
            exclude_tables=tuple(v for f, v in zip(flags[::2], flags[1::2])
                                 if f == "--exclude-table")))


@pytest.mark.parametrize("scheme", ["sqlite", "duckdb"])
def test_a_missing_database_file_is_an_input_error_naming_it(dlkit, tmp_path, scheme):
    missing = tmp_path / "missing.db"
    result = dlkit("import", "sql", f"{scheme}:///{missing}", str(tmp_path / "db"))
    assert result.returncode == 5, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and str(missing) in result.stderr


def test_a_file_that_is_no_database_is_an_input_error(dlkit, tmp_path):
    (tmp_path / "x.db").write_bytes(b"not a database at all" * 100)
    for scheme in ("sqlite", "duckdb"):
        result = dlkit("import", "sql", f"{scheme}:///{tmp_path / 'x.db'}", str(tmp_path / "o"))
        assert result.returncode == 5, result.stderr


def test_a_schema_error_from_a_flag_names_the_flag_not_the_unwritten_schema(dlkit, shop,
                                                                              tmp_path):
    result = dlkit("import", "sql", shop, str(tmp_path / "db"), "--time", "users.id")
    assert result.returncode == 5, result.stderr
    assert "--time users.id" in result.stderr and "dlkit.toml" not in result.stderr
    assert "a key column can be the time column only" in result.stderr


def test_a_schema_error_from_the_partial_schema_names_that_file(dlkit, shop, tmp_path):
    partial = tmp_path / "ex2.toml"
    partial.write_text("[tables.orders.foreign_keys]\nqty = \"events\"\n")  # no primary key
    result = dlkit("import", "sql", shop, str(tmp_path / "out" / "ex2"), "--schema",
                   str(partial))
    assert result.returncode == 5, result.stderr
    assert str(partial) in result.stderr and "ex2.dlkit.toml" not in result.stderr


# --- views, and the advice of the mixed-kinds error --------------------------------------


def test_views_are_skipped_with_a_note(tmp_path):
    url = _sqlite(tmp_path / "v.sqlite",
                  "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT);"
                  "CREATE VIEW tv AS SELECT id, upper(v) AS v FROM t;"
                  "CREATE VIEW \"a view\" AS SELECT id FROM t;"
                  "INSERT INTO t VALUES (1, 'x');")
    report = import_sql(url, tmp_path / "db", fsync=False)
    assert [t.name for t in report.build.tables] == ["t"]
    assert "views not imported (dlkit reads base tables): 'a view', tv" in report.notes


def test_a_duckdb_view_is_skipped_with_a_note(tmp_path):
    import duckdb

    with duckdb.connect(str(tmp_path / "v.duckdb")) as db:
        db.execute("CREATE TABLE t (id BIGINT PRIMARY KEY)")
        db.execute("CREATE VIEW v AS SELECT id FROM t")
    report = import_sql(f"duckdb:///{tmp_path / 'v.duckdb'}", tmp_path / "db", fsync=False)
    assert "views not imported (dlkit reads base tables): v" in report.notes


def test_postgresql_views_are_skipped_with_a_note(postgres_server, tmp_path):
    url = _postgres(postgres_server, ["CREATE TABLE t (id int PRIMARY KEY)",
                                      "CREATE VIEW v AS SELECT id FROM t",
                                      "CREATE MATERIALIZED VIEW mv AS SELECT id FROM t"])
    report = import_sql(url, tmp_path / "db", fsync=False)
    assert [t.name for t in report.build.tables] == ["t"]
    assert "views not imported (dlkit reads base tables): mv, v" in report.notes


def test_the_mixed_kinds_error_shows_values_and_gives_advice_that_works(dlkit, tmp_path):
    url = _sqlite(tmp_path / "m.sqlite", "CREATE TABLE t (id INTEGER PRIMARY KEY, v);"
                                         "INSERT INTO t VALUES (1, 7), (2, 'x');")
    result = dlkit("import", "sql", url, str(tmp_path / "db"))
    assert result.returncode == 5, result.stderr
    assert "view" not in result.stderr.replace("views are not imported", "")
    assert "e.g. 7" in result.stderr and "e.g. 'x'" in result.stderr
    assert "--exclude-table t" in result.stderr


# --- notes ----------------------------------------------------------------------------


def test_excluding_a_column_of_a_composite_foreign_key_drops_it_with_a_note(tmp_path):
    url = _sqlite(tmp_path / "c.sqlite",
                  "CREATE TABLE Teams (year INTEGER, team TEXT, PRIMARY KEY (year, team));"
                  "CREATE TABLE Batting (pid TEXT, year INTEGER, team TEXT, "
                  "FOREIGN KEY (year, team) REFERENCES Teams (year, team));"
                  "INSERT INTO Teams VALUES (2000, 'BOS');"
                  "INSERT INTO Batting VALUES ('p', 2000, 'BOS');")
    partial = tmp_path / "p.toml"
    partial.write_text('[tables.Batting]\nexclude = ["team"]\n')
    report = import_sql(url, tmp_path / "db", partial=partial, fsync=False)
    assert report.build.num_edges == 0
    assert ("foreign key Batting(year, team) -> Teams left out: its column 'team' is excluded"
            in report.notes)


def test_notes_quote_names_that_would_read_ambiguously(tmp_path):
    import duckdb

    with duckdb.connect(str(tmp_path / "d.duckdb")) as db:
        db.execute('CREATE TABLE ".." (id BIGINT PRIMARY KEY, t INTERVAL)')
        db.execute("INSERT INTO \"..\" VALUES (1, INTERVAL 1 DAY)")
    report = import_sql(f"duckdb:///{tmp_path / 'd.duckdb'}", tmp_path / "db", fsync=False)
    assert "'..'.t left out: its type month_day_nano_interval is not one dlkit reads" \
        in report.notes, report.notes
    assert not any("..." in n for n in report.notes)
