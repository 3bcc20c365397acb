"""The as-of aggregate files of a database whose ``dlkit.toml`` has ``[aggregates]``
(``dlkit.db.aggregates`` describes them; ``dlkit.core.aggregates`` computes them).

They are made at the end of the ``graph`` stage, from the files the build has written by
then: ``graph.bin``'s child lists and the child columns, read through memory maps. Each
prefix array (8 bytes per edge into its parent table) comes from the build's budgeted
working arrays (in memory, or a scratch file beyond the budget) and is released once
written, so at most one is held at a time besides the writer's backlog.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dlkit.core import aggregates as kernels
from dlkit.core.stats import column_stats, welford_state, welford_update
from dlkit.db import aggregates as agg
from dlkit.db import format as fmt
from dlkit.db.aggregates import AggregateMetadata, cell_name
from dlkit.db.schema.spec import AggregateSpec
from dlkit.db.write.embed import Embedder, embed_texts
from dlkit.db.write.hashing import Hasher
from dlkit.db.write.plan import ColumnPlan, TablePlan, where
from dlkit.db.write.scratch import Arrays
from dlkit.errors import SchemaError


def check_columns(spec: AggregateSpec, plans: list[TablePlan]) -> None:
    """Every aggregated column is a numeric or boolean feature column (after the scan)."""
    by_name = {p.name: p for p in plans}
    for table, names in spec.columns:
        columns = {c.name: c for c in by_name[table].columns}
        for name in names:
            if name not in columns:
                raise SchemaError(f"aggregates.columns.{table}: {where(table, name)} is not a "
                                  "column of the table")
            if columns[name].stype not in (fmt.NUMERIC, fmt.BOOLEAN):
                raise SchemaError(f"aggregates.columns.{table}: {where(table, name)} is "
                                  f"{fmt.STYPE_NAMES[columns[name].stype]}; aggregates sum "
                                  "numeric or boolean columns")


def plan_cells(spec: AggregateSpec, plans: list[TablePlan]) -> list[tuple[str, TablePlan,
                                                                           TablePlan, Any]]:
    """``(kind, parent, child, column plan or None)`` of every cell, in order: parent tables
    in order, for each its child tables in order (those with a foreign key into it), the
    count, the recency, then per selected column its sum and mean."""
    selected = dict(spec.columns)
    cells: list[tuple[str, TablePlan, TablePlan, Any]] = []
    for parent in plans:
        for child in plans:
            if not any(fk.parent == parent.name for fk in child.foreign_keys):
                continue
            if spec.counts:
                cells.append(("count", parent, child, None))
            if spec.recency:
                cells.append(("recency", parent, child, None))
            for name in selected.get(child.name, ()):
                column = next(c for c in child.columns if c.name == name)
                cells.append(("sum", parent, child, column))
                cells.append(("mean", parent, child, column))
    return cells


def _graph_arrays(root: Path, num_rows: int, num_edges: int, id_dtype: npt.DTypeLike,
                  offset_dtype: npt.DTypeLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``graph.bin``'s child offsets, child ids and child times."""
    layout, _ = fmt.graph_layout(num_rows, num_edges, id_dtype, offset_dtype)
    mapped = np.memmap(root / fmt.GRAPH_FILE, dtype=np.uint8, mode="r")
    out = []
    for name in ("child_offsets", "child_ids", "child_times"):
        offset, dtype, count = layout[name]
        out.append(mapped[offset:offset + count * np.dtype(dtype).itemsize].view(dtype))
    return out[0], out[1], out[2]


def _column_arrays(root: Path, child: TablePlan, column: ColumnPlan) -> tuple[np.ndarray, np.ndarray]:
    dtype = np.float64 if column.stype == fmt.NUMERIC else np.uint8
    n = child.num_rows
    values = (np.memmap(root / fmt.column_values_file(child.name, column.index), dtype=dtype,
                        mode="r") if n else np.zeros(0, dtype))
    bitmap = (np.memmap(root / fmt.column_valid_file(child.name, column.index), dtype=np.uint8,
                        mode="r") if n else np.zeros(0, np.uint8))
    return values, bitmap


def _stats(values: np.ndarray) -> tuple[float, float]:
    state = welford_state()
    welford_update(values, np.ones(values.shape[0], dtype=np.bool_), state)
    return column_stats(state)


def write_aggregates(root: Path, spec: AggregateSpec, plans: list[TablePlan], hasher: Hasher,
                     arrays: Arrays, embedder: Embedder, num_edges: int,
                     id_dtype: npt.DTypeLike, offset_dtype: npt.DTypeLike) -> tuple[AggregateMetadata, ...]:
    """Write the three aggregate files (``graph.bin`` and the columns must be complete on
    disk: call after ``Hasher.flush``); returns the cells' metadata."""
    cells = plan_cells(spec, plans)
    if not cells:
        return ()
    num_rows = sum(p.num_rows for p in plans)
    num_columns = sum(len(p.columns) for p in plans)
    child_offsets, child_ids, child_times = _graph_arrays(root, num_rows, num_edges, id_dtype,
                                                          offset_dtype)
    out: list[AggregateMetadata] = []
    counts_file = hasher.open(agg.COUNTS_FILE)
    sums_file = hasher.open(agg.SUMS_FILE)
    valid: np.ndarray | None = None
    for kind, parent, child, column in cells:
        first, last = parent.row_offset, parent.row_offset + parent.num_rows
        length = int(child_offsets[last] - child_offsets[first])
        child_first = child.row_offset
        totals = np.zeros(parent.num_rows, dtype=np.float64)
        if kind == "count":
            prefix = arrays.empty(np.int64, length)
            kernels.prefix_counts(child_offsets, child_ids, first, last, child_first,
                                  child_first + child.num_rows, prefix)
            counts_file.write(prefix)
            kernels.row_totals(child_offsets, first, last, prefix, totals)
            mean, std = _stats(np.log1p(totals))
        elif kind == "recency":
            prefix = arrays.empty(np.int64, length)
            gaps = arrays.empty(np.float64, length)
            num_gaps = kernels.prefix_latest(child_offsets, child_ids, child_times, first, last,
                                             child_first, child_first + child.num_rows, prefix,
                                             gaps)
            counts_file.write(prefix)
            mean, std = _stats(gaps[:num_gaps])
        elif kind == "sum":
            values, bitmap = _column_arrays(root, child, column)
            sums = arrays.empty(np.float64, length)
            valid = arrays.empty(np.int64, length)
            assert valid is not None
            kernels.prefix_sums(child_offsets, child_ids, first, last, child_first, values,
                                bitmap, sums, valid)
            sums_file.write(sums)
            kernels.row_totals(child_offsets, first, last, sums, totals)
            mean, std = _stats(np.sign(totals) * np.log1p(np.abs(totals)))
        else:  # the mean of the sum just written: its running counts of values
            assert valid is not None, "a mean follows its sum"
            counts_file.write(valid)
            valid = None
            numeric = column.stype == fmt.NUMERIC
            mean = float(column.mean) if numeric else 0.0
            std = float(column.std) if numeric else 1.0
        out.append(AggregateMetadata(
            name=cell_name(kind, parent.name, child.name, column.name if column else None),
            kind=kind, parent_table=parent.name, child_table=child.name,
            column=column.name if column else None, column_id=num_columns + len(out),
            mean=float(mean), std=float(std)))
    counts_file.close()
    sums_file.close()
    with hasher.open(agg.EMBEDDINGS_FILE) as f:
        f.write(embed_texts(embedder, [cell.name for cell in out]))
    return tuple(out)
