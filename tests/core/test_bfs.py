"""The temporal BFS kernel against the plain-Python reference, and its invariants."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from dlkit.core.bfs import (
    CHILD_QUOTA,
    CHILD_RECENT,
    CHILD_UNIFORM,
    NO_TIME,
    RECORD_WIDTH,
    VIA_CHILD,
    VIA_PARENT,
    child_edge_records,
    choose_without_replacement,
    parent_edge_records,
    quota_of,
    table_links_of,
    temporal_bfs,
    visible_prefix,
)
from dlkit.core.records import Graph, Stream, Tables, Visit, Walk
from dlkit.core.streams import new_stream, next_draw, sequence_key
from tests import naive_sampler as naive
from tests.sampler.fakedb import random_database

INT64_MAX = np.iinfo(np.int64).max

databases = st.builds(
    random_database,
    seed=st.integers(0, 2**32 - 1),
    num_tables=st.integers(1, 4),
    max_rows=st.integers(1, 40),
    fk_prob=st.floats(0.3, 1.0),
    null_prob=st.floats(0.0, 0.5),
    temporal_prob=st.floats(0.0, 1.0),
    num_tasks=st.just(1),
    time_span=st.sampled_from([10, 1000, 10**9]),
)


def edge_records(g) -> tuple[np.ndarray, np.ndarray]:
    """Both edge records, built by the kernels and checked here against their definition."""
    edges = len(g.parent_ids)
    parents = np.full((edges, RECORD_WIDTH), -7, np.int64)
    children = np.full((edges, RECORD_WIDTH), -7, np.int64)
    parent_edge_records(g.parent_ids, g.row_times, g.parent_offsets, g.child_offsets, parents)
    child_edge_records(g.child_ids, g.parent_offsets, g.child_offsets, children)

    def counts(row: int) -> int:
        return (int(g.child_offsets[row + 1] - g.child_offsets[row]) << 32
                | int(g.parent_offsets[row + 1] - g.parent_offsets[row]))

    for e in range(edges):
        p, c = int(g.parent_ids[e]), int(g.child_ids[e])
        assert parents[e].tolist() == [p, int(g.row_times[p]), int(g.child_offsets[p]),
                                       counts(p)]
        num_parents = int(g.parent_offsets[c + 1] - g.parent_offsets[c])
        num_children = int(g.child_offsets[c + 1] - g.child_offsets[c])
        assert children[e].tolist() == [c, int(g.parent_offsets[c]), int(g.child_offsets[c]),
                                        num_parents << 32 | num_children]
    return parents, children


def run_kernel(db, seed_row, obs_time, width, max_cells, max_rows, seed, epoch, task, anchor,
               table_offsets=None, records=False, policy=CHILD_UNIFORM):
    g = db.graph
    offsets = np.asarray(db.table_offsets) if table_offsets is None else table_offsets
    ncells = np.asarray([len(t.columns) for t in db.tables], dtype=np.int64)
    k0, k1 = sequence_key(np.uint64(seed), np.uint64(epoch), task)
    visit = Visit(rows=np.zeros(max_rows, np.int64), depth=np.zeros(max_rows, np.int64),
                  source=np.zeros(max_rows, np.int64), via=np.zeros(max_rows, np.int8),
                  parent_start=np.full(max_rows + 1, -9, np.int64))
    cutoff = INT64_MAX if obs_time == NO_TIME else obs_time
    if records:
        parents, children = edge_records(g)
    else:
        parents = children = np.empty((0, RECORD_WIDTH), np.int64)
    graph = Graph(parent_offsets=g.parent_offsets, parent_ids=g.parent_ids,
                  child_offsets=g.child_offsets, child_ids=g.child_ids,
                  child_times=g.child_times, row_times=g.row_times, parent_records=parents,
                  child_records=children)
    tables = Tables(offsets=offsets, col_start=np.concatenate([[0], np.cumsum(ncells)]),
                    num_cells=ncells,
                    links=table_links_of(g.parent_offsets, g.child_offsets, offsets))
    walk = Walk(child_width=width, max_cells=max_cells, max_rows=max_rows, child_policy=policy)
    # A one-entry buffer at a non-zero fill: the walk must grow it and append after it.
    n, parent_buffer, used = temporal_bfs(graph, tables, walk, seed_row, cutoff,
                                          Stream(k0=k0, k1=k1, anchor=anchor), visit,
                                          np.full(1, -7, np.int64), 1)
    assert parent_buffer[0] == -7
    end = 1
    starts = visit.parent_start
    for i in range(n):  # each visited row's parent ids, in edge order, for the structure pass
        row = int(visit.rows[i])
        want = g.parent_ids[int(g.parent_offsets[row]):int(g.parent_offsets[row + 1])].tolist()
        assert int(starts[i]) == end
        assert parent_buffer[int(starts[i]):int(starts[i + 1])].tolist() == want
        end = int(starts[i + 1])
    assert used == end
    out = (visit.rows, visit.depth, visit.source, visit.via)
    return [tuple(int(a[i]) for a in out) for i in range(n)]


def any_seed(db, draw):
    """A seed row of any table (not only task seeds): observation time = its row time."""
    row = draw(st.integers(0, db.num_rows - 1))
    return row, int(db.graph.row_times[row])


@given(db=databases, data=st.data(), width=st.integers(0, 6), max_cells=st.integers(1, 80),
       max_rows=st.integers(1, 40), seed=st.integers(0, 2**64 - 1), epoch=st.integers(0, 2**64 - 1),
       records=st.booleans(), policy=st.sampled_from([CHILD_UNIFORM, CHILD_RECENT, CHILD_QUOTA]))
def test_kernel_matches_reference(db, data, width, max_cells, max_rows, seed, epoch, records,
                                  policy):
    """Reading the CSR alone or the edge records, under every child policy, the walk is the
    reference's."""
    row, obs = any_seed(db, data.draw)
    task = data.draw(st.integers(0, 2**32 - 1))
    anchor = data.draw(st.integers(0, 2**63 - 1))
    got = run_kernel(db, row, obs, width, max_cells, max_rows, seed, epoch, task, anchor,
                     records=records, policy=policy)
    want = naive.bfs(db, row, obs, width, max_cells, max_rows,
                     naive.Stream(seed, epoch, task, anchor), policy=policy)
    assert got == want


