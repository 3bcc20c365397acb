"""The set helpers ``dlkit show`` counts a sequence's children with, against Python sets."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from dlkit.sampler.inspect import _distinct_rows, is_member

# narrow spans take the bitmap, wide ones the sort: both are drawn
ROW_IDS = st.one_of(st.lists(st.integers(0, 40), max_size=60),
                    st.lists(st.integers(0, 2**40), max_size=20))


@given(ROW_IDS)
def test_distinct_rows_are_the_set_ascending(ids):
    got = _distinct_rows(np.asarray(ids, dtype=np.int64))
    assert got.dtype == np.int64
    assert got.tolist() == sorted(set(ids))


@given(ROW_IDS, ROW_IDS)
def test_is_member_is_set_membership(values, members):
    got = is_member(np.asarray(values, dtype=np.int64),
                    np.asarray(sorted(set(members)), dtype=np.int64))
    assert got.tolist() == [v in set(members) for v in values]
