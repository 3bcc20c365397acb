"""``dlkit sample``, ``dlkit replay``, ``dlkit verify-golden``: the NextBatch commands."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import typer

from dlkit.cli.app import app
from dlkit.cli.console import err_console, plain, print_error, print_json, print_note, progress
from dlkit.cli.params import MAX_STEPS, check_rank, positive_uint64, uint64
from dlkit.cli.pipes import delivered
from dlkit.errors import (
    DlkitError,
    GoldenFileError,
    GoldenMismatchError,
    InvalidArgumentError,
    TraceError,
)
from dlkit.nextbatch.formats import OutputFormat
from dlkit.text import counted

PANEL = "Index sampling (NextBatch_v2 and v3)"


def _parse_steps(value: str) -> int | None:
    if value == "all":
        return None
    try:
        steps = int(value)
    except ValueError:
        raise InvalidArgumentError(f"--steps must be a positive integer or 'all', got {value!r}") from None
    if not 1 <= steps <= MAX_STEPS:
        raise InvalidArgumentError(f"--steps must be from 1 to 2^32 (or 'all'), got {steps}")
    return steps


@app.command(rich_help_panel=PANEL)
def sample(
    manifest: Path = typer.Argument(..., help="Run manifest JSON (seed, global_batch_size, data, datasets)."),
    dataset: str = typer.Option(..., "--dataset", "-d", help="Dataset key in the manifest's datasets."),
    epoch: int = typer.Option(None, "--epoch", "-e", parser=uint64,
                              help="Epoch to sample. Default: 0, or the checkpoint's epoch with --resume."),
    rank: int = typer.Option(0, "--rank", "-r", parser=uint64,
                             help="This process's rank, 0-based."),
    world_size: int = typer.Option(1, "--world-size", "-w", parser=positive_uint64,
                                   help="Number of ranks; must divide global_batch_size."),
    stage: str = typer.Option("train", "--stage", metavar="<train|eval|infer>",
                              help="train (the manifest's shuffled order, no repeats; a partial "
                                   "last batch unless the manifest's drop_last), eval or infer "
                                   "(in order, partial last batch)."),
    start_index: int = typer.Option(None, "--start-index", parser=uint64,
                                    help="Global position in the epoch to start from. Default: 0."),
    resume: Path = typer.Option(None, "--resume", help="Start from the cursor stored in this checkpoint."),
    steps: str = typer.Option("all", "--steps", "-n", metavar="<int|all>",
                              help="Calls to make: a positive integer (may roll into later "
                                   "epochs), or 'all' for the rest of the epoch."),
    fmt: OutputFormat = typer.Option(OutputFormat.TXT, "--format", "-f",
                                     help="txt: one line per step, indices separated by spaces "
                                          "(empty line for an empty micro-batch); bin: raw "
                                          "little-endian uint64; npy: one 1-D uint64 array."),
    out: Path = typer.Option(None, "--out", "-o", help="Output file (written atomically). Default: stdout."),
    trace: Path = typer.Option(None, "--trace", help="Also write the CBOR trace (one record per step) here."),
    checkpoint_out: Path = typer.Option(None, "--checkpoint-out",
                                        help="Write the cursor after the last step to this "
                                             "checkpoint (bound to this manifest: --resume with "
                                             "another one is refused)."),
    overwrite: bool = typer.Option(False, "--overwrite",
                                   help="Replace existing output files (--out, --trace, "
                                        "--checkpoint-out; a symbolic link is replaced itself, "
                                        "never the file it names)."),
    cardinality: int = typer.Option(None, "--cardinality", parser=uint64,
                                    help="Actual number of rows of the data; a mismatch with the "
                                         "manifest is CARDINALITY_MISMATCH."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary on stdout (needs --out)."),
    quiet: bool = typer.Option(False, "--quiet", "-q",
                               help="No progress bar or summary on stderr (the indices and "
                                    "--json still print)."),
) -> None:
    """Dump this rank's deterministic batch indices (NextBatch_v2, or v3 if the manifest says so).

    The global order depends only on the manifest, dataset and epoch: every world size sees the
    same global batches, each rank its contiguous slice. The output files (--out, --trace,
    --checkpoint-out) appear together, complete, or not at all; an existing one is replaced
    only with --overwrite. Example:

        dlkit sample run.json -d flights/train --epoch 0 --rank 1 --world-size 8 --steps 10
    """
    from dlkit.nextbatch.export import SampleRequest, run_sample

    check_rank(rank, world_size)
    if as_json and out is None:
        raise InvalidArgumentError("--json prints a summary on stdout, so it needs --out")
    if fmt is not OutputFormat.TXT and out is None and sys.stdout.isatty():
        raise InvalidArgumentError(f"refusing to write {fmt.value} binary data to a terminal; use --out")
    request = SampleRequest(
        manifest_path=str(manifest), dataset_key=dataset, rank=rank, world_size=world_size,
        stage=stage, epoch=epoch, start_index=start_index,
        resume=None if resume is None else str(resume), steps=_parse_steps(steps), fmt=fmt,
        out=None if out is None else str(out), trace=None if trace is None else str(trace),
        checkpoint_out=None if checkpoint_out is None else str(checkpoint_out),
        actual_cardinality=cardinality, overwrite=overwrite,
    )
    show = not quiet and out is not None
    stdout = delivered(sys.stdout.buffer)  # `| head -1` leaves early: exit 141
    if show:
        with progress() as bar:
            task = bar.add_task("sampling steps", total=None)
            summary = run_sample(request, stdout,
                                 on_start=lambda total: bar.update(task, total=total),
                                 on_progress=lambda n: bar.advance(task, n))
    else:
        summary = run_sample(request, stdout)
    sys.stdout.flush()
    for note in summary.notes:
        print_note(note)
    result = {"steps": summary.steps, "total_samples_seen": summary.indices,
              "cursor_start": summary.cursor_start.to_value(),
              "cursor_end": summary.cursor_end.to_value()}
    if as_json:
        print_json(result)
    elif show:
        err_console.print(f"[green]wrote[/] {counted(summary.steps, 'step')}, "
                          f"{counted(summary.indices, 'index', 'indices')}; "
                          f"next cursor: {summary.cursor_end}")


@app.command(rich_help_panel=PANEL)
def replay(
    trace: Path = typer.Argument(..., help="Trace file written by `dlkit sample --trace`."),
    manifest: Path = typer.Option(..., "--manifest", "-m", help="The run manifest the trace was made with."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary on stderr (the exit code tells)."),
) -> None:
    """Recompute every record of a trace and report the first mismatch.

    Exit 0 only when every record (indices digest, cursors, tokens, metadata) matches.
    """
    from dlkit.atomic_journal import settle
    from dlkit.files import open_regular
    from dlkit.nextbatch.run_manifest import load_manifest

    settle(trace)  # a commit of it that a killed `dlkit sample` decided is finished first
    try:
        # The arguments are checked before the kernels load (a second or more)
        run = load_manifest(manifest)
        try:
            os.close(open_regular(trace))
        except OSError as exc:
            raise TraceError(f"cannot read: {exc.strerror}", path=trace) from None
        from dlkit.nextbatch.trace import replay_trace

        report = replay_trace(trace, run)
    except DlkitError as exc:
        if as_json:  # scripts read the verdict on stdout; the exit code still tells it
            print_json({"ok": False, "code": exc.code, "message": str(exc)})
        raise
    result = {"ok": True, "steps": report.records_checked,
              "total_samples_seen": report.total_samples_seen,
              "cursor_end": report.final_cursor.to_value()}
    if as_json:
        print_json(result)
    elif not quiet:
        records = report.records_checked
        err_console.print(f"[green]ok[/] {counted(records, 'record')} "
                          f"{'matches' if records == 1 else 'match'}; "
                          f"{counted(report.total_samples_seen, 'sample')}; "
                          f"final cursor {report.final_cursor}")


@app.command("verify-golden", rich_help_panel=PANEL)
def verify_golden_command(
    golden: list[Path] = typer.Argument(None, help="Golden files. Default: every golden file bundled with dlkit."),
    full: bool = typer.Option(False, "--full", help="Also digest whole epochs of the large (N = 10^9) streams."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q",
                               help="No progress or per-file summary on stderr (failures are "
                                    "still named)."),
) -> None:
    """Check golden index streams: digests, first indices and sampled positions.

    The default run checks every small stream in full and the prefix of large ones (well under a
    minute); --full digests every epoch in full (a few minutes for N = 10^9).
    """
    from dlkit.nextbatch.golden import (
        bundled_golden_dir,
        default_golden_paths,
        golden_work,
        load_golden,
        verify_golden,
    )

    paths = list(dict.fromkeys(golden)) if golden else default_golden_paths()
    if not paths:
        raise InvalidArgumentError(f"no golden files given and none bundled in "
                                   f"{bundled_golden_dir()} (a broken installation?)")
    # Every file is checked: a bad one does not hide the others.
    documents: dict[Path, dict[str, Any]] = {}
    failures: dict[Path, DlkitError] = {}
    for path in paths:
        try:
            documents[path] = load_golden(path)
        except DlkitError as exc:
            failures[path] = exc
    reports = []
    with progress(enabled=not quiet) as bar:
        task = bar.add_task("hashing indices",
                            total=sum(golden_work(d, full) for d in documents.values()))
        for path, document in documents.items():
            bar.update(task, description=f"verifying {path.name}")
            try:
                reports.append(verify_golden(path, full=full, document=document,
                                             progress=lambda n: bar.advance(task, n)))
            except DlkitError as exc:
                failures[path] = exc
    failures = {path: failures[path] for path in paths if path in failures}  # given order
    if as_json:
        print_json({"ok": not failures, "files": [r.__dict__ for r in reports],
                    "failures": [{"path": str(p), "code": e.code, "message": str(e)}
                                 for p, e in failures.items()]})
    elif not quiet:
        for r in reports:
            skipped = (f", {counted(r.full_digests_skipped, 'full digest')} left for --full"
                       if r.full_digests_skipped else "")
            err_console.print(
                f"[green]ok[/] {plain(Path(r.path).name)}: {counted(r.cases, 'case')}, "
                f"{counted(r.streams_checked, 'stream')}, "
                f"{counted(r.full_digests_checked, 'full digest')}, "
                f"{counted(r.positions_checked, 'position')}{skipped}")
    if len(failures) == 1:
        raise next(iter(failures.values()))
    if failures:  # each in the order given, then the verdict, which a mismatch decides
        for failure in failures.values():
            print_error(failure)
        mismatch = any(isinstance(e, GoldenMismatchError) for e in failures.values())
        verdict = GoldenMismatchError if mismatch else GoldenFileError
        raise verdict(f"{len(failures)} of {len(paths)} golden files failed (above)")
