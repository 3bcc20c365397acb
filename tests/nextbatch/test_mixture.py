"""The mixture order (docs/mixture.md) against a plain-Python reference built on
tests/naive_feistel.py: exact proportions per block, a bijection onto each component's own
steps, and any split of a step range giving the same order (resume)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.encoding import cbor_sha256
from dlkit.errors import InvalidArgumentError
from dlkit.nextbatch.mixture import MAX_BLOCK, MixtureOrder, weights_from_counts
from tests import naive_feistel

weights_lists = st.lists(st.integers(1, 12), min_size=1, max_size=6)
seeds = st.integers(0, 2**64 - 1)


def _order(weights, seed: int) -> MixtureOrder:
    return MixtureOrder.from_seed([f"db{i}/task" for i in range(len(weights))], weights, seed)


def naive_step(order: MixtureOrder, step: int) -> tuple[int, int]:
    """docs/mixture.md §2, one step at a time, with the reference Feistel permutation."""
    weights = list(order.weights)
    total = sum(weights)
    block, offset = divmod(step, total)
    seed = cbor_sha256(["dlkit_mixture_block_v1", order.replay_token,
                        cbor_sha256(["dlkit_mixture_v1", list(order.names), weights]),
                        block])[:16]
    slot = naive_feistel.index(offset, total, naive_feistel.round_keys(seed))
    start = 0
    for component, weight in enumerate(weights):
        if slot < start + weight:
            return component, block * weight + slot - start
        start += weight
    raise AssertionError("slot beyond the block")


@given(weights=weights_lists, seed=seeds, first=st.integers(0, 10**6), count=st.integers(0, 60))
def test_each_step_is_the_reference_order(weights, seed, first, count):
    order = _order(weights, seed)
    components, local = order.resolve(first, count)
    assert list(zip(components.tolist(), local.tolist())) == [
        naive_step(order, step) for step in range(first, first + count)]


@given(weights=weights_lists, seed=seeds, blocks=st.integers(1, 5))
def test_every_block_holds_the_weights_and_each_component_its_own_steps_once(weights, seed,
                                                                              blocks):
    order = _order(weights, seed)
    total = sum(weights)
    components, local = order.resolve(0, blocks * total)
    for block in range(blocks):
        window = components[block * total:(block + 1) * total].tolist()
        assert [window.count(c) for c in range(len(weights))] == weights
    for c, weight in enumerate(weights):
        own = local[components == c].tolist()
        assert sorted(own) == list(range(blocks * weight))  # a bijection onto 0, 1, 2, ...


@given(weights=weights_lists, seed=seeds, first=st.integers(0, 10**9),
       count=st.integers(1, 80), cut=st.integers(0, 80))
def test_any_split_of_a_range_gives_the_same_order(weights, seed, first, count, cut):
    order = _order(weights, seed)
    cut = min(cut, count)
    whole = order.resolve(first, count)
    head, tail = order.resolve(first, cut), order.resolve(first + cut, count - cut)
    for i in range(2):
        assert whole[i].tolist() == head[i].tolist() + tail[i].tolist()


def test_the_order_depends_on_the_seed_and_the_mixture():
    base = _order([3, 5, 2], 7).resolve(0, 100)[0].tolist()
    assert _order([3, 5, 2], 8).resolve(0, 100)[0].tolist() != base
    assert _order([5, 3, 2], 7).resolve(0, 100)[0].tolist() != base
    renamed = MixtureOrder.from_seed(["a", "b", "c"], [3, 5, 2], 7)
    assert renamed.mixture_hash != _order([3, 5, 2], 7).mixture_hash


@pytest.mark.parametrize("names, weights, problem", [
    ((), (), "at least one component"),
    (("a", "b"), (1,), "one weight per component"),
    (("a", "a"), (1, 2), "distinct names"),
    (("a",), (0,), "positive integer"),
    (("a",), (True,), "positive integer"),
    (("a", "b"), (MAX_BLOCK, 1), "at most"),
])
def test_a_bad_mixture_is_refused(names, weights, problem):
    with pytest.raises(InvalidArgumentError, match=problem):
        MixtureOrder.from_seed(names, weights, 0)


@given(counts=st.lists(st.integers(0, 10**9), min_size=1, max_size=12).filter(any),
       total=st.integers(1, 4096))
def test_weights_from_counts_are_the_largest_remainder_rounding(counts, total):
    weights = weights_from_counts(counts, total)
    whole = sum(counts)
    exact = [Fraction(count * total, whole) for count in counts]
    for i, (weight, share) in enumerate(zip(weights, exact, strict=True)):
        assert weight >= 1
        assert weight == 1 or abs(weight - share) < 1, (i, weight, share)
    # they sum to the total, plus at most one for each component raised from none to 1
    assert total <= sum(weights) <= total + sum(share < 1 for share in exact)


def test_weights_from_counts_break_ties_toward_the_earlier_component():
    assert weights_from_counts([1, 1, 1], 4) == (2, 1, 1)
    assert weights_from_counts([10**6, 10, 5000], 1024) == (1019, 1, 5)
    with pytest.raises(InvalidArgumentError):
        weights_from_counts([0, 0])
