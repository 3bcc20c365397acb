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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlkit.atomic import AtomicDirectory, TargetKind
from dlkit.errors import InvalidArgumentError, OutputError
from dlkit.files import json_object_at
from dlkit.nextbatch.tokens import TrainOrder
from dlkit.sampler.arguments import integer
from dlkit.sampler.batch import BatchBuilder, BatchConfig, BuiltBatch, ChildPolicy
from dlkit.sampler.channel import build_job
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
    """One (task, split) stream of batches, as ``dlkit batches`` asks for it."""

    task: str
    split: Split | str
    steps: int
    seed: int = 0
    split_seed: int = 0
    split_ratios: str | tuple[float, ...] | SplitRatios = (0.8, 0.1, 0.1)
    batch_size: int = 32
    rank: int = 0
    world_size: int = 1
    sequence_length: int = 1024
    max_rows: int = 256
    bfs_child_width: int = 16
    sampling_mode: TrainOrder | str = DEFAULT_TRAIN_ORDER  # parsed: a TrainOrder
    bfs_child_policy: ChildPolicy | str = ChildPolicy.UNIFORM

    def __post_init__(self) -> None:
        object.__setattr__(self, "sampling_mode", TrainOrder.parse(self.sampling_mode))
        object.__setattr__(self, "split", Split.parse(self.split))
        integer(self.steps, "steps", 1, expected="a positive integer")
        self.run  # noqa: B018 - validates the seeds, ratios, ranks and the train order
        self.batch_config  # noqa: B018 - validates S, R and the child width

    @property
    def run(self) -> RunConfig:
        return RunConfig(seed=self.seed, batch_size=self.batch_size,
                          world=World(self.rank, self.world_size), split_seed=self.split_seed,
                          split_ratios=SplitRatios.parse(self.split_ratios),
                          sampling_mode=TrainOrder.parse(self.sampling_mode))

    @property
    def batch_config(self) -> BatchConfig:
        return BatchConfig(self.sequence_length, self.max_rows, self.bfs_child_width,
                           bfs_child_policy=ChildPolicy.parse(self.bfs_child_policy))


def iter_batches(db: SamplerDatabase, request: BatchRequest) -> Iterator[tuple[Job, BuiltBatch]]:
    """The first ``request.steps`` batches of one (task, split) stream on one rank."""
    return open_batch_stream(db, request)[1]


def stream_schedule(db: SamplerDatabase, request: BatchRequest
                    ) -> tuple[BatchBuilder, TaskView, Schedule]:
    """The builder, task and step schedule of one (task, split) stream on one rank: step
    ``k``'s seeds are ``schedule.job(k)``'s, at O(1) per step."""
    plan = RunPlan(db, request.run)
    builder = BatchBuilder(db, request.batch_config, request.seed)
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
            yield job, build_job(builder, job)

    return builder.label_info(view), batches()


@dataclass(frozen=True)
class BatchesSummary:
    out_dir: str
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


BATCHES = TargetKind("batches directory", is_batches_dir)


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
    value = dict(request.__dict__)
    value["split_ratios"] = str(SplitRatios.parse(request.split_ratios))
    value["split"] = Split.parse(request.split).value
    value["sampling_mode"] = TrainOrder.parse(request.sampling_mode).short
    policy = ChildPolicy.parse(request.bfs_child_policy)
    if policy is ChildPolicy.UNIFORM:  # the default: the index of earlier versions, exactly
        del value["bfs_child_policy"]
    else:
        value["bfs_child_policy"] = policy.value
    return value


__all__ = ["SPLITS", "BatchRequest", "BatchesSummary", "iter_batches", "open_batch_stream",
           "write_batches"]
