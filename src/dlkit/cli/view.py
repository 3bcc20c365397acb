"""``dlkit info``, ``dlkit view``, ``dlkit curves``: ways to see a database, the contexts the
Sampler draws from it and how training went (``dlkit schema diagram`` is with the other
``schema`` commands, in :mod:`dlkit.cli.db`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import typer
from rich.table import Table

from dlkit.cli.app import app
from dlkit.cli.console import (
    console,
    err_console,
    plain,
    print_json,
    print_warning,
    progress,
    sampler_warnings,
)
from dlkit.cli.params import CONTEXT_EXAMPLES_HELP, CONTEXT_POLICY_HELP, check_output_file
from dlkit.errors import InvalidArgumentError
from dlkit.sampler import knobs
from dlkit.sampler.split import SPLITS
from dlkit.text import counted, human_bytes, unknown_name

if TYPE_CHECKING:
    from dlkit.db.read.info import Degrees
    from dlkit.db.read.mapped import Database
    from dlkit.sampler.batch import ChildPolicy, ContextExamplePolicy
    from dlkit.viewer.curves import Series
    from dlkit.viewer.page import PageOptions

T = TypeVar("T")

PANEL = "Seeing the data"
DB_HELP = "Preprocessed database directory (made by `dlkit preprocess`)."


def _int_list(text: str, what: str, minimum: int) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise InvalidArgumentError(f"{what} must be integers separated by commas, got {text!r}",
                                   code="USAGE") from None
    if any(not minimum <= v <= 65536 for v in values):
        raise InvalidArgumentError(f"{what} must be in [{minimum}, 65536], got {text!r}",
                                   code="USAGE")
    return tuple(dict.fromkeys(values))


def _key_text(key: str | tuple[str, ...] | None) -> str:
    """A primary key for the table: its column, ``(a, b)`` for a composite key, or ``-``."""
    if key is None:
        return "-"
    return key if isinstance(key, str) else f"({', '.join(key)})"


def _policies(text: str) -> tuple[ChildPolicy, ...]:
    from dlkit.sampler.batch import ChildPolicy

    return _parsed(text, ChildPolicy.parse, "--bfs-child-policy")


def _example_policies(text: str) -> tuple[ContextExamplePolicy, ...]:
    from dlkit.sampler.batch import ContextExamplePolicy

    return _parsed(text, ContextExamplePolicy.parse, "--context-example-policy")


def _parsed(text: str, parse: Callable[[str], T], option: str) -> tuple[T, ...]:
    """The comma-separated values of ``option``, each parsed, without repeats."""
    try:
        return tuple(dict.fromkeys(parse(p.strip()) for p in text.split(",")))
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{option}: {exc}", code="USAGE") from None


def _utc(us: int | None) -> str:
    if us is None:
        return "-"
    return (dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=us)
            ).strftime("%Y-%m-%d %H:%M")


def _degrees(d: Degrees) -> str:
    return f"{d.p50:g} / {d.p99:g} / {d.max:,}"


def _split_counts(db: Database, split_seed: int) -> dict[str, dict[str, int]]:
    from dlkit.viewer.context import seeds_by_split

    return {t.name: {s: int(a.size) for s, a in seeds_by_split(
        db, t.name, split_seed=split_seed).items()} for t in db.tasks}


@app.command(rich_help_panel=PANEL)
def info(
    database: Path = typer.Argument(..., help=DB_HELP),
    split_seed: int = typer.Option(knobs.SPLIT_SEED, "--split-seed", min=0,
                                   help="Split seed of the hash splits whose seeds are counted."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q",  # noqa: ARG001
                               help="Accepted for uniformity: info prints only its summary."),
) -> None:
    """What a database holds: tables, foreign keys, tasks, embeddings, size and hash.

    Tables with their rows, columns by type and time range; foreign keys with their edges,
    nulls, dangling keys and children per parent row (p50 / p99 / max); tasks with target,
    type, seeds per split (hash splits by --split-seed), label lag, boundary and split rule.
    Example:

        dlkit info out/db --json | jq '.tasks[].name'
    """
    from dlkit.db import open_database
    from dlkit.db.read.info import database_info
    from dlkit.db.schema.render import render_duration

    with open_database(database) as db:
        summary = database_info(db, seeds_per_split=_split_counts(db, split_seed))
    if as_json:
        print_json(summary.to_json())
        return
    console.print(f"[bold]{plain(summary.database_id)}[/]  {plain(summary.path)}  "
                  f"{human_bytes(summary.size_bytes)} in {counted(summary.num_files, 'file')}",
                  highlight=False)
    console.print(f"hash {summary.database_hash}", highlight=False)
    console.print(f"{summary.num_rows:,} rows, {summary.num_edges:,} foreign-key edges",
                  highlight=False)
    tables = Table(title="tables", title_justify="left", header_style="bold")
    for name in ("table", "rows", "key", "time column", "columns", "first", "last"):
        tables.add_column(name, justify="right" if name == "rows" else "left")
    for t in summary.tables:
        columns = ", ".join(f"{n} {k}" for k, n in t.columns_by_type.items()) or "-"
        tables.add_row(plain(t.name), f"{t.num_rows:,}", plain(_key_text(t.primary_key)),
                       plain(t.time_column or "-"), columns, _utc(t.time_range.first_us),
                       _utc(t.time_range.last_us))
    console.print(tables)
    for t in summary.tables:  # what a row shows late, and what it holds beyond its columns
        if t.known_after_us:
            lags = ", ".join(f"{plain(c)} {render_duration(us)}"
                             for c, us in t.known_after_us.items())
            console.print(f"{plain(t.name)}: known after their row's time: {lags}",
                          highlight=False)
        if t.aggregate_cells:
            console.print(f"{plain(t.name)}: {counted(len(t.aggregate_cells), 'aggregate cell')}"
                          f" per row: {', '.join(plain(c) for c in t.aggregate_cells)}",
                          highlight=False)
    if summary.foreign_keys:
        fks = Table(title="foreign keys", title_justify="left", header_style="bold")
        for name in ("child.column", "parent", "edges", "null", "dangling",
                     "children per parent p50/p99/max", "linked"):
            fks.add_column(name, justify="left" if name in ("child.column", "parent") else "right")
        for f in summary.foreign_keys:
            fks.add_row(plain(f"{f.table}.{f.column}"), plain(f.parent), f"{f.num_edges:,}",
                        f"{f.num_null:,}", f"{f.num_dangling:,}",
                        _degrees(f.children_per_parent) + (" *" if f.shared_with else ""),
                        f"{100 * f.linked_share:.1f}%")
        console.print(fks)
    if summary.tasks:
        tasks = Table(title="tasks", title_justify="left", header_style="bold")
        for name in ("task", "table.target", "type", "seeds", "train/val/test", "split",
                     "label lag", "boundary"):
            tasks.add_column(name, justify="right" if name == "seeds" else "left")
        for k in summary.tasks:
            per = "/".join(f"{k.seeds_per_split.get(s, 0):,}" for s in SPLITS)
            tasks.add_row(plain(k.name), plain(f"{k.table}.{k.target}"), k.target_type,
                          f"{k.num_seeds:,}", per, k.split_rule,
                          render_duration(k.label_lag_us), k.boundary)
        console.print(tasks)
    e = summary.embeddings
    console.print(f"embeddings: {plain(e.embedder)}, text {e.text_dim}, column {e.column_dim}, "
                  f"categorical {e.categorical_dim} dimensions; "
                  f"{counted(e.num_texts, 'distinct text')}", highlight=False)
    if any(f.shared_with for f in summary.foreign_keys):
        console.print("* several keys of one table to the same parent: their degrees are "
                      "counted together", highlight=False)


@app.command(rich_help_panel=PANEL)
def view(
    database: Path = typer.Argument(..., help=DB_HELP),
    out: Path = typer.Option(None, "--out", "-o",
                             help="Write the page here (default: DATABASE's name + .html in "
                                  "the current directory)."),
    serve: bool = typer.Option(False, "--serve",
                               help="Serve the page on 127.0.0.1 instead of writing it: any "
                                    "seed and any setting, computed on request (Ctrl-C stops)."),
    port: int = typer.Option(0, "--port", min=0, max=65535,
                             help="--serve's port (0: any free one; the URL is printed)."),
    task: list[str] = typer.Option(None, "--task", "-t",
                                   help="A task to show (repeat for several; default: all)."),
    seeds: int = typer.Option(5, "--seeds", min=1, max=1000,
                              help="Seeds per task and split written into the page."),
    sequence_length: str = typer.Option(
        str(knobs.SEQUENCE_LENGTH), "--sequence-length", "-S",
        help="Sequence length S; several separated by commas (128,512,1024) to switch "
             "between them in the page."),
    max_rows: str = typer.Option(str(knobs.MAX_ROWS), "--max-rows", "-R", help="Max rows R (or several)."),
    bfs_child_width: str = typer.Option(str(knobs.BFS_CHILD_WIDTH), "--bfs-child-width", "-W",
                                        help="Children taken per row (or several)."),
    bfs_child_policy: str = typer.Option(
        knobs.CHILD_POLICY, "--bfs-child-policy",
        help="Which children a row keeps beyond the width: uniform, recent or quota (or "
             "several, separated by commas)."),
    context_examples: str = typer.Option(
        str(knobs.CONTEXT_EXAMPLES), "--context-examples",
        help=CONTEXT_EXAMPLES_HELP + " Several separated by commas to switch between them; "
             "each below every --max-rows."),
    context_example_policy: str = typer.Option(
        knobs.CONTEXT_EXAMPLE_POLICY, "--context-example-policy",
        metavar="<recent|random|parent>", help=CONTEXT_POLICY_HELP + " Or several."),
    seed: int = typer.Option(knobs.SEED, "--seed", "-s", min=0, help="Sampling seed (the BFS draws)."),
    split_seed: int = typer.Option(knobs.SPLIT_SEED, "--split-seed", min=0,
                                   help="Split seed (hash splits)."),
    step: int = typer.Option(
        None, "--step", min=0,
        help="Show the seeds of this step of each task's train, val and test stream (the "
             "batches `dlkit batches` builds, at their epoch) instead of the first --seeds."),
    batch_size: int = typer.Option(knobs.BATCH_SIZE, "--batch-size", "-b", min=1,
                                   help="--step's global batch size."),
    sampling_mode: str = typer.Option(knobs.TRAIN_ORDER, "--sampling-mode", metavar="<v3|v2>",
                                      help="--step's train order."),
    record: list[Path] = typer.Option(
        None, "--record", help="A training run's --record JSONL to plot (repeatable)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out file."),
    as_json: bool = typer.Option(False, "--json", help="Print {output, contexts} as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress or summary."),
) -> None:
    """See what the model sees: one HTML page (no server, no network) with every task's
    sampled contexts.

    Pick a task, a split and a seed: the page shows the BFS tree of rows (table, time,
    depth, the row it was reached from, how many children of each table were visible and
    how many the width took), the cells per row (nulls, hidden and target cells marked),
    how much of the sequence is filled, the attention structure as a cell-by-cell picture,
    the schema and, with --record, the training curves; with --context-examples, the rows
    of other seeds' walks that fill a short sequence, marked. Examples:

        dlkit view out/db -o view.html -S 128,1024 -W 4,16
        dlkit view out/db -o examples.html --context-examples 0,4
        dlkit view out/db --step 1000 --batch-size 64 -o step1000.html
        dlkit view out/db --serve --port 8765
    """
    from dlkit.atomic import atomic_write_bytes
    from dlkit.db import open_database
    from dlkit.nextbatch.tokens import TrainOrder
    from dlkit.viewer.page import Mode, PageOptions, knob_grid, num_contexts, page_data, render_page

    rows = _int_list(max_rows, "--max-rows", 1)
    examples = _int_list(context_examples, "--context-examples", 0)
    if max(examples) >= min(rows):
        raise InvalidArgumentError(f"--context-examples {max(examples)} must be below every "
                                   f"--max-rows (each example takes a row), got {min(rows)}",
                                   code="USAGE")
    knobs = knob_grid(_int_list(sequence_length, "--sequence-length", 1), rows,
                      _int_list(bfs_child_width, "--bfs-child-width", 0),
                      _policies(bfs_child_policy), examples,
                      _example_policies(context_example_policy))
    if serve and len(knobs) > 1:
        raise InvalidArgumentError("--serve takes one value per setting (the page has a field "
                                   "for each)", code="USAGE")
    target = out if out is not None else Path(f"{database.resolve().name or 'database'}.html")
    if not serve:
        check_output_file(target, overwrite, inside=database, inside_what="the database")
    curves = _read_records(record or ())
    with open_database(database) as db:
        known = [t.name for t in db.tasks]
        for name in task or ():
            if name not in known:
                raise InvalidArgumentError(unknown_name("task", name, known, "the database"))
        options = PageOptions(knobs=knobs, seeds_per_split=seeds, seed=seed,
                              split_seed=split_seed, tasks=tuple(task) if task else None,
                              step=step, batch_size=batch_size,
                              sampling_mode=TrainOrder.parse(sampling_mode))
        if serve:
            _serve(db, options, curves, port, quiet)
            return
        with progress(enabled=not quiet) as bar, sampler_warnings():
            job = bar.add_task("sampling contexts", total=num_contexts(db, options))
            data = page_data(db, options, Mode.STATIC, curves,
                             progress=lambda n: bar.advance(job, n))
    page = render_page(data)
    atomic_write_bytes(target, page.encode("utf-8"), overwrite=overwrite)
    if as_json:
        print_json({"output": str(target), "contexts": len(data["contexts"]),
                    "size_bytes": len(page.encode("utf-8"))})
    elif not quiet:
        err_console.print(f"wrote {plain(target)}: {counted(len(data['contexts']), 'context')}, "
                          f"{human_bytes(len(page.encode('utf-8')))}; open it in a browser",
                          highlight=False)


def _serve(db: Database, options: PageOptions, curves: tuple[Series, ...], port: int,
           quiet: bool) -> None:
    """Serve the page until Ctrl-C or SIGTERM (exit 0); its URL is the one line on stdout."""
    from dlkit.errors import OutputError
    from dlkit.viewer.page import Mode, page_data, render_page
    from dlkit.viewer.serve import make_server

    with sampler_warnings():  # printed before serving starts
        page = render_page(page_data(db, options, Mode.SERVE, curves))
    try:
        server = make_server(db, page, port=port, seed=options.seed,
                             split_seed=options.split_seed)
    except OSError as exc:
        raise OutputError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}") from None
    host, bound = str(server.server_address[0]), int(server.server_address[1])
    if not quiet:
        err_console.print(f"serving {plain(db.path)} on http://{host}:{bound}/ (Ctrl-C stops)",
                          highlight=False)
    try:  # from the URL on, a stop is no error (a client may stop it as soon as it reads it)
        print(f"http://{host}:{bound}/", flush=True)
        server.serve_forever()
    except KeyboardInterrupt:  # Ctrl-C (or SIGTERM) is how a server is stopped: no error
        if not quiet:
            err_console.print("stopped serving", highlight=False)
    finally:
        server.server_close()


def _read_records(paths: Sequence[Path], quiet: bool = False) -> tuple[Series, ...]:
    """Every series of the --record files, each labelled with its file when there are
    several, with one warning line for each that has values that are not finite (a
    diverged run)."""
    from dlkit.viewer.curves import read_records

    series = read_records(paths)
    for path, one in series:
        if one.not_finite and not quiet:
            print_warning(f"{path}: {one.name} is {one.not_finite_note()}")
    return tuple(one for _path, one in series)


@app.command(rich_help_panel=PANEL)
def curves(
    record: list[Path] = typer.Argument(..., help="--record JSONL files of training runs."),
    out: Path = typer.Option(..., "--out", "-o", help="The SVG file to write."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing --out file."),
    as_json: bool = typer.Option(False, "--json", help="Print {output, series} as JSON (each "
                                                       "series: name, record, title, not_finite)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary on stderr."),
) -> None:
    """Plot training curves (loss and any other number per step) of the examples' --record
    files as one SVG.

        dlkit curves run.jsonl -o curves.svg
    """
    from dlkit.atomic import atomic_write_bytes
    from dlkit.viewer.curves import curves_svg

    check_output_file(out, overwrite, inputs={f"the record {path}": path for path in record})
    series = _read_records(record, quiet=quiet or as_json)
    atomic_write_bytes(out, curves_svg(series).encode("utf-8"), overwrite=overwrite)
    if as_json:
        print_json({"output": str(out), "series": [s.to_json() for s in series]})
    elif not quiet:
        err_console.print(f"wrote {plain(out)}: {', '.join(plain(s.title) for s in series)}",
                          highlight=False)
