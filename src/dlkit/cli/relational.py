"""``dlkit manifest``, ``dlkit batches``, ``dlkit show``: the relational sampler's commands."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table
from rich.text import Text

from dlkit.cli.app import app
from dlkit.cli.console import (
    console,
    err_console,
    plain,
    print_json,
    progress,
    sampler_warnings,
)
from dlkit.cli.params import (
    CONTEXT_EXAMPLES_HELP,
    CONTEXT_POLICY_HELP,
    MAX_BATCH,
    MAX_STEPS,
    check_output_file,
    check_rank,
    positive_uint64,
    uint64,
)
from dlkit.sampler import knobs
from dlkit.text import counted

if TYPE_CHECKING:  # imported by the commands: they load the kernels (see dlkit._lazy)
    from rich.console import JustifyMethod

    from dlkit.sampler.splits import SplitRatios

PANEL = "Relational sampling"
DB_HELP = "Preprocessed database directory (made by `dlkit preprocess`)."
SEED_HELP = "Sampling seed: the order of seeds and every BFS draw."
SPLIT_SEED_HELP = ("Split seed: which seeds are train/val/test (independent of --seed, so "
                   "changing --seed never moves a seed between splits).")
RATIOS_HELP = "Train,val,test shares of the hash split; must sum to 1."
MODE_HELP = ("Train order: v3 (NextBatch_v3, a keyed Feistel shuffle of each epoch) or v2 "
             "(NextBatch_v2's block-affine order, an arithmetic progression inside a block; "
             "for runs that started with it).")
# The manifest does not fix val/test order: `dlkit sample --stage` does; its default shuffles.
MANIFEST_MODE_HELP = (MODE_HELP + " Sample val and test with `dlkit sample --stage eval` (in "
                      "order, partial last batch); the default stage shuffles them like train.")
BATCHES_MODE_HELP = MODE_HELP + " Val and test are in order either way."


S_HELP = "Cells per sequence (S)."
R_HELP = "Rows per sequence, the size of fk_adj (R)."
WIDTH_HELP = "Children kept per visited row (which ones: --bfs-child-policy)."
POLICY_HELP = ("Which children a row with more than the width keeps: uniform (drawn uniformly, "
               "the default), recent (the latest visible ones), quota (each child table its "
               "share of the width, the unused share passed on; uniform within a table).")


# Each sampler knob's option, declared once (defaults: dlkit.sampler.knobs, as the Sampler's).
def _seed_option() -> Any:
    return typer.Option(knobs.SEED, "--seed", "-s", parser=uint64, help=SEED_HELP)


def _split_seed_option() -> Any:
    return typer.Option(knobs.SPLIT_SEED, "--split-seed", parser=uint64, help=SPLIT_SEED_HELP)


def _split_ratios_option() -> Any:
    return typer.Option(knobs.SPLIT_RATIOS_TEXT, "--split-ratios", help=RATIOS_HELP)


def _sampling_mode_option(text: str) -> Any:
    return typer.Option(knobs.TRAIN_ORDER, "--sampling-mode", metavar="<v3|v2>", help=text)


def _sequence_length_option() -> Any:
    return typer.Option(knobs.SEQUENCE_LENGTH, "--sequence-length", "-S", min=1,
                        max=knobs.MAX_EXTENT, help=S_HELP)


def _max_rows_option() -> Any:
    return typer.Option(knobs.MAX_ROWS, "--max-rows", "-R", min=1, max=knobs.MAX_EXTENT,
                        help=R_HELP)


def _child_width_option() -> Any:
    return typer.Option(knobs.BFS_CHILD_WIDTH, "--bfs-child-width", min=0, help=WIDTH_HELP)


def _child_policy_option() -> Any:
    return typer.Option(knobs.CHILD_POLICY, "--bfs-child-policy",
                        metavar="<uniform|recent|quota>", help=POLICY_HELP)


def _context_examples_option() -> Any:
    return typer.Option(knobs.CONTEXT_EXAMPLES, "--context-examples", min=0,
                        max=knobs.MAX_CONTEXT_EXAMPLES, help=CONTEXT_EXAMPLES_HELP)


def _context_policy_option() -> Any:
    return typer.Option(knobs.CONTEXT_EXAMPLE_POLICY, "--context-example-policy",
                        metavar="<recent|random|parent>", help=CONTEXT_POLICY_HELP)


def sampling_mode_name(mode: str) -> str:
    """The CLI's one spelling of a train order: v3 or v2 (a manifest holds the full name;
    --sampling-mode accepts either)."""
    from dlkit.nextbatch.tokens import TrainOrder

    return TrainOrder.parse(mode).short


def _ratios(text: str) -> SplitRatios:
    from dlkit.sampler.splits import SplitRatios

    return SplitRatios.parse(text)


@app.command(rich_help_panel=PANEL)
def manifest(
    db: Path = typer.Argument(..., help=DB_HELP),
    seed: int = typer.Option(..., "--seed", "-s", parser=uint64,
                             help="The run's sampling seed."),
    global_batch_size: int = typer.Option(
        ..., "--global-batch-size", "-g", parser=positive_uint64,
        help="Seeds per step over all ranks (world size x micro-batch)."),
    out: Path = typer.Option(Path("run.json"), "--out", "-o",
                             help="Manifest file to write (atomically); an existing one only with --overwrite."),
    overwrite: bool = typer.Option(False, "--overwrite",
                                   help="Replace an existing --out (a symbolic link is replaced "
                                        "itself, never the file it names)."),
    split_seed: int = _split_seed_option(),
    split_ratios: str = _split_ratios_option(),
    sampling_mode: str = _sampling_mode_option(MANIFEST_MODE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary on stderr (warnings still print)."),
) -> None:
    """Write the run manifest: one dataset per task and split, ready for `dlkit sample`.

    Datasets are named DB_ID/TASK/SPLIT (DB_ID is the database id); each one's cardinality is
    its number of seeds and its hash the database hash. Train uses drop_last, so every step is
    full (a warning names each train split smaller than the global batch size: it yields no
    step), and NextBatch_v3's shuffle unless --sampling-mode v2. Sample val and test with
    `dlkit sample --stage eval`: in order, with a partial last batch. Example:

        dlkit manifest out/db --seed 42 --global-batch-size 64 --out run.json
        dlkit sample run.json -d DB_ID/review_rating/val --stage eval
    """
    check_output_file(out, overwrite, inside=db, inside_what="the database")
    from dlkit.sampler.run_manifest import write_run_manifest

    with sampler_warnings():
        summary = write_run_manifest(db, out, seed=seed, global_batch_size=global_batch_size,
                                     split_seed=split_seed, split_ratios=_ratios(split_ratios),
                                     sampling_mode=sampling_mode, overwrite=overwrite)
    mode = sampling_mode_name(summary.sampling_mode)
    if as_json:
        print_json(dict(summary.__dict__, sampling_mode=mode))
        return
    if quiet:
        return
    table = Table(title=f"run manifest {plain(summary.output)}", title_justify="left")
    table.add_column("dataset")
    table.add_column("seeds", justify="right")
    for key, count in summary.datasets.items():
        table.add_row(plain(key), str(count))
    err_console.print(table)
    err_console.print(f"global batch size {summary.global_batch_size}, train order {mode}, "
                      f"manifest hash {summary.manifest_hash}")


@app.command(rich_help_panel=PANEL)
def batches(
    db: Path = typer.Argument(..., help=DB_HELP),
    task: str = typer.Option(..., "--task", "-t", help="Task name (see the database metadata)."),
    split: str = typer.Option(
        "train", "--split", metavar="<train|val|test>",
        help="train (shuffled), val or test (in order, each seed once per epoch)."),
    steps: int = typer.Option(
        1, "--steps", "-n", min=1, max=MAX_STEPS,
        help="Batches to write (may roll into later epochs)."),
    out: Path = typer.Option(
        ..., "--out", "-o",
        help="Directory for step_NNNNNN.npz files and index.json: a new one (--overwrite "
             "replaces an empty one or an earlier dlkit batches output)."),
    overwrite: bool = typer.Option(
        False, "--overwrite",
        help="Replace an existing --out of an earlier `dlkit batches` as a whole (atomically); "
             "refused when it holds a file its index.json does not list."),
    seed: int = _seed_option(),
    split_seed: int = _split_seed_option(),
    split_ratios: str = _split_ratios_option(),
    batch_size: int = typer.Option(
        knobs.BATCH_SIZE, "--batch-size", "-b", min=1, max=MAX_BATCH, help="Sequences per batch on this rank (B)."),
    rank: int = typer.Option(0, "--rank", "-r", parser=uint64, help="This rank, 0-based."),
    world_size: int = typer.Option(
        1, "--world-size", "-w", parser=positive_uint64, help="Number of ranks."),
    sequence_length: int = _sequence_length_option(),
    max_rows: int = _max_rows_option(),
    bfs_child_width: int = _child_width_option(),
    bfs_child_policy: str = _child_policy_option(),
    context_examples: int = _context_examples_option(),
    context_example_policy: str = _context_policy_option(),
    sampling_mode: str = _sampling_mode_option(BATCHES_MODE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or summary on stderr."),
) -> None:
    """Build batches of one task and split and write them as .npz (the batch keys, exactly).

    Each file holds one batch dict; index.json lists every step's task, epoch, cursor and
    anchor rows. A task's train batches are the same ones `dlkit.Sampler` yields for that
    task. Example:

        dlkit batches out/db --task review_rating --split train --steps 4 --out out/batches
    """
    from dlkit.sampler.batch_files import BatchRequest, write_batches

    check_rank(rank, world_size)
    with sampler_warnings():
        request = BatchRequest(task=task, split=split, steps=steps, seed=seed,
                               split_seed=split_seed, split_ratios=_ratios(split_ratios),
                               batch_size=batch_size, rank=rank, world_size=world_size,
                               sequence_length=sequence_length, max_rows=max_rows,
                               bfs_child_width=bfs_child_width, sampling_mode=sampling_mode,
                               bfs_child_policy=bfs_child_policy,
                               context_examples=context_examples,
                               context_example_policy=context_example_policy)
        if quiet or as_json:
            summary = write_batches(db, request, out, overwrite=overwrite)
        else:
            with progress() as bar:
                job = bar.add_task("building batches", total=steps)
                summary = write_batches(db, request, out, overwrite=overwrite,
                                        on_batch=lambda n: bar.advance(job, n))
    if as_json:
        print_json(dict(summary.__dict__))
    elif not quiet:
        err_console.print(f"[green]wrote[/] {counted(summary.steps, 'batch', 'batches')} "
                          f"({counted(summary.sequences, 'sequence')}, "
                          f"{counted(summary.cells, 'cell')}) to {plain(summary.output)}")


@app.command(rich_help_panel=PANEL)
def show(
    db: Path = typer.Argument(..., help=DB_HELP),
    task: str = typer.Option(..., "--task", "-t", help="Task name."),
    anchor: int = typer.Option(
        ..., "--anchor", "-a", parser=uint64,
        help="The seed: a row number (0-based, input order) of the task's table, as in "
             "index.json's anchor_rows; not a position that `dlkit sample` prints (those "
             "count the seeds of one split)."),
    seed: int = _seed_option(),
    epoch: int = typer.Option(0, "--epoch", "-e", parser=uint64,
                              help="Epoch of the BFS stream."),
    sequence_length: int = _sequence_length_option(),
    max_rows: int = _max_rows_option(),
    bfs_child_width: int = _child_width_option(),
    bfs_child_policy: str = _child_policy_option(),
    context_examples: int = _context_examples_option(),
    context_example_policy: str = _context_policy_option(),
    as_json: bool = typer.Option(False, "--json", help="Print the sequence as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q",  # noqa: ARG001
                               help="Accepted for uniformity: show prints only data (the "
                                    "sequence) on stdout."),
) -> None:
    """Show one seed's sequence as a table: visited rows, their cells, the masked target.

    Rows are in visit order (#0 is the seed); "reached" says how the BFS found each row.
    Values are the database's own (labels, text, UTC times), not the normalised floats.
    Example:

        dlkit show out/db --task review_rating --anchor 3
    """
    from dlkit.sampler.inspect import MASKED, describe_sequence

    view = describe_sequence(db, task, anchor, seed=seed, epoch=epoch,
                             sequence_length=sequence_length, max_rows=max_rows,
                             bfs_child_width=bfs_child_width,
                             bfs_child_policy=bfs_child_policy,
                             context_examples=context_examples,
                             context_example_policy=context_example_policy)
    if as_json:
        print_json(view.to_json_value())
        return
    console.print(f"task [bold]{plain(view.task)}[/], anchor row {view.anchor_row}, observed at "
                  f"{view.observation_time}; epoch {view.epoch}; {counted(len(view.rows), 'row')}, "
                  f"{view.num_cells:,}/{counted(view.sequence_length, 'cell')}", highlight=False)
    table = Table(show_lines=False, header_style="bold")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("#", "right"), ("table", "left"), ("key", "left"), ("time", "left"),
        ("reached", "left"), ("cells", "left"))
    for name, justify in columns:
        table.add_column(name, justify=justify, overflow="fold")
    for row in view.rows:
        cells = Text()
        for k, cell in enumerate(row.cells):
            if k:
                cells.append("  ")
            cells.append(f"{cell.column}=", style="dim")
            style = "bold red" if cell.is_target else (
                "dim italic" if cell.is_null or cell.is_hidden else "")
            cells.append(cell.value, style=style)
        if row.truncated:
            cells.append("  ... (cut at S)", style="yellow")
        reached = row.reached if row.reached == "context example" or not row.context_example \
            else f"{row.reached} (example)"
        table.add_row(str(row.index), *(plain(v) for v in (row.table, row.key, row.time, reached)),
                      cells)
    console.print(table)
    target = next((c.column for r in view.rows for c in r.cells if c.is_target), "?")
    console.print(f"target [bold red]{plain(target)}[/] of row #0 is [bold red]{plain(MASKED)}[/] in "
                  f"the batch; its true value {plain(view.target)} is hidden from the model",
                  highlight=False)
    stopped = {"cells": "the sequence is full", "rows": "the row budget (--max-rows) is spent",
               "exhausted": "nothing visible is left within the child width"}[view.stopped]
    console.print(f"context: {view.num_cells:,} of {counted(view.sequence_length, 'cell')} "
                  f"({view.num_cells / view.sequence_length:.0%}), "
                  f"{len(view.rows)} of {view.max_rows} rows; stopped because {stopped}",
                  highlight=False)
    examples = sum(row.reached == "context example" for row in view.rows)
    if examples:
        console.print(f"  filled with {counted(examples, 'context example')} "
                      f"({sum(row.context_example for row in view.rows)} of the rows)",
                      highlight=False)
    for child in view.children:
        console.print(f"  {plain(child.table)}: {child.taken} of "
                      f"{counted(child.visible, 'visible child', 'visible children')} taken "
                      f"(width {view.bfs_child_width}, policy {view.bfs_child_policy})",
                      highlight=False)
