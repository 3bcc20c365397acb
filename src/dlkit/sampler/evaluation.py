"""One evaluation pass: every seed of a split exactly once across all ranks, in fixed shapes.

Distributed evaluation needs two things a training stream does not: every seed counted once
(no drop, no repeat), and the same number of equally shaped batches on every rank, so that a
collective after each batch never waits for a rank that has run out and a compiled step never
sees a new shape. A pass walks the split's tasks in task order; each task's seeds, ascending,
are cut into global batches of ``batch_size * world_size`` positions, and rank ``r`` takes the
``r``-th contiguous ``batch_size`` of each (as every NextBatch eval stage does). Where the tail
leaves a rank short, its batch is filled up with copies of the task's first seed in the split,
marked ``sequence_mask = 0``. The pass is a pure function of the split and the shape, built at
epoch 0, so it is the same whenever it is run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dlkit.sampler.batch import BatchBuilder, BuiltBatch
from dlkit.sampler.tasks import TaskView
from dlkit.sampler.world import World

EVAL_EPOCH = 0


@dataclass(frozen=True)
class EvalTask:
    """One task's seeds (positions in its seed list) of the split being evaluated, and the
    position of its database in the sampler's list."""

    view: TaskView
    positions: np.ndarray
    database: int = 0

    def num_steps(self, global_batch_size: int) -> int:
        return -(-int(self.positions.shape[0]) // global_batch_size)


class EvalPass:
    """Steps ``0 .. len(self) - 1`` of one pass, as seen by ``rank`` of ``world_size``; a
    task is built by ``builders[task.database]``."""

    def __init__(self, builders: Sequence[BatchBuilder], tasks: Sequence[EvalTask],
                 batch_size: int, world: World):
        self.builders = tuple(builders)
        self.tasks = tuple(t for t in tasks if t.positions.shape[0] > 0)
        self.batch_size = batch_size
        self.global_batch_size = batch_size * world.world_size
        self.rank = world.rank
        steps = [t.num_steps(self.global_batch_size) for t in self.tasks]
        self.first_step = np.cumsum([0, *steps]).astype(np.int64)

    def __len__(self) -> int:
        return int(self.first_step[-1])

    def seeds(self, step: int) -> tuple[EvalTask, np.ndarray, int]:
        """The task of ``step``, this rank's seed positions (padded to ``batch_size``) and
        how many of them are real."""
        if not 0 <= step < len(self):
            raise IndexError(f"eval step {step} is not in [0, {len(self)})")
        t = int(np.searchsorted(self.first_step, step, side="right")) - 1
        task = self.tasks[t]
        n = int(task.positions.shape[0])
        start = (step - int(self.first_step[t])) * self.global_batch_size \
            + self.rank * self.batch_size
        real = task.positions[min(start, n):min(start + self.batch_size, n)]
        padded = np.full(self.batch_size, task.positions[0], dtype=np.int64)
        padded[:real.shape[0]] = real
        return task, padded, int(real.shape[0])

    def build(self, step: int) -> BuiltBatch:
        task, positions, num_real = self.seeds(step)
        return self.builders[task.database].build(task.view, positions, EVAL_EPOCH,
                                                  num_real=num_real)
