"""Integer time units against a plain-Python ``datetime`` reference, and their schema syntax."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlkit.db.schema.render import render_schema
from dlkit.db.schema.spec import parse_schema
from dlkit.db.time_units import (
    TimePosition,
    TimeUnit,
    int_time_to_micros,
    int_times_to_micros,
)
from dlkit.errors import SchemaError

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
ONE_US = dt.timedelta(microseconds=1)


def _us(moment: dt.datetime) -> int:
    d = moment - EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def reference(value: int, unit: TimeUnit, position: TimePosition) -> int | None:
    """The row time of ``value`` by ``datetime`` alone, or None when it is no valid time."""
    end = position is TimePosition.END
    if not -(1 << 63) <= value < (1 << 63):  # no integer column holds it as a time
        return None
    try:
        if unit is TimeUnit.YEAR:
            start = dt.datetime(value, 1, 1, tzinfo=dt.UTC)
            following = dt.datetime(value + 1, 1, 1, tzinfo=dt.UTC) if value < 9999 else None
        elif unit is TimeUnit.YYYYMM:
            year, month = divmod(value, 100)
            start = dt.datetime(year, month, 1, tzinfo=dt.UTC)
            following = None
            if end:
                following = dt.datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=dt.UTC) \
                    if (year, month) != (9999, 12) else None
        elif unit is TimeUnit.YYYYMMDD:
            year, rest = divmod(value, 10_000)
            month, day = divmod(rest, 100)
            start = dt.datetime(year, month, day, tzinfo=dt.UTC)
            following = start + dt.timedelta(days=1) if end and start.date() != dt.date.max \
                else None
        else:
            whole = {TimeUnit.S: 1_000_000, TimeUnit.MS: 1_000, TimeUnit.US: 1}
            if unit is TimeUnit.NS:
                us = abs(value) // 1_000 * (1 if value >= 0 else -1)  # toward zero
            else:
                us = value * whole[unit]
            return us if -(1 << 63) < us < (1 << 63) else None
    except (ValueError, OverflowError):
        return None
    if not end:
        return _us(start)
    if following is None:  # the last period datetime knows: its end is 9999-12-31T23:59:59.999999
        return _us(dt.datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=dt.UTC))
    return _us(following - ONE_US)


CASES = [
    (TimeUnit.YEAR, [1, 1969, 1970, 2000, 2023, 2024, 9999, 0, -5, 10_000]),
    (TimeUnit.YYYYMM, [197001, 202302, 202312, 200002, 99912, 999912, 202300, 202313, 12]),
    (TimeUnit.YYYYMMDD, [19700101, 20230228, 20240229, 20230229, 20230230, 20231231, 20230132,
                         20230431, 99991231, 10101, 20231300, 0]),
    (TimeUnit.S, [0, -1, 1_700_000_000, (1 << 63) // 10**6, -((1 << 63) // 10**6) - 1]),
    (TimeUnit.MS, [0, -1, 1_700_000_000_123, (1 << 63) // 1000 + 1]),
    (TimeUnit.US, [0, -1, 1 << 62, -(1 << 63)]),
    (TimeUnit.NS, [0, -1, -999, -1000, -1001, 1999, (1 << 63) - 1, -(1 << 63), 1 << 63]),
]


@pytest.mark.parametrize("position", list(TimePosition))
@pytest.mark.parametrize(("unit", "values"), CASES, ids=[u.value for u, _ in CASES])
def test_each_unit_and_position_matches_datetime(unit, values, position):
    for value in values:  # an epoch unit has no position: the reference ignores it too
        assert int_time_to_micros(value, unit, position) == reference(value, unit, position), \
            value
    assert any(reference(v, unit, position) is None for v in values)  # bad values are tried


def test_the_documented_instants():
    def iso(us: int) -> str:
        return (EPOCH + dt.timedelta(microseconds=us)).isoformat()

    end = TimePosition.END
    assert iso(int_time_to_micros(2023, TimeUnit.YEAR)) == "2023-01-01T00:00:00+00:00"
    assert iso(int_time_to_micros(2023, TimeUnit.YEAR, end)) == "2023-12-31T23:59:59.999999+00:00"
    assert iso(int_time_to_micros(202402, TimeUnit.YYYYMM, end)) == \
        "2024-02-29T23:59:59.999999+00:00"
    assert iso(int_time_to_micros(20230315, TimeUnit.YYYYMMDD)) == "2023-03-15T00:00:00+00:00"
    # a period's end is one microsecond before the next period's start
    for unit, value, following in ((TimeUnit.YEAR, 1999, 2000), (TimeUnit.YYYYMM, 199912, 200001),
                                   (TimeUnit.YYYYMMDD, 19991231, 20000101)):
        assert int_time_to_micros(value, unit, end) + 1 == int_time_to_micros(following, unit)


def _calendar_values() -> st.SearchStrategy[tuple[TimeUnit, int]]:
    return st.one_of(
        st.tuples(st.just(TimeUnit.YEAR), st.integers(-20, 10_020)),
        st.tuples(st.just(TimeUnit.YEAR), st.integers(-(1 << 63), (1 << 63) - 1)),
        st.tuples(st.just(TimeUnit.YYYYMM), st.integers(0, 10_000_00)),
        st.tuples(st.just(TimeUnit.YYYYMMDD),
                  st.builds(lambda y, m, d: y * 10_000 + m * 100 + d, st.integers(-1, 10_000),
                            st.integers(0, 13), st.integers(0, 32))),
        st.tuples(st.sampled_from([TimeUnit.S, TimeUnit.MS, TimeUnit.US, TimeUnit.NS]),
                  st.integers(-(1 << 63), (1 << 63) - 1)),
    )


@settings(max_examples=400, deadline=None)
@given(st.lists(_calendar_values(), min_size=1, max_size=20), st.sampled_from(list(TimePosition)),
       st.data())
def test_arrays_match_the_reference_and_name_the_first_bad_value(cases, position, data):
    unit = cases[0][0]
    values = [v for u, v in cases if u is unit]
    valid = np.asarray(data.draw(st.lists(st.booleans(), min_size=len(values),
                                          max_size=len(values))), dtype=bool)
    expected = [reference(v, unit, position) if ok else 0 for v, ok in zip(values, valid)]
    got, bad = int_times_to_micros(np.asarray(values, dtype=np.int64), valid, unit, position)
    first_bad = next((i for i, e in enumerate(expected) if e is None), -1)
    assert bad == first_bad
    if bad < 0:
        assert got.tolist() == expected
        assert got.dtype == np.int64


def test_unsigned_values_above_int64_are_bad():
    values = np.asarray([5, (1 << 63) + 7], dtype=np.uint64)
    _, bad = int_times_to_micros(values, np.ones(2, dtype=bool), TimeUnit.US)
    assert bad == 1
    got, bad = int_times_to_micros(values, np.asarray([True, False]), TimeUnit.S)
    assert bad == -1 and got.tolist() == [5_000_000, 0]


YEAR_TABLE = """
[tables.people]
primary_key = "pid"
[tables.seasons]
time_column = "yearID"
time_unit = "year"
{extra}
foreign_keys = {{ pid = "people" }}
"""


def _schema(extra: str = "", task: str = ""):
    return parse_schema(YEAR_TABLE.format(extra=extra) + task)


def test_schema_units_positions_and_lags_round_trip():
    task = ('[tasks.win]\ntable = "seasons"\ntarget = "won"\nsplit = "time"\n'
            'val_from = 2010\ntest_from = 2015\nlabel_lag = "30d"\n')
    schema = _schema('time_position = "end"\nknown_after = { score = "6h", hits = "0" }', task)
    seasons = schema.table("seasons")
    assert seasons.time_unit is TimeUnit.YEAR and seasons.time_position is TimePosition.END
    assert seasons.known_after == (("score", 6 * 3_600_000_000),)  # a lag of 0 is dropped
    (win,) = schema.tasks
    # val_from = 2010 is where the rows of 2010 are: the end of 2010, as the column's values
    assert win.val_from_us == reference(2010, TimeUnit.YEAR, TimePosition.END)
    assert win.test_from_us == reference(2015, TimeUnit.YEAR, TimePosition.END)
    again = parse_schema(render_schema(schema))
    assert again.tables == schema.tables and again.tasks == schema.tasks
    start = _schema(task=task)
    assert start.tasks[0].val_from_us == reference(2010, TimeUnit.YEAR, TimePosition.START)


def test_integer_lags_in_an_epoch_unit():
    text = ('[tables.events]\ntime_column = "ts"\ntime_unit = "{unit}"\n'
            'known_after = {{ x = {lag} }}\n')
    for unit, lag, us in (("s", 90, 90_000_000), ("ms", 1500, 1_500_000), ("us", 7, 7),
                          ("ns", 1001, 2)):  # nanoseconds round up: never shown early
        schema = parse_schema(text.format(unit=unit, lag=lag))
        assert schema.table("events").known_after == (("x", us),)


@pytest.mark.parametrize(("extra", "message"), [
    ('time_position = "middle"', 'time_position must be "start"'),
    ('known_after = { score = "soon" }', "known_after must be a duration"),
    ('known_after = { score = 3 }', "not a fixed duration"),
    ('known_after = { pid = "1h" }', "not to a key, excluded or time column"),
    ('known_after = { yearID = "1h" }', "not to a key, excluded or time column"),
    ('known_after = ["score"]', "known_after must map column -> lag"),
])
def test_bad_time_options_are_schema_errors(extra, message):
    with pytest.raises(SchemaError, match=message):
        _schema(extra)


def test_more_bad_time_options():
    with pytest.raises(SchemaError, match="time_unit must be one of year, yyyymm"):
        parse_schema('[tables.t]\ntime_column = "y"\ntime_unit = "month"\n')
    with pytest.raises(SchemaError, match="time_position applies to time_unit = .year."):
        parse_schema('[tables.t]\ntime_column = "y"\ntime_unit = "s"\ntime_position = "end"\n')
    with pytest.raises(SchemaError, match="time_unit needs a time_column"):
        parse_schema('[tables.t]\ntime_unit = "year"\n')
    with pytest.raises(SchemaError, match="known_after needs a time_column"):
        parse_schema('[tables.t]\nknown_after = { x = "1h" }\n')
    with pytest.raises(SchemaError, match="2023013 is not a valid time in unit 'yyyymm'"):
        parse_schema('[tables.t]\ntime_column = "m"\ntime_unit = "yyyymm"\n[tasks.a]\n'
                     'table = "t"\ntarget = "x"\nsplit = "time"\nval_from = 2023013\n'
                     'test_from = 202401\n')
    with pytest.raises(SchemaError, match="val_from must be a date"):  # no unit: no integers
        parse_schema('[tables.t]\ntime_column = "m"\n[tasks.a]\ntable = "t"\ntarget = "x"\n'
                     'split = "time"\nval_from = 2023\ntest_from = 2024\n')


def test_a_task_table_may_have_an_integer_time_column():
    text = ('[tables.users]\nprimary_key = "uid"\n[tasks.churn]\nentity_table = "users"\n'
            'entity_column = "uid"\ntime_column = "month"\ntime_unit = "yyyymm"\n'
            'time_position = "end"\ntarget = "churned"\nsplit = "time"\nval_from = 202301\n'
            'test_from = 202307\n')
    schema = parse_schema(text)
    churn = schema.table("churn")
    assert (churn.time_unit, churn.time_position) == (TimeUnit.YYYYMM, TimePosition.END)
    assert schema.tasks[0].val_from_us == reference(202301, TimeUnit.YYYYMM, TimePosition.END)
    again = parse_schema(render_schema(schema))
    assert again.tables == schema.tables and again.tasks == schema.tasks
