"""Calendar features and the counting sorts of the collation kernels, against Python."""

from __future__ import annotations

import datetime as dt

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from dlkit.core.collate import order_by_column, order_by_row_key
from dlkit.core.timefeatures import calendar_of, time_features
from tests import naive_sampler as naive

# Python's datetime covers years 1..9999.
MIN_US = -62_135_596_800 * 10**6
MAX_US = 253_402_300_799 * 10**6 + 999_999


# Around 1970, year 0/1, leap days and century years (1900 no leap, 2000 leap), the era edge.
EDGE_DAYS = [(dt.date(y, m, d) - dt.date(1970, 1, 1)).days for y, m, d in (
    (1, 1, 1), (1969, 12, 31), (1970, 1, 1), (1900, 2, 28), (1900, 3, 1), (2000, 2, 29),
    (2000, 3, 1), (2000, 12, 31), (2004, 2, 29), (2100, 3, 1), (9999, 12, 31), (400, 2, 29))]


@given(t=st.one_of(st.integers(MIN_US, MAX_US), st.integers(-10**12, 10**12)),
       mean=st.floats(-1e15, 1e15), std=st.floats(1e-3, 1e15))
def test_time_features_match_datetime(t, mean, std):
    out = np.zeros(15, dtype=np.float32)
    time_features(t, mean, std, out)
    want = np.asarray(naive.time_features(t, mean, std), dtype=np.float32)
    assert np.allclose(out[:14], want[:14], atol=2e-6, rtol=0)
    assert out[14] == want[14]


@given(days=st.one_of(st.integers(-719_162, 2_932_896), st.sampled_from(EDGE_DAYS)))
def test_calendar_matches_datetime(days):
    date = dt.date(1970, 1, 1) + dt.timedelta(days=days)
    want = (date.month, date.day, date.timetuple().tm_yday, date.weekday())
    assert calendar_of(days) == want


def test_calendar_repeats_every_400_years_far_outside_datetime():
    """Before year 1 the era shift takes over; int64 microseconds reach +-292,000 years."""
    for days in (-106_751_992, -3_000_000, -719_469, 106_751_991):
        base = days % 146_097 - 146_097 * 2  # same place in the 400-year cycle, within datetime
        assert calendar_of(days) == calendar_of(base)


def test_time_features_at_extreme_int64_do_not_fail():
    out = np.zeros(15, dtype=np.float32)
    for t in (np.iinfo(np.int64).min + 1, np.iinfo(np.int64).max):
        time_features(t, 0.0, 1.0, out)
        assert np.all(np.isfinite(out[:14])) and np.all(np.abs(out[:14]) <= 1)


def _runs(lengths: list[int]) -> tuple[np.ndarray, list[int], int]:
    """``row_first`` of rows with these cell counts, each cell's row, and the cell count."""
    row_first = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    row_of = [i for i, n in enumerate(lengths) for _ in range(n)]
    return row_first, row_of, len(row_of)


@given(data=st.data(), padding=st.integers(0, 5))
def test_order_by_row_key_is_a_stable_sort_with_padding_last(data, padding):
    lengths = data.draw(st.lists(st.integers(0, 6), max_size=12))
    keys = data.draw(st.lists(st.integers(0, len(lengths)), min_size=len(lengths),
                              max_size=len(lengths)))
    row_first, row_of, n = _runs(lengths)
    out = np.full(n + padding, 0xFFFF, dtype=np.uint16)
    order_by_row_key(row_first, len(lengths), np.asarray(keys, dtype=np.int64),
                     len(lengths) + 1, out)
    want = sorted(range(n), key=lambda p: keys[row_of[p]]) + list(range(n, n + padding))
    assert out.tolist() == want


@given(data=st.data(), padding=st.integers(0, 5))
def test_order_by_column_is_a_stable_sort_with_padding_last(data, padding):
    """Rows of tables with 0-4 columns (the last row may be cut), column ranks shuffled."""
    widths = data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=4))
    starts = np.concatenate([[0], np.cumsum(widths)]).tolist()
    rank = data.draw(st.permutations(range(starts[-1])))
    tables = data.draw(st.lists(st.integers(0, len(widths) - 1), max_size=10))
    lengths = [widths[t] for t in tables]
    if lengths and lengths[-1] > 0:
        lengths[-1] = data.draw(st.integers(1, lengths[-1]))
    row_first, row_of, n = _runs(lengths)
    column = [starts[tables[row_of[p]]] + p - int(row_first[row_of[p]]) for p in range(n)]
    out = np.full(n + padding, 0xFFFF, dtype=np.uint16)
    order_by_column(row_first, len(lengths), np.asarray(column + [-1] * padding, dtype=np.int32),
                    np.asarray(rank, dtype=np.int64), len(rank), out)
    want = sorted(range(n), key=lambda p: rank[column[p]]) + list(range(n, n + padding))
    assert out.tolist() == want
