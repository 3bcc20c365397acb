"""``dlkit import sql``: a SQL database (SQLite, DuckDB, PostgreSQL) into a dlkit database.

The import is the Parquet build of the same rows, by construction:

1. the catalog (``dlkit.db.schema.sql_catalog``) gives the tables and their keys;
2. each table's rows stream, one record batch at a time (never a whole table in memory),
   into ``<table>.parquet`` in a scratch directory beside the output
   (``.<OUTPUT name>.dlkit-sql-<random>``), in primary-key order; columns of types dlkit does
   not read (lists, blobs, intervals, ...) are left out, and the schema says so;
3. the catalog and the partial schema are merged (``dlkit.db.schema.sql_schema``) into the
   ``dlkit.toml`` text, which is parsed as any schema file is;
4. ``preprocess`` builds the database from the scratch directory with that schema; the
   scratch directory is removed afterwards, whether the build succeeded, failed or was
   interrupted.

So ``dlkit preprocess DIR OUT --schema SCHEMA`` on the same rows exported to Parquet (same
Arrow types, same row order) gives the same database hash.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dlkit.db.schema.arrow_types import type_family
from dlkit.db.schema.spec import parse_schema
from dlkit.db.schema.sql_catalog import (
    SqlCatalog,
    SqlConnection,
    SqlTable,
    SqlUrl,
    connect,
    parse_sql_url,
)
from dlkit.db.schema.sql_schema import (
    EXCLUDE_TABLES,
    MergedSchema,
    SqlSchemaOptions,
    mapped_names,
    merge_schema,
    resolve_table,
    table_names,
)
from dlkit.db.write.report import PreprocessReport, Progress
from dlkit.db.write.source import DEFAULT_BATCH_ROWS
from dlkit.errors import OutputError, SchemaError, SqlInputError, SqlSourceError
from dlkit.files import read_regular

SCRATCH_MARK = ".dlkit-sql-"


@dataclass(frozen=True)
class SqlImportReport:
    """The preprocess report, the schema text built from and where it was written."""

    build: PreprocessReport
    schema_text: str
    schema_path: str | None
    url: str
    notes: tuple[str, ...] = ()  # what the merge did beyond the catalog (renames, left out)

    def to_json(self) -> dict[str, Any]:
        return {**self.build.to_json(), "source": self.url, "schema_path": self.schema_path,
                "notes": list(self.notes)}


def default_schema_path(output: str | os.PathLike[str]) -> Path:
    """Where the schema an import used is written by default: ``OUTPUT.dlkit.toml``, beside
    the database (a database directory holds only its own files)."""
    out = Path(output)
    return out.with_name(out.name + ".dlkit.toml")


def load_partial(path: str | os.PathLike[str] | None) -> dict[str, Any] | None:
    if path is None:
        return None
    p = Path(path)
    try:
        text = read_regular(p).decode("utf-8")
    except FileNotFoundError:
        raise SchemaError("partial schema file not found", path=p) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SchemaError(f"cannot read the partial schema: {exc}", path=p) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SchemaError(f"not valid TOML: {exc}", path=p) from None


def _excluded_tables(catalog: SqlCatalog, partial: dict[str, Any] | None,
                     options: SqlSchemaOptions, source: str | None) -> set[str]:
    """The SQL names of the tables left out; the names of the others are then checked for
    collisions (so that excluding one of two colliding tables settles it)."""
    names = mapped_names(catalog)
    raw = (partial or {}).get(EXCLUDE_TABLES, [])
    if not isinstance(raw, list) or not all(isinstance(t, str) for t in raw):
        raise SchemaError(f"{EXCLUDE_TABLES} must be a list of table names", path=source)
    out = set()
    for name in raw:
        out.add(resolve_table(name, names, EXCLUDE_TABLES, source))
    for name in options.exclude_tables:
        out.add(resolve_table(name, names, f"--exclude-table {name}", None))
    table_names(catalog, out)
    return out


def _export_table(conn: SqlConnection, table: SqlTable, path: Path, batch_rows: int,
                  progress: Progress) -> tuple[pa.Schema, dict[str, str]]:
    """Stream ``table`` into the Parquet file ``path``: ``(its Arrow schema, the columns left
    out with why)``."""
    schema, batches = conn.open_reader(table, batch_rows)
    kept = [f.name for f in schema if type_family(f.type) != "unsupported"]
    dropped = {f.name: f"its type {f.type} is not one dlkit reads"
               for f in schema if f.name not in kept}
    if len(set(schema.names)) != len(schema.names):
        raise SqlSourceError(f"table {table.name!r} has two columns of one name",
                             path=conn.url.display)
    out_schema = pa.schema([schema.field(n) for n in kept])
    with pq.ParquetWriter(path, out_schema) as writer:
        for batch in batches:
            if dropped:
                batch = batch.select(kept)
            if batch.schema != out_schema:  # e.g. nullability flags of a driver's batches
                batch = pa.RecordBatch.from_arrays(batch.columns, schema=out_schema)
            writer.write_batch(batch)
            progress.advance(batch.num_rows)
    return out_schema, dropped


def export_tables(conn: SqlConnection, catalog: SqlCatalog, excluded: set[str], scratch: Path,
                  batch_rows: int, progress: Progress
                  ) -> tuple[dict[str, pa.Schema], dict[str, dict[str, str]]]:
    names = table_names(catalog, excluded)
    tables = [t for t in catalog.tables if t.name not in excluded]
    total = sum(conn.count_rows(t) for t in tables)
    schemas: dict[str, pa.Schema] = {}
    dropped: dict[str, dict[str, str]] = {}
    progress.begin("export", total)
    try:
        for table in tables:
            schemas[table.name], dropped[table.name] = _export_table(
                conn, table, scratch / f"{names[table.name]}.parquet", batch_rows, progress)
    finally:
        progress.end()
    return schemas, dropped


def _default_name(url: SqlUrl) -> str:
    if url.dialect.value == "postgresql":
        from urllib.parse import urlsplit

        name = urlsplit(url.target).path.lstrip("/")
        return name or "database"
    return Path(url.target).stem or "database"


def _merge_source(url: SqlUrl, partial: str | os.PathLike[str] | None,
                  options: SqlSchemaOptions) -> str:
    """What the merged schema comes from, as its errors name it (the file it is written to
    does not exist yet, and may never): ``sqlite:///x.db with p.toml, --time t.c``."""
    given = [str(partial)] if partial is not None else []
    given += [f"--time {item}" for item in options.time_columns]
    given += [f"--name {options.name}"] if options.name is not None else []
    return url.display + (f" with {', '.join(given)}" if given else "")


