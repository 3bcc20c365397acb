"""The work behind ``dlkit batches``: one (task, split) stream's batches written as files.

``write_batches`` streams one (task, split) dataset through the same plan and schedules the
``Sampler`` uses (so a task's train batches here are that task's batches in a multi-task
run, in order) and writes each batch as ``.npz``, into a directory that replaces the output
directory only when complete.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from dlkit.atomic import AtomicDirectory, TargetKind
from dlkit.errors import InvalidArgumentError, OutputError
from dlkit.files import json_object_at
from dlkit.nextbatch.tokens import TrainOrder
from dlkit.sampler import knobs
from dlkit.sampler.arguments import integer
from dlkit.sampler.batch import (
    BatchBuilder,
    BatchConfig,
    BuiltBatch,
    ChildPolicy,
    ContextExamplePolicy,
)
from dlkit.sampler.channel import build_job
from dlkit.sampler.config import SamplerSettings
from dlkit.sampler.database import DatabaseSource, SamplerDatabase, open_db
from dlkit.sampler.labels import LabelInfo
from dlkit.sampler.run_plan import RunConfig, RunPlan, initial_state
from dlkit.sampler.schedule import Job, Schedule
from dlkit.sampler.splits import DEFAULT_TRAIN_ORDER, SPLITS, Split, SplitRatios
from dlkit.sampler.tasks import TaskView
from dlkit.sampler.world import World

INDEX_FILE = "index.json"


@dataclass(frozen=True)
class BatchRequest:
    """One (task, split) stream of batches, as ``dlkit batches`` asks for it; its
    ``settings`` (``SamplerSettings``, the Sampler's own) are parsed once, on construction."""

    task: str
    split: Split | str
    steps: int
    seed: int = knobs.SEED
    split_seed: int = knobs.SPLIT_SEED
    split_ratios: str | tuple[float, ...] | SplitRatios = knobs.SPLIT_RATIOS
    batch_size: int = knobs.BATCH_SIZE
    rank: int = 0
    world_size: int = 1
    sequence_length: int = knobs.SEQUENCE_LENGTH
    max_rows: int = knobs.MAX_ROWS
    bfs_child_width: int = knobs.BFS_CHILD_WIDTH
    sampling_mode: TrainOrder | str = DEFAULT_TRAIN_ORDER  # parsed: a TrainOrder
    bfs_child_policy: ChildPolicy | str = ChildPolicy.UNIFORM
    context_examples: int = knobs.CONTEXT_EXAMPLES
    context_example_policy: ContextExamplePolicy | str = ContextExamplePolicy.RECENT
    settings: SamplerSettings = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sampling_mode", TrainOrder.parse(self.sampling_mode))
        object.__setattr__(self, "split", Split.parse(self.split))
        integer(self.steps, "steps", 1, expected="a positive integer")
        # validates the seeds, ratios, ranks and the train order, S, R and the child width
        object.__setattr__(self, "settings", SamplerSettings.parse(
            seed=self.seed, split_seed=self.split_seed, split_ratios=self.split_ratios,
            batch_size=self.batch_size, world=World(self.rank, self.world_size),
            sampling_mode=self.sampling_mode, sequence_length=self.sequence_length,
            max_rows=self.max_rows, bfs_child_width=self.bfs_child_width,
            bfs_child_policy=self.bfs_child_policy, context_examples=self.context_examples,
            context_example_policy=self.context_example_policy))

    @property
    def run(self) -> RunConfig:
        return self.settings.run

    @property
    def batch_config(self) -> BatchConfig:
        return self.settings.batch


def iter_batches(db: SamplerDatabase, request: BatchRequest) -> Iterator[tuple[Job, BuiltBatch]]:
    """The first ``request.steps`` batches of one (task, split) stream on one rank."""
    return open_batch_stream(db, request)[1]


def stream_schedule(db: SamplerDatabase, request: BatchRequest
                    ) -> tuple[BatchBuilder, TaskView, Schedule]:
    """The builder, task and step schedule of one (task, split) stream on one rank: step
    ``k``'s seeds are ``schedule.job(k)``'s, at O(1) per step."""
    settings = request.settings
    plan = RunPlan(db, settings.run)
    builder = BatchBuilder(db, settings.batch, settings.run.seed)
    view = builder.task(request.task)
    split = Split.parse(request.split)  # parsed by the request: the Split itself
    streams = plan.streams(split, [view])
    if not streams:
        raise InvalidArgumentError(f"task {view.name!r} has no {request.split} batch on rank "
                                   f"{request.rank} of {request.world_size} (see the warning)")
    state = initial_state(split, streams)
    train = split is Split.TRAIN
    schedule: Schedule = (plan.train_schedule(streams, [1.0], state) if train
                          else plan.eval_schedule(streams, state))
    return builder, view, schedule


def open_batch_stream(db: SamplerDatabase, request: BatchRequest
                      ) -> tuple[LabelInfo, Iterator[tuple[Job, BuiltBatch]]]:
    """The task's labels and ``iter_batches``' batches (checked before the first is built)."""
    builder, view, schedule = stream_schedule(db, request)

    def batches() -> Iterator[tuple[Job, BuiltBatch]]:
        for step in range(request.steps):
            job = schedule.job(step)
            yield job, build_job((builder,), job)

    return builder.label_info(view), batches()


@dataclass(frozen=True)
class BatchesSummary:
    output: str
    files: list[str]
    steps: int
    sequences: int
    cells: int
    index_file: str


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    # numpy's stub types every keyword of savez as its allow_pickle flag (a bool)
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


def is_batches_dir(path: Path) -> bool:
    """A directory that looks like ``write_batches`` output (its index names the database
    and lists the batches)."""
    doc = json_object_at(path / INDEX_FILE)
    return doc is not None and {"database_id", "batches"} <= doc.keys()


def batches_files(path: Path) -> list[str]:
    """The files a batches directory holds by its index: the index and every batch file."""
    batches = (json_object_at(path / INDEX_FILE) or {}).get("batches")
    entries = batches if isinstance(batches, list) else []
    return [INDEX_FILE, *(str(entry["file"]) for entry in entries
                          if isinstance(entry, dict) and "file" in entry)]


BATCHES = TargetKind("batches directory", is_batches_dir, batches_files)


def _write(root: Path, out: Path, name: str, data: bytes) -> None:
    try:
        (root / name).write_bytes(data)
    except OSError as exc:  # the temporary directory's name would mean nothing to the user
        raise OutputError(f"cannot write {name}: {exc.strerror or exc}", path=out) from None


def write_batches(db_path: DatabaseSource, request: BatchRequest, out_dir: str | Path,
                  on_batch: Callable[[int], None] | None = None,
                  overwrite: bool = False) -> BatchesSummary:
    """Write ``step_NNNNNN.npz`` (exactly the batch keys) per step and ``index.json``
    (per step: file, task, epoch, cursor, anchor rows) into a new ``out_dir``. With
    ``overwrite`` an existing one (empty, or an earlier run's) is replaced as a whole, so no
    file of an earlier run stays beside the new index, and only once every file is written."""
    out = Path(out_dir)
    target = AtomicDirectory(out, BATCHES, overwrite=overwrite)
    db, owned = open_db(db_path)
    files, entries, sequences, cells = [], [], 0, 0
    try:
        with target as root:
            labels, batches = open_batch_stream(db, request)
            for job, built in batches:
                name = f"step_{job.step:06d}.npz"
                _write(root, out, name, npz_bytes(built.arrays))
                files.append(name)
                sequences += int(built.seed_indices.shape[0])
                cells += int(built.cell_counts.sum())
                entries.append({"step": job.step, "file": name, "task": built.task,
                                "dataset": job.stream.key, "epoch": job.cursor.epoch,
                                "global_index": job.cursor.global_index,
                                "anchor_rows": built.anchor_rows.tolist()})
                if on_batch is not None:
                    on_batch(1)
            index = {"database_id": db.database_id, "request": _request_json(request),
                     "labels": labels.to_json(), "batches": entries}
            _write(root, out, INDEX_FILE, (json.dumps(index, indent=1) + "\n").encode())
            target.commit()
    finally:
        if owned:
            db.close()
    return BatchesSummary(str(out), files, len(files), sequences, cells, str(out / INDEX_FILE))


def _request_json(request: BatchRequest) -> dict[str, Any]:
    """The request as index.json records it: its arguments (not the parsed settings), the
    ratios, split and train order spelled as the CLI takes them."""
    value = {f.name: getattr(request, f.name) for f in fields(request) if f.init}
    run, batch = request.settings.run, request.settings.batch
    value["split_ratios"] = str(run.split_ratios)
    value["split"] = Split.parse(request.split).value
    value["sampling_mode"] = run.sampling_mode.short
    if batch.bfs_child_policy is ChildPolicy.UNIFORM:  # the default: earlier indexes, exactly
        del value["bfs_child_policy"]
    else:
        value["bfs_child_policy"] = batch.bfs_child_policy.value
    # context examples likewise: recorded only when on or not the default policy
    if batch.context_examples == knobs.CONTEXT_EXAMPLES:
        del value["context_examples"]
    if batch.context_example_policy is ContextExamplePolicy.RECENT:
        del value["context_example_policy"]
    else:
        value["context_example_policy"] = batch.context_example_policy.value
    return value


__all__ = ["SPLITS", "BatchRequest", "BatchesSummary", "iter_batches", "open_batch_stream",
           "write_batches"]
