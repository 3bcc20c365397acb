"""Writing a rank's index stream: text lines, raw little-endian uint64, or ``.npy``.

The stream is produced in bounded chunks (``SamplingPlan.iter_chunks``), so an epoch of any
size is written with constant memory. A trace, when requested, gets one record per step.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from dlkit.nextbatch.cursor import Cursor

if TYPE_CHECKING:  # imported where used: they load the kernels (see dlkit._lazy)
    from dlkit.nextbatch.sampler import SamplingPlan
    from dlkit.nextbatch.trace import TraceWriter


class OutputFormat(str, enum.Enum):
    TXT = "txt"
    NPY = "npy"
    BIN = "bin"


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
            out.write(memoryview(np.ascontiguousarray(chunk.indices, dtype="<u8")).cast("B"))
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


def resolve_start(request: SampleRequest) -> tuple[Cursor, dict[str, Cursor]]:
    """The starting cursor, and the other datasets' cursors to carry into a new checkpoint."""
    from dlkit.errors import CheckpointError, InvalidArgumentError
    from dlkit.nextbatch.cursor import load_checkpoint

    if request.resume is not None:
        if request.start_index is not None:
            raise InvalidArgumentError("--start-index and --resume are mutually exclusive")
        cursors = load_checkpoint(request.resume)
        if request.dataset_key not in cursors:
            known = ", ".join(sorted(cursors)) or "none"
            raise CheckpointError(f"holds no cursor for dataset {request.dataset_key!r} "
                                  f"(it has: {known})", path=request.resume)
        cursor = cursors[request.dataset_key]
        if request.epoch is not None and request.epoch != cursor.epoch:
            raise InvalidArgumentError(
                f"--epoch {request.epoch} contradicts the checkpoint's epoch {cursor.epoch}; "
                "omit --epoch when resuming")
        return cursor, cursors
    return Cursor(request.epoch or 0, request.start_index or 0), {}


def run_sample(request: SampleRequest, stdout: BinaryIO, *,
               on_start: Callable[[int], None] | None = None,
               on_progress: Callable[[int], None] | None = None) -> ExportSummary:
    """``dlkit sample``: validate, stream the steps to the output, write trace and checkpoint.

    Every output file is written atomically; on failure none of them is replaced.
    """
    import contextlib

    from dlkit.atomic import atomic_writer
    from dlkit.errors import CheckpointError, NextBatchError
    from dlkit.nextbatch.cursor import save_checkpoint
    from dlkit.nextbatch.manifest import load_manifest
    from dlkit.nextbatch.sampler import SamplingPlan
    from dlkit.nextbatch.trace import TraceWriter

    manifest = load_manifest(request.manifest_path)
    plan = SamplingPlan.create(manifest, request.dataset_key, request.world_size, request.rank,
                               request.stage, actual_cardinality=request.actual_cardinality)
    cursor, carried = resolve_start(request)
    try:
        plan.check_cursor(cursor)
    except NextBatchError as exc:
        if request.resume is None:
            raise
        raise CheckpointError(f"its cursor does not fit this run: {exc.message}",
                              path=request.resume) from None
    if on_start is not None:
        on_start(request.steps if request.steps is not None else plan.steps_to_epoch_end(cursor))
    with contextlib.ExitStack() as stack:
        out = stdout if request.out is None else stack.enter_context(atomic_writer(request.out))
        trace = None
        if request.trace is not None:
            trace = stack.enter_context(TraceWriter(request.trace, plan, cursor))
        summary = export_steps(plan, cursor, request.steps, request.fmt, out, trace=trace,
                               on_progress=on_progress)
    if request.checkpoint_out is not None:
        save_checkpoint(request.checkpoint_out, {**carried, request.dataset_key: summary.cursor_end})
    return summary