def import_sql(
    url: str,
    output: str | os.PathLike[str],
    *,
    partial: str | os.PathLike[str] | None = None,
    options: SqlSchemaOptions | None = None,
    schema_out: str | os.PathLike[str] | None = None,
    write_schema: bool = True,
    overwrite: bool = False,
    on_dangling: str = "drop",
    batch_rows: int = DEFAULT_BATCH_ROWS,
    embedder: Any = None,
    progress: Progress | None = None,
    fsync: bool = True,
    memory_budget: int | None = None,
) -> SqlImportReport:
    """Build the dlkit database of the SQL database at ``url`` at ``output`` (module doc).

    ``partial``: a partial ``dlkit.toml`` merged over the catalog; ``schema_out``: where to
    write the merged schema (default ``OUTPUT.dlkit.toml``; none when ``write_schema`` is
    False). Raises :class:`SqlSourceError` (unreachable database; its subclass
    :class:`SqlInputError`, an input error, for a missing file, a file that is no database,
    or a column of values dlkit cannot read),
    :class:`MissingExtraError` (driver not installed), :class:`SchemaError`,
    :class:`DataError`, :class:`OutputError` as ``preprocess`` does.
    """
    from dlkit.atomic import atomic_write_bytes, check_target
    from dlkit.db.output import DATABASE
    from dlkit.db.write.writer import preprocess

    progress = progress or Progress()
    options = options or SqlSchemaOptions()
    parsed = parse_sql_url(url)
    target = Path(output)
    check_target(target.absolute(), overwrite, DATABASE)
    schema_path = None
    if write_schema:
        schema_path = Path(schema_out) if schema_out is not None else default_schema_path(target)
        if schema_path.exists() and not overwrite:
            raise OutputError("already exists (pass --overwrite to replace it)",
                              path=schema_path)
    partial_doc = load_partial(partial)
    partial_source = str(partial) if partial is not None else None
    conn = connect(parsed)
    try:
        catalog = conn.catalog()
        if not catalog.tables:
            raise SqlInputError("the database has no tables"
                                 + (f" in schema {parsed.namespace!r}" if parsed.namespace
                                    else ""), path=parsed.display)
        excluded = _excluded_tables(catalog, partial_doc, options, partial_source)
        target.absolute().parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}{SCRATCH_MARK}",
                                        dir=target.absolute().parent))
        try:
            schemas, dropped = export_tables(conn, catalog, excluded, scratch, batch_rows,
                                             progress)
            merged: MergedSchema = merge_schema(
                catalog, schemas, dropped, partial_doc, options, partial_source=partial_source,
                default_name=_default_name(parsed))
            schema = parse_schema(merged.text, source=_merge_source(parsed, partial, options))
            build = preprocess(scratch, target, schema=schema, overwrite=overwrite,
                               on_dangling=on_dangling, batch_rows=batch_rows,
                               embedder=embedder, progress=progress, fsync=fsync,
                               memory_budget=memory_budget)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    finally:
        conn.close()
    if schema_path is not None:
        atomic_write_bytes(schema_path, merged.text.encode("utf-8"), overwrite=True)
    return SqlImportReport(build=build, schema_text=merged.text,
                           schema_path=None if schema_path is None else str(schema_path),
                           url=parsed.display, notes=tuple(merged.notes))
