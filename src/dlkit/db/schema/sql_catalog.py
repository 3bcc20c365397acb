"""Reading a SQL database: its URL, its catalog (tables, columns, primary and foreign keys)
and its rows as Arrow record batches.

Three engines, one class each behind :class:`SqlConnection`:

* SQLite (``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``): the catalog from
  ``PRAGMA table_info`` and ``PRAGMA foreign_key_list``; rows through Python's ``sqlite3``
  module, typed per column by the storage classes the column holds (SQLite types values,
  not columns: ADBC's SQLite driver guesses a type from the first rows and fails on a later
  row of another type). Integers only: int64; integers and reals: float64; text: string
  (a column declared ``DATE``, ``DATETIME`` or ``TIMESTAMP`` holding ISO 8601 texts:
  timestamp, a text with a zone offset moved to UTC); blobs: left out.
* DuckDB (``duckdb:///path``): ``duckdb_columns()`` and ``duckdb_constraints()``; rows
  through DuckDB's own Arrow export.
* PostgreSQL (``postgresql://user@host:port/db``, a Unix socket as
  ``postgresql:///db?host=/run/postgresql``; any libpq URI): ``information_schema`` and
  ``pg_constraint``; rows through the ADBC driver (``adbc-driver-postgresql``). ``numeric``
  columns are read as float64 (the driver would hand them over as text), ``uuid`` ones as
  text.

Views (materialized ones too) are listed, not read: their rows are a query's, with no keys.
A foreign key into another SQL schema (PostgreSQL) names that schema.

Rows are read in primary-key order (a table without one: ordered by every column, nulls
first, texts in byte order), so the
same content gives the same rows in the same order whatever the engine's physical order.
``?schema=NAME`` in the URL picks the SQL schema (default: ``main`` for DuckDB, ``public``
for PostgreSQL). The drivers are the optional extra ``sql`` (``pip install 'dlkit[sql]'``).
"""

from __future__ import annotations

import enum
import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

import pyarrow as pa

from dlkit.db.schema.iso_times import first_non_time, iso_times
from dlkit.errors import InvalidArgumentError, MissingExtraError, SqlInputError, SqlSourceError

EXTRA_HINT = "pip install 'dlkit[sql]'"


class Dialect(enum.Enum):
    SQLITE = "sqlite"
    DUCKDB = "duckdb"
    POSTGRESQL = "postgresql"


_SCHEMES = {"sqlite": Dialect.SQLITE, "duckdb": Dialect.DUCKDB,
            "postgresql": Dialect.POSTGRESQL, "postgres": Dialect.POSTGRESQL}


@dataclass(frozen=True)
class SqlUrl:
    """A parsed database URL. ``target``: the file path (SQLite, DuckDB) or the libpq URI
    (PostgreSQL); ``display``: the URL with any password masked, for messages."""

    dialect: Dialect
    target: str
    namespace: str | None
    display: str


def _mask(url: str) -> str:
    """``url`` with a password (``user:password@`` or ``password=``) masked."""
    url = re.sub(r"(://[^/:@]*:)[^@/]*@", r"\1***@", url)
    return re.sub(r"((?:^|[?&\s])password=)[^&\s]*", r"\1***", url)


def parse_sql_url(url: str) -> SqlUrl:
    """``sqlite:///path``, ``duckdb:///path`` (three slashes then a relative path, four for an
    absolute one, as SQLAlchemy writes them) or ``postgresql://...`` (a libpq URI)."""
    display = _mask(url)
    scheme, sep, _ = url.partition("://")
    dialect = _SCHEMES.get(scheme.lower()) if sep else None
    if dialect is None:
        raise InvalidArgumentError(
            f"database URL {display!r}: expected sqlite:///PATH, duckdb:///PATH or "
            "postgresql://[USER@]HOST[:PORT]/DB (postgresql:///DB?host=/socket/dir for a Unix "
            "socket)")
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    namespace = query.pop("schema", [None])[-1]
    if dialect is Dialect.POSTGRESQL:
        # libpq knows no "schema" parameter: it is ours, taken out of the URI
        kept = urlencode(query, doseq=True, safe="/")
        target = f"postgresql://{parts.netloc}{parts.path}" + (f"?{kept}" if kept else "")
        return SqlUrl(dialect, target, namespace or "public", display)
    if parts.netloc:
        raise InvalidArgumentError(f"database URL {display!r}: a file URL has no host: write "
                                   f"{scheme}:///relative/path or {scheme}:////absolute/path")
    path = unquote(parts.path)[1:]  # after the third slash
    if not path:
        raise InvalidArgumentError(f"database URL {display!r}: no file path after "
                                   f"{scheme}:///")
    if not Path(path).is_file():
        raise SqlInputError("no database file (" + ("not a regular file" if Path(path).exists()
                                                    else "no such file") + f"; from {display})",
                            path=path)
    if dialect is Dialect.DUCKDB:
        return SqlUrl(dialect, path, namespace or "main", display)
    return SqlUrl(dialect, path, None, display)


