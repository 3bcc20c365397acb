"""The one-pass kernels of ``dlkit verify`` (:mod:`dlkit.core.integrity`) against plain numpy:
the edge screen on random graphs and planted corruptions, columns, row times, ``row_table``
and tasks. (The string and parent-order kernels are tested in ``tests/db/read/test_verify_content``.)
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlkit.core import csr, integrity
from dlkit.core.codes import NO_TIME


def _graph(rng, rows: int, max_parents: int, id_dtype=np.int64):
    """A random parent CSR, row times, and its transpose built with numpy (no dlkit kernel):
    ``(parent_offsets, parent_ids, row_times, child_offsets, child_ids, child_times)``."""
    degrees = rng.integers(0, max_parents + 1, rows)
    parent_offsets = np.concatenate([[0], np.cumsum(degrees)]).astype(id_dtype)
    parent_ids = rng.integers(0, max(rows, 1), int(parent_offsets[-1])).astype(id_dtype)
    row_times = rng.integers(-5, 6, rows).astype(np.int64)
    children = np.repeat(np.arange(rows), degrees)
    order = np.lexsort((children, row_times[children], parent_ids))
    child_offsets = np.zeros(rows + 1, dtype=id_dtype)
    np.cumsum(np.bincount(parent_ids, minlength=rows), out=child_offsets[1:])
    child_ids = children[order].astype(id_dtype)
    return (parent_offsets, parent_ids, row_times, child_offsets, child_ids,
            row_times[child_ids].copy())


def _triples_equal(parent_offsets, parent_ids, row_times, child_offsets, child_ids,
                   child_times) -> bool:
    """The reference: the sorted (parent, child, time) triples of both sides are equal."""
    rows = len(parent_offsets) - 1
    v = np.repeat(np.arange(rows), np.diff(parent_offsets))
    left = np.stack([parent_ids.astype(np.int64), v, row_times[v]], axis=1)
    p = np.repeat(np.arange(rows), np.diff(child_offsets))
    right = np.stack([p, child_ids.astype(np.int64), child_times], axis=1)
    if left.shape != right.shape:
        return False
    return bool(np.array_equal(left[np.lexsort(left.T[::-1])], right[np.lexsort(right.T[::-1])]))


def _keys(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**64, 4, dtype=np.uint64)


def _screen(g, seed: int = 0) -> bool:
    return integrity.edges_agree(*g, _keys(seed))


def _exact(g) -> bool:
    """Today's exact checks: child times, then the scatter transpose."""
    po, pi, rt, co, ci, ct = g
    return csr.check_child_times(ci, ct, rt) == -1 and csr.transpose_matches(po, pi, co, ci)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(0, 50), k=st.integers(0, 4),
       id_dtype=st.sampled_from([np.int32, np.int64]), key_seed=st.integers(0, 2**32 - 1),
       mutation=st.sampled_from(["none", "child_id", "child_time", "offset", "swap_lists",
                                 "parent_id"]))
def test_screen_agrees_with_the_multiset_reference_and_the_exact_checks(
        seed, rows, k, id_dtype, key_seed, mutation):
    rng = np.random.default_rng(seed)
    g = list(_graph(rng, rows, k, id_dtype))
    _, pi, _, co, ci, ct = g
    edges = ci.size
    if mutation != "none" and edges:
        e = int(rng.integers(0, edges))
        if mutation == "child_id":
            ci[e] = rng.integers(0, rows)
        elif mutation == "child_time":
            ct[e] += int(rng.integers(-2, 3))
        elif mutation == "offset" and rows > 1:
            r = int(rng.integers(1, rows))
            co[r] = rng.integers(co[r - 1], co[r + 1] + 1)  # still monotone
        elif mutation == "swap_lists":
            f = int(rng.integers(0, edges))
            ci[e], ci[f] = ci[f], ci[e]
            ct[e], ct[f] = ct[f], ct[e]
        elif mutation == "parent_id":
            pi[e] = rng.integers(0, rows)
    expected = _triples_equal(*g)
    assert _screen(g, key_seed) == expected
    assert _exact(g) == expected


@pytest.fixture
def graph():
    g = _graph(np.random.default_rng(11), 400, 3, np.int32)
    assert _screen(g) and _exact(g) and g[4].size > 100
    return g


