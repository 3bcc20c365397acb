"""The full checks of ``graph.bin`` (``dlkit verify``; ``docs/database_format.md`` lists
them): reserved bytes and padding zero, ``row_table``, child order, child times and the
transpose (screened by :func:`dlkit.core.integrity.edges_agree`), parents in foreign-key
order, edges per table and key. :class:`GraphChecks` runs them on a thread of their own,
beside the tables' checks."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from dlkit.core import csr, integrity
from dlkit.core.jit import is_interpreted
from dlkit.db import format as fmt
from dlkit.db.failures import Checks
from dlkit.db.metadata_records import DatabaseMetadata, TableMetadata
from dlkit.db.read.mapped import Graph

# graph.bin's sections: {name: (byte offset, dtype, count)} (format.graph_layout)
Layout = dict[str, tuple[int, np.dtype, int]]


class GraphChecks:
    """The full checks of ``graph.bin`` on a thread of their own, beside the tables' checks
    (the kernels release the GIL); their failures are collected apart and put, on
    :meth:`join`, where a sequential run would have put them: right after the graph's
    cheap checks."""

    def __init__(self, meta: DatabaseMetadata, graph: Graph, raw: np.ndarray, layout: Layout,
                 checks: Checks):
        self.checks, self.position = checks, len(checks.failures)
        self.found = Checks(collect=True, root=checks.root)
        self._pool: ThreadPoolExecutor | None = None
        if is_interpreted():  # interpreted kernels hold the GIL: a thread would only wait
            self._run(meta, graph, raw, layout)
            return
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dlkit-graph")
        self._done = self._pool.submit(self._run, meta, graph, raw, layout)

    def _run(self, meta: DatabaseMetadata, graph: Graph, raw: np.ndarray, layout: Layout) -> None:
        check_graph_zeros(raw, layout, self.found)
        full_graph_checks(meta, graph, self.found)

    def join(self) -> None:
        if self._pool is not None:
            try:
                self._done.result()
            finally:
                self._pool.shutdown()
        self.checks.failures[self.position:self.position] = self.found.failures


# The header's last 16 bytes (offset 48) are zero.
GRAPH_RESERVED = slice(fmt.GRAPH_HEADER_SIZE - 16, fmt.GRAPH_HEADER_SIZE)


def check_graph_zeros(raw: np.ndarray, layout: Layout, checks: Checks) -> None:
    """The header's reserved bytes and the padding around the page-aligned sections are 0."""
    G = fmt.GRAPH_FILE
    if raw[GRAPH_RESERVED].any():
        checks.fail(G, "graph.header", f"reserved header bytes {GRAPH_RESERVED.start}.."
                    f"{GRAPH_RESERVED.stop - 1} are not zero")
    pos, gaps = fmt.GRAPH_HEADER_SIZE, []
    for name, (off, dtype, count) in layout.items():  # in file order
        gaps.append((pos, off, f"before {name}"))
        pos = off + count * dtype.itemsize
    gaps.append((pos, raw.size, "after the last section"))
    for a, b, what in gaps:
        if raw[a:b].any():
            at = a + int(np.flatnonzero(raw[a:b])[0])
            checks.fail(G, "graph.padding", f"padding {what} (bytes {a}..{b - 1}) is not zero "
                        f"(byte {at})")


def full_graph_checks(meta: DatabaseMetadata, g: Graph, checks: Checks) -> None:
    G = fmt.GRAPH_FILE
    offsets = np.asarray(meta.table_offsets, dtype=np.int64)
    if integrity.first_table_mismatch(g.row_table, offsets) >= 0:
        checks.fail(G, "graph.row_table", "row_table disagrees with table_offsets")
    i = csr.check_child_order(g.child_offsets, g.child_ids, g.child_times)
    if i >= 0:
        checks.fail(G, "graph.child_order", f"children not sorted by (time, id) at edge {i}")
    keys = np.frombuffer(os.urandom(integrity.EDGE_KEY_BYTES), dtype=np.uint64)
    if not integrity.edges_agree(g.parent_offsets, g.parent_ids, g.row_times, g.child_offsets,
                                 g.child_ids, g.child_times, keys):
        # something differs: the exact checks (a random access per edge) say what
        i = csr.check_child_times(g.child_ids, g.child_times, g.row_times)
        if i >= 0:
            checks.fail(G, "graph.child_times", f"child_times[{i}] is not the child's row time")
        if not csr.transpose_matches(g.parent_offsets, g.parent_ids, g.child_offsets,
                                     g.child_ids):
            checks.fail(G, "graph.transpose", "the child lists are not the transpose of the "
                        "parent lists")
    name_to_index = {t.name: t.index for t in meta.tables}
    for t in meta.tables:
        a, b = offsets[t.index], offsets[t.index + 1]
        lo, hi = g.parent_offsets[a], g.parent_offsets[b]
        fks = t.foreign_keys
        listed = sum(fk.num_edges for fk in fks)
        if hi - lo != listed:
            checks.fail(G, "graph.parent_ids", f"table {t.name!r} has {hi - lo} parent edges, "
                        f"metadata says {listed}")
            continue
        _check_parent_order(t, g, offsets, [name_to_index[fk.parent_table] for fk in fks],
                            checks)


def _check_parent_order(t: TableMetadata, g: Graph, offsets: np.ndarray, fk_tables: list[int],
                        checks: Checks) -> None:
    """Each row's parents in foreign-key order, each in its key's table; edges per key as in
    the metadata (per parent table when two keys point at the same table: the graph does not
    say which key gave such an edge)."""
    G = fmt.GRAPH_FILE
    a, b = int(offsets[t.index]), int(offsets[t.index + 1])
    keys = np.asarray(fk_tables, dtype=np.intp)
    counts = np.zeros(keys.size, dtype=np.int64)
    v = integrity.first_parent_misorder(g.parent_offsets, g.parent_ids, a, b, offsets[keys],
                                        offsets[keys + 1], counts)
    if v >= 0:
        tables = np.searchsorted(offsets, g.parents(v), side="right") - 1
        checks.fail(G, "graph.parent_order", f"row {v - a} of table {t.name!r} has parents "
                    f"in tables {tables.tolist()}, not one per foreign key in the order of its "
                    f"keys' tables {fk_tables}")
        return
    for table in sorted(set(fk_tables)):
        ks = [k for k, p in enumerate(fk_tables) if p == table]
        counted = int(sum(counts[k] for k in ks))
        recorded = sum(t.foreign_keys[k].num_edges for k in ks)
        if counted != recorded:
            columns = ", ".join(t.foreign_keys[k].column for k in ks)
            checks.fail(G, "graph.foreign_key_edges", f"table {t.name!r}, foreign key(s) "
                        f"{columns}: {counted} edges, metadata says {recorded}")
