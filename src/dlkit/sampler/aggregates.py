"""The as-of aggregate cells of a database as the batch kernels read them.

A database built with ``[aggregates]`` (``dlkit.db.aggregates``) gives every row of a parent
table extra cells: the catalog (``dlkit.sampler.catalog``) lays them out as numeric columns
after the table's own, with the cells' column ids, and ``kernel_aggregates`` gives the
kernels where each one's prefix sums are (``dlkit.core.aggregates``). A database without
aggregates (or any reader without the ``aggregates`` attribute) has none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from dlkit.core.aggregates import KINDS, Aggregates, no_aggregates
from dlkit.sampler.database import SamplerDatabase

if TYPE_CHECKING:
    from dlkit.sampler.catalog import ColumnCatalog  # which reads our aggregate cells


def aggregate_source(db: Any) -> Any:
    """The database's aggregate data (``db.aggregates``), None without aggregate cells."""
    data = getattr(db, "aggregates", None)
    if data is None or not getattr(data, "cells", ()):
        return None
    return data


def aggregate_cells(db: Any, table: str) -> list[tuple[int, Any]]:
    """``(index, metadata)`` of the aggregate cells of ``table``'s rows, in cell order."""
    data = aggregate_source(db)
    if data is None:
        return []
    return [(j, cell) for j, cell in enumerate(data.cells) if cell.parent_table == table]


def column_embeddings(db: Any) -> np.ndarray:
    """The column embeddings a model indexes with ``column_ids``: the database's columns,
    then its aggregate cells (their column ids follow the columns')."""
    columns = np.asarray(db.column_embeddings())
    data = aggregate_source(db)
    if data is None:
        return np.array(columns, dtype=np.float16)
    return np.concatenate([columns, np.asarray(data.embeddings)]).astype(np.float16)


def kernel_aggregates(db: SamplerDatabase, catalog: ColumnCatalog,
                      child_offsets: np.ndarray) -> Aggregates:
    """The kernels' record of ``catalog``'s aggregate cells (``child_offsets`` of the graph
    the kernels read, to locate each cell's parent table's child lists)."""
    data = aggregate_source(db)
    if data is None:
        return no_aggregates(catalog.num_columns)
    num = len(data.cells)
    kind = np.empty(num, dtype=np.int64)
    source_col = np.full(num, -1, dtype=np.int64)
    count_at = np.empty(num, dtype=np.int64)
    sum_at = np.empty(num, dtype=np.int64)
    base = np.empty(num, dtype=np.int64)
    mean = np.empty(num, dtype=np.float64)
    std = np.empty(num, dtype=np.float64)
    tables = {t.name: t for t in db.tables}
    for j, (cell, seg) in enumerate(zip(data.cells, data.segments)):
        kind[j] = KINDS.index(cell.kind)
        if cell.column is not None:
            source_col[j] = catalog.index(cell.child_table, cell.column)
        count_at[j], sum_at[j] = seg.count_at, seg.sum_at
        base[j] = int(child_offsets[int(tables[cell.parent_table].row_offset)])
        mean[j], std[j] = float(cell.mean), float(cell.std)
    counts = np.asarray(data.counts, dtype=np.int64)
    sums = np.asarray(data.sums, dtype=np.float64)
    return Aggregates(catalog.agg, kind, source_col, count_at, sum_at, base, mean, std,
                      counts, sums)
