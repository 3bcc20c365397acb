"""The prefix-sum kernels of ``dlkit.core.aggregates`` against plain Python."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlkit.core.aggregates import (
    aggregate_cutoff,
    elapsed_days,
    prefix_counts,
    prefix_latest,
    prefix_sums,
    signed_log,
)

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


@st.composite
def child_lists(draw):
    """A CSR of parent rows 0..P-1 over child rows P..P+C-1 (some children are other rows)."""
    parents = draw(st.integers(1, 5))
    children = draw(st.integers(0, 12))
    lists = [draw(st.lists(st.integers(0, parents + children + 2), max_size=6))
             for _ in range(parents)]
    offsets = np.zeros(parents + 1, dtype=np.int64)
    np.cumsum([len(x) for x in lists], out=offsets[1:])
    ids = np.array([c for x in lists for c in x], dtype=np.int64)
    values = np.array(draw(st.lists(st.floats(-1e6, 1e6), min_size=children,
                                    max_size=children)), dtype=np.float64)
    valid = draw(st.lists(st.booleans(), min_size=children, max_size=children))
    return parents, offsets, ids, values, valid


@settings(max_examples=60, deadline=None)
@given(child_lists())
def test_running_counts_and_sums_restart_at_each_parent(data):
    parents, offsets, ids, values, valid = data
    first_child = parents
    bitmap = np.packbits(np.array(valid, dtype=bool), bitorder="little")
    if bitmap.size == 0:
        bitmap = np.zeros(1, dtype=np.uint8)
    counts = np.full(ids.shape[0], -1, dtype=np.int64)
    sums = np.full(ids.shape[0], np.nan)
    valid_counts = np.full(ids.shape[0], -1, dtype=np.int64)
    prefix_counts(offsets, ids, 0, parents, first_child, first_child + values.shape[0], counts)
    prefix_sums(offsets, ids, 0, parents, first_child, values, bitmap, sums, valid_counts)
    for p in range(parents):
        run, total, n = 0, 0.0, 0
        for i in range(int(offsets[p]), int(offsets[p + 1])):
            local = int(ids[i]) - first_child
            if 0 <= local < values.shape[0]:
                run += 1
                if valid[local]:
                    total += float(values[local])
                    n += 1
            assert counts[i] == run and sums[i] == total and valid_counts[i] == n


@settings(max_examples=60, deadline=None)
@given(child_lists(), st.data())
def test_latest_times_and_gaps_restart_at_each_parent(data, draw):
    """Each position's latest child time, and the gaps between consecutive timed children,
    on lists sorted by (time, id) as graph.bin's are: ties, and children without a time
    (first)."""
    parents, offsets, ids, values, _ = data
    first_child, last_child = parents, parents + values.shape[0]
    times = np.array(draw.draw(st.lists(st.sampled_from([INT64_MIN, 0, 5, 86_400_000_000]),
                                        min_size=ids.shape[0], max_size=ids.shape[0])),
                     dtype=np.int64)
    for p in range(parents):  # each list in (time, id) order
        lo, hi = int(offsets[p]), int(offsets[p + 1])
        order = sorted(range(lo, hi), key=lambda i: (int(times[i]), int(ids[i])))
        times[lo:hi], ids[lo:hi] = times[order].copy(), ids[order].copy()
    latest = np.full(ids.shape[0], 7, dtype=np.int64)
    gaps = np.full(ids.shape[0] + 1, np.nan)
    n = prefix_latest(offsets, ids, times, 0, parents, first_child, last_child, latest, gaps)
    expected_gaps = []
    for p in range(parents):
        mine = []  # this parent's children of the table so far, as (time, id)
        for i in range(int(offsets[p]), int(offsets[p + 1])):
            if first_child <= int(ids[i]) < last_child:
                mine.append(int(times[i]))
                timed = [t for t in mine if t != INT64_MIN]
                if mine[-1] != INT64_MIN and len(timed) > 1:
                    expected_gaps.append(math.log1p((timed[-1] - timed[-2]) / 86_400e6))
            # the latest child so far: the one with the largest (time, id), the last
            assert latest[i] == (mine[-1] if mine else INT64_MIN)
            assert not mine or max(mine) == mine[-1]
    assert n == len(expected_gaps)
    assert list(gaps[:n]) == expected_gaps


def test_elapsed_days_across_the_int64_range():
    assert elapsed_days(0, 86_400_000_000) == 1.0
    assert elapsed_days(5, 5) == 0.0 and elapsed_days(6, 5) == 0.0
    assert elapsed_days(-86_400_000_000, 86_400_000_000 * 3) == 4.0
    # ends further apart than int64 holds: no wrap-around to a negative difference
    far = elapsed_days(INT64_MIN + 1, INT64_MAX)
    assert far == pytest.approx((INT64_MAX - (INT64_MIN + 1)) / 86_400e6, rel=1e-15)


def test_cutoffs_at_the_edges_of_int64():
    assert aggregate_cutoff(INT64_MIN, 0, 5) == INT64_MAX  # no observation time: everything
    assert aggregate_cutoff(100, 0, 0) == 100
    assert aggregate_cutoff(100, 1, 0) == 99
    assert aggregate_cutoff(100, 1, 30) == 70
    assert aggregate_cutoff(100, 0, 1) == 99
    # an observation time within a lag of INT64_MIN knows only the rows without a time
    assert aggregate_cutoff(INT64_MIN + 3, 0, 10) == INT64_MIN
    assert aggregate_cutoff(INT64_MIN + 10, 0, 10) == INT64_MIN
    assert aggregate_cutoff(INT64_MIN + 11, 0, 10) == INT64_MIN + 1


@given(st.floats(-1e300, 1e300))
def test_signed_log_is_odd_and_log1p(value):
    """Odd to the bit, and log1p of |v| to within one ulp: numpy's log1p (the kernel run as
    plain Python, make test-nojit) and the C library's (compiled, and math.log1p) may differ
    in the last bit."""
    out = signed_log(value)
    assert signed_log(-value) == -out
    expected = math.copysign(math.log1p(abs(value)), value)
    assert abs(out - expected) <= np.spacing(abs(expected)) or value == 0 and out == 0
