"""An open database's tasks as the sampler reads them: seeds validated against the catalog.

``task_views`` checks every task of a database once, when it is opened (anchor rows inside
and ascending, the target a non-key column of the task's table and of the task's type), and
gives each a ``TaskView``: its seeds, what every batch of it carries, and its labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from dlkit.core.codes import CATEGORICAL
from dlkit.core.records import Task
from dlkit.db.task_rules import TaskRules, rules_of
from dlkit.errors import DatabaseError, InvalidArgumentError
from dlkit.sampler.catalog import ColumnCatalog, readonly_view
from dlkit.sampler.database import SamplerDatabase, SamplerTask
from dlkit.sampler.labels import LABEL_DTYPES, LabelInfo, labels_of
from dlkit.text import unknown_name


@dataclass(frozen=True)
class TaskView:
    """One task's seeds (local rows of its table, which starts at global row ``row_offset``),
    plus what every batch of it carries. A batch's seeds become global rows as it is built:
    a copy of every seed's global row would cost 8 bytes per seed for the Sampler's life."""

    name: str
    index: int
    table_index: int
    anchor_row: np.ndarray
    row_offset: int
    obs_time: np.ndarray
    target_col: int
    target_stype: int
    cat_emb_start: int
    cat_emb_count: int
    target_values: np.ndarray
    target_mean: float
    target_std: float
    rules: TaskRules = TaskRules()

    @property
    def num_seeds(self) -> int:
        return int(self.anchor_row.shape[0])

    @cached_property
    def kernel_task(self) -> Task:
        """What the batch kernels need of this task (made once per task)."""
        return Task(index=self.index, target_col=self.target_col, strict=int(self.rules.strict))

    @cached_property
    def time_order(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The seeds in (observation time, anchor row) order, for context examples
        (``dlkit.core.examples``): their anchor rows, their times (ascending) and each seed's
        position in that order. Made on first use (24 bytes per seed)."""
        order = np.argsort(self.obs_time, kind="stable")  # anchor rows ascend: ties by row
        ranks = np.empty(order.shape[0], dtype=np.int64)
        ranks[order] = np.arange(order.shape[0], dtype=np.int64)
        return (np.ascontiguousarray(self.anchor_row[order], dtype=np.int64),
                np.ascontiguousarray(self.obs_time[order], dtype=np.int64), ranks)

    def labels(self, anchor_rows: np.ndarray) -> np.ndarray:
        """The hidden target cells of the seeds at ``anchor_rows`` as labels."""
        return labels_of(self.target_values[anchor_rows], self.target_stype, self.target_mean,
                         self.target_std)


def task_views(db: SamplerDatabase, catalog: ColumnCatalog) -> tuple[TaskView, ...]:
    """Every task of ``db`` (whose columns ``catalog`` indexes), validated, in task order."""
    return tuple(_task_view(db, catalog, task) for task in db.tasks)


def _task_view(db: SamplerDatabase, catalog: ColumnCatalog, task: SamplerTask) -> TaskView:
    path = getattr(db, "path", None)
    table = db.table(task.table)
    target_col = catalog.index(table.name, task.target_column)
    if target_col < 0:
        raise DatabaseError(f"task {task.name}: target column {task.target_column!r} is not "
                            f"a non-key column of table {table.name}", path=path)
    n = int(task.num_seeds)
    anchor = readonly_view(task.anchor_row, np.int64, n, f"task {task.name} anchor_row", path)
    obs = readonly_view(task.obs_time, np.int64, n, f"task {task.name} obs_time", path)
    if n and (int(anchor.min()) < 0 or int(anchor.max()) >= int(table.num_rows)):
        raise DatabaseError(f"task {task.name}: anchor rows outside table {table.name}'s "
                            f"{table.num_rows} rows", path=path)
    if n > 1 and bool(np.any(anchor[1:] <= anchor[:-1])):
        raise DatabaseError(f"task {task.name}: anchor rows are not strictly ascending",
                            path=path)
    stype = int(task.target_stype)
    column_stype = int(catalog.columns.stype[target_col])
    if stype != column_stype:
        raise DatabaseError(f"task {task.name}: target type {stype} disagrees with column "
                            f"{table.name}.{task.target_column}'s type {column_stype}",
                            path=path)
    return TaskView(task.name, int(task.index), int(table.index), anchor,
                    int(table.row_offset), obs, target_col, stype,
                    int(catalog.columns.cat_start[target_col]),
                    int(catalog.cat_count[target_col]),
                    catalog.values(target_col), float(catalog.columns.mean[target_col]),
                    float(catalog.columns.std[target_col]), rules_of(task))


def find_task(views: tuple[TaskView, ...], name_or_index: str | int) -> TaskView:
    """The task named ``name_or_index`` (or of that index) among ``views``."""
    for view in views:
        if name_or_index in (view.name, view.index):
            return view
    raise InvalidArgumentError(unknown_name("task", name_or_index, [v.name for v in views],
                                            "the database"))


def label_info(db: SamplerDatabase, catalog: ColumnCatalog, task: TaskView) -> LabelInfo:
    """What ``task``'s labels are (see ``dlkit.sampler.labels``); ``db`` is the open database
    whose columns ``catalog`` indexes (for the target's category names)."""
    table = db.tables[task.table_index]
    column = catalog.names[task.target_col][1]
    categories = None
    if task.target_stype == CATEGORICAL:
        found = next((c for c in table.columns if c.name == column), None)
        names = getattr(found, "categories", None)
        categories = tuple(str(name) for name in names) if names is not None else None
    return LabelInfo(task.name, task.index, table.name, column, task.target_stype,
                     task.target_mean, task.target_std, task.cat_emb_count, categories,
                     LABEL_DTYPES[task.target_stype])
