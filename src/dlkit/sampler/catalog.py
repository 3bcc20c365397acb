"""The column catalog: an open database's columns as flat arrays the kernels can index.

Built once per sampler. Every column array is wrapped (no copy) as a read-only, C-contiguous
1-D view in a per-dtype typed list (validity as bitmaps), and every id a kernel will use to
index another table
(categorical ids into the categorical embeddings, text ids into the text embeddings) is
range-checked here, so a corrupt database is a ``DatabaseError`` naming the column, never an
out-of-bounds read in a kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dlkit.core.bfs import table_links_of
from dlkit.core.codes import BOOLEAN, CATEGORICAL, NUMERIC, TEXT, TIMESTAMP
from dlkit.core.lists import append_array, empty_list
from dlkit.core.records import ColumnLists, Columns, Graph, RowValues, Tables
from dlkit.db.task_rules import rules_of
from dlkit.errors import DatabaseError
from dlkit.sampler.aggregates import aggregate_cells
from dlkit.sampler.database import SamplerDatabase
from dlkit.sampler.shared import Memory

_VALUE_DTYPES = {NUMERIC: np.float64, BOOLEAN: np.uint8, TIMESTAMP: np.int64,
                 CATEGORICAL: np.int32, TEXT: np.int64}


_LIST_DTYPES = tuple(np.dtype(d) for d in (np.float64, np.uint8, np.int64, np.int32))


def _typed_lists(arrays: dict[Any, list[np.ndarray]]
                 ) -> tuple[dict[np.dtype, tuple[np.ndarray, ...]], ColumnLists]:
    """Each dtype's read-only 1-D arrays, and the same as the kernels' typed lists."""
    tuples: dict[np.dtype, tuple[np.ndarray, ...]] = {}
    lists = []
    for dtype in _LIST_DTYPES:
        typed = empty_list(dtype)
        for array in arrays[dtype]:
            append_array(typed, array)
        tuples[dtype] = tuple(arrays[dtype])
        lists.append(typed)
    return tuples, ColumnLists(*lists)


def readonly_view(array: Any, dtype: Any, length: int, what: str, path: Any) -> np.ndarray:
    """``array`` as a read-only C-contiguous 1-D ndarray of ``dtype`` and ``length``."""
    base = np.asarray(array)
    if base.ndim != 1 or base.shape[0] != length:
        raise DatabaseError(f"{what} has shape {base.shape}, expected ({length},)", path=path)
    if base.dtype != np.dtype(dtype):
        if np.dtype(dtype) == np.uint8 and base.dtype == np.bool_:
            base = base.view(np.uint8)
        else:
            raise DatabaseError(f"{what} has dtype {base.dtype}, expected {np.dtype(dtype)}",
                                path=path)
    if not base.flags.c_contiguous:
        base = np.ascontiguousarray(base)
    view = base.view()
    view.setflags(write=False)
    return view


@dataclass(frozen=True, eq=False)
class ColumnCatalog:
    """An open database's columns in catalog order (tables in order, each table's columns in
    order, then its as-of aggregate cells): the kernels' records of them (``tables``,
    ``columns``, ``lists``) and what Python alone reads (names, category counts, aggregate
    cells, the column arrays as numpy arrays)."""

    names: tuple[tuple[str, str], ...]
    tables: Tables
    columns: Columns
    # Each dtype's column arrays (values; u8 also every validity bitmap), in slot order: as
    # numpy arrays for Python, as typed lists for the kernels (made by cached kernels:
    # reading a typed list from Python would compile its accessors in every process).
    arrays: dict[np.dtype, tuple[np.ndarray, ...]]
    lists: ColumnLists
    cat_count: np.ndarray  # int64[C]: categorical embedding rows of the column
    # The as-of aggregate cells (dlkit.sampler.aggregates): catalog column c is the
    # database's aggregate cell agg[c], -1 for a column of the table. Aggregate cells
    # follow their table's columns, have no value arrays (slots -1) and are numeric.
    agg: np.ndarray

    @property
    def num_columns(self) -> int:
        return int(self.columns.stype.shape[0])

    def index(self, table: str, column: str) -> int:
        """Catalog index of ``table.column``; -1 when it is not a non-key column."""
        try:
            return self.names.index((table, column))
        except ValueError:
            return -1

    def is_aggregate(self, c: int) -> bool:
        """Whether catalog column ``c`` is an as-of aggregate cell (no value arrays)."""
        return c < self.agg.shape[0] and int(self.agg[c]) >= 0

    @property
    def table_num_features(self) -> np.ndarray:
        """Each table's own cells (its columns; ``tables.num_cells`` adds the aggregates)."""
        agg = np.zeros(self.tables.num_cells.shape[0], dtype=np.int64)
        for c in np.flatnonzero(self.agg >= 0):
            agg[int(np.searchsorted(self.tables.col_start, c, side="right")) - 1] += 1
        return self.tables.num_cells - agg

    def values(self, c: int) -> np.ndarray:
        """Column ``c``'s values (validated, read-only; null cells hold 0)."""
        dtype = _VALUE_DTYPES[int(self.columns.stype[c])]
        return self.arrays[np.dtype(dtype)][int(self.columns.value_slot[c])]

    def validity(self, c: int) -> np.ndarray:
        """Column ``c``'s validity bitmap (bit ``r`` set = row ``r`` not null)."""
        return self.arrays[np.dtype(np.uint8)][int(self.columns.valid_slot[c])]

    def column_arrays(self) -> tuple[np.ndarray, ...]:
        """Every column's values and validity bitmap (what ``fill_values`` reads at random)."""
        return tuple(a for dtype in _LIST_DTYPES for a in self.arrays[dtype])

    def with_columns(self, copy: Callable[[np.ndarray], np.ndarray]) -> ColumnCatalog:
        """The same catalog reading ``copy(array)`` for every column array."""
        arrays, lists = _typed_lists({dtype: [copy(a) for a in self.arrays[dtype]]
                                      for dtype in _LIST_DTYPES})
        return replace(self, arrays=arrays, lists=lists)


