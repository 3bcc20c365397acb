"""One sequence made readable: the rows a seed's BFS visited and the cells it linearised.

``describe_sequence`` builds the seed's sequence exactly as a batch would (same stream, same
linearisation) and decodes every cell back to the database's own value (category labels,
text, ISO timestamps), so ``dlkit show`` can print what the model sees -- the masked target
included -- without anyone decoding arrays by hand.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlkit.core.bfs import VIA_CHILD, VIA_EXAMPLE, VIA_PARENT
from dlkit.core.codes import BOOLEAN, CATEGORICAL, NO_TIME, NUMERIC, STYPE_NAMES, TEXT, TIMESTAMP
from dlkit.errors import DatabaseError, InvalidArgumentError
from dlkit.sampler import knobs
from dlkit.sampler.batch import BatchBuilder, ChildPolicy, ContextExamplePolicy
from dlkit.sampler.config import SamplerSettings
from dlkit.sampler.database import DatabaseSource, InspectableDatabase, SamplerDatabase, open_db
from dlkit.sampler.splits import check_seed

MASKED = "[MASKED]"
HIDDEN = "[NOT YET KNOWN]"  # a lagged label the observation time does not know yet
NULL = "null"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class CellView:
    position: int
    column: str
    stype: str
    value: str
    is_null: bool
    is_target: bool
    is_hidden: bool = False
    # for --json: the value typed (a number, true/false, ISO time, the whole text; None for
    # a null, masked or hidden cell: its flags say which)
    typed: Any = None


@dataclass(frozen=True)
class RowView:
    index: int
    table: str
    local_row: int
    key: str
    time: str
    depth: int
    reached: str
    cells: tuple[CellView, ...]
    truncated: bool
    typed_key: Any = None    # for --json: the key as the database holds it (an int or text)
    iso_time: str = "-"      # for --json: the time in the one format JSON uses (ISO 8601)
    source: int = -1         # the sequence row it was reached from (-1: the seed)
    global_row: int = -1     # its global row id in the database
    context_example: bool = False  # a row of another seed's walk (docs/batch_format.md §4)


@dataclass(frozen=True)
class ChildTableView:
    """What the walk took of one child table: of the ``visible`` distinct rows of ``table``
    that are visible children of the sequence's visited rows, ``taken`` are in the
    sequence."""

    table: str
    visible: int
    taken: int


@dataclass(frozen=True)
class SequenceView:
    task: str
    anchor_row: int
    observation_time: str
    target: str
    epoch: int
    sequence_length: int
    max_rows: int
    num_cells: int
    rows: tuple[RowView, ...]

    target_typed: Any = None
    # How the walk ended ("cells": the sequence is full, "rows": max_rows reached,
    # "exhausted": nothing visible was left within the child width) and, per child table in
    # table order, how many of the visible children of the visited rows it took.
    stopped: str = "exhausted"
    children: tuple[ChildTableView, ...] = ()
    bfs_child_width: int = 16
    bfs_child_policy: str = "uniform"

    def to_json_value(self) -> dict[str, Any]:
        """Typed values: numbers as numbers, booleans as true/false, nulls as null, every time
        in ISO 8601 (UTC, ``Z``), texts whole. A masked or hidden cell's value is null too (its
        ``is_target`` / ``is_hidden`` says why), so every value has its column's type."""
        value = {k: v for k, v in self.__dict__.items() if k not in ("target_typed", "children")}
        value["children"] = [dict(c.__dict__) for c in self.children]
        value["target"] = self.target_typed
        value["rows"] = []
        for r in self.rows:
            row = {k: v for k, v in r.__dict__.items() if k not in ("typed_key", "iso_time")}
            row.update(key=r.typed_key, time=r.iso_time,
                       cells=[{**{k: v for k, v in c.__dict__.items() if k != "typed"},
                               "value": c.typed} for c in r.cells])
            value["rows"].append(row)
        return value


def format_time(t: int, compact: bool = False) -> str:
    """ISO 8601 UTC (``compact``: to the second, for a narrow column); ``-`` for no time."""
    if t == NO_TIME:
        return "-"
    try:
        moment = _EPOCH + dt.timedelta(microseconds=int(t))
    except OverflowError:
        return f"{t} us"
    if compact:
        return moment.strftime("%Y-%m-%d %H:%M:%S")
    return moment.isoformat().replace("+00:00", "Z")


