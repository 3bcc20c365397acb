"""Task seeds: the rows of a task's table with a non-null target, appended as rows go by."""

from __future__ import annotations

from typing import Any

import numpy as np

from dlkit.core.stats import remap_ids
from dlkit.db import format as fmt
from dlkit.db.hashing import Hasher
from dlkit.db.plan import ColumnPlan
from dlkit.db.scratch import empty_small_pages


class TaskWriter:
    """Seeds of one task, appended batch by batch as the table's rows go by.

    A categorical target arrives as provisional category ids; they are kept in memory (room
    for every row being a seed; pages never written cost nothing), renumbered in place and
    written by :meth:`finish`.
    """

    def __init__(self, task, index: int, col: ColumnPlan, hasher: Hasher, num_rows: int):
        self.task = task
        self.index = index
        self.col = col
        self.files = {stem: hasher.open(fmt.task_file(task.name, stem))
                      for stem, _ in fmt.TASK_ARRAYS if stem != "target"}
        self.categorical = col.stype == fmt.CATEGORICAL
        self.target = hasher.open(fmt.task_file(task.name, "target"))
        if self.categorical:
            self.provisional = empty_small_pages("<f8", num_rows)
        self.num_seeds = 0

    def append(self, start: int, row_times: np.ndarray, values: np.ndarray, valid: np.ndarray) -> None:
        local = np.flatnonzero(valid)
        self.files["anchor_row"].write((local + start).astype("<i8"))
        self.files["obs_time"].write(np.ascontiguousarray(row_times[local], dtype="<i8"))
        self.files["target_valid"].write(np.ones(local.size, dtype=np.uint8))
        if self.categorical:
            self.provisional[self.num_seeds:self.num_seeds + local.size] = values[local]
        else:
            self.target.write(values[local].astype("<f8"))
        self.num_seeds += int(local.size)

    def finish(self, mapping: np.ndarray | None) -> dict[str, Any]:
        for f in self.files.values():
            f.close()
        if self.categorical:
            remap_ids(self.provisional[:self.num_seeds], mapping)
            self.target.write(self.provisional[:self.num_seeds], bounded=False)
            self.provisional = None
        self.target.close()
        col = self.col
        return {
            "name": self.task.name, "index": self.index, "table": self.task.table,
            "target_column": self.task.target, "target_stype": col.stype,
            "target_stype_name": fmt.STYPE_NAMES[col.stype], "target_column_id": col.column_id,
            "num_seeds": self.num_seeds,
        }