def _two_lists(g) -> tuple[int, int]:
    """Two parents with at least two children each."""
    co = g[3]
    big = np.flatnonzero(np.diff(co) >= 2)
    return int(big[0]), int(big[1])


def test_planted_swapped_child_id(graph):
    """One child of parent p becomes a child of parent q's list and vice versa."""
    po, pi, rt, co, ci, ct = (a.copy() for a in graph)
    p, q = _two_lists(graph)
    i, j = int(co[p]), int(co[q])
    ci[i], ci[j] = ci[j], ci[i]
    ct[i], ct[j] = ct[j], ct[i]
    g = (po, pi, rt, co, ci, ct)
    assert not _screen(g) and not csr.transpose_matches(po, pi, co, ci)


def test_planted_moved_edge(graph):
    """A child moves to another parent's list (its time moves with it): the in-degrees of two
    parents change, the child times still hold."""
    po, pi, rt, co, ci, ct = (a.copy() for a in graph)
    p, _ = _two_lists(graph)
    co[p + 1] -= 1  # the last child of p is now the first child of p + 1
    g = (po, pi, rt, co, ci, ct)
    assert csr.check_child_times(ci, ct, rt) == -1
    assert not _screen(g) and not csr.transpose_matches(po, pi, co, ci)


def test_planted_duplicated_edge_with_a_dropped_one(graph):
    """Counts stay equal: one list holds a child twice and misses another."""
    po, pi, rt, co, ci, ct = (a.copy() for a in graph)
    p, _ = _two_lists(graph)
    i = int(co[p])
    ci[i + 1], ct[i + 1] = ci[i], ct[i]
    g = (po, pi, rt, co, ci, ct)
    assert np.array_equal(np.diff(co), np.bincount(pi, minlength=len(co) - 1))
    assert not _screen(g) and not csr.transpose_matches(po, pi, co, ci)


def test_planted_changed_offset(graph):
    po, pi, rt, co, ci, ct = (a.copy() for a in graph)
    p, _ = _two_lists(graph)
    co[p + 1] += 1  # still monotone: p's list takes the next parent's first child
    g = (po, pi, rt, co, ci, ct)
    assert not _screen(g) and not _exact(g)


def test_planted_child_time(graph):
    po, pi, rt, co, ci, ct = (a.copy() for a in graph)
    ct[7] += 1
    g = (po, pi, rt, co, ci, ct)
    assert not _screen(g) and csr.check_child_times(ci, ct, rt) == 7
    assert csr.transpose_matches(po, pi, co, ci)


def test_order_within_a_list_is_not_the_screens_business(graph):
    """The multiset ignores order: check_child_order names that."""
    po, pi, rt, co, ci, ct = (a.copy() for a in graph)
    p, _ = _two_lists(graph)
    i = int(co[p])
    ci[i], ci[i + 1] = ci[i + 1], ci[i]
    ct[i], ct[i + 1] = ct[i + 1], ct[i]
    assert _screen((po, pi, rt, co, ci, ct))


def test_sums_split_at_any_row_add_up(graph):
    """The sums of consecutive row ranges add up (mod 2^64) to the sum over all rows: the
    order and the chunking do not matter."""
    po, pi, rt, co, ci, ct = graph
    rows, keys = len(po) - 1, _keys(3)
    whole = integrity.parent_side_sums(po, pi, rt, 0, rows, keys)
    cut = rows // 3
    a = integrity.parent_side_sums(po, pi, rt, 0, cut, keys)
    b = integrity.parent_side_sums(po, pi, rt, cut, rows, keys)
    assert tuple((int(x) + int(y)) % 2**64 for x, y in zip(a, b)) == tuple(map(int, whole))
    assert whole == integrity.child_side_sums(co, ci, ct, 0, rows, keys)
    assert whole != integrity.parent_side_sums(po, pi, rt, 0, rows, _keys(4))  # keyed


# --- columns, row times, row_table, tasks ---------------------------------------------------


def _bits(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    valid = rng.random(n) < 0.6
    return valid, np.packbits(valid, bitorder="little")


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 40),
       dtype=st.sampled_from([np.float64, np.int64, np.int32, np.uint8]))
