"""The work behind ``dlkit manifest``: the run manifest of every task and split of a database.

``write_run_manifest`` hash-splits every task (``dlkit.sampler.run_plan``, as the ``Sampler``
does) and writes the run manifest ``dlkit sample`` reads, warning of each dataset that can
never yield a step.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

from dlkit.atomic import atomic_write_bytes
from dlkit.db.task_rules import rules_of, timeless_warning
from dlkit.nextbatch import RunManifest
from dlkit.nextbatch.tokens import TrainOrder
from dlkit.sampler import knobs
from dlkit.sampler.arguments import integer
from dlkit.sampler.database import DatabaseSource, SamplerDatabase, open_db
from dlkit.sampler.run_plan import RunConfig, RunPlan
from dlkit.sampler.schedule import SamplerWarning
from dlkit.sampler.splits import DEFAULT_TRAIN_ORDER, SplitRatios
from dlkit.text import counted


@dataclass(frozen=True)
class ManifestSummary:
    output: str  # the manifest written
    database_id: str
    manifest_hash: str
    global_batch_size: int
    sampling_mode: str = ""
    datasets: dict[str, int] = field(default_factory=dict)


def make_run_manifest(db: SamplerDatabase, *, seed: int, global_batch_size: int,
                      split_seed: int = knobs.SPLIT_SEED,
                      split_ratios: SplitRatios | str | tuple[float, ...] = knobs.SPLIT_RATIOS,
                      sampler_block_size: int | None = None,
                      sampling_mode: TrainOrder | str = DEFAULT_TRAIN_ORDER) -> RunManifest:
    """The run manifest of every task and split of an open database (train order
    ``sampling_mode``: ``TrainOrder.V3``, the default, or ``V2``, or their names ``"v3"``,
    ``"v2"``): the plan of one rank whose batch is the global batch (the Sampler's
    ``RunConfig``, parsed by ``RunConfig.parse``)."""
    batch = integer(global_batch_size, "global batch size", 1, expected="a positive integer")
    config = RunConfig.parse(seed=seed, batch_size=batch, split_seed=split_seed,
                             split_ratios=split_ratios, sampling_mode=sampling_mode,
                             sampler_block_size=sampler_block_size)
    return RunPlan(db, config).manifest


def write_run_manifest(db_path: DatabaseSource, out: str | Path, *, seed: int,
                       global_batch_size: int, split_seed: int = knobs.SPLIT_SEED,
                       split_ratios: SplitRatios | str | tuple[float, ...] = knobs.SPLIT_RATIOS,
                       sampler_block_size: int | None = None,
                       sampling_mode: TrainOrder | str = DEFAULT_TRAIN_ORDER,
                       overwrite: bool = True) -> ManifestSummary:
    """Write the run manifest (atomically; an existing ``out`` only with ``overwrite``) and
    summarise it."""
    order = TrainOrder.parse(sampling_mode)  # a bad mode fails before the database is opened
    db, owned = open_db(db_path)
    try:
        manifest = make_run_manifest(db, seed=seed, global_batch_size=global_batch_size,
                                     split_seed=split_seed, split_ratios=split_ratios,
                                     sampler_block_size=sampler_block_size,
                                     sampling_mode=order)
        atomic_write_bytes(out, manifest.to_json().encode(), overwrite=overwrite)
        _warn_unusable(manifest)
        _warn_timeless(db)
        return ManifestSummary(str(out), db.database_id, manifest.manifest_hash.hex(),
                               manifest.global_batch_size, manifest.data.sampling_mode,
                               {key: e.cardinality for key, e in manifest.datasets.items()})
    finally:
        if owned:
            db.close()


def _warn_timeless(db: SamplerDatabase) -> None:
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


__all__ = ["ManifestSummary", "make_run_manifest", "write_run_manifest"]
