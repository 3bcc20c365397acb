"""``graph.bin``: both CSR directions of the foreign-key graph.

The sections are built in working arrays (:class:`dlkit.db.write.scratch.Arrays`) and written once,
in file order, as a stream (:class:`dlkit.db.write.hashing.HashedFile`: hashed and written on the
writer thread, bypassing the page cache where possible):

* while the tables stream by, every batch's resolved foreign keys are appended to the child
  -> parents arrays (:meth:`GraphWriter.append`, :func:`dlkit.core.csr.append_parent_csr`);
  the edge count is not known yet, so ``parent_ids`` is sized for the most edges there could
  be (pages never written cost nothing);
* the parents' in-degrees are counted as the edges arrive, so the transpose starts from them;
* the ``graph`` stage (:meth:`GraphWriter.finish`) queues the header, the parent sections,
  the row times and the row tables for writing, builds the transpose
  (:func:`dlkit.core.csr.transpose_csr`) meanwhile (queuing the child offsets as soon as they
  are final, before its sweeps), then queues the child ids and times. The file's sections are
  in this order, so its hash runs alongside the transpose and only the last two sections
  are left to hash when it ends; their bytes go to disk run by run as the transpose's last
  sweep finishes them (:meth:`HashedFile.write_ahead`), so the disk need not wait for the
  transpose's end.

Padding between sections (to page boundaries) is zeros, as the format requires.
"""

from __future__ import annotations

import threading

import numpy as np

from dlkit.core import csr
from dlkit.db import format as fmt
from dlkit.db.write.hashing import HashedFile, Hasher
from dlkit.db.write.plan import TablePlan
from dlkit.db.write.scratch import Arrays, populate

ROW_TABLE_BLOCK = 1 << 20
_FINISHED = "the graph writer is used before finish, which releases its arrays"


