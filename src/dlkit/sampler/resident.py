"""One opened database as the batch kernels read it: its records, read once, placed once.

``read_resident`` validates an open database (the reader API of docs/database_format.md)
into a ``ResidentDatabase``: the kernels' records themselves (``Graph``, ``Tables``,
``Columns``, ``ColumnLists``, ``RowValues``, ``Aggregates``) as read-only views of the memory
map, the text embeddings a batch gathers from, and its validated tasks. ``place`` puts one
where batches read it fastest (``dlkit.sampler.hugepages``, ``dlkit.sampler.shared``):
huge-page copies of this process's own or one segment per machine. Nothing in either is
global to the process: several databases may be resident side by side, each with its own
records (``dlkit.sampler.batch.build_batch`` takes the one a batch is built from).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np

from dlkit.core.aggregates import Aggregates
from dlkit.core.records import ColumnLists, Columns, Graph, RowValues, Tables
from dlkit.errors import DatabaseError
from dlkit.sampler.aggregates import kernel_aggregates
from dlkit.sampler.catalog import (
    ColumnCatalog,
    build_catalog,
    no_row_values,
    row_layout,
    row_values,
)
from dlkit.sampler.database import SamplerDatabase
from dlkit.sampler.graph import graph_of, huge_page_bytes, huge_page_graph
from dlkit.sampler.hugepages import memory_path
from dlkit.sampler.shared import Memory, PrivateMemory, SegmentSizer, SharedSegment, segment_key
from dlkit.sampler.tasks import TaskView, find_task, task_views


@dataclass(frozen=True, eq=False)
class ResidentDatabase:
    """An opened database's records, as every batch of it reads them (read-only arrays).

    ``memory_path`` says where the graph and the values are read from: ``"mmap"`` (the
    database's memory map), ``"private"`` (this process's huge-page copies) or ``"shared"``
    (``segment``, one per machine); ``close`` leaves the segment."""

    path: str | os.PathLike[str] | None
    database_hash: bytes
    graph: Graph
    catalog: ColumnCatalog
    row_values: RowValues
    aggregates: Aggregates
    text_bits: np.ndarray  # uint16[U, D]: the text embeddings' bits (gather_rows reads them)
    tasks: tuple[TaskView, ...]
    memory_path: str = "mmap"
    segment: SharedSegment | None = None

    @property
    def tables(self) -> Tables:
        return self.catalog.tables

    @property
    def columns(self) -> Columns:
        return self.catalog.columns

    @property
    def column_lists(self) -> ColumnLists:
        return self.catalog.lists

    @property
    def huge_pages(self) -> bool:
        """Whether batches read huge-page copies (private or shared), not the memory map."""
        return self.memory_path != "mmap"

    def task(self, name_or_index: str | int) -> TaskView:
        """The task named ``name_or_index`` (or of that index)."""
        return find_task(self.tasks, name_or_index)

    def value_bytes(self) -> int:
        """RAM the placed values take: the row values, else every column array."""
        layout = row_layout(self.catalog)
        if layout is not None:
            return 8 * layout[2]
        return sum(int(a.nbytes) for a in self.catalog.column_arrays())

    def close(self) -> None:
        """Leave the shared segment, if any (the last process on the machine removes it)."""
        if self.segment is not None:
            self.segment.close()


def read_resident(db: SamplerDatabase) -> ResidentDatabase:
    """``db``'s records as views of its memory map, every array and task validated (a
    corrupt database is a ``DatabaseError`` naming what is wrong, never a kernel's
    out-of-bounds read)."""
    path = getattr(db, "path", None)
    graph = graph_of(db)
    catalog = build_catalog(db, graph)
    text = np.asarray(db.text_embeddings())
    if text.ndim != 2 or text.dtype != np.float16:
        raise DatabaseError(f"text embeddings have shape {text.shape} and dtype {text.dtype}, "
                            "expected a 2-D float16 array", path=path)
    return ResidentDatabase(
        path=path, database_hash=bytes(db.database_hash), graph=graph, catalog=catalog,
        row_values=no_row_values(int(catalog.tables.num_cells.shape[0])),
        aggregates=kernel_aggregates(db, catalog, graph.child_offsets),
        # gather_rows wants C order
        text_bits=np.ascontiguousarray(text.view(np.uint16)),
        tasks=task_views(db, catalog))


def place(resident: ResidentDatabase, huge_pages: bool | None,
          local_copies: int = 1) -> ResidentDatabase:
    """``resident`` read from where ``huge_pages`` says (``dlkit.sampler.hugepages.
    memory_path``: True, False, or None = when it pays); ``local_copies`` is how many
    processes on this machine read the same database (the local ranks), which then share
    one segment. The same records, the same values: only where the graph and the values
    live changes."""
    total = huge_page_bytes(resident.graph) + resident.value_bytes()
    where = memory_path(huge_pages, total, local_copies)
    if where == "private":
        return replace(_placed(resident, PrivateMemory()), memory_path=where)
    if where == "shared":
        sizer = SegmentSizer()
        _placed(resident, sizer)
        segment = SharedSegment.join(segment_key(resident.database_hash), sizer.size)
        try:
            placed = _placed(resident, segment)
            segment.publish()
        except BaseException:
            segment.close()
            raise
        return replace(placed, memory_path=where, segment=segment)
    return resident


def _placed(resident: ResidentDatabase, memory: Memory) -> ResidentDatabase:
    """The graph and the values in ``memory``: the same arrays in the same order whatever
    the memory, so a shared segment's offsets agree in every process (a ``SegmentSizer``
    only measures them)."""
    graph = huge_page_graph(resident.graph, memory)
    rows = row_values(resident.catalog, memory)
    if rows is None:
        return replace(resident, graph=graph, catalog=resident.catalog.with_columns(memory.copy))
    return replace(resident, graph=graph, row_values=rows)