def format_value(db: SamplerDatabase, column: Any, local: int) -> str:
    """A cell's value as the database holds it (not normalised)."""
    if not bool(column.valid[local]):
        return NULL
    v = column.values[local]
    stype = int(column.stype)
    if stype == NUMERIC:
        return f"{float(v):.6g}"
    if stype == BOOLEAN:
        return "true" if v else "false"
    if stype == TIMESTAMP:
        return format_time(int(v))
    if stype == CATEGORICAL:
        categories = getattr(column, "categories", None)
        return str(categories[int(v)]) if categories else f"category {int(v)}"
    text_of = getattr(db, "text", None)
    text = text_of(int(v)) if text_of is not None else f"text {int(v)}"
    return text if len(text) <= 60 else text[:57] + "..."


def typed_value(db: SamplerDatabase, column: Any, local: int) -> Any:
    """A cell's value for JSON: typed, whole, None when null (see ``to_json_value``)."""
    if not bool(column.valid[local]):
        return None
    v = column.values[local]
    stype = int(column.stype)
    if stype == NUMERIC:
        return float(v)
    if stype == BOOLEAN:
        return bool(v)
    if stype == TIMESTAMP:
        return format_time(int(v))
    if stype == CATEGORICAL:
        categories = getattr(column, "categories", None)
        return str(categories[int(v)]) if categories else int(v)
    text_of = getattr(db, "text", None)
    return text_of(int(v)) if text_of is not None else int(v)


def aggregate_value(cell: Any, encoded: float) -> int | float:
    """The as-of value an aggregate cell holds, from its encoding (docs/batch_format.md):
    a count exactly (an integer), a sum, mean or recency (days) rounded to the digits the
    float32 encoding carries (120, not 119.99999667846673): the z-score's float32 spacing,
    carried through the decoding, is the value's uncertainty."""
    z = np.float32(encoded)
    spread = float(np.spacing(np.abs(z))) * float(cell.std)  # on the decoded scale
    value = float(z) * float(cell.std) + float(cell.mean)
    if cell.kind == "count":
        return round(math.expm1(value))
    if cell.kind == "sum":
        if abs(value) < 1e-6:  # a float32 z-score's rounding around an empty sum
            return 0.0
        value = math.copysign(math.expm1(abs(value)), value)
        spread *= abs(value) + 1.0  # d expm1(t) / dt = exp(t)
    elif cell.kind == "recency":
        value = max(0.0, math.expm1(value))  # log1p of days >= 0: rounding stays above -1
        spread *= value + 1.0
    # the last decimal whose unit is at least twice the spacing: the noise rounds away
    decimals = 15 if spread <= 1e-15 else math.floor(-math.log10(2.0 * spread))
    return round(value, min(decimals, 15))


def _typed_key(table: Any, local: int) -> Any:
    key = getattr(table, "key", None)
    try:
        return key(local) if key is not None else local
    except (KeyError, IndexError):
        return local


def _column(table: Any, name: str, row: int) -> Any:
    """The column a cell of ``row`` names; a name its table lacks means the graph's table
    index disagrees with the tables (a corrupt but in-range ``graph.bin``)."""
    for column in table.columns:
        if column.name == name:
            return column
    raise DatabaseError(f"row {row} has a cell of column {name!r}, which its table "
                        f"{table.name!r} lacks: the graph's row_table is corrupt (run "
                        "`dlkit verify`)", path="graph.bin")


def _key_of(table: Any, local: int) -> str:
    key = getattr(table, "key", None)
    try:
        return str(key(local)) if key is not None else str(local)
    except (KeyError, IndexError):
        return str(local)


