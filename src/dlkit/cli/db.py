"""``dlkit preprocess``, ``dlkit verify``, ``dlkit schema infer``: the database commands."""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from dlkit.cli.app import app
from dlkit.cli.console import err_console, plain, print_json, print_warning, progress
from dlkit.cli.params import check_output_file
from dlkit.errors import InvalidArgumentError, SourcesFailedError, VerificationError
from dlkit.text import counted, human_bytes

if TYPE_CHECKING:
    from dlkit.db.schema.spec import Schema
    from dlkit.db.write.collection import SourceResult
    from dlkit.viewer.diagram import SchemaDiagram

PANEL = "Relational database"
MIB = float(1 << 20)

schema_app = typer.Typer(help="Draft a dlkit.toml schema from Parquet files.", no_args_is_help=True)
app.add_typer(schema_app, name="schema", rich_help_panel=PANEL)


def parse_size(text: str, what: str) -> int:
    """``512M``, ``2G``, ``1.5G``, ``100000`` (bytes) -> bytes."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1:] if t[-1:] in units else ""
    try:
        value = float(t[: len(t) - len(unit)])
    except ValueError:
        raise InvalidArgumentError(f"{what} must be a size like 512M or 2G, got {text!r}") from None
    size = value * units[unit]
    if not 0 <= size < float(1 << 62):  # not negative, NaN or beyond any memory
        raise InvalidArgumentError(f"{what} must be a size from 0 to 2^62 bytes, got {text!r}")
    return int(size)


class RichProgress:
    """The preprocess progress sink: one bar per stage, on stderr."""

    def __init__(self) -> None:
        self.bar = Progress(
            TextColumn("[bold]{task.description:<13}"),
            BarColumn(),
            TaskProgressColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[unit]}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[spill]}"),
            console=err_console,
            transient=False,
            disable=not err_console.is_terminal,  # bars only on a terminal (docs/cli.md)
        )
        self.task: TaskID | None = None
        self.started = False

    def __enter__(self) -> RichProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.started:
            self.bar.stop()

    def begin(self, stage: str, total: int | None, unit: str = "rows") -> None:
        if total == 0:  # nothing to do here (keys read in the tables pass): no "0/0" bar
            self.task = None
            return
        if not self.started:  # at the first stage: an early error leaves no empty bar line
            self.bar.start()
            self.started = True
        self.task = self.bar.add_task(stage, total=total, unit=unit, spill="")

    def advance(self, amount: int) -> None:
        if self.task is not None:
            self.bar.advance(self.task, amount)

    def spilled(self, total_bytes: int) -> None:
        if self.task is not None:
            self.bar.update(self.task, spill=f"{human_bytes(total_bytes)} spilled to disk")

    def end(self) -> None:
        if self.task is not None:
            t = self.bar.tasks[self.task] if isinstance(self.task, int) else None
            total = t.total if t is not None else None
            self.bar.update(self.task, completed=total if total is not None else 1,
                            total=total if total is not None else 1)
            self.task = None


# The build options `preprocess` and `preprocess-many` share, declared once
OnDangling = Annotated[str, typer.Option(
    "--on-dangling", metavar="<drop|error>",
    help="Foreign keys pointing to a missing parent: drop (keep the row, drop the edge, "
         "report) or error.")]
# = dlkit.db.write.source.DEFAULT_BATCH_ROWS, not imported here: that would load pyarrow for
# every command, --help included.
DEFAULT_BATCH_ROWS = 1 << 18
BatchRows = Annotated[int, typer.Option(
    "--batch-rows", min=1,
    help="Rows per record batch read from Parquet (the output does not depend on it).")]
EmbedderName = Annotated[str, typer.Option(
    "--embedder", help="Text embedder: 'hashed' (built in, no download), 'minilm' "
                       "(all-MiniLM-L6-v2 offline, the text extra) or "
                       "'package.module:factory' (see dlkit.db.write.embed).")]
EmbeddingDim = Annotated[int, typer.Option(
    "--embedding-dim", min=1, max=65536,
    help="Embedding size (default: 64 for hashed; a model's own width for minilm).")]
MemoryBudget = Annotated[str, typer.Option(
    "--memory-budget",
    help="Memory for the build's working arrays (row times, primary keys, key indexes, "
         "category ids, both CSRs), e.g. 2G or 512M; beyond it they spill to scratch files "
         "in the build directory. The database is the same for any budget. Default: half the "
         "available memory.")]
NoFsync = Annotated[bool, typer.Option("--no-fsync",
                                       help="Skip fsync before the rename (faster; not crash-safe).")]


def build_options(on_dangling: str, batch_rows: int, embedder: str, embedding_dim: int | None,
                   memory_budget: str | None, no_fsync: bool) -> dict[str, Any]:
    """The keywords of :func:`dlkit.db.preprocess` the shared options give."""
    from dlkit.db.write.embed import load_embedder
    from dlkit.db.write.writer import ON_DANGLING

    if on_dangling not in ON_DANGLING:
        raise InvalidArgumentError(f"--on-dangling must be drop or error, got {on_dangling!r}")
    return {"on_dangling": on_dangling, "batch_rows": batch_rows,
            "embedder": load_embedder(embedder, embedding_dim), "fsync": not no_fsync,
            "memory_budget": (None if memory_budget is None
                              else parse_size(memory_budget, "--memory-budget"))}


@app.command(rich_help_panel=PANEL)
def preprocess(
    input_dir: Path = typer.Argument(..., help="Directory of Parquet tables (files or directories of parts)."),
    output: Path = typer.Argument(..., help="Database directory to create (built beside it, renamed into place)."),
    schema: Path = typer.Option(None, "--schema", help="Schema file. Default: INPUT_DIR/dlkit.toml."),
    overwrite: bool = typer.Option(
        False, "--overwrite",
        help="Replace an existing database at OUTPUT (atomically); refused when it holds a "
             "file its manifest does not list."),
    on_dangling: OnDangling = "drop",
    batch_rows: BatchRows = DEFAULT_BATCH_ROWS,
    embedder: EmbedderName = "hashed",
    embedding_dim: EmbeddingDim = None,  # type: ignore[assignment]  # typer: None is "not given"
    memory_budget: MemoryBudget = None,  # type: ignore[assignment]  # typer: None is "not given"
    no_fsync: NoFsync = False,
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or summary on stderr."),
) -> None:
    """Turn a relational Parquet database into a verified, memory-mapped dlkit database.

    The database is built beside OUTPUT and renamed into place when complete: a failed or
    interrupted run leaves no partial database. Example:

        dlkit schema infer data/shop -o data/shop/dlkit.toml   # then review it
        dlkit preprocess data/shop out/shop-db
        dlkit verify out/shop-db
    """
    preprocess_and_report(input_dir, output, schema, overwrite, as_json, quiet,
                           build_options(on_dangling, batch_rows, embedder, embedding_dim,
                                          memory_budget, no_fsync))


def preprocess_and_report(input_dir: Path, output: Path, schema: Path | Schema | None,
                           overwrite: bool, as_json: bool, quiet: bool,
                           options: dict[str, Any]) -> None:
    """Build one database and print its report (the body of `preprocess`)."""
    from dlkit.db.write.writer import preprocess as run

    show = not quiet and not as_json
    if show:
        with RichProgress() as sink:
            report = run(input_dir, output, schema=schema, overwrite=overwrite,
                         progress=sink,  # type: ignore[arg-type]  # db Progress: a class
                         **options)
    else:
        report = run(input_dir, output, schema=schema, overwrite=overwrite, **options)
    if as_json:
        print_json(report.to_json())
    for warning in report.warnings:  # not a summary: --quiet and --json keep them
        print_warning(warning)
    if as_json or quiet:
        return
    err_console.print(f"[bold green]preprocessed[/] {plain(input_dir)} -> {plain(output)}  "
                      f"(database [bold]{plain(report.database_id)}[/])", highlight=False)
    tables = Table(title="tables", title_justify="left")
    for name in ("table", "rows", "columns", "edges out", "dangling"):
        tables.add_column(name, justify="left" if name == "table" else "right")
    for t in report.tables:
        tables.add_row(plain(t.name), f"{t.rows:,}", str(t.columns), f"{t.edges:,}",
                       f"{t.dangling:,}")
    err_console.print(tables)
    stages = Table(title="stages", title_justify="left")
    spilled = report.spilled_bytes > 0  # a column only when the budget was exceeded
    for name in ("stage", "rows", "edges", "columns", "bytes", "seconds") + (
            ("spilled",) if spilled else ()):
        stages.add_column(name, justify="left" if name == "stage" else "right")
    for s in report.stages:
        stages.add_row(s.name, f"{s.rows:,}" if s.rows else "", f"{s.edges:,}" if s.edges else "",
                       str(s.columns) if s.columns else "", human_bytes(s.bytes) if s.bytes else "",
                       f"{s.seconds:.3f}",
                       *((human_bytes(s.spilled) if s.spilled else "",) if spilled else ()))
    stages.add_row("[bold]total", f"{report.num_rows:,}", f"{report.num_edges:,}",
                   str(report.num_columns), human_bytes(report.size_bytes), f"{report.seconds:.3f}",
                   *((human_bytes(report.spilled_bytes),) if spilled else ()))
    err_console.print(stages)
    if spilled:
        err_console.print(f"working arrays beyond --memory-budget "
                          f"{human_bytes(report.memory_budget)} spilled to scratch files: "
                          f"{human_bytes(report.spilled_bytes)}", highlight=False)
    err_console.print(f"{counted(report.num_texts, 'distinct text')}, "
                      f"{counted(report.num_categories, 'category', 'categories')}, "
                      f"{counted(report.num_tasks, 'task')}", highlight=False)
    err_console.print(f"database hash [bold]{report.database_hash}[/]", highlight=False)


@app.command("preprocess-many", rich_help_panel=PANEL)
def preprocess_many(
    collection: Path = typer.Argument(
        ..., help="A directory whose sub-directories are sources (each a directory of Parquet "
                  "tables with its dlkit.toml), or a text file listing source directories, "
                  "one per line."),
    out_dir: Path = typer.Argument(
        ..., help="Directory of the databases, one per source, named as the source directory."),
    shard: int = typer.Option(0, "--shard", min=0,
                              help="This run's shard, 0 <= I < N (a job array's task index)."),
    num_shards: int = typer.Option(1, "--num-shards", min=1,
                                   help="Shards of the collection (the job array's size)."),
    skip_existing: bool = typer.Option(
        False, "--skip-existing",
        help="Leave a source whose database exists alone (a re-run builds only what is "
             "missing). Without it (or --overwrite) an existing database is a failure of "
             "that source."),
    overwrite: bool = typer.Option(
        False, "--overwrite",
        help="Build every source of the shard again, replacing its database (atomically)."),
    on_dangling: OnDangling = "drop",
    batch_rows: BatchRows = DEFAULT_BATCH_ROWS,
    embedder: EmbedderName = "hashed",
    embedding_dim: EmbeddingDim = None,  # type: ignore[assignment]  # typer: None is "not given"
    memory_budget: MemoryBudget = None,  # type: ignore[assignment]  # typer: None is "not given"
    no_fsync: NoFsync = False,
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or summary on stderr."),
) -> None:
    """Preprocess a collection of databases, one per source, on a job array.

    The sources, sorted by name, are dealt round-robin to N shards; shard I builds its share,
    each database as `dlkit preprocess` would. A source that fails is reported and the run
    goes on; the exit code is non-zero when any failed. With --skip-existing a re-run builds
    only what is missing, and two runs that meet on one source never both build it (the other
    reports it busy). Example, as a Slurm array of 8 tasks:

        dlkit preprocess-many sources/ dbs/ --shard $SLURM_ARRAY_TASK_ID --num-shards 8 --skip-existing
    """
    from dlkit.db.write.collection import Outcome, check_shard
    from dlkit.db.write.collection import preprocess_many as run
    from dlkit.interrupts import outputs_in_parts

    try:
        check_shard(shard, num_shards)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"--shard {shard} --num-shards {num_shards}: {exc}",
                                   code="USAGE") from exc
    if skip_existing and overwrite:
        raise InvalidArgumentError("--skip-existing and --overwrite contradict each other: "
                                   "choose one", code="USAGE")
    options = build_options(on_dangling, batch_rows, embedder, embedding_dim, memory_budget,
                             no_fsync)
    with progress(enabled=not quiet and not as_json) as bar:
        job = bar.add_task("sources", total=None)

        def done(result: SourceResult) -> None:
            bar.advance(job, 1)
            for warning in result.warnings:  # not a summary: --quiet and --json keep them
                print_warning(f"{result.name}: {warning}")
            if result.outcome is Outcome.FAILED and not as_json:
                err_console.print(f"[red]failed[/] {plain(result.name)}: "
                                  f"{plain(result.error or '')}", highlight=False)

        with outputs_in_parts():  # each database is a part: the run is done at its end
            report = run(collection, out_dir, shard=shard, num_shards=num_shards,
                         skip_existing=skip_existing, overwrite=overwrite,
                         on_start=lambda total: bar.update(job, total=total), on_source=done,
                         **options)
    if as_json:
        print_json(report.to_json())
    elif not quiet:
        err_console.print(
            f"shard {report.shard} of {report.num_shards}: {counted(len(report.results), 'source')}"
            f" of {report.num_sources}: " + ", ".join(
                f"{report.count(o)} {o.value}" for o in Outcome) + f" ({report.seconds:.1f} s)",
            highlight=False)
    if report.failures:
        first = report.failures[0]
        raise SourcesFailedError(
            f"{len(report.failures)} of {counted(len(report.results), 'source')} failed; "
            f"first: {first.name}: {first.error}", path=collection)


@app.command(rich_help_panel=PANEL)
def verify(
    database: Path = typer.Argument(..., help="Database directory made by `dlkit preprocess`."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q",
                               help="No summary on stderr (the exit code and error line still tell)."),
) -> None:
    """Check every file of a database against manifest.json, then its structure.

    Exit 0 only when every check holds; otherwise each failing file and check is named and
    the exit code is 3.
    """
    from dlkit.db.read.verify import verify_database

    if not quiet and not as_json and err_console.is_terminal:  # the hashing, in MiB
        with progress() as bar:
            job = bar.add_task("hashing (MiB)", total=None)
            report = verify_database(database, progress=lambda amount, total: bar.update(
                job, advance=amount / MIB, total=total / MIB))
    else:
        report = verify_database(database)
    if as_json:
        print_json(report.to_json())
    elif quiet:
        pass
    elif report.ok:
        err_console.print(f"[bold green]OK[/] {plain(database)}: {report.num_files} files, "
                          f"{human_bytes(report.size_bytes)}, every hash and structure check holds "
                          f"({report.seconds:.2f} s)", highlight=False)
        err_console.print(f"database hash [bold]{report.database_hash}[/]", highlight=False)
    else:
        err_console.print(f"[bold red]FAILED[/] {plain(database)}: "
                          f"{counted(len(report.failures), 'problem')}", highlight=False)
        for f in report.failures:
            err_console.print(f"  {plain(f.file)}: [red]{plain(f.check)}[/]: {plain(f.message)}", highlight=False)
    if not report.ok:
        first = report.failures[0]
        raise VerificationError(f"{counted(len(report.failures), 'check')} failed, first: {first}",
                                path=database)


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    """The entries of ``directory`` (none when it cannot be listed: the command says why)."""
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except OSError:
        return []


@schema_app.command("infer")
def schema_infer(
    input_dir: Path = typer.Argument(..., help="Directory of Parquet tables."),
    out: Path = typer.Option(None, "--out", "-o", help="Write the draft here (default: stdout)."),
    name: str = typer.Option(None, "--name", help="Database id (default: the directory's name)."),
    overwrite: bool = typer.Option(False, "--overwrite",
                                   help="Replace an existing --out file (a symbolic link is "
                                        "replaced itself, never the file it names)."),
    task: list[str] = typer.Option(None, "--task", metavar="<name>",
                                   help="RelBench datasets only: a task to take (repeat for "
                                        "several; default: every task)."),
    as_json: bool = typer.Option(False, "--json", help="Print {output, schema} as JSON on stdout "
                                                       "instead of the draft itself."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary on stderr."),
) -> None:
    """Draft a dlkit.toml from the Parquet schemas (keys, time columns, types) to review.

    Keys are found by their values (comments say why; doubtful ones are marked guess). A
    RelBench dataset directory (db/ and tasks/) gives its exact schema, tasks included.
    """
    from dlkit.atomic import atomic_write_bytes
    from dlkit.db.schema.spec import SCHEMA_FILE
    from dlkit.db.write.infer import infer_schema

    if out is not None:  # before the work: a refused output wastes none of it
        tables = {f"the input {entry.name}": Path(entry.path)
                  for entry in _entries(input_dir)
                  if entry.is_file() and entry.name.endswith(".parquet")}
        check_output_file(out, overwrite, inputs=tables)
    with printing_relbench_warnings():
        _schema, text = infer_schema(input_dir, name=name, tasks=task or None)
    if out is not None:
        atomic_write_bytes(out, text.encode("utf-8"), overwrite=overwrite)
    if as_json:
        print_json({"output": None if out is None else str(out), "schema": text})
        return
    if out is None:
        sys.stdout.write(text)
    elif not quiet:
        # preprocess reads INPUT_DIR/dlkit.toml unless told otherwise
        default = out.resolve() == (input_dir / SCHEMA_FILE).resolve()
        command = (f"dlkit preprocess {shlex.quote(str(input_dir))} OUT"
                   + ("" if default else f" --schema {shlex.quote(str(out))}"))
        err_console.print(f"wrote {plain(out)}: review it, then `{plain(command)}`",
                          highlight=False)


@contextlib.contextmanager
def printing_relbench_warnings() -> Iterator[None]:
    """What a RelBench import leaves out, as warnings on stderr."""
    from dlkit.db.write.relbench import RelbenchWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RelbenchWarning)
        yield
    for warning in caught:
        print_warning(warning.message)


def _is_database(source: Path) -> bool:
    return (source.is_dir() and (source / "metadata.json").is_file()
            and (source / "manifest.json").is_file())


def _diagram_of(source: Path) -> SchemaDiagram:
    """The diagram of a database, a dlkit.toml, or a directory of Parquet tables (its
    dlkit.toml, else a draft inferred from the data)."""
    from dlkit.db.schema.spec import SCHEMA_FILE, load_schema
    from dlkit.viewer.diagram import diagram_of_metadata, diagram_of_schema

    if _is_database(source):
        from dlkit.db import open_database

        with open_database(source) as db:
            return diagram_of_metadata(db.metadata)
    if source.is_dir() and (source / SCHEMA_FILE).is_file():
        return diagram_of_schema(load_schema(source / SCHEMA_FILE))
    if source.is_dir():
        from dlkit.db.write.infer import infer_schema

        schema, _text = infer_schema(source)
        return diagram_of_schema(schema)
    return diagram_of_schema(load_schema(source))


_FORMATS = ("mermaid", "dot", "svg")
_SUFFIXES = {".mmd": "mermaid", ".mermaid": "mermaid", ".md": "mermaid", ".dot": "dot",
             ".gv": "dot", ".svg": "svg"}


@schema_app.command("diagram")
def schema_diagram(
    source: Path = typer.Argument(
        ..., help="A database directory, a dlkit.toml, or a directory of Parquet tables (its "
                  "dlkit.toml, else a draft `schema infer` would write)."),
    fmt: str = typer.Option("auto", "--format", "-f",
                            help="mermaid, dot or svg (svg needs Graphviz's `dot`). auto: by "
                                 "--out's suffix (.mmd .dot .gv .svg), else mermaid."),
    out: Path = typer.Option(None, "--out", "-o", help="Write here (default: stdout)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out file."),
    as_json: bool = typer.Option(False, "--json",
                                 help="Print {output, name, tables, edges} as JSON on stdout "
                                      "(with --out, the diagram is written there too)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No note on stderr."),
) -> None:
    """Draw the schema: tables with keys and time columns, foreign keys as arrows (with edge
    counts from a database), tasks marked.

    Mermaid text renders on GitHub and in many editors; DOT and SVG come from Graphviz
    (Debian: `apt-get install graphviz`). Examples:

        dlkit schema diagram out/db -o schema.svg
        dlkit schema diagram data/shop --format mermaid
    """
    from dlkit.atomic import atomic_write_bytes

    if fmt == "auto":
        fmt = _SUFFIXES.get(out.suffix.lower(), "mermaid") if out is not None else "mermaid"
    if fmt not in _FORMATS:
        raise InvalidArgumentError(f"--format must be one of auto, {', '.join(_FORMATS)}, got "
                                   f"{fmt!r}", code="USAGE")
    if out is not None:  # never into the database drawn, nor over the schema it reads
        from dlkit.db.schema.spec import SCHEMA_FILE

        if _is_database(source):
            check_output_file(out, overwrite, inside=source, inside_what="the database")
        else:
            schema = source / SCHEMA_FILE if source.is_dir() else source
            inputs = {f"the input {schema.name}": schema}
            if source.is_dir():  # a draft is inferred from the tables: they are inputs too
                inputs.update({f"the input {entry.name}": Path(entry.path)
                               for entry in _entries(source)
                               if entry.is_file() and entry.name.endswith(".parquet")})
            check_output_file(out, overwrite, inputs=inputs)
    diagram = _diagram_of(source)
    if as_json and out is None:  # the JSON stands for the diagram on stdout
        print_json({"output": None, **diagram.to_json()})
        return
    text = {"mermaid": diagram.to_mermaid, "dot": diagram.to_dot, "svg": diagram.to_svg}[fmt]()
    if out is None:
        sys.stdout.write(text)
        return
    atomic_write_bytes(out, text.encode("utf-8"), overwrite=overwrite)
    if as_json:  # as every command: the file is written, the JSON names it
        print_json({"output": str(out), **diagram.to_json()})
    elif not quiet:
        err_console.print(f"wrote {plain(out)} ({fmt}, "
                          f"{counted(len(diagram.tables), 'table')}, "
                          f"{counted(len(diagram.edges), 'foreign key')})", highlight=False)
