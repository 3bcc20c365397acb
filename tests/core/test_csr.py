"""CSR build kernels against plain-Python adjacency, and the cheap structural checks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.core import csr


def _random_graph(rng, num_nodes, max_parents, time_range, sorted_times=False):
    degrees = rng.integers(0, max_parents + 1, num_nodes)
    offsets = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(degrees, out=offsets[1:])
    ids = rng.integers(0, max(num_nodes, 1), offsets[-1]).astype(np.int64)
    times = rng.integers(-time_range, time_range + 1, num_nodes).astype(np.int64)
    if sorted_times:
        times.sort()
    return offsets, ids, times


def _python_children(offsets, ids, times):
    """Plain-Python reference: for every parent, [(time, child)] sorted."""
    children = {p: [] for p in range(len(offsets) - 1)}
    for v in range(len(offsets) - 1):
        for e in range(offsets[v], offsets[v + 1]):
            children[int(ids[e])].append((int(times[v]), v))
    return {p: sorted(lst) for p, lst in children.items()}


def _build(offsets, ids, times, **kwargs):
    n = len(offsets) - 1
    co = np.empty(n + 1, dtype=np.int64)
    ci = np.empty(ids.size, dtype=ids.dtype)  # row ids: int32 or int64, as graph.bin stores
    ct = np.empty(ids.size, dtype=np.int64)
    csr.transpose_csr(offsets, ids, times, co, ci, ct, **kwargs)
    return co, ci, ct


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 60), k=st.integers(0, 4),
       trange=st.sampled_from([0, 3, 1000]), bucket_edges=st.sampled_from([1, 2, 7, 1 << 15]),
       block_shift=st.integers(0, 7), threads=st.integers(1, 3),
       id_dtype=st.sampled_from([np.int32, np.int64]))
def test_transpose_matches_python(seed, n, k, trange, bucket_edges, block_shift, threads,
                                  id_dtype):
    rng = np.random.default_rng(seed)
    offsets, ids, times = _random_graph(rng, n, k, trange)
    ids = ids.astype(id_dtype)
    co, ci, ct = _build(offsets, ids, times, bucket_edges=bucket_edges, block_shift=block_shift,
                        threads=threads)
    ref = _python_children(offsets, ids, times)
    assert co[0] == 0 and co[-1] == ids.size
    for p in range(n):
        got = list(zip(ct[co[p]:co[p + 1]].tolist(), ci[co[p]:co[p + 1]].tolist()))
        assert got == ref[p]
    assert csr.check_child_order(co, ci, ct) == -1
    assert csr.check_child_times(ci, ct, times) == -1
    assert csr.transpose_matches(offsets, ids, co, ci)


def test_bucket_sizes_and_threads_give_identical_bytes():
    rng = np.random.default_rng(5)
    offsets, ids, times = _random_graph(rng, 50_000, 3, 10**9)
    ids[::7] = 12_345  # a hub parent: its list spans many bucket-sized stretches
    ref = csr.argsort_transpose(offsets, ids, times)
    for bucket_edges, block_shift, threads in ((1 << 15, 6, 1), (1 << 15, 6, 2), (64, 0, 3),
                                                (1000, 3, 2), (1 << 30, 16, 1)):
        got = _build(offsets, ids, times, bucket_edges=bucket_edges, block_shift=block_shift,
                     threads=threads)
        for a, b in zip(ref, got):
            assert np.array_equal(a, b)


def test_parallel_sweeps_give_identical_bytes(monkeypatch):
    # both sweeps split across threads even on a small graph: the bytes must not change
    monkeypatch.setattr(csr, "PARALLEL_MIN_EDGES", 0)
    rng = np.random.default_rng(11)
    offsets, ids, times = _random_graph(rng, 20_000, 4, 50)
    ids[::5] = 777  # a hub: its list is cut by the child ranges of sweep A
    ref = csr.argsort_transpose(offsets, ids, times)
    for threads, bucket_edges in ((2, 1 << 15), (3, 500), (8, 64)):
        ready = []
        n = len(offsets) - 1
        co = np.empty(n + 1, dtype=np.int64)
        ci = np.empty(ids.size, dtype=np.int64)
        ct = np.empty(ids.size, dtype=np.int64)
        csr.transpose_csr(offsets, ids, times, co, ci, ct, threads=threads,
                          bucket_edges=bucket_edges, offsets_ready=lambda: ready.append(co.copy()))
        assert len(ready) == 1 and np.array_equal(ready[0], ref[0])  # final before the sweeps
        for a, b in zip(ref, (co, ci, ct)):
            assert np.array_equal(a, b)


def test_in_degrees_counted_while_edges_arrive_give_identical_bytes():
    # the preprocess builder counts in-degrees batch by batch, then transposes with counted=True
    rng = np.random.default_rng(3)
    offsets, ids, times = _random_graph(rng, 5_000, 3, 100)
    ref = csr.argsort_transpose(offsets, ids, times)
    n = len(offsets) - 1
    co = np.zeros(n + 1, dtype=np.int64)
    for start in range(0, ids.size, 777):
        csr.count_in_degrees(ids[start:start + 777], co)
    ci = np.empty(ids.size, dtype=np.int64)
    ct = np.empty(ids.size, dtype=np.int64)
    # the builder also hands in its own, longer scratch for the edges' bucket-local parents
    scratch = np.full(ids.size + 100, 0xFFFF, dtype=np.uint16)
    csr.transpose_csr(offsets, ids, times, co, ci, ct, counted=True, threads=2,
                      local_parent=scratch)
    for a, b in zip(ref, (co, ci, ct)):
        assert np.array_equal(a, b)
    assert (scratch[ids.size:] == 0xFFFF).all()  # nothing written past the edges


def test_buckets_never_span_more_parents_than_a_uint16_counts():
    # 300,000 parents with no edges between two busy ones: bucket spans must still be cut
    n = 300_002
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[-3:] = [0, 2, 4]  # rows n-2 and n-1 have two parents each
    ids = np.array([0, n - 1, 1, 0], dtype=np.int64)
    times = np.arange(n, dtype=np.int64) % 5
    co, ci, ct = _build(offsets, ids, times, bucket_edges=1 << 20, block_shift=6)
    assert ci[co[0]:co[1]].tolist() == [n - 2, n - 1]  # times 0 and 1
    assert ci[co[n - 1]:co[n]].tolist() == [n - 2] and ci[co[1]:co[2]].tolist() == [n - 1]
    for a, b in zip(csr.argsort_transpose(offsets, ids, times), (co, ci, ct)):
        assert np.array_equal(a, b)



def test_children_in_time_order_with_ties_by_id():
    # parent 0 gets children 5, 3, 4, 1 with times 7, 7, 2, 9 -> (2,4) (7,3) (7,5) (9,1)
    num = 6
    offsets = np.array([0, 0, 1, 1, 2, 3, 4], dtype=np.int64)
    ids = np.zeros(4, dtype=np.int64)
    times = np.array([0, 9, 0, 7, 2, 7], dtype=np.int64)
    co, ci, ct = _build(offsets, ids, times)
    assert ci[co[0]:co[1]].tolist() == [4, 3, 5, 1]
    assert ct[co[0]:co[1]].tolist() == [2, 7, 7, 9]
    assert co.tolist() == [0, 4, 4, 4, 4, 4, 4]
    assert num == len(offsets) - 1


@pytest.mark.parametrize("n", [25, 60, 500, 5000])  # odd and even numbers of merge passes
def test_long_unsorted_list_uses_mergesort_path(n):
    offsets = np.arange(n + 1, dtype=np.int64)  # every row has one parent: row 0
    ids = np.zeros(n, dtype=np.int64)
    times = np.random.default_rng(1).integers(0, 50, n).astype(np.int64)
    co, ci, ct = _build(offsets, ids, times)
    expect = sorted((int(times[v]), v) for v in range(n))
    assert list(zip(ct.tolist(), ci.tolist())) == expect


def test_append_parent_csr_skips_missing_parents():
    fk = np.array([[3, -1, 5], [-1, -1, 4]], dtype=np.int64)
    # rows 0..2 belong to an earlier table with 2 edges; this table's rows are 3..5
    po = np.array([0, 1, 1, 2, 0, 0, 0], dtype=np.int64)
    pi = np.array([9, 9, 0, 0, 0], dtype=np.int64)
    e = csr.append_parent_csr(fk, 3, 2, po, pi)
    assert e == 5
    assert po.tolist() == [0, 1, 1, 2, 3, 3, 5]
    assert pi.tolist() == [9, 9, 3, 5, 4]


def test_check_offsets_and_ids():
    assert csr.check_offsets(np.array([0, 1, 1, 3]), 3) == -1
    assert csr.check_offsets(np.array([1, 1, 3]), 3) == 0
    assert csr.check_offsets(np.array([0, 2, 1, 3]), 3) == 2
    assert csr.check_offsets(np.array([0, 1, 2]), 3) == 2
    assert csr.check_offsets(np.zeros(0, np.int64), 0) == 0
    assert csr.check_ids(np.array([0, 4, 2]), 0, 5) == -1
    assert csr.check_ids(np.array([0, 5, 2]), 0, 5) == 1
    assert csr.check_ids(np.array([-1]), 0, 5) == 0
    assert csr.check_ids_where(np.array([9, 1]), np.array([False, True]), 0, 2) == -1


def test_transpose_matches_detects_a_moved_edge():
    rng = np.random.default_rng(3)
    offsets, ids, times = _random_graph(rng, 40, 2, 100)
    co, ci, ct = _build(offsets, ids, times)
    assert csr.transpose_matches(offsets, ids, co, ci)
    if ci.size >= 2:
        bad = ci.copy()
        bad[0] = (bad[0] + 1) % 40
        assert not csr.transpose_matches(offsets, ids, co, bad)


def test_bad_bucket_parameters_are_refused():
    offsets, ids, times = np.zeros(2, np.int64), np.zeros(0, np.int64), np.zeros(1, np.int64)
    with pytest.raises(ValueError):
        _build(offsets, ids, times, block_shift=17)
    with pytest.raises(ValueError):
        _build(offsets, ids, times, bucket_edges=0)


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 80), k=st.integers(0, 4),
       ready=st.sampled_from([1, 3, 10, 1 << 20]), bucket_edges=st.sampled_from([1, 4, 1 << 15]),
       threads=st.integers(1, 3))
def test_ranges_reported_ready_are_final_and_cover_every_edge_once(seed, n, k, ready,
                                                                   bucket_edges, threads):
    rng = np.random.default_rng(seed)
    offsets, ids, times = _random_graph(rng, n, k, 50)
    seen = []

    def range_ready(lo, hi):
        seen.append((lo, hi, ci[lo:hi].copy(), ct[lo:hi].copy()))

    co = np.empty(n + 1, dtype=np.int64)
    ci = np.empty(ids.size, dtype=ids.dtype)
    ct = np.empty(ids.size, dtype=np.int64)
    original = csr.READY_EDGES
    csr.READY_EDGES = ready
    try:
        csr.transpose_csr(offsets, ids, times, co, ci, ct, threads=threads,
                          bucket_edges=bucket_edges, range_ready=range_ready)
    finally:
        csr.READY_EDGES = original
    covered = sorted((lo, hi) for lo, hi, _, _ in seen)
    assert [lo for lo, _ in covered] == [0] + [hi for _, hi in covered[:-1]] if covered else True
    assert (covered[-1][1] if covered else 0) == ids.size
    for lo, hi, got_ids, got_times in seen:  # what was reported is what stayed
        assert np.array_equal(got_ids, ci[lo:hi]) and np.array_equal(got_times, ct[lo:hi])
    assert np.array_equal(ci, _build(offsets, ids, times)[1])