def describe_sequence(db_path: DatabaseSource, task: str, anchor_row: int, *,
                      seed: int = knobs.SEED, epoch: int = 0,
                      sequence_length: int = knobs.SEQUENCE_LENGTH, max_rows: int = knobs.MAX_ROWS,
                      bfs_child_width: int = knobs.BFS_CHILD_WIDTH,
                      bfs_child_policy: ChildPolicy | str = ChildPolicy.UNIFORM,
                      context_examples: int = knobs.CONTEXT_EXAMPLES,
                      context_example_policy: ContextExamplePolicy | str =
                      knobs.CONTEXT_EXAMPLE_POLICY) -> SequenceView:
    """The sequence of task ``task``'s seed at ``anchor_row`` (a local row of its table),
    filled with context examples as the Sampler fills it with these settings."""
    db, owned = open_db(db_path)
    try:
        # the Sampler's settings (its seed checked with theirs); a sequence needs no split
        settings = SamplerSettings.parse(seed=seed, sequence_length=sequence_length,
                                         max_rows=max_rows, bfs_child_width=bfs_child_width,
                                         bfs_child_policy=bfs_child_policy,
                                         context_examples=context_examples,
                                         context_example_policy=context_example_policy)
        builder = BatchBuilder(db, settings.batch, settings.run.seed)
        view = builder.task(task)
        matches = np.flatnonzero(view.anchor_row == anchor_row)
        if matches.size == 0:
            raise InvalidArgumentError(
                f"row {anchor_row} of table {db.tables[view.table_index].name!r} is not a seed of "
                f"task {view.name!r} (its target is null or the row does not exist; seeds are "
                f"rows {', '.join(str(int(a)) for a in view.anchor_row[:5])}...)")
        built = builder.build(view, matches[:1], check_seed(epoch, "epoch"))
        if not isinstance(db, InspectableDatabase):
            raise InvalidArgumentError("describing a sequence needs a database that maps global "
                                       "rows to their tables (row_of): open it with "
                                       "dlkit.db.open_database")
        return _decode(db, builder, built)
    finally:
        if owned:
            db.close()


def _decode(db: InspectableDatabase, builder: BatchBuilder, built: Any) -> SequenceView:
    a = built.arrays
    n_rows = int(built.visited_counts[0])
    n_cells = int(built.cell_counts[0])
    rows_cells: list[list[CellView]] = [[] for _ in range(n_rows)]
    catalog = builder.resident.catalog
    by_id = {int(cid): c for c, cid in enumerate(catalog.columns.column_id)}
    for p in range(n_cells):
        i = int(a["seq_row_ids"][0, p])
        c = by_id[int(a["column_ids"][0, p])]
        table_name, column_name = catalog.names[c]
        row = int(built.visited_rows[0, i])
        table, local = db.row_of(row)
        target = bool(a["is_target"][0, p])
        hidden = bool(a["is_hidden"][0, p])
        if catalog.is_aggregate(c):
            cells: Any = db.aggregates.cells  # type: ignore[attr-defined]
            cell = cells[int(catalog.agg[c])]
            null = bool(a["is_null"][0, p])
            number = aggregate_value(cell, float(a["numeric_values"][0, p]))
            shown = HIDDEN if hidden else NULL if null else f"{number:.6g}"
            rows_cells[i].append(CellView(p, column_name, "numeric", shown, null, False, hidden,
                                          None if hidden or null else number))
            continue
        column = _column(table, column_name, row)
        value = MASKED if target else HIDDEN if hidden else format_value(db, column, local)
        typed = None if target or hidden else typed_value(db, column, local)
        rows_cells[i].append(CellView(p, column_name, STYPE_NAMES[int(column.stype)], value,
                                      bool(a["is_null"][0, p]), target, hidden, typed))
    # Examples follow the seed's own walk: every row from the first example row on. That is
    # the first row holding an example cell, or an example's seed row cut off at S (no cell
    # flags it). An example's seed row already visited is not added again, so its walk may
    # begin with rows reached as children or parents.
    vias = built.visited_via[0, :n_rows]
    flagged = np.flatnonzero(a["is_context_example"][0, :n_cells])
    starts = [int(np.argmax(vias == VIA_EXAMPLE))] if (vias == VIA_EXAMPLE).any() else []
    starts += [int(a["seq_row_ids"][0, flagged[0]])] if flagged.size else []
    first_example = min(starts, default=n_rows)
    rows = []
    for i in range(n_rows):
        row = int(built.visited_rows[0, i])
        table, local = db.row_of(row)
        source, via = int(built.visited_source[0, i]), int(built.visited_via[0, i])
        reached = ("context example" if via == VIA_EXAMPLE else "seed" if source < 0 else
                   f"parent of #{source}" if via == VIA_PARENT else
                   f"child of #{source}" if via == VIA_CHILD else "?")
        rows.append(RowView(i, table.name, local, _key_of(table, local),
                            format_time(int(db.graph.row_times[row]), compact=True),
                            int(built.visited_depth[0, i]), reached, tuple(rows_cells[i]),
                            len(rows_cells[i]) < int(catalog.tables.num_cells[table.index]),
                            _typed_key(table, local),
                            format_time(int(db.graph.row_times[row])), source, row,
                            i >= first_example))
    task = builder.task(built.task)
    config = builder.config
    stopped = ("cells" if n_cells >= config.sequence_length else
               "rows" if n_rows >= config.max_rows else "exhausted")
    children = _children_taken(db, built.visited_rows[0, :n_rows], int(built.obs_times[0]),
                               bool(task.rules.strict))
    seed_table = db.tables[task.table_index]
    target_name = catalog.names[task.target_col][1]
    target_column = next(c for c in seed_table.columns if c.name == target_name)
    return SequenceView(
        task=built.task, anchor_row=int(built.anchor_rows[0]),
        observation_time=format_time(int(built.obs_times[0])),
        target=format_value(db, target_column, int(built.anchor_rows[0])),
        epoch=built.epoch, sequence_length=builder.config.sequence_length,
        max_rows=builder.config.max_rows, num_cells=n_cells, rows=tuple(rows),
        target_typed=typed_value(db, target_column, int(built.anchor_rows[0])),
        stopped=stopped, children=children, bfs_child_width=config.bfs_child_width,
        bfs_child_policy=config.bfs_child_policy.value)