def test_null_cells(seed, n, dtype):
    rng = np.random.default_rng(seed)
    valid, bitmap = _bits(rng, n)
    values = np.where(valid, rng.integers(-3, 4, n), 0).astype(dtype)
    if n and rng.random() < 0.5:
        values[rng.integers(0, n)] = 1
    nulls = np.flatnonzero(~valid & (values != 0))
    assert integrity.null_cells(values, bitmap) == (int(valid.sum()),
                                                    int(nulls[0]) if nulls.size else -1)


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 40), has_column=st.booleans())
def test_first_time_mismatch(seed, n, has_column):
    rng = np.random.default_rng(seed)
    valid, bitmap = _bits(rng, n)
    values = rng.integers(-9, 9, n).astype(np.int64)
    expected = np.where(valid, values, NO_TIME) if has_column else np.full(n, NO_TIME)
    times = expected.copy()
    if n and rng.random() < 0.6:
        times[rng.integers(0, n)] = rng.choice([NO_TIME, 0, 5])
    if not has_column:
        values, bitmap = np.zeros(0, np.int64), np.zeros(0, np.uint8)
    bad = np.flatnonzero(times != expected)
    assert integrity.first_time_mismatch(times, values, bitmap, NO_TIME) == (
        int(bad[0]) if bad.size else -1)


@given(sizes=st.lists(st.integers(0, 6), min_size=1, max_size=4), seed=st.integers(0, 99),
       corrupt=st.sampled_from(["none", "value", "short", "long"]))
def test_first_table_mismatch(sizes, seed, corrupt):
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    row_table = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)
    rng = np.random.default_rng(seed)
    if corrupt == "value" and row_table.size:
        row_table[rng.integers(0, row_table.size)] += 1
    elif corrupt == "short" and row_table.size:
        row_table = row_table[:-1]
    elif corrupt == "long":
        row_table = np.append(row_table, np.int32(len(sizes) - 1))
    reference = np.array_equal(row_table, np.repeat(np.arange(len(sizes)), sizes))
    assert (integrity.first_table_mismatch(row_table, offsets) == -1) == reference


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 30),
       corrupt=st.sampled_from(["none", "order", "seed", "target", "target_valid", "obs_time"]),
       with_graph=st.booleans())
def test_task_agreement(seed, n, corrupt, with_graph):
    rng = np.random.default_rng(seed)
    valid, bitmap = _bits(rng, n)
    values = rng.integers(0, 5, n).astype(np.int32)
    offset = 3
    row_times = rng.integers(0, 100, n + offset + 2).astype(np.int64)
    anchor = np.flatnonzero(valid).astype(np.int64)
    target = values[anchor].astype(np.float64)
    target_valid = np.ones(anchor.size, np.uint8)
    obs_time = row_times[offset + anchor].copy()
    m = anchor.size
    if m:
        i = int(rng.integers(0, m))
        if corrupt == "order" and m > 1:
            anchor[[0, 1]] = anchor[[1, 0]]
        elif corrupt == "seed":
            anchor[i] = (anchor[i] + 1) % n
        elif corrupt == "target":
            target[i] += 0.5
        elif corrupt == "target_valid":
            target_valid[i] = 0
        elif corrupt == "obs_time":
            obs_time[i] += 1
    got = integrity.task_agreement(anchor, bitmap, n, values, target, target_valid, obs_time,
                                   row_times if with_graph else np.zeros(0, np.int64), offset)
    expected = (
        not (m > 1 and not np.all(anchor[1:] > anchor[:-1])),
        bool(np.array_equal(anchor, np.flatnonzero(valid))),
        bool(np.array_equal(target, values[anchor].astype(np.float64))),
        bool(np.all(target_valid == 1)),
        not with_graph or bool(np.array_equal(obs_time, row_times[offset + anchor])),
    )
    assert tuple(map(bool, got)) == expected


@given(values=st.lists(st.integers(-5, 5), max_size=12))
def test_strictly_ascending(values):
    arr = np.array(values, dtype=np.int64)
    assert integrity.strictly_ascending(arr) == bool(np.all(np.diff(arr) > 0))
