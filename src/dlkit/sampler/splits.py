"""Hash splits of every task's seeds, their NextBatch datasets, and the run manifest.

A seed's split is a pure function of (anchor row, task index, split seed, ratios) -- see
``dlkit.core.streams`` -- so every rank agrees without communicating and the sampling seed
never moves a seed between splits. A split's seeds, in ascending anchor order, form the
dataset ``"<database id>/<task>/<split>"`` whose cardinality is their count and whose hash
is the database hash.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlkit.core.jit import cheaper_interpreted, interpreted
from dlkit.core.streams import assign_splits, split_buckets, split_positions
from dlkit.db.task_rules import TaskRules, rules_of
from dlkit.encoding import UINT64_MAX
from dlkit.errors import InvalidArgumentError
from dlkit.nextbatch import DataConfig, DatasetEntry, RunManifest
from dlkit.nextbatch.tokens import TrainOrder
from dlkit.sampler.arguments import integer, is_probability
from dlkit.sampler.split import SPLITS as SPLITS
from dlkit.sampler.split import Split as Split

SPLIT_VERSION = "hash-split-v1"
# The sampler's train order unless told otherwise (a manifest without one is v2's).
DEFAULT_TRAIN_ORDER = TrainOrder.V3


@dataclass(frozen=True)
class SplitRatios:
    """Train/val/test shares: non-negative, summing to 1 (to within 1e-6)."""

    train: float = 0.8
    val: float = 0.1
    test: float = 0.1

    def __post_init__(self) -> None:
        values = (self.train, self.val, self.test)
        # Each share from 0 to 1, compared before any conversion or sum (1e308 + 1e308
        # overflows fsum, 10**400 a float; NaN fails the comparison).
        if not all(is_probability(v) for v in values):
            raise InvalidArgumentError(f"split ratios must be three non-negative numbers of at "
                                       f"most 1 each (summing to 1), got {values!r}")
        if abs(math.fsum(values) - 1.0) > 1e-6:
            raise InvalidArgumentError(f"split ratios must sum to 1, got {values!r} "
                                       f"(sum {math.fsum(values)!r})")

    @classmethod
    def parse(cls, value: SplitRatios | Sequence[float] | str) -> SplitRatios:
        """From a ``SplitRatios``, a 3-sequence, or text like ``"0.8,0.1,0.1"``."""
        if isinstance(value, SplitRatios):
            return value
        if isinstance(value, str):
            try:
                value = [float(part) for part in value.split(",")]
            except ValueError:
                raise InvalidArgumentError(
                    f"split ratios must look like 0.8,0.1,0.1, got {value!r}") from None
        items = list(value)
        if len(items) != 3:
            raise InvalidArgumentError(f"split ratios need 3 values (train, val, test), "
                                       f"got {items!r}")
        return cls(*items)

    @property
    def cuts(self) -> tuple[int, int]:
        """Bucket thresholds: train below the first, val below the second (Python round)."""
        return round(1000 * self.train), round(1000 * (self.train + self.val))

    def __str__(self) -> str:
        return f"{self.train:g},{self.val:g},{self.test:g}"  # the --split-ratios syntax


def check_seed(value: Any, name: str) -> int:
    return integer(value, name, 0, UINT64_MAX, expected="an integer in [0, 2^64-1]")


def split_codes(anchor_rows: np.ndarray, task_idx: int, split_seed: int,
                ratios: SplitRatios) -> np.ndarray:
    """Split code per seed: 0 train, 1 val, 2 test."""
    buckets = split_buckets(np.ascontiguousarray(anchor_rows, dtype=np.int64), int(task_idx),
                            np.uint64(split_seed))
    train_cut, val_cut = ratios.cuts
    codes: np.ndarray = assign_splits(buckets, train_cut, val_cut)
    return codes


def dataset_key(database_id: str, task: str, split: str) -> str:
    return f"{database_id}/{task}/{split}"


def split_version(split_seed: int, ratios: SplitRatios, rules: TaskRules | None = None) -> str:
    """The dataset version: it names the split rule so a different split is a new dataset."""
    if rules is not None and rules.split == "time":
        return f"time-split-v1 val_from={rules.val_from} test_from={rules.test_from}"
    if rules is not None and rules.split == "given":
        return "given-split-v1 rows=" + "/".join(str(n) for n in rules.split_rows or ())
    train_cut, val_cut = ratios.cuts
    return f"{SPLIT_VERSION} split_seed={split_seed} buckets={train_cut}/{val_cut}/1000"


def split_codes_by_rule(task: Any, split_seed: int, ratios: SplitRatios) -> np.ndarray:
    """Split code per seed of ``task`` (0 train, 1 val, 2 test) by its rule: hash (the split
    seed and ratios), time (its observation time against the cut-offs) or given (which of the
    table's train, val and test rows its anchor row is)."""
    rules = rules_of(task)
    if rules.split == "time":
        assert rules.val_from is not None and rules.test_from is not None, \
            "a time split has both cut-offs"
        obs = np.asarray(task.obs_time, dtype=np.int64)
        return ((obs >= np.int64(rules.val_from)).astype(np.int8)
                + (obs >= np.int64(rules.test_from)).astype(np.int8))
    if rules.split == "given":
        anchors = np.asarray(task.anchor_row, dtype=np.int64)
        train_rows, val_rows, _ = rules.split_rows or (0, 0, 0)
        return ((anchors >= train_rows).astype(np.int8)
                + (anchors >= train_rows + val_rows).astype(np.int8))
    return split_codes(np.asarray(task.anchor_row), task.index, split_seed, ratios)


@dataclass(frozen=True)
class TaskSplits:
    """Positions (into a task's ascending seed list) of each split's seeds (int32 for a
    task under 2^31 seeds: see :func:`positions_by_split`)."""

    task: str
    task_index: int
    positions: tuple[np.ndarray, np.ndarray, np.ndarray]
    version: str = ""

    def of(self, split: str) -> np.ndarray:
        return self.positions[split_index(split)]


def split_index(split: Split | str) -> int:
    """The split code of ``split`` (``Split.parse(split).code``)."""
    return Split.parse(split).code


def positions_by_split(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ascending positions of split codes 0, 1 and 2 in ``codes`` (int8), read-only:
    int32 below 2^31 seeds (4 bytes a seed held for the whole run, not 8), int64 beyond."""
    counts = np.bincount(codes, minlength=3)
    dtype = np.int32 if codes.size <= np.iinfo(np.int32).max else np.int64
    positions = tuple(np.empty(int(count), dtype=dtype) for count in counts)
    split_positions(codes, *positions)
    for p in positions:
        p.setflags(write=False)
    return positions[0], positions[1], positions[2]


# Splits of this many seeds in all are made sooner by the kernels' Python (6 us a seed) than
# numba starts (0.35 s a process): dlkit manifest of a small database never loads numba.
INTERPRET_BELOW_SEEDS = 1 << 14


def compute_splits(tasks: Iterable[Any], split_seed: int,
                   ratios: SplitRatios) -> tuple[TaskSplits, ...]:
    """``TaskSplits`` of every task (objects with ``name``, ``index``, ``anchor_row``)."""
    tasks = list(tasks)
    seeds = sum(len(task.anchor_row) for task in tasks)
    out = []
    with interpreted(cheaper_interpreted(seeds, INTERPRET_BELOW_SEEDS)):
        for task in tasks:
            codes = split_codes_by_rule(task, split_seed, ratios)
            codes = np.ascontiguousarray(codes, dtype=np.int8)
            if codes.size and not 0 <= int(codes.min()) <= int(codes.max()) <= 2:
                raise AssertionError(f"split codes of task {task.name!r} outside 0..2")
            positions = positions_by_split(codes)
            out.append(TaskSplits(task.name, int(task.index), positions,
                                  split_version(split_seed, ratios, rules_of(task))))
    return tuple(out)


def build_run_manifest(database_id: str, database_hash: bytes, splits: Sequence[TaskSplits], *,
                       seed: int, global_batch_size: int, split_seed: int,
                       ratios: SplitRatios, sampler_block_size: int | None = None,
                       sampling_mode: TrainOrder = DEFAULT_TRAIN_ORDER) -> RunManifest:
    """The run manifest over every task and split (``drop_last``: every train step is full).

    ``sampling_mode`` picks the train order: ``TrainOrder.V3`` (default, NextBatch_v3) or
    ``V2`` (NextBatch_v2, whose manifests carry no ``sampling_mode`` key and keep their
    hashes). The seeds are checked once, by ``dlkit.sampler.run_plan.RunConfig`` (which
    every caller in dlkit builds first); the manifest itself refuses a seed beyond uint64.
    """
    mode = TrainOrder.parse(sampling_mode).value  # the manifest holds the name
    integer(global_batch_size, "global batch size", 1, expected="a positive integer")
    datasets = {}
    for task_splits in splits:
        version = task_splits.version or split_version(split_seed, ratios)
        for k, split in enumerate(SPLITS):
            key = dataset_key(database_id, task_splits.task, split)
            datasets[key] = DatasetEntry(id=key, version=version,
                                         cardinality=int(task_splits.positions[k].shape[0]),
                                         hash=bytes(database_hash))
    if not datasets:
        raise InvalidArgumentError("the database defines no task: there is nothing to sample")
    data = DataConfig(drop_last=True, sampling_mode=mode) if sampler_block_size is None else \
        DataConfig(sampler_block_size=sampler_block_size, drop_last=True, sampling_mode=mode)
    return RunManifest(seed=seed, global_batch_size=global_batch_size, datasets=datasets,
                       data=data)
