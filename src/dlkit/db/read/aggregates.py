"""Opening and checking a database's as-of aggregate files (``dlkit.db.aggregates``).

Opening checks their sizes against ``metadata.json`` (the edges into each parent table);
``dlkit verify`` also recomputes every prefix array from ``graph.bin`` and the child columns
(the build's kernels, one sequential pass per array) and compares them bit for bit, and each
count's, sum's and recency's statistics within a relative 1e-9.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dlkit.core import aggregates as kernels
from dlkit.core.stats import column_stats, welford_state, welford_update
from dlkit.db import aggregates as agg
from dlkit.db.aggregates import AggregateMetadata, Segment
from dlkit.db.failures import Checks
from dlkit.db.metadata_records import DatabaseMetadata

if TYPE_CHECKING:
    from dlkit.db.read.mapped import FileMaps, Graph, TableData


@dataclass(frozen=True, eq=False)
class AggregateData:
    """The aggregate cells of an open database: their metadata, where each one's prefix
    arrays are (``segments``), the two prefix files and the cells' column embeddings."""

    cells: tuple[AggregateMetadata, ...]
    segments: tuple[Segment, ...]
    counts: np.ndarray  # int64
    sums: np.ndarray  # float64
    embeddings: np.ndarray  # float16 [cells, column_dim]


def open_aggregates(meta: DatabaseMetadata, maps: FileMaps,
                    checks: Checks) -> AggregateData | None:
    """The aggregate files (``Stop`` from ``maps`` on a wrong size); None without any."""
    if not meta.aggregates:
        return None
    segments, num_counts, num_sums = agg.layout(meta.aggregates, meta.tables)
    dim = meta.embeddings.column_dim
    counts = maps.array(agg.COUNTS_FILE, "<i8", num_counts)
    sums = maps.array(agg.SUMS_FILE, "<f8", num_sums)
    embeddings = maps.array(agg.EMBEDDINGS_FILE, "<f2", len(meta.aggregates) * dim,
                            (len(meta.aggregates), dim))
    return AggregateData(meta.aggregates, tuple(segments), counts, sums, embeddings)


def _stats(values: np.ndarray) -> tuple[float, float]:
    state = welford_state()
    welford_update(values, np.ones(values.shape[0], dtype=np.bool_), state)
    return column_stats(state)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-300)


def check_aggregates(data: AggregateData, meta: DatabaseMetadata, graph: Graph,
                     tables: Sequence[TableData],
                     checks: Checks) -> None:
    """Recompute every prefix array and statistic (``dlkit verify``)."""
    by_name = {t.name: t for t in tables}
    child_offsets = graph.child_offsets
    for j, (cell, seg) in enumerate(zip(data.cells, data.segments)):
        parent, child = by_name[cell.parent_table], by_name[cell.child_table]
        first, last = parent.row_offset, parent.row_offset + parent.num_rows
        totals = np.zeros(parent.num_rows, dtype=np.float64)
        n = seg.length
        if cell.kind == "count":
            expect = np.empty(n, dtype=np.int64)
            kernels.prefix_counts(child_offsets, graph.child_ids, first, last, child.row_offset,
                                  child.row_offset + child.num_rows, expect)
            stored = data.counts[seg.count_at:seg.count_at + n]
            rel = agg.COUNTS_FILE
            kernels.row_totals(child_offsets, first, last, expect, totals)
            stats = _stats(np.log1p(totals))
        elif cell.kind == "recency":
            child_last = child.row_offset + child.num_rows
            expect = np.empty(n, dtype=np.int64)
            gaps = np.empty(n, dtype=np.float64)
            num_gaps = kernels.prefix_latest(child_offsets, graph.child_ids,
                                             graph.child_times, first, last, child.row_offset,
                                             child_last, expect, gaps)
            stored = data.counts[seg.count_at:seg.count_at + n]
            rel = agg.COUNTS_FILE
            stats = _stats(gaps[:num_gaps])
        else:
            assert cell.column is not None, "a sum or mean aggregates a column"
            column = child.column(cell.column)
            values = np.asarray(column.values)
            sums = np.empty(n, dtype=np.float64)
            valid = np.empty(n, dtype=np.int64)
            kernels.prefix_sums(child_offsets, graph.child_ids, first, last, child.row_offset,
                                values, column.valid_bitmap, sums, valid)
            if cell.kind == "sum":
                expect = sums.view(np.int64)
                stored = data.sums[seg.sum_at:seg.sum_at + n].view(np.int64)
                rel = agg.SUMS_FILE
                kernels.row_totals(child_offsets, first, last, sums, totals)
                stats = _stats(np.sign(totals) * np.log1p(np.abs(totals)))
            else:
                expect = valid
                stored = data.counts[seg.count_at:seg.count_at + n]
                rel = agg.COUNTS_FILE
                if column.mean is None:  # a boolean column
                    stats = (0.0, 1.0)
                else:
                    assert column.std is not None, "the metadata checks require both"
                    stats = (float(column.mean), float(column.std))
        bad = np.flatnonzero(expect != stored)
        if bad.size:
            i = int(bad[0])
            running = "latest child time" if cell.kind == "recency" else cell.kind
            checks.fail(rel, "aggregates.prefix", f"aggregate {j} ({cell.name}): value at "
                        f"position {i} of its segment is not the running {running} of the "
                        "parent's child list")
        if not (_close(stats[0], cell.mean) and _close(stats[1], cell.std)):
            checks.fail("metadata.json", "aggregates.stats", f"aggregate {j} ({cell.name}): "
                        f"mean/std {cell.mean}/{cell.std}, recomputed {stats[0]}/{stats[1]}")
