"""``dlkit bench``: measure the prefetch engine against a sequential loop on a real workload."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich import box
from rich.table import Table

from dlkit.bench.request import WorkloadKind
from dlkit.cli.app import app
from dlkit.cli.console import (
    console,
    plain,
    print_json,
    print_note,
    progress,
    sampler_warnings,
)
from dlkit.cli.params import (
    MAX_BATCH,
    MAX_ROW_BYTES,
    MAX_ROWS,
    MAX_STEPS,
    MAX_THREADS,
    check_rank,
)
from dlkit.prefetch.config import Policy, PrefetchConfig, ShardMode

if TYPE_CHECKING:  # imported by the command: it loads the kernels (see dlkit._lazy)
    from rich.progress import TaskID

    from dlkit.bench.report import BenchReport, RunResult

PANEL = "Performance"


def _duration(us: float) -> str:
    return f"{us:.1f} us" if us < 1000 else f"{us / 1e3:.2f} ms"


def _row(result: RunResult, baseline: RunResult) -> list[str]:
    speedup = result.batches_per_s / baseline.batches_per_s if baseline.batches_per_s else 0.0
    return [result.name, f"{result.batches_per_s:,.0f}", f"{result.samples_per_s:,.0f}",
            f"{result.mb_per_s:,.1f}" if result.bytes else "-",
            _duration(result.wait_p50_us), _duration(result.wait_p99_us), f"{speedup:.2f}x"]


def render(report: BenchReport) -> None:
    w, config = report.workload, report.prefetch
    if w["workload"] == "gather":
        what = f"batches of <= {w['batch_size']} rows x {w['row_bytes']} B ({w['order']} order)"
    elif w["workload"] == "relational":
        what = f"Sampler train batches of {w['batch_size']} sequences of {plain(w['db'])}"
    else:
        what = "batches"
    consumer = (f"{w['consumer_ms']} ms (as long as building a batch, measured)"
                if w.get("consumer_calibrated") else f"{w['consumer_ms']} ms")
    machine = report.machine
    load = machine.get("load_1min")
    table = Table(title=f"{w['workload']} workload: {w['steps']} {what}", title_justify="left",
                  caption=(f"engine: {config.num_workers} producer threads, {config.policy.value}, "
                           f"{config.shard_mode.value}, {config.buffer_size} buffers ahead; "
                           f"compute {w['compute_ms']} ms, consumer {consumer} per batch; "
                           f"{machine.get('cores_available', '?')} cores available, load "
                           f"{'?' if load is None else f'{load:.2f}'} (1 min)"),
                  caption_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1))
    for name in ("run", "batches/s", "samples/s", "MB/s", "wait p50", "wait p99", "speedup"):
        table.add_column(name, justify="left" if name == "run" else "right", no_wrap=True)
    runs = [report.sequential, report.engine] + ([report.torch] if report.torch else [])
    for result in runs:
        table.add_row(*_row(result, report.sequential))
    console.print(table)
    same = "yes" if report.identical else "[bold red]NO[/]"
    order = "same order" if config.policy is Policy.STRICT else "same multiset"
    console.print(f"engine speedup over the sequential loop: [bold]{report.speedup:.2f}x[/]; "
                  f"output identical ({order}): {same}")


@app.command(rich_help_panel=PANEL)
def bench(
    workload: WorkloadKind = typer.Option(None, "--workload", show_default=False,
                                 help="Default: relational, or gather with --manifest, --trace "
                                      "or --data. relational: dlkit.Sampler train batches of "
                                      "--db (default: the bundled example) feeding a training "
                                      "step; gather: rows from a memory-mapped file in "
                                      "`dlkit sample` order; synthetic: a CPU-bound nogil "
                                      "kernel per batch."),
    db: Path = typer.Option(None, "--db",
                            help="relational: the database (made by `dlkit preprocess`). "
                                 "Default: the bundled example, preprocessed into a temporary "
                                 "directory."),
    steps: int = typer.Option(None, "--steps", "-n", min=1, max=MAX_STEPS,
                              help="Batches to time. Default: 64 (relational), 400 (gather: "
                                   "NextBatch calls; --trace gives its own; synthetic)."),
    batch_size: int = typer.Option(None, "--batch-size", "-b", min=1, max=MAX_BATCH,
                                   help="Sequences (relational) or rows per batch (with "
                                        "--manifest: global_batch_size / world size instead). "
                                        "Default: 32 (relational), 256."),
    workers: int = typer.Option(2, "--workers", min=1, max=MAX_THREADS, help="Producer threads."),
    buffers_ahead: int = typer.Option(3, "--buffers-ahead", min=1, max=MAX_THREADS,
                                      help="Batches each producer may have ready ahead of the "
                                           "consumer."),
    policy: Policy = typer.Option(Policy.STRICT, "--policy",
                                  help="strict: deterministic round-robin; best-effort: first "
                                       "ready, bounded lead."),
    shard_mode: ShardMode = typer.Option(ShardMode.INTERLEAVED, "--shard-mode",
                                         help="How steps are split over the producers."),
    drop_remainder: bool = typer.Option(False, "--drop-remainder",
                                        help="Give every producer the same number of steps "
                                             "(drops the rest)."),
    max_lead: int = typer.Option(4, "--max-lead", min=1, max=MAX_THREADS,
                                 help="best-effort: how far a producer may run ahead of the "
                                      "slowest."),
    compute_ms: float = typer.Option(0.0, "--compute-ms", min=0.0,
                                     help="Synthetic nogil compute added to producing each "
                                          "batch, in ms."),
    consumer_ms: float = typer.Option(0.0, "--consumer-ms", min=0.0,
                                      help="Synthetic nogil compute added to consuming each "
                                           "batch (the 'training step'), in ms. relational: 0 "
                                           "means as long as a batch takes to build, measured "
                                           "first."),
    madvise: bool = typer.Option(False, "--madvise/--no-madvise",
                                 help="madvise(MADV_WILLNEED) the pages of each producer's next "
                                      "batch."),
    data: Path = typer.Option(None, "--data",
                              help="Raw row file to gather from. Default: a temporary file of "
                                   "--rows rows."),
    rows: int = typer.Option(131_072, "--rows", min=1, max=MAX_ROWS,
                             help="Rows of the temporary file (raised to cover the order's "
                                  "largest index) and of the default in-memory manifest."),
    row_bytes: int = typer.Option(512, "--row-bytes", min=8, max=MAX_ROW_BYTES, help="Bytes per row."),
    manifest: Path = typer.Option(None, "--manifest", "-m",
                                  help="Run manifest for the index order. Default: an in-memory "
                                       "one over --rows rows."),
    dataset: str = typer.Option(None, "--dataset", "-d",
                                help="Dataset key in --manifest. Default: its only dataset, or "
                                     "its only train dataset (otherwise name one)."),
    world_size: int = typer.Option(1, "--world-size", "-w", min=1, help="Number of ranks of the index order."),
    rank: int = typer.Option(0, "--rank", "-r", min=0, help="The rank whose batches are gathered."),
    stage: str = typer.Option("train", "--stage", metavar="<train|eval|infer>", help="train, eval or infer."),
    trace: Path = typer.Option(None, "--trace",
                               help="Replay the steps of a trace from `dlkit sample --trace` "
                                    "(needs --manifest)."),
    torch: bool = typer.Option(True, "--torch/--no-torch",
                               help="Also time torch.utils.data.DataLoader with worker "
                                    "processes, when torch is installed."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
) -> None:
    """Time the prefetch engine against a no-prefetch sequential loop, in the same process.

    By default: dlkit.Sampler train batches of a database (--db, or the bundled example)
    built on demand, then by --workers producer threads, each batch consumed by a training
    step as long as building one (or --consumer-ms). Reports batches/s, samples/s, MB/s, the
    consumer's wait per batch (p50, p99), the speedup, and the cores available and the load
    beside it. Examples:

        dlkit bench --db out/db --consumer-ms 20
        dlkit bench --workload synthetic --compute-ms 5 --consumer-ms 5 --workers 2
    """
    from dlkit.bench import BenchRequest, run_bench

    check_rank(rank, world_size)

    if workload is None:  # the gather workload's inputs say which one is meant
        gather_inputs = manifest is not None or trace is not None or data is not None
        workload = WorkloadKind.GATHER if gather_inputs else WorkloadKind.RELATIONAL
    relational = workload is WorkloadKind.RELATIONAL
    request = BenchRequest(
        workload=workload, db=None if db is None else str(db),
        steps=steps if steps is not None else (64 if relational else 400),
        batch_size=batch_size if batch_size is not None else (32 if relational else 256),
        prefetch=PrefetchConfig(num_workers=workers, buffer_size=buffers_ahead, policy=policy,
                                shard_mode=shard_mode, drop_remainder=drop_remainder,
                                max_lead=max_lead),
        compute_ms=compute_ms, consumer_ms=consumer_ms, madvise=madvise,
        data=None if data is None else str(data), rows=rows, row_bytes=row_bytes,
        manifest=None if manifest is None else str(manifest), dataset=dataset,
        world_size=world_size, rank=rank, stage=stage,
        trace=None if trace is None else str(trace), compare_torch=torch)
    with sampler_warnings():  # after the progress display is gone
        if quiet:
            report = run_bench(request)
        else:
            with progress() as bar:
                tasks: dict[str, TaskID] = {}

                def on_progress(phase: str, done: int, total: int) -> None:
                    if phase not in tasks:
                        tasks[phase] = bar.add_task(phase, total=total)
                    bar.update(tasks[phase], completed=done)

                report = run_bench(request, on_progress)
    if as_json:
        print_json(report.to_dict())
    else:
        render(report)
    console.file.flush()
    for note in report.notes:  # not a summary: --quiet and --json keep them
        print_note(note)