class GraphWriter:
    def __init__(self, plans: list[TablePlan], hasher: Hasher, arrays: Arrays):
        self.plans = plans
        self.hasher = hasher
        self.arrays = arrays
        self.num_rows = sum(p.num_rows for p in plans)
        max_edges = sum(p.num_rows * len(p.foreign_keys) for p in plans)
        self.id_dtype = fmt.graph_id_dtype(self.num_rows)
        self.offset_dtype = fmt.graph_offset_dtype(max_edges)
        # The parents' in-degrees, counted as the edges arrive (on the thread appending
        # them, in parallel with the column work), then turned into the child offsets.
        # Asked for first: the only array written at random (an increment per edge), so
        # the one to keep in memory when the budget cannot hold them all; every other one
        # is written in order, or in a few thousand sequential runs (the transpose).
        # (Every array is released by finish: None from then on.)
        self.child_offsets: np.ndarray | None = arrays.zeros(self.offset_dtype, self.num_rows + 1)
        parent_offsets = arrays.empty(self.offset_dtype, self.num_rows + 1)
        parent_offsets[0] = 0
        self.parent_offsets: np.ndarray | None = parent_offsets
        self.parent_ids: np.ndarray | None = arrays.empty(self.id_dtype, max_edges)
        self.num_edges = 0
        self.row_times: np.ndarray | None = arrays.empty(np.int64, self.num_rows)
        self.size = 0
        # The transpose's output and its largest temporary.
        self.child_ids: np.ndarray | None = arrays.empty(self.id_dtype, max_edges)
        self.child_times: np.ndarray | None = arrays.empty(np.int64, max_edges)
        self.local_parent: np.ndarray | None = arrays.empty(np.uint16, max_edges)
        # Every page faulted in on a helper thread while the first tables stream by (the
        # foreign-key thread idles until a table with foreign keys comes), in order of first
        # use, instead of by the threads that write them (or by the graph stage's prefix
        # sum and transpose, where both cores are busy).
        ahead = (self.child_offsets, self.parent_offsets, self.parent_ids, self.row_times,
                 self.child_ids, self.child_times, self.local_parent)
        self.populated = threading.Thread(target=_populate_all, args=(ahead,),
                                          name="dlkit-populate", daemon=True)
        self.populated.start()

    def no_edges(self, plan: TablePlan) -> None:
        """The rows of a table without foreign keys (numpy, not a kernel: the first table's
        pass comes before the kernels are loaded, and must not wait for them)."""
        start = plan.row_offset + 1
        assert self.parent_offsets is not None, _FINISHED
        self.parent_offsets[start:start + plan.num_rows] = self.num_edges

    def append(self, parents: np.ndarray, first_row: int) -> None:
        """Rows ``first_row..`` (global ids) with ``parents`` (``int64[K, n]``, -1 for none;
        stored as the graph's id dtype, which holds every row id)."""
        first_edge = self.num_edges
        assert self.parent_ids is not None and self.child_offsets is not None, _FINISHED
        self.num_edges = csr.append_parent_csr(parents, first_row, first_edge,
                                               self.parent_offsets, self.parent_ids)
        csr.count_in_degrees(self.parent_ids[first_edge:self.num_edges], self.child_offsets)

    def finish(self) -> int:
        """Stage ``graph``: build the transpose and write the file; returns how many child
        lists needed the time sort."""
        V, E = self.num_rows, self.num_edges
        layout, self.size = fmt.graph_layout(V, E, self.id_dtype, self.offset_dtype)
        out = self.hasher.open(fmt.GRAPH_FILE)
        out.write(fmt.graph_header(V, E, len(self.plans), self.id_dtype, self.offset_dtype),
                  bounded=False)
        parent_offsets, parent_ids, row_times = self.parent_offsets, self.parent_ids, self.row_times
        assert parent_offsets is not None and parent_ids is not None and row_times is not None, \
            _FINISHED
        parent_ids = parent_ids[:E]
        self.parent_offsets = self.parent_ids = None
        _write_section(out, layout, "parent_offsets", parent_offsets)
        _write_section(out, layout, "parent_ids", parent_ids)
        _write_section(out, layout, "row_times", row_times)
        out.write(bytes(layout["row_table"][0] - out.size), bounded=False)
        for plan in self.plans:  # each table's index, repeated: one small array per table
            block = np.full(max(1, min(plan.num_rows, ROW_TABLE_BLOCK)), plan.index, dtype="<i4")
            for start in range(0, plan.num_rows, block.size):
                out.write(block[:min(block.size, plan.num_rows - start)], bounded=False)
        child_offsets, self.child_offsets = self.child_offsets, None
        self.populated.join()
        child_ids, child_times = self.child_ids, self.child_times
        assert child_offsets is not None and child_ids is not None and child_times is not None
        child_ids, child_times = child_ids[:E], child_times[:E]
        local_parent, self.child_ids, self.child_times, self.local_parent = (
            self.local_parent, None, None, None)
        ids_at, times_at = layout["child_ids"][0], layout["child_times"][0]

        def range_ready(lo: int, hi: int) -> None:
            # final already: to disk now, while the rest of the sweep runs (hashed in order
            # once the sweep is done)
            out.write_ahead(child_ids[lo:hi], ids_at + lo * child_ids.itemsize)
            out.write_ahead(child_times[lo:hi], times_at + lo * child_times.itemsize)

        unsorted = csr.transpose_csr(
            parent_offsets, parent_ids, row_times, child_offsets, child_ids, child_times,
            empty=self.arrays.empty, counted=True, local_parent=local_parent,
            offsets_ready=lambda: _write_section(out, layout, "child_offsets", child_offsets),
            range_ready=range_ready)
        _write_section(out, layout, "child_ids", child_ids)
        _write_section(out, layout, "child_times", child_times)
        out.write(bytes(self.size - out.size), bounded=False)
        out.close()
        self.row_times = None
        return unsorted


def _populate_all(arrays: tuple[np.ndarray, ...]) -> None:
    for array in arrays:
        populate(array)


def _write_section(out: HashedFile, layout: dict[str, tuple[int, np.dtype, int]], name: str, array: np.ndarray) -> None:
    offset, dtype, count = layout[name]
    # padding to the section's start; unbounded, or it would wait for the whole backlog
    out.write(bytes(offset - out.size), bounded=False)
    if array.dtype != dtype or array.shape != (count,):
        raise AssertionError(f"graph section {name}: {array.dtype}{array.shape}, "
                             f"expected {dtype}({count},)")
    out.write(array, bounded=False)  # the array lives on until the write: no extra memory
