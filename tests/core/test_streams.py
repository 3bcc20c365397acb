"""Philox streams of the relational sampler against the plain-Python reference."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from dlkit.core.philox import philox4x32_10
from dlkit.core.streams import (
    assign_splits,
    count_task_picks,
    new_stream,
    pick_tasks,
    sequence_key,
    split_buckets,
    split_positions,
    task_draws,
    uniform_below,
)
from tests import naive_sampler as naive

u64 = st.integers(0, 2**64 - 1)

# Random123 known-answer vectors for Philox4x32-10.
KNOWN_ANSWERS = [
    ((0, 0, 0, 0, 0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 6, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344, 0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def test_reference_philox_known_answers():
    for args, want in KNOWN_ANSWERS:
        assert naive.philox(*args) == want
        assert tuple(int(x) for x in philox4x32_10(*[np.uint64(a) for a in args])) == want


@given(anchors=st.lists(st.integers(0, 2**63 - 1), max_size=50), task=st.integers(0, 2**32 - 1),
       split_seed=u64, train=st.integers(0, 1000), val=st.integers(0, 1000))
def test_split_hash_matches_reference(anchors, task, split_seed, train, val):
    val = min(val, 1000 - train)
    ratios = (train / 1000, val / 1000, 1 - (train + val) / 1000)
    buckets = split_buckets(np.asarray(anchors, dtype=np.int64), task, np.uint64(split_seed))
    codes = assign_splits(buckets, round(1000 * ratios[0]), round(1000 * (ratios[0] + ratios[1])))
    assert codes.tolist() == [naive.split_of(a, task, split_seed, ratios) for a in anchors]


@given(seed=u64, epoch=u64, task=st.integers(0, 2**32 - 1), anchor=st.integers(0, 2**63 - 1),
       sizes=st.lists(st.one_of(st.integers(1, 10), st.integers(1, 2**63 - 1)), min_size=1,
                      max_size=20))
def test_uniform_draws_match_reference(seed, epoch, task, anchor, sizes):
    stream = naive.Stream(seed, epoch, task, anchor)
    k0, k1 = sequence_key(np.uint64(seed), np.uint64(epoch), task)
    assert (int(k0), int(k1)) == stream.key
    state = new_stream()
    for n in sizes:
        value = uniform_below(k0, k1, anchor, state, np.uint64(n))
        assert int(value) == stream.below(n)
        assert int(state[0]) == stream.draw


def test_uniform_rejection_path():
    """n just above 2^62 rejects about a quarter of the raw draws: both sides must agree."""
    n = 2**62 + 12345
    stream = naive.Stream(1, 2, 3, 4)
    k0, k1 = sequence_key(np.uint64(1), np.uint64(2), 3)
    state = new_stream()
    for _ in range(200):
        value = uniform_below(k0, k1, 4, state, np.uint64(n))
        assert int(value) == stream.below(n)
    assert int(state[0]) - 200 > 30  # draws rejected


@given(seed=u64, first=st.integers(0, 2**40), weights=st.lists(
    st.floats(0.01, 100.0), min_size=1, max_size=6))
def test_task_picks_match_reference(seed, first, weights):
    draws = task_draws(np.uint64(seed), np.uint64(first), 40)
    picks = pick_tasks(draws, np.cumsum(np.asarray(weights, dtype=np.float64)))
    assert picks.tolist() == [naive.task_pick(seed, first + i, weights) for i in range(40)]


def test_task_picks_follow_weights():
    draws = task_draws(np.uint64(3), np.uint64(0), 100_000)
    picks = pick_tasks(draws, np.cumsum([1.0, 3.0, 0.5]))
    freq = np.bincount(picks, minlength=3) / picks.shape[0]
    assert np.allclose(freq, [1 / 4.5, 3 / 4.5, 0.5 / 4.5], atol=0.01)


def test_split_proportions_on_many_seeds():
    anchors = np.arange(100_000, dtype=np.int64)
    for ratios in ((0.8, 0.1, 0.1), (0.5, 0.25, 0.25), (0.98, 0.01, 0.01)):
        buckets = split_buckets(anchors, 7, np.uint64(123))
        codes = assign_splits(buckets, round(1000 * ratios[0]),
                              round(1000 * (ratios[0] + ratios[1])))
        freq = np.bincount(codes, minlength=3) / anchors.shape[0]
        assert np.all(np.abs(freq - ratios) < 0.01), (ratios, freq)


@given(st.lists(st.integers(0, 2), max_size=300))
def test_split_positions_are_each_codes_ascending_positions(codes):
    codes = np.asarray(codes, dtype=np.int8)
    for dtype in (np.int32, np.int64):
        positions = [np.full(codes.tolist().count(k), -5, dtype=dtype) for k in range(3)]
        split_positions(codes, *positions)
        for k in range(3):
            expected = [i for i, c in enumerate(codes.tolist()) if c == k]
            assert positions[k].tolist() == expected


@given(seed=u64, first=st.one_of(st.integers(0, 2**40), st.integers(2**63 - 2000, 2**63 - 1)),
       count=st.integers(0, 300), weights=st.lists(st.floats(0.01, 100.0), min_size=1,
                                                  max_size=6))
def test_task_pick_counts_tally_the_reference_picks(seed, first, count, weights):
    counts = np.full(len(weights), 5, dtype=np.int64)  # counts are added to
    count_task_picks(np.uint64(seed), np.uint64(first), count,
                     np.cumsum(np.asarray(weights, dtype=np.float64)), counts)
    picks = [naive.task_pick(seed, first + i, weights) for i in range(count)]
    assert counts.tolist() == [5 + picks.count(t) for t in range(len(weights))]