ROW_ALIGN_WORDS = 8  # every table's records start on a 64-byte cache line
MAX_ROW_COLUMNS = 64  # one validity word per record


def no_row_values(num_tables: int) -> RowValues:
    """Row values of none of ``num_tables`` tables: the kernels read the columns instead."""
    zeros = np.zeros(num_tables, dtype=np.int64)
    words = np.empty(0, dtype=np.int64)
    return RowValues(start=zeros, width=zeros, words=words, floats=words.view(np.float64))


def row_layout(catalog: ColumnCatalog) -> tuple[np.ndarray, np.ndarray, int] | None:
    """``(start, width, total words)`` of ``catalog``'s row values (``RowValues``: widths are
    powers of two, so a record of up to 7 columns is one cache line, and every table starts
    on a cache line); None when a table has more than ``MAX_ROW_COLUMNS`` columns (its
    validity would not fit one word)."""
    num_cells = catalog.tables.num_cells
    if int(num_cells.max(initial=0)) > MAX_ROW_COLUMNS:
        return None
    rows = np.diff(catalog.tables.offsets)
    # The smallest power of two that holds the validity word and every column.
    width = np.asarray([1 << int(n).bit_length() for n in num_cells], dtype=np.int64)
    start = np.zeros(rows.shape[0], dtype=np.int64)
    total = 0
    for t in range(rows.shape[0]):
        start[t] = total
        total += int(rows[t] * width[t])
        total = -(-total // ROW_ALIGN_WORDS) * ROW_ALIGN_WORDS
    return start, width, total


def row_values(catalog: ColumnCatalog, memory: Memory) -> RowValues | None:
    """Every table's cells row-major (``dlkit.core.collate.fill_values_from_rows``), in an
    array from ``memory.empty(words, dtype)`` (filled unless ``memory.fill`` is False:
    another process filled it); None when ``row_layout`` says they do not fit."""
    layout = row_layout(catalog)
    if layout is None:
        return None
    start, width, total = layout
    words = memory.empty(total, np.int64)
    if memory.fill:
        _fill_rows(catalog, start, width, words)
        words.setflags(write=False)
    return RowValues(start=start, width=width, words=words, floats=words.view(np.float64))


def _fill_rows(catalog: ColumnCatalog, start: np.ndarray, width: np.ndarray,
               words: np.ndarray) -> None:
    offsets, col_start = catalog.tables.offsets, catalog.tables.col_start
    for t in range(start.shape[0]):
        n = int(offsets[t + 1] - offsets[t])
        table = words[start[t]:start[t] + n * width[t]].reshape(n, int(width[t]))
        table[:, 0] = 0
        first = int(col_start[t])
        for c in range(first, int(col_start[t + 1])):
            k = c - first
            if catalog.is_aggregate(c):
                continue  # filled from the prefix sums, never from the records
            values = catalog.values(c)
            if int(catalog.columns.stype[c]) == NUMERIC:
                table.view(np.float64)[:, 1 + k] = values
            else:
                table[:, 1 + k] = values
            bitmap = catalog.validity(c)
            valid = np.unpackbits(bitmap, count=n, bitorder="little").astype(np.int64)
            table[:, 0] |= valid << np.int64(k)
        table[:, 1 + int(catalog.tables.num_cells[t]):] = 0


def _statistics(column: Any, path: Any) -> tuple[float, float]:
    if column.stype not in (NUMERIC, TIMESTAMP):
        return 0.0, 1.0
    mean, std = float(column.mean), float(column.std)
    if not np.isfinite(mean) or not np.isfinite(std) or std <= 0:
        raise DatabaseError(f"column {column.table}.{column.name}: mean {mean} / std {std} "
                            "cannot z-score (expected finite values and std > 0)", path=path)
    return mean, std


def _check_ids(values: np.ndarray, limit: int, what: str, path: Any) -> None:
    # Null cells hold 0 in a dlkit database, so the whole array must lie in [0, max(limit, 1)).
    if values.size and (int(values.min()) < 0 or int(values.max()) >= max(limit, 1)):
        raise DatabaseError(f"{what} holds ids in [{int(values.min())}, {int(values.max())}], "
                            f"expected [0, {limit})", path=path)


def validity_bitmap(column: Any, n: int, what: str, path: Any) -> np.ndarray:
    """The column's validity as a little-endian bitmap (bit ``r`` set = row ``r`` not null).

    A bitmap is an eighth of a bool array, so it stays in cache during random access; the
    database stores one (``valid_bitmap``), an in-memory double may only have ``valid``.
    """
    bitmap = getattr(column, "valid_bitmap", None)
    if bitmap is None:
        valid = readonly_view(column.valid, np.uint8, n, f"{what} validity", path)
        bitmap = np.packbits(valid.astype(bool), bitorder="little")
    return readonly_view(bitmap, np.uint8, (n + 7) // 8, f"{what} validity bitmap", path)


def build_catalog(db: SamplerDatabase, graph: Graph) -> ColumnCatalog:
    """Validate and index every non-key column of ``db`` (the reader API of database_format);
    ``graph`` is its graph (``dlkit.sampler.graph.graph_of``), for the tables' links."""
    path = getattr(db, "path", None)
    num_texts = int(db.text_embeddings().shape[0])
    table_offsets = np.asarray(db.table_offsets, dtype=np.int64)
    if table_offsets.shape[0] != len(db.tables) + 1 or table_offsets[-1] != db.num_rows:
        raise DatabaseError("table_offsets disagree with the tables and num_rows", path=path)
    lists: dict[Any, list[np.ndarray]] = {np.float64: [], np.uint8: [], np.int64: [], np.int32: []}
    names, starts, stypes, column_ids, value_slots, valid_slots = [], [0], [], [], [], []
    means, stds, cat_starts, cat_counts = [], [], [], []
    col_agg: list[int] = []
    # A cell's lag: its column's known_after; an aggregate cell has none of its own (the
    # lags of the child columns it sums apply inside it).
    lags: list[int] = []
    for table in db.tables:
        n = int(table.num_rows)
        if int(table_offsets[table.index + 1] - table_offsets[table.index]) != n:
            raise DatabaseError(f"table {table.name}: {n} rows disagree with table_offsets",
                                path=path)
        for column in table.columns:
            what = f"column {table.name}.{column.name}"
            stype = int(column.stype)
            if stype not in _VALUE_DTYPES:
                raise DatabaseError(f"{what} has semantic type {stype}, expected 0-4", path=path)
            dtype = _VALUE_DTYPES[stype]
            values = readonly_view(column.values, dtype, n, f"{what} values", path)
            valid = validity_bitmap(column, n, what, path)
            cat_start = cat_count = 0
            if stype == CATEGORICAL:
                cat_start, cat_count = int(column.cat_emb_start), int(column.cat_emb_count)
                num_categories = int(db.categorical_embeddings().shape[0])
                if cat_start < 0 or cat_count < 0 or cat_start + cat_count > num_categories:
                    raise DatabaseError(
                        f"{what}: categorical embedding rows [{cat_start}, "
                        f"{cat_start + cat_count}) exceed the {num_categories} rows", path=path)
                _check_ids(values, cat_count, f"{what} categories", path)
            elif stype == TEXT:
                _check_ids(values, num_texts, f"{what} text ids", path)
            mean, std = _statistics(column, path)
            value_slots.append(len(lists[dtype]))
            lists[dtype].append(values)
            valid_slots.append(len(lists[np.uint8]))
            lists[np.uint8].append(valid)
            names.append((table.name, column.name))
            lags.append(int(getattr(column, "known_after_us", 0)))
            stypes.append(stype)
            column_ids.append(int(column.column_id))
            means.append(mean)
            stds.append(std)
            cat_starts.append(cat_start)
            cat_counts.append(cat_count)
        for j, cell in aggregate_cells(db, table.name):
            col_agg.extend([-1] * (len(names) - len(col_agg)) + [j])
            names.append((table.name, cell.name))
            lags.append(0)
            stypes.append(NUMERIC)
            column_ids.append(int(cell.column_id))
            value_slots.append(-1)
            valid_slots.append(-1)
            means.append(float(cell.mean))
            stds.append(float(cell.std))
            cat_starts.append(0)
            cat_counts.append(0)
        starts.append(len(names))
    # A column's lag: the largest of its own (the schema's known_after) and the label lags
    # of the tasks predicting it.
    label_lag = np.asarray(lags, dtype=np.int64)
    for task in db.tasks:
        lag = rules_of(task).label_lag_us
        if lag:
            c = names.index((task.table, task.target_column))
            label_lag[c] = max(int(label_lag[c]), int(lag))
    column_id_array = np.asarray(column_ids, dtype=np.int32)
    # Dense rank of each column id: a counting sort by rank is a stable sort by column id.
    sort_rank = np.searchsorted(np.unique(column_id_array), column_id_array).astype(np.int64)
    table_col_start = np.asarray(starts, dtype=np.int64)
    arrays, column_lists = _typed_lists({np.dtype(dtype): arrays
                                         for dtype, arrays in lists.items()})
    num_cells = np.diff(table_col_start)
    return ColumnCatalog(
        names=tuple(names),
        tables=Tables(offsets=table_offsets, col_start=table_col_start, num_cells=num_cells,
                      links=table_links_of(graph.parent_offsets, graph.child_offsets,
                                           table_offsets)),
        columns=Columns(
            stype=np.asarray(stypes, dtype=np.int8),
            column_id=column_id_array,
            sort_rank=sort_rank,
            value_slot=np.asarray(value_slots, dtype=np.int64),
            valid_slot=np.asarray(valid_slots, dtype=np.int64),
            mean=np.asarray(means, dtype=np.float64),
            std=np.asarray(stds, dtype=np.float64),
            cat_start=np.asarray(cat_starts, dtype=np.int64),
            label_lag=label_lag),
        arrays=arrays,
        lists=column_lists,
        cat_count=np.asarray(cat_counts, dtype=np.int64),
        agg=np.asarray(col_agg + [-1] * (len(names) - len(col_agg)), dtype=np.int64),
    )
