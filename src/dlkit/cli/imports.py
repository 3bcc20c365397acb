"""``dlkit import relbench`` and ``dlkit import sql``: a dlkit database, in one command, from
data another tool saved. The build options and the report are ``dlkit preprocess``'s
(:mod:`dlkit.cli.db`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from dlkit.cli.app import app
from dlkit.cli.console import err_console, plain, print_json, print_warning
from dlkit.cli.db import (
    DEFAULT_BATCH_ROWS,
    PANEL,
    EmbedderName,
    EmbeddingDim,
    NoFsync,
    OnDangling,
    RichProgress,
    build_options,
    preprocess_and_report,
    printing_relbench_warnings,
)
from dlkit.cli.params import check_output_file
from dlkit.text import counted

import_app = typer.Typer(help="Build a dlkit database from data another tool saved.",
                         no_args_is_help=True)
app.add_typer(import_app, name="import", rich_help_panel=PANEL)


@import_app.command("relbench")
def import_relbench(
    source: Path = typer.Argument(..., help="A RelBench dataset directory as RelBench caches it: "
                                            "db/TABLE.parquet and "
                                            "tasks/TASK/{train,val,test}.parquet."),
    output: Path = typer.Argument(..., help="Database directory to create (built beside it, renamed into place)."),
    task: list[str] = typer.Option(None, "--task", metavar="<name>",
                                   help="A task to import (repeat for several; default: every task "
                                        "dlkit supports, with a warning naming those left out). "
                                        "Link-prediction tasks are refused."),
    name: str = typer.Option(None, "--name", help="Database id (default: the dataset directory's name)."),
    schema_out: Path = typer.Option(None, "--schema-out",
                                    help="Also write the dlkit.toml this builds from (`dlkit "
                                         "preprocess SOURCE OUT --schema FILE` builds the same "
                                         "database)."),
    overwrite: bool = typer.Option(False, "--overwrite",
                                   help="Replace an existing database at OUTPUT (atomically) and "
                                        "an existing --schema-out file."),
    embedder: EmbedderName = "hashed",
    embedding_dim: EmbeddingDim = None,  # type: ignore[assignment]  # typer: None is "not given"
    no_fsync: NoFsync = False,
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars on stderr."),
) -> None:
    """Turn a RelBench dataset into a dlkit database in one command.

    Keys, time columns and tasks come from RelBench's own Parquet metadata; each entity task
    becomes a task table with RelBench's train, val and test files as given splits.
    Link-prediction (recommendation) tasks are not supported yet: they are left out, with a
    warning naming them. Example:

        dlkit import relbench ~/.cache/relbench/rel-f1 out/rel-f1 --task driver-dnf
    """
    from dlkit.atomic import atomic_write_bytes
    from dlkit.db.schema.spec import parse_schema
    from dlkit.db.write.relbench import relbench_schema

    if schema_out is not None:  # before the work: a refused output wastes none of it
        check_output_file(schema_out, overwrite)
    with printing_relbench_warnings():
        _draft, text = relbench_schema(source, name=name, tasks=task or None)
    # build from exactly the text written: what --schema-out shows is what was built
    schema = parse_schema(text, source=str(schema_out or "dlkit.toml (made from RelBench's "
                                                         "metadata)"))
    if schema_out is not None:
        atomic_write_bytes(schema_out, text.encode("utf-8"), overwrite=overwrite)
    preprocess_and_report(source, output, schema, overwrite, as_json, quiet,
                           build_options("drop", DEFAULT_BATCH_ROWS, embedder, embedding_dim,
                                          None, no_fsync))


@import_app.command("sql")
def import_sql(
    url: str = typer.Argument(..., help="The database: sqlite:///PATH, duckdb:///PATH (four "
                                        "slashes for an absolute path) or "
                                        "postgresql://[USER@]HOST[:PORT]/DB "
                                        "(postgresql:///DB?host=/socket/dir for a Unix socket; "
                                        "?schema=NAME picks a SQL schema)."),
    output: Path = typer.Argument(..., help="Database directory to create (built beside it, renamed into place)."),
    schema: Path = typer.Option(None, "--schema",
                                help="A partial dlkit.toml merged over what the catalog says "
                                     "(time columns, types, exclusions, tasks; see "
                                     "docs/schema.md)."),
    time: list[str] = typer.Option(None, "--time", metavar="<table.column>",
                                   help="A table's time column (repeat for several tables)."),
    exclude_table: list[str] = typer.Option(None, "--exclude-table", metavar="<table>",
                                            help="A table to leave out (repeat for several)."),
    name: str = typer.Option(None, "--name", help="Database id (default: the database's name)."),
    schema_out: Path = typer.Option(None, "--schema-out",
                                    help="Where to write the dlkit.toml the database was built "
                                         "from (default: OUTPUT.dlkit.toml beside it; `dlkit "
                                         "import sql URL OUTPUT --schema FILE` builds it again)."),
    overwrite: bool = typer.Option(False, "--overwrite",
                                   help="Replace an existing database at OUTPUT (atomically) and "
                                        "an existing schema file."),
    on_dangling: OnDangling = "drop",
    batch_rows: int = typer.Option(1 << 18, "--batch-rows", min=1,
                                   help="Rows per record batch read from the database (the "
                                        "output does not depend on it)."),
    embedder: EmbedderName = "hashed",
    embedding_dim: EmbeddingDim = None,  # type: ignore[assignment]  # typer: None is "not given"
    memory_budget: str = typer.Option(None, "--memory-budget",
                                      help="Memory for the build's working arrays, e.g. 2G (see "
                                           "`dlkit preprocess --help`)."),
    no_fsync: NoFsync = False,
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or summary on stderr."),
) -> None:
    """Turn a SQL database (SQLite, DuckDB, PostgreSQL) into a dlkit database in one command.

    Tables, primary keys and foreign keys (composite ones included) come from the database's
    catalog; time columns, types and tasks from --time or a partial schema (--schema). Rows
    stream through Parquet files in a scratch directory beside OUTPUT (removed afterwards),
    so the database is the one `dlkit preprocess` builds from the same rows in Parquet.
    Needs the `sql` extra: pip install 'dlkit[sql]'. Example:

        dlkit import sql sqlite:///shop.db out/shop --time orders.created_at
    """
    from dlkit.db.schema.sql_schema import SqlSchemaOptions
    from dlkit.db.write.sql_source import import_sql as run

    options_of_build = build_options(on_dangling, batch_rows, embedder, embedding_dim,
                                     memory_budget, no_fsync)
    if schema_out is not None:  # before the work: a refused output wastes none of it
        check_output_file(schema_out, overwrite, inputs={} if schema is None else
                          {"the partial schema": schema})
    options = SqlSchemaOptions(time_columns=tuple(time or ()),
                               exclude_tables=tuple(exclude_table or ()), name=name)
    kwargs: dict[str, Any] = dict(partial=schema, options=options, schema_out=schema_out,
                        overwrite=overwrite, **options_of_build)
    if not quiet and not as_json:
        with RichProgress() as sink:
            report = run(url, output, progress=sink, **kwargs)  # type: ignore[arg-type]
    else:
        report = run(url, output, **kwargs)
    build = report.build
    if as_json:
        print_json(report.to_json())
    for warning in build.warnings:  # not a summary: --quiet and --json keep them
        print_warning(warning)
    if as_json or quiet:
        return
    for note in report.notes:
        err_console.print(f"note: {plain(note)}", highlight=False)
    err_console.print(f"[bold green]imported[/] {plain(report.url)} -> {plain(output)}  "
                      f"({counted(build.num_tables, 'table')}, {build.num_rows:,} rows, "
                      f"{build.num_edges:,} edges, {build.seconds:.2f} s)", highlight=False)
    if report.schema_path is not None:
        err_console.print(f"schema written to {plain(report.schema_path)}", highlight=False)
    err_console.print(f"database hash [bold]{build.database_hash}[/]", highlight=False)
