"""NextBatch_v3 kernels against the plain-Python reference (tests/naive_feistel.py).

Both resolution paths (32-bit tiled, 64-bit) are checked separately: each must be a bijection
of [0, N) and equal the reference index by index, at sizes around powers of two, at the 2^32
boundary between the paths, and (by sampled positions) far above it.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.core.feistel import (
    FEISTEL_MAX_N,
    FEISTEL_ROUNDS,
    feistel_domain,
    feistel_encrypt,
    feistel_index,
    feistel_round_keys,
    mix32,
    resolve_feistel,
    resolve_feistel_u32,
    resolve_feistel_u64,
)
from tests import naive_feistel as naive

U32 = st.integers(0, 2**32 - 1)
KEYS = st.lists(U32, min_size=FEISTEL_ROUNDS, max_size=FEISTEL_ROUNDS)


def as_keys(keys):
    return np.array(keys, dtype=np.uint32)


def resolve_all(resolver, keys, n):
    out = np.empty(n, dtype=np.uint64)
    return resolver(as_keys(keys), n, np.array([0], np.uint64), np.array([n], np.uint64), out)


def reference_epoch(keys, n):
    return [naive.index(p, n, keys) for p in range(n)]


@given(st.binary(min_size=16, max_size=16))
def test_round_keys_are_the_philox_words_of_draws_0_and_1(seed):
    words = np.frombuffer(seed, dtype="<u4").astype(np.uint64)
    assert feistel_round_keys(words).tolist() == naive.round_keys(seed)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 1000, 2**16, 2**31, 2**31 + 1, 2**32,
                               2**32 + 1, 2**40 + 7, FEISTEL_MAX_N, 2**64 - 1])
def test_grid_matches_the_definition(n):
    a, kb = (int(v) for v in feistel_domain(np.uint64(n)))
    assert (a, kb) == naive.grid(n)
    assert a * 2**kb >= n > (a - 1) * 2**kb  # fewer than 2^kb cells beyond n
    if n <= FEISTEL_MAX_N:
        assert a * 2**kb <= 2**64


@given(U32, U32)
def test_round_function_matches_reference(value, key):
    assert int(mix32(value, key)) == naive.round_function(value, key)


@given(KEYS, st.integers(1, 2**32), st.integers(0, 32), st.data())
def test_one_encryption_matches_reference(keys, a, kb, data):
    x = data.draw(st.integers(0, a * 2**kb - 1))
    y = int(feistel_encrypt(x, as_keys(keys), a, kb))
    assert y == naive.encrypt(x, keys, a, kb)
    assert 0 <= y < a * 2**kb


SIZES = sorted({s for k in range(1, 13) for s in (2**k - 1, 2**k, 2**k + 1)} | {4099, 10_000})


@pytest.mark.parametrize("n", SIZES)
def test_both_paths_are_the_reference_bijection(n):
    keys = [(0x9E3779B9 * (i + n)) & 0xFFFFFFFF for i in range(FEISTEL_ROUNDS)]
    expected = reference_epoch(keys, n)
    assert sorted(expected) == list(range(n))
    assert resolve_all(resolve_feistel_u64, keys, n).tolist() == expected
    assert resolve_all(resolve_feistel, keys, n).tolist() == expected
    if n >= 3:  # the tiled path needs kb >= 1
        assert resolve_all(resolve_feistel_u32, keys, n).tolist() == expected


@given(KEYS, st.integers(3, 70_000), st.data())
def test_tiled_path_equals_reference_on_arbitrary_slices(keys, n, data):
    """Slices start anywhere, cross grid rows and tiles, and are written back to back."""
    slice_at = lambda s: st.tuples(st.just(s), st.integers(0, min(n - s, 1500)))  # noqa: E731
    slices = data.draw(st.lists(st.integers(0, n - 1).flatmap(slice_at), min_size=1, max_size=4))
    starts = np.array([s for s, _ in slices], np.uint64)
    lengths = np.array([c for _, c in slices], np.uint64)
    got = resolve_feistel_u32(as_keys(keys), n, starts, lengths,
                              np.empty(int(lengths.sum()), np.uint64)).tolist()
    assert got == [naive.index(p, n, keys) for s, c in slices for p in range(s, s + c)]


@given(KEYS, st.integers(3, 20_000))
def test_full_epoch_is_a_bijection_for_any_keys(keys, n):
    out = resolve_all(resolve_feistel, keys, n)
    assert np.array_equal(np.sort(out), np.arange(n, dtype=np.uint64))


@pytest.mark.parametrize("n", [2**32 - 5, 2**32])
def test_tiled_path_at_the_32_bit_boundary(n):
    """a = 2^16 and kb = 16: the largest cells (up to 2^32 - 1) and walks near the top."""
    keys = [0xDEADBEEF ^ i for i in range(FEISTEL_ROUNDS)]
    starts = np.array([0, 2**16 - 100, n - 1200, 2**31 + 77], np.uint64)
    lengths = np.array([300, 700, 1200, 513], np.uint64)
    got = resolve_feistel_u32(as_keys(keys), n, starts, lengths,
                              np.empty(int(lengths.sum()), np.uint64)).tolist()
    expected = [naive.index(p, n, keys) for s, c in zip(starts.tolist(), lengths.tolist())
                for p in range(s, s + c)]
    assert got == expected
    assert len(set(got)) == len(got) and max(got) < n


@given(KEYS, st.sampled_from([2**32 + 1, 2**40 + 7, 10**15, 2**63, FEISTEL_MAX_N]), st.data())
def test_wide_path_equals_reference_at_sampled_positions(keys, n, data):
    positions = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=8))
    starts = np.array(positions, np.uint64)
    n64 = np.uint64(n)  # numba types a Python int >= 2^63 as int64 and overflows
    got = resolve_feistel(as_keys(keys), n64, starts, np.ones(len(positions), np.uint64),
                          np.empty(len(positions), np.uint64)).tolist()
    assert got == [naive.index(p, n, keys) for p in positions]
    a, kb = feistel_domain(n64)
    assert got == [int(feistel_index(np.uint64(p), as_keys(keys), n64, a, kb)) for p in positions]
