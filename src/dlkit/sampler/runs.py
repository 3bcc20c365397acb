"""The work behind ``dlkit manifest`` and ``dlkit batches``: library calls the CLI renders.

``write_run_manifest`` hash-splits every task and writes the run manifest for ``dlkit sample``.
``write_batches`` streams one (task, split) dataset through the same schedules the
``Sampler`` uses (so a task's train batches here are that task's batches in a multi-task
run, in order) and writes each batch as ``.npz``, into a directory that replaces the output
directory only when complete.
"""

from __future__ import annotations

import io
import json
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlkit.atomic import AtomicDirectory, TargetKind, atomic_write_bytes
from dlkit.db.task_rules import rules_of, timeless_warning
from dlkit.errors import InvalidArgumentError, OutputError
from dlkit.files import json_object_at
from dlkit.nextbatch import RunManifest, Stage
from dlkit.sampler.api import open_db
from dlkit.sampler.batch import BatchBuilder, BatchConfig, BuiltBatch
from dlkit.sampler.labels import LabelInfo
from dlkit.sampler.schedule import Job, SamplerWarning, TrainSchedule, ValSchedule, open_streams
from dlkit.sampler.splits import (
    DEFAULT_SAMPLING_MODE,
    SPLITS,
    SplitRatios,
    build_run_manifest,
    check_seed,
    compute_splits,
    dataset_key,
    split_index,
    train_sampling_mode,
)
from dlkit.text import counted

INDEX_FILE = "index.json"


@dataclass(frozen=True)
class ManifestSummary:
    path: str
    database_id: str
    manifest_hash: str
    global_batch_size: int
    sampling_mode: str = ""
    datasets: dict[str, int] = field(default_factory=dict)


def make_run_manifest(db: Any, *, seed: int, global_batch_size: int, split_seed: int = 0,
                      split_ratios: SplitRatios | str | tuple[float, ...] = (0.8, 0.1, 0.1),
                      sampler_block_size: int | None = None,
                      sampling_mode: str = DEFAULT_SAMPLING_MODE) -> RunManifest:
    """The run manifest of every task and split of an open database (train order
    ``sampling_mode``: ``"v3"``, the default, or ``"v2"``)."""
    ratios = SplitRatios.parse(split_ratios)
    builder_tasks = db.tasks
    splits = compute_splits(builder_tasks, check_seed(split_seed, "split_seed"), ratios)
    return build_run_manifest(db.database_id, db.database_hash, splits, seed=seed,
                              global_batch_size=global_batch_size, split_seed=split_seed,
                              ratios=ratios, sampler_block_size=sampler_block_size,
                              sampling_mode=sampling_mode)


def write_run_manifest(db_path: Any, out: str | Path, *, seed: int, global_batch_size: int,
                       split_seed: int = 0,
                       split_ratios: SplitRatios | str | tuple[float, ...] = (0.8, 0.1, 0.1),
                       sampler_block_size: int | None = None,
                       sampling_mode: str = DEFAULT_SAMPLING_MODE,
                       overwrite: bool = True) -> ManifestSummary:
    """Write the run manifest (atomically; an existing ``out`` only with ``overwrite``) and
    summarise it."""
    train_sampling_mode(sampling_mode)  # a bad mode fails before the database is opened
    db, owned = open_db(db_path)
    try:
        manifest = make_run_manifest(db, seed=seed, global_batch_size=global_batch_size,
                                     split_seed=split_seed, split_ratios=split_ratios,
                                     sampler_block_size=sampler_block_size,
                                     sampling_mode=sampling_mode)
        atomic_write_bytes(out, manifest.to_json().encode(), overwrite=overwrite)
        _warn_unusable(manifest)
        _warn_timeless(db)
        return ManifestSummary(str(out), db.database_id, manifest.manifest_hash.hex(),
                               manifest.global_batch_size, manifest.data.sampling_mode,
                               {key: e.cardinality for key, e in manifest.datasets.items()})
    finally:
        if owned:
            db.close()


