"""The foreign-key graph as the kernels read it: ``dlkit.core.records.Graph``, made and placed.

``graph_of`` validates an open database's CSR (``graph.bin``) into the kernels' record of
read-only views: times int64, offsets and row ids int32 or int64 (lengths checked here; ids
and offsets were range-checked by the database reader on open), without edge records.
``huge_page_graph`` places a graph in other memory (``dlkit.sampler.shared``): offsets and
child times copied, plus the edge records of ``dlkit.core.bfs`` built there (each edge's far
row with the CSR ranges and time that a walk reads next, so that read does not wait for the
row id).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from dlkit.core.bfs import RECORD_WIDTH, child_edge_records, parent_edge_records
from dlkit.core.csr import THREADED_MIN_EDGES, side_by_side
from dlkit.core.records import Graph
from dlkit.sampler.catalog import readonly_view
from dlkit.sampler.database import SamplerDatabase
from dlkit.sampler.shared import Memory, PrivateMemory

# Edge records pack a row's parent and child counts in 32 bits each.
MAX_RECORD_EDGES = 1 << 31
THREADED_RECORD_EDGES = THREADED_MIN_EDGES  # fewer: both records on this thread


def _no_records() -> np.ndarray:
    empty = np.empty((0, RECORD_WIDTH), dtype=np.int64)
    empty.setflags(write=False)
    return empty


def _int_dtype(array: Any) -> np.dtype:
    """Row ids and edge offsets are int32 or int64 (``graph.bin`` stores int32 while they
    fit); anything else is refused by ``readonly_view`` as an int64 mismatch."""
    dtype = np.asarray(array).dtype
    return dtype if dtype in (np.dtype(np.int32), np.dtype(np.int64)) else np.dtype(np.int64)


def graph_of(db: SamplerDatabase) -> Graph:
    """``db.graph`` (the reader API of docs/database_format.md) as the kernels' record, its
    arrays read-only views of the database's, with empty edge records."""
    g, n, path = db.graph, int(db.num_rows), getattr(db, "path", None)
    num_parents = int(np.asarray(g.parent_offsets)[-1]) if n >= 0 else 0
    num_children = int(np.asarray(g.child_offsets)[-1]) if n >= 0 else 0
    return Graph(
        parent_offsets=readonly_view(g.parent_offsets, _int_dtype(g.parent_offsets), n + 1,
                                     "parent_offsets", path),
        parent_ids=readonly_view(g.parent_ids, _int_dtype(g.parent_ids), num_parents,
                                 "parent_ids", path),
        child_offsets=readonly_view(g.child_offsets, _int_dtype(g.child_offsets), n + 1,
                                    "child_offsets", path),
        child_ids=readonly_view(g.child_ids, _int_dtype(g.child_ids), num_children,
                                "child_ids", path),
        child_times=readonly_view(g.child_times, np.int64, num_children, "child_times", path),
        row_times=readonly_view(g.row_times, np.int64, n, "row_times", path),
        parent_records=_no_records(),
        child_records=_no_records(),
    )


def has_records(graph: Graph) -> bool:
    """Whether the walk reads ``graph``'s edge records (else the CSR alone)."""
    return int(graph.parent_records.shape[0]) > 0


def records_fit(graph: Graph) -> bool:
    """Graphs of fewer than 2^31 edges (each way) always fit in edge records."""
    return int(graph.parent_ids.shape[0]) < MAX_RECORD_EDGES


def walked(graph: Graph) -> tuple[np.ndarray, ...]:
    """The arrays the BFS and the structure pass read at random."""
    if has_records(graph):
        return (graph.parent_offsets, graph.child_offsets, graph.child_times,
                graph.parent_records, graph.child_records)
    return (graph.parent_offsets, graph.parent_ids, graph.child_offsets, graph.child_ids,
            graph.child_times, graph.row_times)


def huge_page_bytes(graph: Graph) -> int:
    """RAM that ``huge_page_graph`` takes."""
    if not records_fit(graph):
        return sum(int(a.nbytes) for a in walked(graph))
    edges = int(graph.parent_ids.shape[0])
    return (int(graph.parent_offsets.nbytes) + int(graph.child_offsets.nbytes)
            + int(graph.child_times.nbytes) + 2 * edges * RECORD_WIDTH * 8)


def huge_page_graph(graph: Graph, memory: Memory | None = None) -> Graph:
    """Offsets and child times copied into ``memory`` (default: this process's huge pages),
    plus both edge records built there (the walk then reads parent and child ids and row
    times from the records only); without records (2^31 edges or more) every walked array
    is copied instead. When ``memory`` does not ``fill``, another process has built the same
    arrays there already."""
    memory = PrivateMemory() if memory is None else memory
    if not records_fit(graph):
        copies = tuple(memory.copy(a) for a in walked(graph))
        return graph._replace(parent_offsets=copies[0], parent_ids=copies[1],
                              child_offsets=copies[2], child_ids=copies[3],
                              child_times=copies[4], row_times=copies[5])
    edges = int(graph.parent_ids.shape[0])
    parent_records = memory.empty((edges, RECORD_WIDTH), np.int64)
    child_records = memory.empty((edges, RECORD_WIDTH), np.int64)
    if memory.fill:
        # Two gathers of random reads, each a nogil kernel: one on each of two threads, but
        # for a small graph, which they build in less time than a thread takes to start.
        side_by_side(partial(parent_edge_records, graph.parent_ids, graph.row_times,
                             graph.parent_offsets, graph.child_offsets, parent_records),
                     partial(child_edge_records, graph.child_ids, graph.parent_offsets,
                             graph.child_offsets, child_records),
                     threaded=edges >= THREADED_RECORD_EDGES)
        parent_records.setflags(write=False)
        child_records.setflags(write=False)
    return graph._replace(parent_offsets=memory.copy(graph.parent_offsets),
                          child_offsets=memory.copy(graph.child_offsets),
                          child_times=memory.copy(graph.child_times),
                          parent_records=parent_records, child_records=child_records)
