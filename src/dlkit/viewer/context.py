"""One seed's sampled context as the viewer shows it: a JSON-ready record.

The cells and rows are the Sampler's own (:func:`dlkit.sampler.inspect.describe_sequence`
builds the very batch ``dlkit.Sampler`` builds for the seed); this module adds what a person
needs to judge the context and that a batch does not carry: for every visited row, how many
children of each child table were visible at the observation time and how many the BFS took
(what the child width cut), and the foreign-key links among the visited rows (the batch's
``fk_adj``), from which the page draws the attention structure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dlkit.db.read.mapped import Database
from dlkit.errors import InvalidArgumentError
from dlkit.nextbatch.tokens import TrainOrder
from dlkit.sampler.batch import ChildPolicy, ContextExamplePolicy
from dlkit.sampler.batch_files import BatchRequest, stream_schedule
from dlkit.sampler.inspect import describe_sequence, format_time, is_member, visible_children
from dlkit.sampler.splits import (
    DEFAULT_TRAIN_ORDER,
    SPLITS,
    SplitRatios,
    compute_splits,
)


@dataclass(frozen=True)
class Knobs:
    """The sampler settings a context is drawn with."""

    sequence_length: int = 1024
    max_rows: int = 256
    bfs_child_width: int = 16
    bfs_child_policy: ChildPolicy = ChildPolicy.UNIFORM
    context_examples: int = 0
    context_example_policy: ContextExamplePolicy = ContextExamplePolicy.RECENT

    def key(self) -> str:
        examples = (f" E={self.context_examples} {self.context_example_policy.value}"
                    if self.context_examples else "")
        return (f"S={self.sequence_length} R={self.max_rows} W={self.bfs_child_width} "
                f"P={self.bfs_child_policy.value}{examples}")

    def to_json(self) -> dict[str, int | str]:
        return {"sequence_length": self.sequence_length, "max_rows": self.max_rows,
                "bfs_child_width": self.bfs_child_width,
                "bfs_child_policy": self.bfs_child_policy.value,
                "context_examples": self.context_examples,
                "context_example_policy": self.context_example_policy.value}


def seeds_by_split(db: Database, task: str, *, split_seed: int = 0,
                   ratios: SplitRatios | None = None) -> dict[str, np.ndarray]:
    """Each split's seeds of ``task`` as anchor rows (local rows of the task's table),
    ascending, by the same rule the Sampler splits with."""
    data = db.task(task)
    (splits,) = compute_splits([data], split_seed, ratios or SplitRatios())
    anchors = np.asarray(data.anchor_row, dtype=np.int64)
    return {split: anchors[np.asarray(splits.of(split), dtype=np.int64)] for split in SPLITS}


@dataclass(frozen=True)
class StepSeeds:
    """The seeds of one step of a (task, split) stream, as ``dlkit batches`` builds it: the
    global batch (rank 0 of one) and the epoch its BFS draws are made at."""

    step: int
    epoch: int
    anchors: tuple[int, ...]


def step_seeds(db: Database, task: str, split: str, step: int, *, seed: int = 0,
               split_seed: int = 0, batch_size: int = 32,
               sampling_mode: TrainOrder = DEFAULT_TRAIN_ORDER) -> StepSeeds:
    """Step ``step``'s seeds of ``task``'s ``split`` stream under the run manifest ``dlkit
    manifest --seed SEED --global-batch-size BATCH_SIZE`` describes (O(1) in ``step``)."""
    request = BatchRequest(task=task, split=split, steps=1, seed=seed, split_seed=split_seed,
                           batch_size=batch_size, sampling_mode=sampling_mode)
    _builder, view, schedule = stream_schedule(db, request)
    job = schedule.job(step)
    positions = job.stream.seed_indices(job.cursor)
    anchors = np.asarray(view.anchor_row)[np.asarray(positions, dtype=np.int64)]
    return StepSeeds(step, int(job.cursor.epoch), tuple(int(a) for a in anchors))


def _children_in_view(db: Database, row: int, obs_time: int, strict: bool,
                      in_sequence: np.ndarray) -> dict[str, tuple[int, int]]:
    """Per child table: (children of global ``row`` visible at ``obs_time``, how many of those
    are in the sequence, the ascending global rows ``in_sequence``). A row without a time is
    visible at every time, as in the BFS; a child reached by another path counts as in the
    sequence (the width did not cut it)."""
    ids = visible_children(db.graph, row, obs_time, strict)
    tables = np.asarray(db.graph.row_table)[ids]
    visible = np.bincount(tables, minlength=len(db.tables))
    taken = np.bincount(tables[is_member(ids, in_sequence)], minlength=len(db.tables))
    return {db.tables[t].name: (int(visible[t]), int(taken[t]))
            for t in np.flatnonzero(visible).tolist()}


def build_context(db: Database, task: str, anchor_row: int, knobs: Knobs, *, seed: int = 0,
                  epoch: int = 0, split: str | None = None) -> dict[str, Any]:
    """The viewer's record of the sequence of ``task``'s seed at ``anchor_row``."""
    data = db.task(task)
    where = np.flatnonzero(np.asarray(data.anchor_row) == anchor_row)
    if where.size == 0:
        raise InvalidArgumentError(f"row {anchor_row} is not a seed of task {task!r}")
    obs_time = int(data.obs_time[int(where[0])])
    view = describe_sequence(db, task, anchor_row, seed=seed, epoch=epoch,
                             sequence_length=knobs.sequence_length, max_rows=knobs.max_rows,
                             bfs_child_width=knobs.bfs_child_width,
                             bfs_child_policy=knobs.bfs_child_policy,
                             context_examples=knobs.context_examples,
                             context_example_policy=knobs.context_example_policy)
    strict = bool(data.rules.strict)
    position = {r.global_row: r.index for r in view.rows}
    in_sequence = np.sort(np.fromiter(position, dtype=np.int64, count=len(position)))
    rows = []
    totals: dict[str, list[int]] = {}
    for r in view.rows:
        children = _children_in_view(db, r.global_row, obs_time, strict, in_sequence)
        for table, (visible, taken) in children.items():
            total = totals.setdefault(table, [0, 0])
            total[0] += visible
            total[1] += taken
        parents = [position[int(p)] for p in db.graph.parents(r.global_row)
                   if int(p) in position]
        rows.append({
            "index": r.index, "table": r.table, "local_row": r.local_row, "key": r.typed_key,
            "time": r.iso_time, "depth": r.depth, "reached": r.reached, "source": r.source,
            "parents": parents, "truncated": r.truncated, "context_example": r.context_example,
            "children": [{"table": t, "visible": v, "taken": k}
                         for t, (v, k) in sorted(children.items())],
            "cells": [{"position": c.position, "column": c.column, "type": c.stype,
                       "value": c.typed, "text": c.value, "null": c.is_null,
                       "target": c.is_target, "hidden": c.is_hidden} for c in r.cells],
        })
    return {
        "task": task, "split": split, "anchor_row": anchor_row, "seed": seed, "epoch": epoch,
        "knobs": knobs.to_json(), "observed_at": format_time(obs_time),
        "target": view.target_typed, "num_cells": view.num_cells,
        "num_rows": len(view.rows),
        "num_example_rows": sum(r.context_example for r in view.rows),
        "children_per_table": [{"table": t, "visible": v, "taken": k}
                               for t, (v, k) in sorted(totals.items())],
        "rows": rows,
    }


__all__ = ["Knobs", "StepSeeds", "build_context", "seeds_by_split", "step_seeds"]