def _warn_timeless(db: Any) -> None:
    """A ``SamplerWarning`` per task on a table without a time column (unless the schema says
    it is static on purpose): its sequences see every row, whatever its time."""
    for task in db.tasks:
        table = db.table(task.table)
        if getattr(table, "time_column", None) is None and not rules_of(task).static:
            warnings.warn(timeless_warning(task.name, table.name), SamplerWarning,
                          stacklevel=3)


def _warn_unusable(manifest: RunManifest) -> None:
    """A ``SamplerWarning`` per dataset that can never yield a step: train drops a partial
    batch, so it needs a global batch of seeds; val and test (sampled in order, partial last
    batch kept) need one seed."""
    gbs = manifest.global_batch_size
    for key, entry in manifest.datasets.items():
        n = entry.cardinality
        if n == 0:
            warnings.warn(f"dataset {key!r} has no seed: it yields no step", SamplerWarning,
                          stacklevel=3)
        elif key.endswith("/train") and n < gbs:
            warnings.warn(f"dataset {key!r} has {counted(n, 'seed')}, fewer than the global "
                          f"batch size {gbs}: it yields no train step (a partial batch is "
                          "dropped)", SamplerWarning, stacklevel=3)


@dataclass(frozen=True)
class BatchRequest:
    """One (task, split) stream of batches, as ``dlkit batches`` asks for it."""

    task: str
    split: str
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
    sampling_mode: str = DEFAULT_SAMPLING_MODE

    def __post_init__(self) -> None:
        split_index(self.split)
        train_sampling_mode(self.sampling_mode)
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 1:
            raise InvalidArgumentError(f"steps must be a positive integer, got {self.steps!r}")
        if self.batch_size < 1 or self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise InvalidArgumentError(
                f"need batch_size >= 1 and 0 <= rank < world_size, got batch_size "
                f"{self.batch_size}, rank {self.rank}, world_size {self.world_size}")


def iter_batches(db: Any, request: BatchRequest) -> Iterator[tuple[Job, BuiltBatch]]:
    """The first ``request.steps`` batches of one (task, split) stream on one rank."""
    return open_batch_stream(db, request)[1]


def open_batch_stream(db: Any, request: BatchRequest
                      ) -> tuple[LabelInfo, Iterator[tuple[Job, BuiltBatch]]]:
    """The task's labels and ``iter_batches``' batches (checked before the first is built)."""
    ratios = SplitRatios.parse(request.split_ratios)
    config = BatchConfig(request.sequence_length, request.max_rows, request.bfs_child_width)
    builder = BatchBuilder(db, config, check_seed(request.seed, "seed"))
    view = builder.task(request.task)
    splits = compute_splits(builder.tasks, check_seed(request.split_seed, "split_seed"), ratios)
    manifest = build_run_manifest(db.database_id, db.database_hash, splits, seed=request.seed,
                                  global_batch_size=request.batch_size * request.world_size,
                                  split_seed=request.split_seed, ratios=ratios,
                                  sampling_mode=request.sampling_mode)
    key = dataset_key(db.database_id, view.name, request.split)
    stage = Stage.TRAIN if request.split == "train" else Stage.EVAL
    streams = open_streams(manifest, [(key, view, splits[view.index].of(request.split))],
                           request.world_size, request.rank, stage)
    if not streams:
        raise InvalidArgumentError(f"task {view.name!r} has no {request.split} batch on rank "
                                   f"{request.rank} of {request.world_size} (see the warning)")
    schedule: TrainSchedule | ValSchedule = (
        TrainSchedule(streams, [1.0], request.seed) if stage is Stage.TRAIN
        else ValSchedule(streams))

    def batches() -> Iterator[tuple[Job, BuiltBatch]]:
        for step in range(request.steps):
            result = schedule.job(step)
            job = result[0] if isinstance(result, tuple) else result
            yield job, builder.build(view, job.stream.seed_indices(job.cursor),
                                     job.cursor.epoch)

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
    np.savez(buffer, **arrays)
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


def write_batches(db_path: Any, request: BatchRequest, out_dir: str | Path,
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
    return value


__all__ = ["SPLITS", "BatchRequest", "BatchesSummary", "ManifestSummary", "iter_batches",
           "make_run_manifest", "write_batches", "write_run_manifest"]