@given(db=databases, data=st.data(), width=st.integers(0, 4), max_rows=st.integers(1, 60),
       policy=st.sampled_from([CHILD_UNIFORM, CHILD_RECENT, CHILD_QUOTA]))
def test_invariants(db, data, width, max_rows, policy):
    """Seed first, each row once, nothing after the cut-off, child cap, provenance edges real."""
    row, obs = any_seed(db, data.draw)
    # An arbitrary observation time too: the rule must hold for any cut-off.
    obs = data.draw(st.sampled_from([obs, NO_TIME, obs // 2 if obs != NO_TIME else 0]))
    visits = run_kernel(db, row, obs, width, 10**6, max_rows, 1, 2, 3, row, policy=policy)
    g = db.graph
    rows = [v[0] for v in visits]
    assert rows[0] == row and visits[0][1:] == (0, -1, 0)
    assert len(set(rows)) == len(rows) <= max_rows
    for r in rows[1:]:
        t = int(g.row_times[r])
        assert t == NO_TIME or obs == NO_TIME or t <= obs, "visited a row after the cut-off"
    per_source_children: dict[int, int] = {}
    for i, (r, depth, source, via) in enumerate(visits[1:], start=1):
        assert 0 <= source < i
        src_row = rows[source]
        if via == VIA_PARENT:
            assert r in g.parent_ids[g.parent_offsets[src_row]:g.parent_offsets[src_row + 1]]
            assert depth == visits[source][1] + 1
        else:
            assert via == VIA_CHILD
            assert r in g.child_ids[g.child_offsets[src_row]:g.child_offsets[src_row + 1]]
            per_source_children[source] = per_source_children.get(source, 0) + 1
    assert all(count <= width for count in per_source_children.values()), "child cap exceeded"


@given(db=databases, data=st.data())
def test_parents_before_children_in_depth_first_order(db, data):
    """Parents are a stack: until the first child is drawn, the visits are the depth-first
    preorder of the seed's visible ancestors, foreign keys in column order."""
    row, obs = any_seed(db, data.draw)
    visits = run_kernel(db, row, obs, 3, 10**6, 10**4, 5, 0, 0, row)
    g = db.graph
    seen, expected = {row}, [row]

    def ancestors(r):
        for p in g.parent_ids[g.parent_offsets[r]:g.parent_offsets[r + 1]]:
            p = int(p)
            t = int(g.row_times[p])
            if p not in seen and (t == NO_TIME or obs == NO_TIME or t <= obs):
                seen.add(p)
                expected.append(p)
                ancestors(p)

    ancestors(row)
    first_child = next((i for i, v in enumerate(visits) if v[3] == VIA_CHILD), len(visits))
    assert [v[0] for v in visits[:first_child]] == expected


@given(times=st.lists(st.integers(-5, 5), max_size=30).map(sorted), cutoff=st.integers(-7, 7),
       data=st.data())
def test_visible_prefix_counts_the_visible_children(times, cutoff, data):
    """Any window of a time-sorted list (untimed children, NO_TIME, sort first)."""
    arr = np.asarray([NO_TIME, NO_TIME] + times, dtype=np.int64)
    lo = data.draw(st.integers(0, arr.shape[0]))
    hi = data.draw(st.integers(lo, arr.shape[0]))
    expected = sum(t == NO_TIME or t <= cutoff for t in arr[lo:hi].tolist())
    assert visible_prefix(arr, lo, hi, cutoff) == expected


def naive_floyd(stream: naive.Stream, population: int, count: int) -> list[int]:
    chosen: list[int] = []
    for j in range(population - count, population):
        t = stream.below(j + 1)
        chosen.append(j if t in chosen else t)
    return sorted(chosen)


@given(seed=st.integers(0, 2**64 - 1), anchor=st.integers(0, 2**63 - 1),
       skip=st.integers(0, 3), count=st.integers(1, 40), data=st.data())
def test_floyd_matches_reference(seed, anchor, skip, count, data):
    """Small and huge populations (near 2^62 about a quarter of the raw draws fall where
    ``uniform_below`` may reject them), either stream parity, both sort paths: the same picks,
    and the stream ends where the reference's does."""
    population = data.draw(st.one_of(st.integers(count, 10 * count + 10),
                                     st.integers(2**62, 2**62 + 2**40)))
    reference = naive.Stream(seed, 5, 6, anchor)
    k0, k1 = sequence_key(np.uint64(seed), np.uint64(5), 6)
    state = new_stream()
    for _ in range(skip):  # an odd start takes its first draw from the cached half block
        next_draw(k0, k1, anchor, state)
        reference.next_u64()
    out = np.full(count + 1, -1, np.int64)
    choose_without_replacement(k0, k1, anchor, state, population, count, out,
                               np.empty(count, np.uint64))
    assert out[:count].tolist() == naive_floyd(reference, population, count)
    assert out[count] == -1
    assert int(state[0]) == reference.draw
    assert int(next_draw(k0, k1, anchor, state)) == reference.next_u64()


def test_floyd_rejects_like_uniform_below():
    """Some draw of these huge-population picks is rejected (the stream advances by more than
    the pick count), and the result still equals the reference's."""
    rejected = 0
    for anchor in range(40):
        reference = naive.Stream(3, 5, 6, anchor)
        k0, k1 = sequence_key(np.uint64(3), np.uint64(5), 6)
        state = new_stream()
        out = np.empty(8, np.int64)
        choose_without_replacement(k0, k1, anchor, state, 2**62 + 7, 8, out,
                                   np.empty(8, np.uint64))
        assert out.tolist() == naive_floyd(reference, 2**62 + 7, 8)
        assert int(state[0]) == reference.draw
        rejected += reference.draw - 8
    assert rejected > 0


def test_child_cap_draws_each_subset_uniformly():
    """A star: one parent with 6 children, width 2 -> each child is chosen equally often."""
    db = random_database(0, num_tables=1, max_rows=1)
    parent_offsets = np.asarray([0, 0, 1, 1, 1, 1, 1, 1], np.int64)
    g = db.graph
    g.parent_offsets = parent_offsets
    g.parent_ids = np.asarray([0], np.int64)  # row 1 -> parent 0
    g.child_offsets = np.asarray([0, 6, 6, 6, 6, 6, 6, 6], np.int64)
    g.child_ids = np.arange(1, 7, dtype=np.int64)
    g.child_times = np.zeros(6, np.int64)
    g.row_times = np.zeros(7, np.int64)
    g.row_table = np.zeros(7, np.int32)
    counts = np.zeros(7, int)
    for anchor in range(3000):
        visits = run_kernel(db, 0, 0, 2, 10**6, 10, 9, 0, 0, anchor,
                            table_offsets=np.asarray([0, 7], np.int64))
        assert len(visits) == 3
        for r, _, _, _ in visits[1:]:
            counts[r] += 1
    expected = 3000 * 2 / 6
    assert all(abs(c - expected) < 5 * np.sqrt(expected) for c in counts[1:])


def _shop_graph():
    """3 users (rows 0-2, no time), 2 products (3-4, no time), 8 orders (5-12, times 10..80),
    order k -> user k % 3, product 3 + k % 2."""
    db = random_database(0, num_tables=1, max_rows=1)
    parents = {5 + k: [k % 3, 3 + k % 2] for k in range(8)}
    times = [naive.NO_TIME] * 5 + [10 * (k + 1) for k in range(8)]
    children = {r: sorted((c for c, ps in parents.items() if r in ps), key=lambda c: (times[c], c))
                for r in range(13)}
    g = db.graph
    counts = [len(parents.get(r, [])) for r in range(13)]
    g.parent_offsets = np.cumsum([0] + counts).astype(np.int64)
    g.parent_ids = np.asarray([p for r in range(13) for p in parents.get(r, [])], np.int64)
    g.child_offsets = np.cumsum([0] + [len(children[r]) for r in range(13)]).astype(np.int64)
    g.child_ids = np.asarray([c for r in range(13) for c in children[r]], np.int64)
    g.child_times = np.asarray([times[c] for r in range(13) for c in children[r]], np.int64)
    g.row_times = np.asarray(times, np.int64)
    g.row_table = np.zeros(13, np.int32)
    return db


def test_golden_visit_order():
    """Pins the semantics across versions (and is re-derived by the reference every run)."""
    db = _shop_graph()
    offsets = np.asarray([0, 13], np.int64)
    got = run_kernel(db, 9, 50, 2, 10**6, 10, 42, 0, 1, 4, table_offsets=offsets)
    want = naive.bfs(db, 9, 50, 2, 10**6, 10, naive.Stream(42, 0, 1, 4))
    assert got == want
    assert got == GOLDEN_VISITS
    assert all(int(db.graph.row_times[r]) <= 50 for r, *_ in got if r >= 5)


# (row, depth, source visit, via): seed order 9, its user 1 and product 3 (parents, in
# foreign-key order), then children drawn from the shallowest level and their parents.
GOLDEN_VISITS = [(9, 0, -1, 0), (1, 1, 0, 1), (3, 1, 0, 1), (5, 2, 2, 2), (0, 3, 3, 1),
                 (6, 2, 1, 2), (4, 3, 5, 1), (8, 4, 4, 2)]


@given(counts=st.lists(st.integers(0, 12), min_size=1, max_size=6), data=st.data())
def test_quota_shares_the_width_and_passes_the_unused_share_on(counts, data):
    """Against the reference, and from the definition: the quotas fill the width exactly,
    no table gets more than it has, and a table cut short got at least as much as any other
    table (less one for the remainder)."""
    total = sum(counts)
    if total == 0:
        return
    width = data.draw(st.integers(0, total - 1))
    got = np.full(len(counts), -9, np.int64)
    quota_of(np.asarray(counts, np.int64), width, got)
    want = naive.quotas({t: c for t, c in enumerate(counts) if c}, width)
    assert got.tolist() == [want.get(t, 0) for t in range(len(counts))]
    assert int(got.sum()) == width
    assert all(0 <= q <= c for q, c in zip(got.tolist(), counts))
    for t, (q, c) in enumerate(zip(got.tolist(), counts)):
        if q < c:
            assert all(q >= other - 1 for other in got.tolist()), (t, got)


def _star(children_tables: list[int], times: list[int]):
    """One parent (row 0, table 0) with children rows 1.. of the given tables and times."""
    n = len(children_tables)
    db = random_database(0, num_tables=3, max_rows=1)  # a cell count for each table
    assert len(db.tables) == 3
    g = db.graph
    order = sorted(range(n), key=lambda q: (times[q], q + 1))
    g.parent_offsets = np.asarray([0] + list(range(n + 1)), np.int64)
    g.parent_ids = np.zeros(n, np.int64)
    g.child_offsets = np.asarray([0] + [n] * (n + 1), np.int64)
    g.child_ids = np.asarray([q + 1 for q in order], np.int64)
    g.child_times = np.asarray([times[q] for q in order], np.int64)
    g.row_times = np.asarray([0] + times, np.int64)
    g.row_table = np.asarray([0] + children_tables, np.int32)
    return db


def test_recent_takes_the_latest_visible_children():
    """Children at times 1..10, observed at 7, width 3: children at 5, 6, 7, for every
    stream; later children are never visible."""
    db = _star([0] * 10, list(range(1, 11)))
    for anchor in range(20):
        visits = run_kernel(db, 0, 7, 3, 10**6, 10, 9, 0, 0, anchor,
                            table_offsets=np.asarray([0, 11], np.int64), policy=CHILD_RECENT)
        assert sorted(r for r, *_ in visits[1:]) == [5, 6, 7]


def test_quota_gives_every_child_table_its_share():
    """Ten children of table 1 and two of table 2, width 6: table 2 keeps both (its share is
    3), table 1 gets the other 4, uniformly (each of its children about equally often)."""
    tables = [1] * 10 + [2] * 2
    db = _star(tables, list(range(12)))
    offsets = np.asarray([0, 1, 11, 13], np.int64)
    counts = np.zeros(13, int)
    for anchor in range(2000):
        visits = run_kernel(db, 0, 100, 6, 10**6, 20, 9, 0, 0, anchor, table_offsets=offsets,
                            policy=CHILD_QUOTA)
        rows = [r for r, *_ in visits[1:]]
        assert len(rows) == 6 and 11 in rows and 12 in rows
        for r in rows:
            counts[r] += 1
    expected = 2000 * 4 / 10
    assert all(abs(c - expected) < 5 * np.sqrt(expected) for c in counts[1:11])