@dataclass(frozen=True)
class SqlColumn:
    name: str
    sql_type: str  # as the catalog spells it (upper case)


@dataclass(frozen=True)
class SqlForeignKey:
    """``columns`` of the child refer to ``parent_columns`` of table ``parent``, a table of
    the same SQL schema unless ``parent_schema`` names another."""

    columns: tuple[str, ...]
    parent: str
    parent_columns: tuple[str, ...]
    parent_schema: str | None = None


@dataclass(frozen=True)
class SqlTable:
    name: str
    columns: tuple[SqlColumn, ...]
    primary_key: tuple[str, ...]
    foreign_keys: tuple[SqlForeignKey, ...]


@dataclass(frozen=True)
class SqlCatalog:
    url: SqlUrl
    tables: tuple[SqlTable, ...]  # sorted by name (bytes of UTF-8)
    views: tuple[str, ...] = ()  # views and materialized views, sorted: never read

    def table(self, name: str) -> SqlTable:
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(name)


class SqlConnection(Protocol):
    url: SqlUrl

    def catalog(self) -> SqlCatalog: ...

    def count_rows(self, table: SqlTable) -> int: ...

    def open_reader(self, table: SqlTable, batch_rows: int
                    ) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        """The Arrow schema of ``table``'s rows and an iterator of their record batches
        (at most ``batch_rows`` rows each), in primary-key order."""
        ...

    def close(self) -> None: ...


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _order_by(table: SqlTable, collate: str = "",
              orderable: Callable[[SqlColumn], bool] | None = None) -> str:
    """Primary-key order, else every (orderable) column in turn."""
    columns = list(table.primary_key) or [
        c.name for c in table.columns if orderable is None or orderable(c)]
    if not columns:
        return ""
    text = {c.name for c in table.columns if _is_text(c.sql_type)}
    return " ORDER BY " + ", ".join(
        _quote(c) + (collate if c in text else "") + " NULLS FIRST" for c in columns)


def _is_text(sql_type: str) -> bool:
    return any(word in sql_type for word in ("CHAR", "TEXT", "CLOB", "STRING"))


def _with_keys(url: SqlUrl, columns: dict[str, list[SqlColumn]],
               constraints: Sequence[Sequence[Any]], views: Sequence[str], *,
               primary: str) -> SqlCatalog:
    """The catalog of ``columns`` with the keys of ``constraints``: rows of (table, kind,
    columns, referenced table, referenced columns[, referenced table's SQL schema]),
    ``kind == primary`` for a primary key and anything else for a foreign key."""
    pks: dict[str, tuple[str, ...]] = {}
    fks: dict[str, list[SqlForeignKey]] = {}
    for table, kind, cols, parent, pcols, *parent_schema in constraints:
        if kind == primary:
            pks[table] = tuple(cols)
        else:
            other = parent_schema[0] if parent_schema and parent_schema[0] != url.namespace \
                else None
            fks.setdefault(table, []).append(
                SqlForeignKey(tuple(cols), parent, tuple(pcols), other))
    return _finish(url, [SqlTable(t, tuple(cs), pks.get(t, ()), tuple(fks.get(t, ())))
                         for t, cs in columns.items()], views)


