"""Calendar features and the counting sort of the collation kernels, against Python."""

from __future__ import annotations

import datetime as dt

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from dlkit.core.collate import civil_from_days, days_from_civil, stable_order, time_features
from tests import naive_sampler as naive

# Python's datetime covers years 1..9999.
MIN_US = -62_135_596_800 * 10**6
MAX_US = 253_402_300_799 * 10**6 + 999_999


@given(t=st.one_of(st.integers(MIN_US, MAX_US), st.integers(-10**12, 10**12)),
       mean=st.floats(-1e15, 1e15), std=st.floats(1e-3, 1e15))
def test_time_features_match_datetime(t, mean, std):
    out = np.zeros(15, dtype=np.float32)
    time_features(t, mean, std, out)
    want = np.asarray(naive.time_features(t, mean, std), dtype=np.float32)
    assert np.allclose(out[:14], want[:14], atol=2e-6, rtol=0)
    assert out[14] == want[14]


@given(days=st.integers(-719_162, 2_932_896))
def test_civil_dates_match_datetime(days):
    date = dt.date(1970, 1, 1) + dt.timedelta(days=days)
    assert civil_from_days(days) == (date.year, date.month, date.day)
    assert days_from_civil(date.year, date.month, date.day) == days


def test_time_features_at_extreme_int64_do_not_fail():
    out = np.zeros(15, dtype=np.float32)
    for t in (np.iinfo(np.int64).min + 1, np.iinfo(np.int64).max):
        time_features(t, 0.0, 1.0, out)
        assert np.all(np.isfinite(out[:14])) and np.all(np.abs(out[:14]) <= 1)


@given(keys=st.lists(st.integers(0, 5), max_size=40), padding=st.integers(0, 5))
def test_stable_order_is_a_stable_sort_with_padding_last(keys, padding):
    n = len(keys)
    out = np.empty(n + padding, dtype=np.int64)
    stable_order(np.asarray(keys + [0] * padding, dtype=np.int64), n, 6, out)
    assert out.tolist() == sorted(range(n), key=lambda p: keys[p]) + list(range(n, n + padding))
