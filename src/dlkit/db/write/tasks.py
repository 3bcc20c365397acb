"""Task seeds: the rows of a task's table with a non-null target, appended as rows go by."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from dlkit.core.stats import gather_seeds, remap_ids
from dlkit.db import format as fmt
from dlkit.db.metadata_records import TaskMetadata
from dlkit.db.task_rules import TaskRules
from dlkit.db.write.hashing import HashedFile, Hasher
from dlkit.db.write.plan import ColumnPlan
from dlkit.db.write.scratch import Arrays

if TYPE_CHECKING:
    from dlkit.db.schema.spec import TaskSpec

_FINISHED = "a task writer takes seeds until its finish, which releases the provisional ids"


class TaskWriter:
    """Seeds of one task, appended batch by batch as the table's rows go by.

    A categorical target arrives as provisional category ids; they are kept in memory (room
    for every row being a seed; pages never written cost nothing), renumbered in place and
    written by :meth:`finish`. The other arrays of a batch go to their files and come back
    for a later batch once written (``HashedFile.write(released=...)``): fresh memory costs
    more to touch than these arrays cost to fill.
    """

    def __init__(self, task: TaskSpec, index: int, col: ColumnPlan, hasher: Hasher, num_rows: int,
                 arrays: Arrays, split_rows: tuple[int, ...] = ()):
        self.task = task
        self.split_rows = split_rows
        self.index = index
        self.col = col
        self.files = {stem: hasher.open(fmt.task_file(task.name, stem))
                      for stem, _ in fmt.TASK_ARRAYS if stem != "target"}
        self.categorical = col.stype == fmt.CATEGORICAL
        self.target = hasher.open(fmt.task_file(task.name, "target"))
        if self.categorical:
            # kept until finish renumbers and writes them
            self.provisional: np.ndarray | None = arrays.empty("<f8", num_rows)
        self.num_seeds = 0
        self._ones = np.ones(0, dtype=np.uint8)
        self._spare: dict[str, deque[np.ndarray]] = {}  # arrays written out, free for the next batch

    def append(self, start: int, row_times: np.ndarray, values: np.ndarray, valid: np.ndarray) -> None:
        n = valid.shape[0]
        anchor_row = self._buffer("anchor_row", "<i8", n)
        obs_time = self._buffer("obs_time", "<i8", n)
        if self.categorical:
            assert self.provisional is not None, _FINISHED
            target = self.provisional[self.num_seeds:self.num_seeds + n]
        else:
            target = self._buffer("target", "<f8", n)
        count = int(gather_seeds(valid, start, row_times, values, anchor_row[:n], obs_time[:n],
                                 target[:n]))
        self._write(self.files["anchor_row"], "anchor_row", anchor_row, count)
        self._write(self.files["obs_time"], "obs_time", obs_time, count)
        if self._ones.size < count:
            self._ones = np.ones(count, dtype=np.uint8)  # never modified: shared by every write
        self.files["target_valid"].write(self._ones[:count])
        if not self.categorical:
            self._write(self.target, "target", target, count)
        self.num_seeds += count

    def _buffer(self, stem: str, dtype: str, n: int) -> np.ndarray:
        """An array of at least ``n`` for ``stem``'s next batch: one whose last write the
        files are done with, else a new one (the same pages again, not fresh ones: the
        memory stays bounded by the writer's backlog)."""
        spare = self._spare.setdefault(stem, deque())
        while spare:
            buffer = spare.popleft()
            if buffer.shape[0] >= n:
                return buffer
        return np.empty(n, dtype=dtype)

    def _write(self, out: HashedFile, stem: str, buffer: np.ndarray, count: int) -> None:
        out.write(buffer[:count], released=lambda: self._spare[stem].append(buffer))

    def finish(self, mapping: np.ndarray | None) -> TaskMetadata:
        for f in self.files.values():
            f.close()
        if self.categorical:
            assert self.provisional is not None, _FINISHED
            remap_ids(self.provisional[:self.num_seeds], mapping)
            self.target.write(self.provisional[:self.num_seeds], bounded=False)
            self.provisional = None
        self.target.close()
        return TaskMetadata(
            name=self.task.name, index=self.index, table=self.task.table,
            target_column=self.task.target, target_stype=self.col.stype,
            target_column_id=self.col.column_id, num_seeds=self.num_seeds,
            rules=TaskRules.from_schema(self.task, self.split_rows))