def visible_children(graph: Any, row: int, obs_time: int, strict: bool) -> np.ndarray:
    """Global ids of ``row``'s children visible at ``obs_time`` (every one without a time):
    a prefix of its children, which are stored by time with NO_TIME first, as the BFS sees
    them before the width cuts."""
    lo, hi = int(graph.child_offsets[row]), int(graph.child_offsets[row + 1])
    cutoff = np.iinfo(np.int64).max if obs_time == NO_TIME else obs_time - int(strict)
    k = int(np.searchsorted(graph.child_times[lo:hi], cutoff, side="right"))
    return np.asarray(graph.child_ids[lo:lo + k], dtype=np.int64)


def _distinct_rows(ids: np.ndarray) -> np.ndarray:
    """The distinct values of ``ids`` (global row ids), ascending, in O(n): a bitmap over
    their span when it is not much wider than the ids (a skewed parent's million children),
    else a sort of the few. (``np.unique`` hashes: 0.5 s for a million children.)"""
    if ids.size == 0:
        return np.empty(0, dtype=np.int64)
    lo, hi = int(ids.min()), int(ids.max())
    if hi - lo > 8 * ids.size:
        ordered = np.sort(ids)
        return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]
    present = np.zeros(hi - lo + 1, dtype=np.bool_)
    present[ids - lo] = True
    return np.flatnonzero(present).astype(np.int64) + lo


def is_member(values: np.ndarray, ascending: np.ndarray) -> np.ndarray:
    """Which of ``values`` are in the ascending array ``ascending``: a binary search per
    value (``np.isin`` sorts both arrays: a million children against a sequence's rows)."""
    if ascending.size == 0:
        return np.zeros(values.shape, dtype=np.bool_)
    at = np.minimum(np.searchsorted(ascending, values), ascending.size - 1)
    return np.asarray(ascending[at] == values)


def _children_taken(db: InspectableDatabase, visited: np.ndarray, obs_time: int,
                    strict: bool) -> tuple[ChildTableView, ...]:
    """Per child table: the distinct visible children of the visited rows, and how many of
    them the sequence holds (by any route: a child may also be reached as a parent)."""
    rows = _distinct_rows(np.asarray(visited, dtype=np.int64))
    children = _distinct_rows(np.concatenate(
        [visible_children(db.graph, int(row), obs_time, strict) for row in rows.tolist()]
        or [np.empty(0, dtype=np.int64)]))
    # a table's rows are one range of global ids (what row_of maps them by), so each
    # table's children are one slice of the ascending distinct children
    offsets = np.asarray(db.table_offsets, dtype=np.int64)
    visible = np.diff(np.searchsorted(children, offsets))
    held = rows[is_member(rows, children)]
    taken = np.diff(np.searchsorted(held, offsets))
    return tuple(ChildTableView(db.tables[t].name, int(visible[t]), int(taken[t]))
                 for t in np.flatnonzero(visible).tolist())


__all__ = ["CellView", "ChildTableView", "RowView", "SequenceView", "TEXT", "describe_sequence", "format_time",
           "format_value", "is_member", "visible_children"]
