"""Placing a graph: the edge records ``huge_page_graph`` builds are the records' definition
(``tests.core.test_bfs.edge_records`` checks the kernels against it), whether it builds them
on the calling thread (a small graph) or on two threads."""

from __future__ import annotations

import numpy as np
import pytest

from dlkit.sampler import graph as placed
from tests.core.test_bfs import edge_records
from tests.sampler.fakedb import random_database


@pytest.mark.parametrize("threaded_from", [placed.THREADED_RECORD_EDGES, 0])
@pytest.mark.parametrize("seed", [1, 8])
def test_placed_records_are_the_definitions_on_one_thread_or_two(seed, threaded_from,
                                                                  monkeypatch):
    db = random_database(seed, num_tables=4, max_rows=80)
    graph = placed.graph_of(db)
    assert len(graph.parent_ids) > 0
    monkeypatch.setattr(placed, "THREADED_RECORD_EDGES", threaded_from)
    out = placed.huge_page_graph(graph)
    parents, children = edge_records(db.graph)
    assert np.array_equal(out.parent_records, parents)
    assert np.array_equal(out.child_records, children)
    assert not out.parent_records.flags.writeable and not out.child_records.flags.writeable
    for name in ("parent_offsets", "child_offsets", "child_times"):
        assert np.array_equal(getattr(out, name), getattr(graph, name)), name
