"""What a database holds, at a glance: ``dlkit info``.

Everything here is read from an open :class:`~dlkit.db.read.mapped.Database`: the counts from
its metadata record, the time ranges from the graph's row times, the degrees from the two CSR
directions. Nothing is recomputed from the source tables, so the summary describes the
database as it is on disk (what the Sampler will see), at O(rows + edges) cost with no copy of
either (numpy reductions over the memory maps).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dlkit.core.codes import NO_TIME, STYPE_NAMES
from dlkit.db.read.mapped import Database


@dataclass(frozen=True)
class Degrees:
    """Percentiles of a count per row (children per parent row, say), over every row of the
    table the count is about, rows with none included."""

    p50: float
    p99: float
    max: int
    mean: float

    @classmethod
    def of(cls, counts: np.ndarray) -> Degrees:
        if counts.size == 0:
            return cls(0.0, 0.0, 0, 0.0)
        return cls(float(np.percentile(counts, 50)), float(np.percentile(counts, 99)),
                   int(counts.max()), float(counts.mean()))


@dataclass(frozen=True)
class TimeRange:
    """UTC microseconds of the first and last row time; ``None`` when no row has one."""

    first_us: int | None
    last_us: int | None
    num_without_time: int


@dataclass(frozen=True)
class TableInfo:
    name: str
    num_rows: int
    primary_key: str | tuple[str, ...] | None  # a tuple: a composite key's columns
    time_column: str | None
    columns_by_type: dict[str, int]
    time_range: TimeRange
    # columns whose values show only this long after their row's time (known_after), in us
    known_after_us: dict[str, int] = field(default_factory=dict)
    # the as-of aggregate cells each of the table's rows holds ([aggregates]), by name
    aggregate_cells: tuple[str, ...] = ()


@dataclass(frozen=True)
class ForeignKeyInfo:
    """One foreign key: ``table.column -> parent``. ``children_per_parent`` counts, for every
    row of the parent table, the rows of ``table`` linked to it; ``linked_share`` is the share
    of ``table``'s rows that have a parent through this key. Where a table has several keys to
    the same parent, the graph does not tell them apart by row, so their degrees are counted
    together and ``shared_with`` names the others."""

    table: str
    column: str
    parent: str
    num_edges: int
    num_null: int
    num_dangling: int
    children_per_parent: Degrees
    linked_share: float
    shared_with: tuple[str, ...]


@dataclass(frozen=True)
class TaskInfo:
    name: str
    table: str
    target: str
    target_type: str
    num_seeds: int
    seeds_per_split: dict[str, int]
    split_rule: str  # hash, time (with val_from/test_from in UTC microseconds) or given
    label_lag_us: int
    boundary: str  # "inclusive": rows at the observation time are visible; or "strict"
    static: bool
    val_from_us: int | None
    test_from_us: int | None


@dataclass(frozen=True)
class EmbeddingInfo:
    embedder: str
    text_dim: int
    column_dim: int
    categorical_dim: int
    num_texts: int


@dataclass(frozen=True)
class DatabaseInfo:
    path: str
    database_id: str
    database_hash: str
    size_bytes: int
    num_files: int
    num_rows: int
    num_edges: int
    tables: tuple[TableInfo, ...]
    foreign_keys: tuple[ForeignKeyInfo, ...]
    tasks: tuple[TaskInfo, ...]
    embeddings: EmbeddingInfo

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _time_range(times: np.ndarray) -> TimeRange:
    known = times[times != NO_TIME]
    if known.size == 0:
        return TimeRange(None, None, int(times.size))
    return TimeRange(int(known.min()), int(known.max()), int(times.size - known.size))


def _size_on_disk(root: Path) -> tuple[int, int]:
    total, count = 0, 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            total += os.lstat(os.path.join(dirpath, name)).st_size
            count += 1
    return total, count



def database_info(db: Database, *, seeds_per_split: dict[str, dict[str, int]] | None = None
                  ) -> DatabaseInfo:
    """The summary of an open database. ``seeds_per_split`` (task -> split -> count) comes
    from the layer that owns the split rules (the sampler); without it each task reports its
    seeds only."""
    meta = db.metadata
    graph = db.graph
    offsets = db.table_offsets
    tables = []
    for t, table in zip(meta.tables, db.tables, strict=True):
        by_type: dict[str, int] = {}
        for column in table.columns:
            by_type[STYPE_NAMES[column.stype]] = by_type.get(STYPE_NAMES[column.stype], 0) + 1
        lo, hi = int(offsets[t.index]), int(offsets[t.index + 1])
        tables.append(TableInfo(
            t.name, t.num_rows, t.primary_key, t.time_column, by_type,
            _time_range(np.asarray(graph.row_times[lo:hi])),
            {c.name: int(c.known_after_us) for c in table.columns if c.known_after_us},
            tuple(cell.name for cell in meta.aggregates if cell.parent_table == t.name)))
    foreign_keys = []
    row_table = np.asarray(graph.row_table)
    parent_offsets = np.asarray(graph.parent_offsets, dtype=np.int64)
    parent_ids = np.asarray(graph.parent_ids, dtype=np.int64)
    for t in meta.tables:
        lo, hi = int(offsets[t.index]), int(offsets[t.index + 1])
        edges = parent_ids[int(parent_offsets[lo]):int(parent_offsets[hi])]
        owners = np.repeat(np.arange(lo, hi, dtype=np.int64), np.diff(parent_offsets[lo:hi + 1]))
        parent_tables = row_table[edges] if edges.size else np.empty(0, dtype=np.int32)
        for fk in t.foreign_keys:
            parent = next(p for p in meta.tables if p.name == fk.parent_table)
            plo, phi = int(offsets[parent.index]), int(offsets[parent.index + 1])
            mine = parent_tables == parent.index
            counts = np.bincount(edges[mine] - plo, minlength=phi - plo) if phi > plo \
                else np.zeros(0, dtype=np.int64)
            # owners repeats each child row once per parent edge, in row order, so it is
            # non-decreasing by construction and so is any subsequence: its distinct values
            # are its first element and every rise
            linked_owners = owners[mine]
            linked = int(np.count_nonzero(np.diff(linked_owners))) + 1 \
                if linked_owners.size else 0
            shared = tuple(other.column for other in t.foreign_keys
                           if other.parent_table == fk.parent_table and other is not fk)
            foreign_keys.append(ForeignKeyInfo(
                t.name, fk.column, fk.parent_table, fk.num_edges, fk.num_null, fk.num_dangling,
                Degrees.of(counts), linked / t.num_rows if t.num_rows else 0.0, shared))
    tasks = []
    for task in meta.tasks:
        rules = task.rules
        tasks.append(TaskInfo(
            task.name, task.table, task.target_column, STYPE_NAMES[task.target_stype],
            task.num_seeds, dict((seeds_per_split or {}).get(task.name, {})), rules.split,
            rules.label_lag_us, "strict" if rules.strict else "inclusive", rules.static,
            rules.val_from, rules.test_from))
    emb = meta.embeddings
    size, count = _size_on_disk(Path(db.path))
    return DatabaseInfo(
        str(db.path), meta.database_id, db.database_hash.hex(), size, count, meta.num_rows,
        meta.num_edges, tuple(tables), tuple(foreign_keys), tuple(tasks),
        EmbeddingInfo(emb.embedder, emb.text_dim, emb.column_dim, emb.categorical_dim,
                      meta.num_texts))


__all__ = ["DatabaseInfo", "Degrees", "EmbeddingInfo", "ForeignKeyInfo", "TableInfo",
           "TaskInfo", "TimeRange", "database_info"]
