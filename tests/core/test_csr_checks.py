"""The cheap structural checks of :mod:`dlkit.core.csr` (checked a block at a time) against
numpy, with failures planted on and around the block boundaries."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from dlkit.core import csr

B = csr.CHECK_BLOCK
SIZES = st.sampled_from([0, 1, 2, B - 1, B, B + 1, 2 * B, 3 * B + 5])


def _first(mask: np.ndarray) -> int:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else -1


@given(n=SIZES, seed=st.integers(0, 2**32 - 1), bad=st.lists(st.integers(0, 4 * B), max_size=3),
       dtype=st.sampled_from([np.int32, np.int64]))
def test_check_ids_finds_the_first_id_out_of_range(n, seed, bad, dtype):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 50, n).astype(dtype)
    for i in bad:
        if i < n:
            ids[i] = rng.choice([-1, 50, 10**6])
    assert csr.check_ids(ids, 0, 50) == _first((ids < 0) | (ids >= 50))


@given(n=SIZES, seed=st.integers(0, 2**32 - 1), bad=st.lists(st.integers(0, 4 * B), max_size=3),
       dtype=st.sampled_from([np.int32, np.int64]), wrong_total=st.booleans())
def test_check_offsets_finds_the_first_decrease(n, seed, bad, dtype, wrong_total):
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(rng.integers(0, 3, n))]).astype(dtype)
    for i in bad:
        if 0 < i <= n:
            offsets[i] -= 3
    total = int(offsets[-1]) + (1 if wrong_total else 0)
    decrease = _first(np.diff(offsets) < 0)
    expected = 0 if offsets[0] != 0 else decrease + 1 if decrease >= 0 else (
        n if wrong_total else -1)
    assert csr.check_offsets(offsets, total) == expected
