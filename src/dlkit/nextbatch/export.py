"""Writing a rank's index stream: text lines, raw little-endian uint64, or ``.npy``.

The stream is produced in bounded chunks (``SamplingPlan.iter_chunks``), so an epoch of any
size is written with constant memory. A trace, when requested, gets one record per step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from dlkit.core.jit import cheaper_interpreted, interpreted
from dlkit.nextbatch.cursor import Cursor
from dlkit.nextbatch.formats import OutputFormat
from dlkit.nextbatch.stage import Stage

if TYPE_CHECKING:  # imported where used: sampler and trace load the kernels (dlkit._lazy)
    from dlkit.nextbatch.run_manifest import RunManifest
    from dlkit.nextbatch.sampler import SamplingPlan
    from dlkit.nextbatch.trace import TraceWriter


@dataclass(frozen=True)
class ExportSummary:
    steps: int
    indices: int
    cursor_start: Cursor
    cursor_end: Cursor


def _npy_header(count: int) -> bytes:
    import io

    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": "<u8", "fortran_order": False, "shape": (count,)})
    return buffer.getvalue()


def _text_lines(chunk_indices: np.ndarray, counts: np.ndarray) -> bytes:
    values = chunk_indices.tolist()
    lines = []
    offset = 0
    for count in counts.tolist():
        lines.append(" ".join(map(str, values[offset:offset + count])))
        offset += count
    return ("\n".join(lines) + "\n").encode()


def export_steps(plan: SamplingPlan, cursor: Cursor, steps: int | None, fmt: OutputFormat,
                 out: BinaryIO, *, trace: TraceWriter | None = None,
                 on_progress: Callable[[int], None] | None = None) -> ExportSummary:
    """Write ``steps`` steps (None: to the end of the epoch) of ``plan`` from ``cursor``."""
    fmt = OutputFormat(fmt)
    if fmt is OutputFormat.NPY:
        out.write(_npy_header(plan.count_indices(cursor, steps)))
    start = cursor
    total_steps = total_indices = 0
    for chunk in plan.iter_chunks(cursor, steps):
        if fmt is OutputFormat.TXT:
            out.write(_text_lines(chunk.indices, chunk.counts))
        else:
            out.write(np.ascontiguousarray(chunk.indices, dtype="<u8").data.cast("B"))
        if trace is not None:
            for before, indices in zip(chunk.step_cursors(plan), chunk.split()):
                trace.record(indices, before, plan.advance(before))
        total_steps += chunk.num_steps
        total_indices += int(chunk.indices.shape[0])
        cursor = chunk.cursor_after
        if on_progress is not None:
            on_progress(chunk.num_steps)
    return ExportSummary(total_steps, total_indices, start, cursor)


@dataclass(frozen=True)
class SampleRequest:
    """Everything ``dlkit sample`` needs; ``None`` means the documented default."""

    manifest_path: str
    dataset_key: str
    rank: int
    world_size: int
    stage: str = "train"
    epoch: int | None = None
    start_index: int | None = None
    resume: str | None = None
    steps: int | None = None
    fmt: OutputFormat = OutputFormat.TXT
    out: str | None = None
    trace: str | None = None
    checkpoint_out: str | None = None
    actual_cardinality: int | None = None
    overwrite: bool = False


@dataclass(frozen=True)
class SampleSummary(ExportSummary):
    """What ``run_sample`` did, and what the user should know about it (``notes``)."""

    notes: tuple[str, ...] = ()


def resolve_start(request: SampleRequest, manifest_hash: bytes
                  ) -> tuple[Cursor, dict[str, Cursor], tuple[str, ...]]:
    """The starting cursor, the other datasets' cursors to carry into a new checkpoint, and
    notes for the user. A checkpoint of another run (another manifest, dataset or stage) is
    refused, before anything else about the run is checked: that mismatch is the mistake,
    whatever else the run would then trip on."""
    from dlkit.atomic_journal import settle
    from dlkit.errors import CheckpointError, InvalidArgumentError
    from dlkit.nextbatch.cursor import read_checkpoint

    if request.resume is None:
        return Cursor(request.epoch or 0, request.start_index or 0), {}, ()
    if request.start_index is not None:
        raise InvalidArgumentError("--start-index and --resume are mutually exclusive")
    settle(request.resume)  # a commit of it that a killed run decided is finished first
    checkpoint = read_checkpoint(request.resume)
    cursors = dict(checkpoint.cursors)
    notes: tuple[str, ...] = ()
    if checkpoint.manifest_hash is None:
        notes = (f"{request.resume} names no run manifest (written by dlkit 0.1): its cursor "
                 "is used unchecked; the checkpoint written now is bound to this run",)
    else:
        _check_binding(request, checkpoint.manifest_hash, checkpoint.dataset_key,
                       checkpoint.stage, manifest_hash)
        if checkpoint.stage is None:
            notes = (f"{request.resume} does not record its stage (written by an earlier "
                     f"dlkit): its cursor is used unchecked at stage {request.stage}; the "
                     "checkpoint written now records it",)
    if request.dataset_key not in cursors:
        known = ", ".join(sorted(cursors)) or "none"
        raise CheckpointError(f"holds no cursor for dataset {request.dataset_key!r} "
                              f"(it has: {known})", path=request.resume)
    cursor = cursors[request.dataset_key]
    if request.epoch is not None and request.epoch != cursor.epoch:
        raise InvalidArgumentError(
            f"--epoch {request.epoch} contradicts the checkpoint's epoch {cursor.epoch}; "
            "omit --epoch when resuming")
    return cursor, cursors, notes


def _check_binding(request: SampleRequest, written_hash: bytes, written_key: str | None,
                   written_stage: Stage | None, manifest_hash: bytes) -> None:
    """Refuse a checkpoint written by another run, naming what it was written with and what
    this run has."""
    from dlkit.errors import CheckpointError

    if written_hash != manifest_hash:
        problem = (f"it was written with manifest hash {written_hash.hex()}, and "
                   f"{request.manifest_path} has manifest hash {manifest_hash.hex()}")
    elif written_key != request.dataset_key:
        problem = (f"it was written for dataset {written_key!r}, and this run samples "
                   f"dataset {request.dataset_key!r}")
    elif (written_stage is not None and written_stage.value != request.stage
          # a stage that is none of them is SamplingPlan.create's INVALID_STAGE_TYPE
          and request.stage in {s.value for s in Stage}):
        problem = (f"it was written at stage {written_stage.value}, and this run samples "
                   f"stage {request.stage}")
    else:
        return
    raise CheckpointError(f"belongs to another run: {problem}", path=request.resume)


def check_outputs(request: SampleRequest, stdout: BinaryIO | None = None) -> None:
    """Refuse outputs that would lose a file: an existing one without ``overwrite``, a
    symbolic link (see :func:`dlkit.outputs.output_kind`), one that is an input (the manifest,
    the checkpoint resumed from) or the same file as another output, or as ``stdout`` when
    the indices go there (the binary trace would be mixed into them). The one exception:
    ``--checkpoint-out`` may be the checkpoint resumed from (with ``overwrite``), which it
    advances: it is read whole before anything is written, and replaced atomically."""
    from dlkit.outputs import output_kind, refuse_overlap, refuse_shared_stream, stream_identity

    outputs = {"--out": request.out, "--trace": request.trace,
               "--checkpoint-out": request.checkpoint_out}
    refuse_overlap(outputs, {"the manifest": request.manifest_path})
    refuse_overlap({"--out": request.out, "--trace": request.trace},
                   {"the checkpoint of --resume": request.resume})
    refuse_shared_stream(outputs, None if request.out is not None or stdout is None
                         else stream_identity(stdout), "the indices")
    for path in outputs.values():
        if path is not None:
            output_kind(path, request.overwrite)


def check_not_empty(request: SampleRequest, manifest: RunManifest) -> None:
    """Refuse a dataset with no seeds as what it is, not as the NextBatch profile's
    ``CARDINALITY_MISMATCH`` for ``N == 0`` (nothing mismatches). The dataset named on the
    command line has nothing the run could sample: a usage error (docs/cli.md), exit 2.
    A ``--cardinality`` that is not 0 does mismatch, and is left to ``SamplingPlan.create``."""
    from dlkit.errors import InvalidArgumentError

    entry = manifest.datasets.get(request.dataset_key)
    if entry is not None and entry.cardinality == 0 and not request.actual_cardinality:
        raise InvalidArgumentError(f"dataset {request.dataset_key!r} of "
                                   f"{request.manifest_path} has no seeds: nothing to sample")


# A run this short is sampled sooner by the kernels' Python (3 us an index) than numba starts
# (0.35 s a process): measured with dlkit sample of the example manifest, 10 to 10^5 steps.
INTERPRET_BELOW_INDICES = 1 << 16


def run_sample(request: SampleRequest, stdout: BinaryIO, *,
               on_start: Callable[[int], None] | None = None,
               on_progress: Callable[[int], None] | None = None) -> SampleSummary:
    """``dlkit sample``: validate, stream the steps to the output, write trace and checkpoint.

    The output files (``out``, ``trace``, ``checkpoint_out``) appear together, complete, or
    not at all (:class:`dlkit.atomic.AtomicFiles`); on failure or interrupt none of them is
    replaced and no temporary file is left.
    """
    from dlkit.atomic import AtomicFiles
    from dlkit.errors import CheckpointError, NextBatchError
    from dlkit.nextbatch.cursor import Checkpoint, checkpoint_bytes
    from dlkit.nextbatch.run_manifest import load_manifest
    from dlkit.nextbatch.sampler import SamplingPlan
    from dlkit.nextbatch.trace import TraceWriter

    check_outputs(request, stdout)
    manifest = load_manifest(request.manifest_path)
    cursor, carried, notes = resolve_start(request, manifest.manifest_hash)
    check_not_empty(request, manifest)
    plan = SamplingPlan.create(manifest, request.dataset_key, request.world_size, request.rank,
                               request.stage, actual_cardinality=request.actual_cardinality)
    try:
        plan.check_cursor(cursor)
    except NextBatchError as exc:
        if request.resume is None:
            raise
        raise CheckpointError(f"its cursor does not fit this run: {exc.message}",
                              path=request.resume) from None
    steps = request.steps if request.steps is not None else plan.steps_to_epoch_end(cursor)
    if on_start is not None:
        on_start(steps)
    paths = [p for p in (request.out, request.trace, request.checkpoint_out) if p is not None]
    files = AtomicFiles(paths, overwrite=request.overwrite)
    with files as streams:
        opened = iter(streams)  # in the order of ``paths``
        out = stdout if request.out is None else next(opened)
        trace_writer = None if request.trace is None else TraceWriter(
            None, plan, cursor, stream=next(opened))
        with contextlib.ExitStack() as stack:
            trace = None if trace_writer is None else stack.enter_context(trace_writer)
            stack.enter_context(interpreted(cheaper_interpreted(
                steps * plan.micro_batch_size, INTERPRET_BELOW_INDICES)))
            summary = export_steps(plan, cursor, request.steps, request.fmt, out, trace=trace,
                                   on_progress=on_progress)
        if request.checkpoint_out is not None:
            next(opened).write(checkpoint_bytes(Checkpoint(
                {**carried, request.dataset_key: summary.cursor_end},
                manifest.manifest_hash, request.dataset_key, plan.stage)))
        if request.out is None:
            stdout.flush()  # the indices reached their reader before the files appear
        files.commit()
    return SampleSummary(summary.steps, summary.indices, summary.cursor_start,
                         summary.cursor_end, notes)