def _finish(url: SqlUrl, tables: list[SqlTable], views: Sequence[str] = ()) -> SqlCatalog:
    """Tables sorted by name; each one's foreign keys in the order of their columns in the
    table (engines list them in different orders: SQLite newest first)."""
    out = []
    for t in sorted(tables, key=lambda t: t.name.encode("utf-8", "surrogatepass")):
        position = {c.name: i for i, c in enumerate(t.columns)}
        fks = sorted(t.foreign_keys, key=lambda f: (
            [position.get(c, len(position)) for c in f.columns], f.parent, f.parent_columns))
        out.append(SqlTable(t.name, t.columns, t.primary_key, tuple(fks)))
    return SqlCatalog(url=url, tables=tuple(out),
                      views=tuple(sorted(views, key=lambda v: v.encode("utf-8", "surrogatepass"))))


# --- SQLite ---------------------------------------------------------------------------------

_SQLITE_TIME = re.compile(r"DATE|TIME")


class SqliteConnection:
    def __init__(self, url: SqlUrl):
        self.url = url
        try:
            self.db = sqlite3.connect(Path(url.target).absolute().as_uri() + "?mode=ro",
                                      uri=True)
            self.db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.Error as exc:  # the file is unreadable or no SQLite database
            raise SqlInputError(f"cannot open the SQLite database: {exc}",
                                path=url.display) from None

    def _rows(self, sql: str) -> list[tuple[Any, ...]]:
        try:
            return self.db.execute(sql).fetchall()
        except sqlite3.Error as exc:
            raise SqlSourceError(f"{exc} (in: {sql})", path=self.url.display) from None

    def catalog(self) -> SqlCatalog:
        names = [r[0] for r in self._rows(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")]
        views = [r[0] for r in self._rows("SELECT name FROM sqlite_master WHERE type = 'view'")]
        tables = []
        for name in names:
            info = self._rows(f"SELECT name, type, pk FROM pragma_table_info({_literal(name)})")
            columns = tuple(SqlColumn(c, (t or "").upper()) for c, t, _ in info)
            pk = tuple(c for c, _, k in sorted((r for r in info if r[2]), key=lambda r: r[2]))
            groups: dict[int, list[tuple[int, str, str, str | None]]] = {}
            for fid, seq, parent, col, to in self._rows(
                    "SELECT id, seq, \"table\", \"from\", \"to\" FROM "
                    f"pragma_foreign_key_list({_literal(name)})"):
                groups.setdefault(fid, []).append((seq, parent, col, to))
            fks = []
            for fid in sorted(groups):
                rows = sorted(groups[fid])
                parent = rows[0][1]
                to = tuple(r[3] for r in rows)
                if any(t is None for t in to):  # REFERENCES parent: its primary key
                    to = tuple(r[0] for r in sorted(
                        (r for r in self._rows("SELECT name, type, pk FROM "
                                               f"pragma_table_info({_literal(parent)})")
                         if r[2]), key=lambda r: r[2])) or to
                fks.append(SqlForeignKey(tuple(r[2] for r in rows), parent,
                                         tuple(str(t) for t in to)))
            tables.append(SqlTable(name, columns, pk, tuple(fks)))
        return _finish(self.url, tables, views)

    def count_rows(self, table: SqlTable) -> int:
        return int(self._rows(f"SELECT count(*) FROM {_quote(table.name)}")[0][0])

    def _arrow_types(self, table: SqlTable) -> list[pa.DataType | None]:
        """Each column's Arrow type from the storage classes it holds (None: left out)."""
        if not table.columns:
            return []
        sums = ", ".join(f"sum(typeof({_quote(c.name)}) = '{k}')"
                         for c in table.columns for k in ("integer", "real", "text", "blob"))
        counts = self._rows(f"SELECT {sums} FROM {_quote(table.name)}")[0]
        return [self._arrow_type(table, column, *(int(v or 0) for v in counts[4 * i: 4 * i + 4]))
                for i, column in enumerate(table.columns)]

    def _arrow_type(self, table: SqlTable, column: SqlColumn, ints: int, reals: int,
                    texts: int, blobs: int) -> pa.DataType | None:
        declared = column.sql_type
        if blobs and not (texts or ints or reals):
            return None  # binary data: not a feature dlkit reads
        if blobs or (texts and (ints or reals)):
            kinds = ", ".join(
                f"{n:,} {kind}{'s' if n != 1 else ''} e.g. {self._example(table, column, kind)}"
                for kind, n in (("integer", ints), ("real", reals), ("text", texts),
                                ("blob", blobs)) if n)
            raise SqlInputError(
                f"table {table.name!r}, column {column.name!r} holds values of several kinds "
                f"({kinds}): dlkit reads one type per column; store one kind in it (e.g. "
                f"UPDATE {_quote(table.name)} SET {_quote(column.name)} = "
                f"CAST({_quote(column.name)} AS TEXT) in a copy of the database; views are not "
                f"imported) or leave the table out (--exclude-table {table.name})",
                path=self.url.display)
        if texts or not (ints or reals):  # texts, or no value at all: the declared type says
            if _SQLITE_TIME.search(declared):
                return pa.timestamp("us")
            if texts:
                return pa.string()
            return pa.int64() if "INT" in declared else \
                pa.float64() if _affinity_real(declared) else pa.string()
        return pa.float64() if reals else pa.int64()

    def _example(self, table: SqlTable, column: SqlColumn, kind: str) -> str:
        """One value of storage class ``kind`` in ``column``, as a message shows it."""
        rows = self._rows(f"SELECT {_quote(column.name)} FROM {_quote(table.name)} "
                          f"WHERE typeof({_quote(column.name)}) = {_literal(kind)} LIMIT 1")
        return _shown(rows[0][0]) if rows else "?"

    def open_reader(self, table: SqlTable, batch_rows: int
                    ) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        types = self._arrow_types(table)
        kept = [(c, t) for c, t in zip(table.columns, types) if t is not None]
        schema = pa.schema([(c.name, t) for c, t in kept])
        return schema, self._batches(table, kept, schema, batch_rows)

    def _batches(self, table: SqlTable, kept: list[tuple[SqlColumn, pa.DataType]],
                 schema: pa.Schema, batch_rows: int) -> Iterator[pa.RecordBatch]:
        if not kept:
            return
        select = ", ".join(_quote(c.name) for c, _ in kept)
        try:
            cursor = self.db.execute(f"SELECT {select} FROM {_quote(table.name)}"
                                     + _order_by(table))
            done = 0
            while True:
                rows = cursor.fetchmany(batch_rows)
                if not rows:
                    break
                arrays = []
                for (column, t), values in zip(kept, zip(*rows)):
                    if pa.types.is_timestamp(t):
                        arrays.append(_parse_times(pa.array(values, pa.string()), table, column,
                                                   done, self.url.display))
                    else:
                        arrays.append(pa.array(values, type=t))
                done += len(rows)
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)
        except sqlite3.Error as exc:
            raise SqlSourceError(f"table {table.name!r}: {exc}", path=self.url.display) from None

    def close(self) -> None:
        self.db.close()


def _affinity_real(sql_type: str) -> bool:
    return any(w in sql_type for w in ("REAL", "FLOA", "DOUB", "NUMERIC", "DECIMAL"))


def _parse_times(values: pa.Array, table: SqlTable, column: SqlColumn, rows_before: int,
                 where: str) -> pa.Array:
    times = iso_times(values)
    if times is not None:
        return times
    bad = first_non_time(values)
    if bad is None:  # the batch failed though no value alone does (not seen so far)
        problem = "texts do not all parse as times"
    else:
        order = ", ".join(table.primary_key) or "every column"
        problem = (f"row {rows_before + bad + 1:,} (ordered by {order}) holds "
                   f"{_shown(values[bad].as_py())}, which is no ISO 8601 date or time (e.g. "
                   "2024-01-02 03:04:05, 2024-01-02T03:04:05+05:00)")
    raise SqlInputError(f"table {table.name!r}, column {column.name!r} is declared "
                        f"{column.sql_type} (a date or time) but its {problem}: fix the value, or "
                        "declare the column TEXT", path=where)


def _shown(value: object, limit: int = 40) -> str:
    """A value as a message quotes it, long texts and blobs cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


# --- DuckDB ---------------------------------------------------------------------------------

_DUCKDB_MAGIC = (8, b"DUCK")  # offset and bytes of the storage format's magic number


def _is_duckdb_file(path: str) -> bool:
    offset, magic = _DUCKDB_MAGIC
    try:
        with open(path, "rb") as f:
            return f.read(offset + len(magic))[offset:] == magic
    except OSError:
        return False


class DuckdbConnection:
    def __init__(self, url: SqlUrl):
        try:
            import duckdb
        except ImportError:
            raise MissingExtraError(f"reading DuckDB needs the duckdb package: {EXTRA_HINT}") \
                from None
        self.url = url
        self.duckdb = duckdb
        try:
            self.db = duckdb.connect(url.target, read_only=True)
        except duckdb.Error as exc:
            # the file's fault (exit 5) or the engine's (a lock another process holds: exit 1)
            error = SqlSourceError if _is_duckdb_file(url.target) else SqlInputError
            raise error(f"cannot open the DuckDB database: {exc}", path=url.display) from None

    def _rows(self, sql: str) -> list[tuple[Any, ...]]:
        try:
            return self.db.execute(sql).fetchall()
        except self.duckdb.Error as exc:
            raise SqlSourceError(f"{exc}", path=self.url.display) from None

    def catalog(self) -> SqlCatalog:
        ns = _literal(self.url.namespace or "main")
        where = f"database_name = current_database() AND schema_name = {ns}"
        columns: dict[str, list[SqlColumn]] = {
            table: [] for (table,) in self._rows(
                f"SELECT table_name FROM duckdb_tables() WHERE {where} AND NOT internal")}
        for table, column, dtype in self._rows(
                f"SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE {where} "
                "AND NOT internal ORDER BY table_name, column_index"):
            if table in columns:  # not a view's
                columns[table].append(SqlColumn(column, dtype.upper()))
        constraints = self._rows(
            "SELECT table_name, constraint_type, constraint_column_names, referenced_table, "
            f"referenced_column_names FROM duckdb_constraints() WHERE {where} "
            "AND constraint_type IN ('PRIMARY KEY', 'FOREIGN KEY') "
            "ORDER BY table_name, constraint_index")
        views = [v for (v,) in self._rows(
            f"SELECT view_name FROM duckdb_views() WHERE {where} AND NOT internal")]
        return _with_keys(self.url, columns, constraints, views, primary="PRIMARY KEY")

    def _from(self, table: SqlTable) -> str:
        return f"{_quote(self.url.namespace or 'main')}.{_quote(table.name)}"

    def count_rows(self, table: SqlTable) -> int:
        return int(self._rows(f"SELECT count(*) FROM {self._from(table)}")[0][0])

    def open_reader(self, table: SqlTable, batch_rows: int
                    ) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        try:
            reader = self.db.sql(f"SELECT * FROM {self._from(table)}"
                                 + _order_by(table)).to_arrow_reader(batch_rows)
        except self.duckdb.Error as exc:
            raise SqlSourceError(f"table {table.name!r}: {exc}", path=self.url.display) from None
        return reader.schema, self._batches(table, reader)

    def _batches(self, table: SqlTable, reader: pa.RecordBatchReader
                 ) -> Iterator[pa.RecordBatch]:
        try:
            yield from reader
        except self.duckdb.Error as exc:
            raise SqlSourceError(f"table {table.name!r}: {exc}", path=self.url.display) from None

    def close(self) -> None:
        self.db.close()


# --- PostgreSQL -----------------------------------------------------------------------------

# Read as another type: numeric (the driver hands it over as text) as float64, a uuid (a
# binary extension type) as its text.
_PG_CASTS = {"NUMERIC": "float8", "UUID": "text"}
_PG_UNORDERED = ("JSON", "XML", "POINT", "LINE", "LSEG", "BOX", "PATH", "POLYGON", "CIRCLE")


class PostgresConnection:
    def __init__(self, url: SqlUrl):
        try:
            import adbc_driver_postgresql.dbapi as pg
        except ImportError:
            raise MissingExtraError("reading PostgreSQL needs the adbc-driver-postgresql "
                                    f"package: {EXTRA_HINT}") from None
        self.url = url
        self.pg = pg
        try:
            self.db = pg.connect(url.target)
        except Exception as exc:  # the driver's errors are its own classes  # noqa: BLE001
            message = " ".join(str(exc).split())
            raise SqlSourceError(f"cannot connect to the PostgreSQL server: {_mask(message)}",
                                 path=url.display) from None

    def _rows(self, sql: str) -> list[tuple[Any, ...]]:
        try:
            with self.db.cursor() as cursor:
                cursor.execute(sql)
                rows: list[tuple[Any, ...]] = cursor.fetchall()
                return rows
        except self.pg.Error as exc:
            raise SqlSourceError(" ".join(str(exc).split()), path=self.url.display) from None

    def catalog(self) -> SqlCatalog:
        ns = _literal(self.url.namespace or "public")
        columns: dict[str, list[SqlColumn]] = {}
        for (table,) in self._rows(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = "
                f"{ns} AND table_type = 'BASE TABLE'"):
            columns[table] = []
        for table, column, dtype in self._rows(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                f"WHERE table_schema = {ns} ORDER BY table_name, ordinal_position"):
            if table in columns:
                columns[table].append(SqlColumn(column, str(dtype).upper()))
        key_names = ("ARRAY(SELECT a.attname::text FROM unnest({keys}) WITH ORDINALITY "
                     "AS k(n, i) JOIN pg_attribute a ON a.attrelid = {rel} AND a.attnum = k.n "
                     "ORDER BY k.i)")
        constraints = self._rows(
                "SELECT cl.relname::text, c.contype::text, "
                + key_names.format(keys="c.conkey", rel="c.conrelid") + ", fcl.relname::text, "
                + key_names.format(keys="c.confkey", rel="c.confrelid")
                + ", fns.nspname::text FROM pg_constraint c "
                "JOIN pg_class cl ON cl.oid = c.conrelid "
                "JOIN pg_namespace ns ON ns.oid = cl.relnamespace "
                "LEFT JOIN pg_class fcl ON fcl.oid = c.confrelid "
                "LEFT JOIN pg_namespace fns ON fns.oid = fcl.relnamespace "
                f"WHERE ns.nspname = {ns} AND c.contype IN ('p', 'f') "
                "ORDER BY cl.relname, c.conname")
        views = [v for (v,) in self._rows(
            f"SELECT relname::text FROM pg_class WHERE relkind IN ('v', 'm') AND relnamespace = "
            f"(SELECT oid FROM pg_namespace WHERE nspname = {ns})")]
        return _with_keys(self.url, columns, constraints, views, primary="p")

    def _from(self, table: SqlTable) -> str:
        return f"{_quote(self.url.namespace or 'public')}.{_quote(table.name)}"

    def count_rows(self, table: SqlTable) -> int:
        return int(self._rows(f"SELECT count(*) FROM {self._from(table)}")[0][0])

    def open_reader(self, table: SqlTable, batch_rows: int
                    ) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        select = ", ".join(
            f"{_quote(c.name)}::{_PG_CASTS[c.sql_type]} AS {_quote(c.name)}"
            if c.sql_type in _PG_CASTS else _quote(c.name) for c in table.columns)
        order = _order_by(table, ' COLLATE "C"',
                          lambda c: not any(w in c.sql_type for w in _PG_UNORDERED))
        cursor = self.db.cursor()
        try:
            cursor.execute(f"SELECT {select} FROM {self._from(table)}{order}")
            reader = cursor.fetch_record_batch()
        except self.pg.Error as exc:
            cursor.close()
            raise SqlSourceError(f"table {table.name!r}: " + " ".join(str(exc).split()),
                                 path=self.url.display) from None
        return reader.schema, self._batches(table, cursor, reader, batch_rows)

    def _batches(self, table: SqlTable, cursor: Any, reader: pa.RecordBatchReader,
                 batch_rows: int) -> Iterator[pa.RecordBatch]:
        try:
            for batch in reader:
                yield from _rebatch(batch, batch_rows)
        except self.pg.Error as exc:
            raise SqlSourceError(f"table {table.name!r}: " + " ".join(str(exc).split()),
                                 path=self.url.display) from None
        finally:
            cursor.close()

    def close(self) -> None:
        self.db.close()


def _rebatch(batch: pa.RecordBatch, batch_rows: int) -> Iterator[pa.RecordBatch]:
    for start in range(0, batch.num_rows, batch_rows):
        yield batch.slice(start, batch_rows)


def connect(url: str | SqlUrl) -> SqlConnection:
    """An open connection to the database at ``url``; ``close()`` it when done."""
    parsed = parse_sql_url(url) if isinstance(url, str) else url
    if parsed.dialect is Dialect.SQLITE:
        return SqliteConnection(parsed)
    if parsed.dialect is Dialect.DUCKDB:
        return DuckdbConnection(parsed)
    return PostgresConnection(parsed)

