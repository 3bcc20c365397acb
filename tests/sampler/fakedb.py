"""An in-memory database with the reader API of docs/database_format.md, for sampler tests.

``random_database(seed, ...)`` builds a random relational schema: tables with and without a
time column, columns of every semantic type with nulls, foreign keys (also self-references and
null keys), and tasks on random (table, target column) pairs. The CSR is built here in plain
Python from the foreign-key values, independently of the preprocess writer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlkit.db.task_rules import TaskRules

NO_TIME = np.iinfo(np.int64).min
NUMERIC, BOOLEAN, TIMESTAMP, CATEGORICAL, TEXT = range(5)
D_TEXT = 8


@dataclass
class FakeColumn:
    name: str
    table: str
    column_id: int
    stype: int
    values: np.ndarray
    valid: np.ndarray
    mean: float = 0.0
    std: float = 1.0
    cat_emb_start: int = 0
    cat_emb_count: int = 0
    known_after_us: int = 0  # the schema's known_after lag (0: none)


@dataclass
class FakeTable:
    name: str
    index: int
    num_rows: int
    row_offset: int
    primary_key: str
    time_column: str | None
    foreign_keys: tuple[tuple[str, str], ...]
    columns: tuple[FakeColumn, ...]


@dataclass
class FakeGraph:
    parent_offsets: np.ndarray
    parent_ids: np.ndarray
    child_offsets: np.ndarray
    child_ids: np.ndarray
    child_times: np.ndarray
    row_table: np.ndarray
    row_times: np.ndarray


@dataclass
class FakeTask:
    name: str
    index: int
    table: str
    target_column: str
    target_stype: int
    anchor_row: np.ndarray
    obs_time: np.ndarray
    target: np.ndarray
    target_valid: np.ndarray
    rules: TaskRules = field(default_factory=TaskRules)

    @property
    def num_seeds(self) -> int:
        return int(self.anchor_row.shape[0])


@dataclass
class FakeDatabase:
    tables: tuple[FakeTable, ...]
    graph: FakeGraph
    tasks: tuple[FakeTask, ...]
    text_emb: np.ndarray
    column_emb: np.ndarray
    category_emb: np.ndarray
    path: str = "<fake database>"
    database_id: str = "fake"
    database_hash: bytes = bytes(range(32))
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def num_rows(self) -> int:
        return int(self.graph.row_table.shape[0])

    @property
    def table_offsets(self) -> np.ndarray:
        return np.asarray([t.row_offset for t in self.tables] + [self.num_rows], dtype=np.int64)

    def table(self, name: str) -> FakeTable:
        return next(t for t in self.tables if t.name == name)

    def task(self, name: str) -> FakeTask:
        return next(t for t in self.tasks if t.name == name)

    def text_embeddings(self) -> np.ndarray:
        return self.text_emb

    def column_embeddings(self) -> np.ndarray:
        return self.column_emb

    def categorical_embeddings(self) -> np.ndarray:
        return self.category_emb

    def close(self) -> None:
        pass

    def __enter__(self) -> FakeDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def random_database(seed: int, *, num_tables: int = 3, max_rows: int = 40, fk_prob: float = 0.7,
                    null_prob: float = 0.15, temporal_prob: float = 0.7, num_tasks: int = 2,
                    time_span: int = 10**9, no_time_prob: float = 0.05,
                    time_rules: bool = False) -> FakeDatabase:
    """A random relational database; every choice comes from ``np.random.default_rng(seed)``.

    ``time_rules``: tasks on tables with times also get random label lags and boundaries
    (drawn from a second generator, so the database is otherwise the same)."""
    rng = np.random.default_rng(seed)
    sizes = [int(rng.integers(1, max_rows + 1)) for _ in range(num_tables)]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(offsets[-1])
    row_table = np.repeat(np.arange(num_tables, dtype=np.int32), sizes)
    row_times = np.full(total, NO_TIME, dtype=np.int64)
    temporal = [bool(rng.random() < temporal_prob) for _ in range(num_tables)]
    base_time = 1_600_000_000_000_000
    for t in range(num_tables):
        if temporal[t]:
            times = base_time + rng.integers(0, time_span, sizes[t])
            times[rng.random(sizes[t]) < no_time_prob] = NO_TIME
            row_times[offsets[t]:offsets[t + 1]] = times
    # Foreign keys: per table, 0-3 columns pointing at any table (self-references included).
    fks: list[list[tuple[str, int, np.ndarray]]] = []
    for t in range(num_tables):
        keys = []
        for k in range(int(rng.integers(0, 4))):
            if rng.random() > fk_prob:
                continue
            target = int(rng.integers(0, num_tables))
            parent_local = rng.integers(0, sizes[target], sizes[t])
            parent_local[rng.random(sizes[t]) < null_prob] = -1  # null key: no edge
            keys.append((f"fk{k}_{target}", target, parent_local))
        fks.append(keys)
    parents: list[list[int]] = [[] for _ in range(total)]
    for t in range(num_tables):
        for _, target, parent_local in fks[t]:
            for r in range(sizes[t]):
                if parent_local[r] >= 0:
                    parents[int(offsets[t]) + r].append(int(offsets[target]) + int(parent_local[r]))
    children: list[list[int]] = [[] for _ in range(total)]
    for row in range(total):
        for p in parents[row]:
            children[p].append(row)
    for p in range(total):
        children[p].sort(key=lambda c: (int(row_times[c]), c))
    graph = FakeGraph(
        parent_offsets=np.concatenate([[0], np.cumsum([len(p) for p in parents])]).astype(np.int64),
        parent_ids=np.asarray([x for p in parents for x in p], dtype=np.int64),
        child_offsets=np.concatenate([[0], np.cumsum([len(c) for c in children])]).astype(np.int64),
        child_ids=np.asarray([x for c in children for x in c], dtype=np.int64),
        child_times=np.asarray([row_times[x] for c in children for x in c], dtype=np.int64),
        row_table=row_table,
        row_times=row_times,
    )
    num_texts = int(rng.integers(1, 30))
    num_categories = 0
    tables = []
    column_count = 0
    column_specs = []
    for t in range(num_tables):
        n = sizes[t]
        specs = []
        for c in range(int(rng.integers(0, 5))):
            stype = int(rng.integers(0, 5))
            valid = rng.random(n) >= null_prob
            mean, std, cat_start, cat_count = 0.0, 1.0, 0, 0
            if stype == NUMERIC:
                values = rng.normal(3.0, 2.0, n)
                mean, std = float(values.mean()), float(values.std()) or 1.0
            elif stype == BOOLEAN:
                values = (rng.random(n) < 0.5).astype(np.uint8)
            elif stype == TIMESTAMP:
                values = base_time + rng.integers(-10**15, 10**15, n)
                mean, std = float(values.mean()), float(values.std()) or 1.0
            elif stype == CATEGORICAL:
                cat_count = int(rng.integers(1, 6))
                cat_start = num_categories
                num_categories += cat_count
                values = rng.integers(0, cat_count, n).astype(np.int32)
            else:
                values = rng.integers(0, num_texts, n).astype(np.int64)
            specs.append((f"c{c}", stype, values, valid, mean, std, cat_start, cat_count))
            column_count += 1
        if temporal[t]:
            times = row_times[offsets[t]:offsets[t + 1]]
            present = times != NO_TIME
            specs.append(("time", TIMESTAMP, times.copy(), present,
                          float(times[present].mean()) if present.any() else 0.0,
                          float(times[present].std()) or 1.0 if present.any() else 1.0, 0, 0))
            column_count += 1
        column_specs.append(specs)
    # Column ids: a random permutation, so sorting by id is not catalog order.
    ids = iter(rng.permutation(column_count + 3).tolist())
    for t in range(num_tables):
        columns = tuple(
            FakeColumn(name, f"t{t}", next(ids), stype, values, valid, mean, std, cs, cc)
            for name, stype, values, valid, mean, std, cs, cc in column_specs[t])
        tables.append(FakeTable(
            name=f"t{t}", index=t, num_rows=sizes[t], row_offset=int(offsets[t]),
            primary_key="id", time_column="time" if temporal[t] else None,
            foreign_keys=tuple((name, f"t{target}") for name, target, _ in fks[t]),
            columns=columns))
    tasks = []
    candidates = [(t, c) for t in tables for c in t.columns]
    for k in range(num_tasks if candidates else 0):
        table, column = candidates[int(rng.integers(0, len(candidates)))]
        seeds = np.flatnonzero(column.valid).astype(np.int64)
        obs = row_times[table.row_offset + seeds]
        tasks.append(FakeTask(
            name=f"task{k}", index=k, table=table.name, target_column=column.name,
            target_stype=column.stype, anchor_row=seeds, obs_time=obs,
            target=column.values[seeds].astype(np.float64),
            target_valid=np.ones(seeds.shape[0], dtype=bool)))
    if time_rules:
        rules_rng = np.random.default_rng([seed, 1])
        for task in tasks:
            timed = any(t.name == task.table and t.time_column for t in tables)
            lag = int(rules_rng.choice([0, time_span // 20, time_span // 3, time_span * 2]))
            task.rules = TaskRules(label_lag_us=lag if timed else 0,
                                   strict=bool(rules_rng.random() < 0.5))
        # Columns known later than their row (known_after) on tables with a time column, from
        # their own stream: the draws above are unchanged.
        lag_rng = np.random.default_rng([seed, 2])
        for table in tables:
            for column in table.columns:
                if table.time_column is not None and column.name != table.time_column:
                    column.known_after_us = int(lag_rng.choice(
                        [0, 0, time_span // 20, time_span // 3, time_span * 2]))
    return FakeDatabase(
        tables=tuple(tables), graph=graph, tasks=tuple(tasks),
        text_emb=rng.normal(size=(num_texts, D_TEXT)).astype(np.float16),
        column_emb=rng.normal(size=(column_count + 3, D_TEXT)).astype(np.float16),
        category_emb=rng.normal(size=(max(num_categories, 1), D_TEXT)).astype(np.float16),
    )
