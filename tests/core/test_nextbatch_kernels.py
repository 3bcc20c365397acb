"""NextBatch_v2 kernels against the plain-Python profile implementation."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from dlkit.core.nextbatch import (
    intra_block_params,
    resolve_sequential,
    resolve_shuffled,
    seeded_block_permute,
)
from tests import naive_nextbatch as naive

SEEDS = st.binary(min_size=16, max_size=16)


def words(seed: bytes) -> np.ndarray:
    return np.frombuffer(seed, dtype="<u4").astype(np.uint64)


@given(SEEDS, st.integers(0, 300))
def test_block_permute_matches_reference_and_is_a_permutation(seed, num_blocks):
    order = seeded_block_permute(words(seed), num_blocks)
    assert order.dtype == np.uint64
    assert order.tolist() == naive.block_permute(num_blocks, seed)
    assert sorted(order.tolist()) == list(range(num_blocks))


@given(SEEDS, st.integers(0, 2**40), st.integers(1, 2**32))
def test_intra_block_params_match_reference(seed, block, m):
    a, c = intra_block_params(words(seed), np.uint64(block), np.uint64(m))
    assert (int(a), int(c)) == naive.affine_params(block, m, seed)
    if m > 1:
        assert np.gcd(int(a), m) == 1 and 1 <= int(a) < m and int(c) < m


@given(SEEDS, st.integers(1, 3000), st.integers(1, 700), st.data())
def test_resolve_shuffled_matches_reference_on_random_slices(seed, n, block_size, data):
    full_blocks = n // block_size
    order = seeded_block_permute(words(seed), full_blocks)
    slices = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, 200)), max_size=6))
    starts = np.array([s for s, _ in slices], dtype=np.uint64)
    lengths = np.array([min(length, n - s) for s, length in slices], dtype=np.uint64)
    out = np.empty(int(lengths.sum()), dtype=np.uint64)
    resolve_shuffled(order, words(seed), n, block_size, starts, lengths, out)

    class Ep(naive.Epoch):  # reuse the reference with this seed and no manifest
        def __init__(self):
            self.n, self.block_size, self.seed = n, block_size, seed
            self.full_blocks, self.order, self.params = full_blocks, order.tolist(), {}

    ep = Ep()
    expected = [ep.index(s + k) for s, length in zip(starts.tolist(), lengths.tolist())
                for k in range(length)]
    assert out.tolist() == expected


def test_resolve_sequential_writes_slices_back_to_back():
    out = np.empty(7, dtype=np.uint64)
    resolve_sequential(np.array([5, 100], dtype=np.uint64), np.array([3, 4], dtype=np.uint64), out)
    assert out.tolist() == [5, 6, 7, 100, 101, 102, 103]
