"""The calendar-period kernel against the numpy rules of ``dlkit.db.time_units`` (which
tests/db/test_time_units.py checks against ``datetime``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dlkit.core.calendar_units import YEAR, YYYYMM, YYYYMMDD, calendar_to_micros
from dlkit.db.time_units import TimePosition, TimeUnit, int_times_to_micros

UNITS = {YEAR: TimeUnit.YEAR, YYYYMM: TimeUnit.YYYYMM, YYYYMMDD: TimeUnit.YYYYMMDD}


def _values(unit: int) -> st.SearchStrategy[int]:
    if unit == YEAR:
        return st.one_of(st.integers(-3, 10_003), st.integers(-(1 << 63), (1 << 63) - 1))
    if unit == YYYYMM:
        return st.builds(lambda y, m: y * 100 + m, st.integers(-2, 10_001), st.integers(0, 13))
    return st.builds(lambda y, m, d: y * 10_000 + m * 100 + d, st.integers(-2, 10_001),
                     st.integers(0, 13), st.integers(0, 32))


@st.composite
def batches(draw):
    unit = draw(st.sampled_from([YEAR, YYYYMM, YYYYMMDD]))
    values = draw(st.lists(_values(unit), min_size=0, max_size=40))
    valid = draw(st.lists(st.booleans(), min_size=len(values), max_size=len(values)))
    return unit, np.asarray(values, dtype=np.int64), np.asarray(valid, dtype=bool)


@settings(max_examples=500, deadline=None)
@given(batches(), st.booleans())
def test_the_kernel_follows_the_numpy_rules(batch, end):
    unit, values, valid = batch
    values.flags.writeable = False
    position = TimePosition.END if end else TimePosition.START
    expected, expected_bad = int_times_to_micros(values, valid, UNITS[unit], position)
    out = np.empty(values.shape[0], dtype=np.int64)
    bad = calendar_to_micros(values, valid, unit, end, out)
    assert bad == expected_bad
    if bad < 0:
        assert out.tolist() == expected.tolist()
    else:
        assert out[:bad].tolist() == int_times_to_micros(values[:bad], valid[:bad],
                                                         UNITS[unit], position)[0].tolist()


def test_every_day_of_four_centuries():
    """Every date of 1900-2300 (leap rules of 1900, 2000, 2100 included), both positions."""
    days = np.arange(np.datetime64("1900-01-01"), np.datetime64("2300-01-01"))
    text = np.datetime_as_string(days)
    values = np.asarray([int(s.replace("-", "")) for s in text], dtype=np.int64)
    values.flags.writeable = False
    valid = np.ones(values.shape[0], dtype=bool)
    out = np.empty(values.shape[0], dtype=np.int64)
    assert calendar_to_micros(values, valid, YYYYMMDD, False, out) == -1
    assert (out == days.astype("datetime64[us]").astype(np.int64)).all()
    assert calendar_to_micros(values, valid, YYYYMMDD, True, out) == -1
    assert (out == (days + 1).astype("datetime64[us]").astype(np.int64) - 1).all()
