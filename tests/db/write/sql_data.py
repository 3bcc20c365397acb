"""One small relational database, made in SQLite, DuckDB and PostgreSQL by the tests, and the
same rows as Parquet written by pyarrow (the reference an import must equal).

users(id PK) <- orders(user_id) -> items(sku, a string key); events has no primary key and
refers to users (with nulls). Times are microsecond timestamps.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def _t(day: int, hour: int = 0) -> dt.datetime:
    return dt.datetime(2024, 1, 1) + dt.timedelta(days=day, hours=hour, microseconds=day * 7)


USERS = [(3, "cy", "fr", _t(3)), (1, "ann", "fr", _t(1)), (2, "bob", None, _t(2)),
         (4, "dee", "de", None)]
ITEMS = [("b-2", 2.5), ("a-1", 1.0), ("c-3", None)]
ORDERS = [(10, 1, "a-1", _t(5, 1), 2), (12, 2, "b-2", _t(6), 1), (11, 1, None, _t(5, 2), None),
          (13, 3, "c-3", _t(7), 4), (14, 4, "a-1", None, 1)]
EVENTS = [(1, "view", _t(4)), (2, "click", _t(4, 3)), (None, "view", _t(1)), (1, "view", None),
          (2, "click", _t(8)), (3, None, _t(2))]

TABLES: dict[str, tuple[list[tuple[str, str]], list[tuple[Any, ...]]]] = {
    # name: ([(column, kind)], rows); kinds: int, float, text, time
    "users": ([("id", "int"), ("name", "text"), ("country", "text"), ("signup", "time")], USERS),
    "items": ([("sku", "text"), ("price", "float")], ITEMS),
    "orders": ([("id", "int"), ("user_id", "int"), ("sku", "text"), ("ts", "time"),
                ("qty", "int")], ORDERS),
    "events": ([("user_id", "int"), ("kind", "text"), ("at", "time")], EVENTS),
}
PRIMARY_KEYS = {"users": "id", "items": "sku", "orders": "id"}
FOREIGN_KEYS = {"orders": [("user_id", "users", "id"), ("sku", "items", "sku")],
                "events": [("user_id", "users", "id")]}
TIME_FLAGS = ("users.signup", "orders.ts", "events.at")

ARROW = {"int": pa.int64(), "float": pa.float64(), "text": pa.string(),
         "time": pa.timestamp("us")}
SQL_TYPES = {
    "sqlite": {"int": "INTEGER", "float": "REAL", "text": "TEXT", "time": "TIMESTAMP"},
    "duckdb": {"int": "BIGINT", "float": "DOUBLE", "text": "VARCHAR", "time": "TIMESTAMP"},
    "postgresql": {"int": "BIGINT", "float": "DOUBLE PRECISION", "text": "TEXT",
                   "time": "TIMESTAMP"},
}


def ddl(dialect: str, tables: dict | None = None) -> list[str]:
    """CREATE TABLE statements, parents first."""
    tables = tables or TABLES
    out = []
    for name in ("users", "items", "orders", "events"):
        columns, _ = tables[name]
        parts = [f'"{c}" {SQL_TYPES[dialect][k]}' for c, k in columns]
        if name in PRIMARY_KEYS:
            parts.append(f'PRIMARY KEY ("{PRIMARY_KEYS[name]}")')
        for column, parent, pcol in FOREIGN_KEYS.get(name, []):
            parts.append(f'FOREIGN KEY ("{column}") REFERENCES "{parent}" ("{pcol}")')
        out.append(f'CREATE TABLE "{name}" ({", ".join(parts)})')
    return out


def sql_literal(value: Any, dialect: str) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, dt.datetime):
        text = value.isoformat(sep=" ")
        return f"'{text}'" if dialect == "sqlite" else f"TIMESTAMP '{text}'"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def inserts(dialect: str) -> list[str]:
    out = []
    for name in ("users", "items", "orders", "events"):
        _, rows = TABLES[name]
        values = ", ".join("(" + ", ".join(sql_literal(v, dialect) for v in row) + ")"
                           for row in rows)
        out.append(f'INSERT INTO "{name}" VALUES {values}')
    return out


def _sort_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """Nulls first, then the value (the import's order for a table without a key)."""
    return tuple((v is not None, v) for v in row)


def write_reference(directory: Path) -> Path:
    """The rows as Parquet in the import's order: primary-key order, else by every column."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, (columns, rows) in TABLES.items():
        if name in PRIMARY_KEYS:
            key = [c for c, _ in columns].index(PRIMARY_KEYS[name])
            ordered = sorted(rows, key=lambda r: r[key])
        else:
            ordered = sorted(rows, key=_sort_key)
        arrays = [pa.array([r[i] for r in ordered], ARROW[kind])
                  for i, (_, kind) in enumerate(columns)]
        pq.write_table(pa.table(arrays, names=[c for c, _ in columns]),
                       directory / f"{name}.parquet")
    return directory


def expected_edges() -> int:
    """Foreign-key values that are non-null and name an existing parent row (plain Python)."""
    keys = {t: {r[[c for c, _ in TABLES[t][0]].index(k)] for r in TABLES[t][1]}
            for t, k in PRIMARY_KEYS.items()}
    total = 0
    for table, fks in FOREIGN_KEYS.items():
        names = [c for c, _ in TABLES[table][0]]
        for column, parent, _ in fks:
            i = names.index(column)
            total += sum(1 for r in TABLES[table][1] if r[i] is not None and r[i] in keys[parent])
    return total


def make_sqlite(path: Path) -> str:
    import sqlite3

    db = sqlite3.connect(path)
    for statement in ddl("sqlite") + inserts("sqlite"):
        db.execute(statement)
    db.commit()
    db.close()
    return f"sqlite:///{path}"


def make_duckdb(path: Path) -> str:
    import duckdb

    db = duckdb.connect(str(path))
    for statement in ddl("duckdb") + inserts("duckdb"):
        db.execute(statement)
    db.close()
    return f"duckdb:///{path}"


def run_postgres(url: str, statements: list[str]) -> None:
    import adbc_driver_postgresql.dbapi as pg

    from dlkit.db.schema.sql_catalog import parse_sql_url

    with pg.connect(parse_sql_url(url).target) as db, db.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)
        db.commit()


def make_postgres(url: str, schema: str) -> str:
    """The tables in a fresh PostgreSQL schema ``schema``; the URL that reads it."""
    run_postgres(url, [f'CREATE SCHEMA "{schema}"', f'SET search_path TO "{schema}"',
                       *ddl("postgresql"), *inserts("postgresql")])
    return f"{url}&schema={schema}"
