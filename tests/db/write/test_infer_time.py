"""Proposing integer time columns by value ranges and names (``infer_time``), on its own and
through ``dlkit schema infer``."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlkit.db.schema.spec import parse_schema
from dlkit.db.time_units import TimePosition, TimeUnit
from dlkit.db.write.infer import infer_schema
from dlkit.db.write.infer_time import (
    IntegerColumn,
    integer_columns,
    propose_int_time,
)


def col(name: str, values, arrow_type: str = "int64") -> IntegerColumn:
    v = np.asarray(values, dtype=np.int64)
    return IntegerColumn(name, arrow_type, v, int(v.min()), int(v.max()))


YEARS = list(range(1871, 2016))
NOW_S = 1_700_000_000


@pytest.mark.parametrize(("column", "unit"), [
    (col("yearID", YEARS), TimeUnit.YEAR),
    (col("season", [2019, 2020, 2021]), TimeUnit.YEAR),
    (col("fiscal_year", [1999, 2000]), TimeUnit.YEAR),
    (col("period", [202301, 202312, 199905]), TimeUnit.YYYYMM),
    (col("game_date", [20230101, 20240229, 19991231]), TimeUnit.YYYYMMDD),
    (col("code", [20230101, 20240229, 19991231]), TimeUnit.YYYYMMDD),  # values alone
    (col("created", [NOW_S, NOW_S + 86_400]), TimeUnit.S),
    (col("event_ts", [NOW_S * 1000, NOW_S * 1000 + 5]), TimeUnit.MS),
    (col("x", [NOW_S * 10**6, NOW_S * 10**6 + 5]), TimeUnit.US),  # magnitude alone
    (col("updated_at", [NOW_S * 10**9]), TimeUnit.NS),
])
def test_each_kind_is_found_with_its_unit(column, unit):
    guess = propose_int_time([column])
    assert guess is not None and guess.column == column.name and guess.unit is unit
    assert guess.position is (TimePosition.END if unit.calendar else TimePosition.START)
    assert "\n" not in guess.reason and unit.value in guess.reason


@pytest.mark.parametrize("column", [
    col("price", [1900, 2000, 2050]),             # year-like values, no year name
    col("year", [1700, 2000]),                    # a year name, values out of range
    col("birth_year", [1950, 1980]),             # a person's year, not the row's
    col("period", [202313, 202301]),              # month 13
    col("game_date", [20230230, 20230101]),       # 30 February
    col("user_id", [NOW_S, NOW_S + 1]),           # seconds' magnitude, no time name
    col("count", [0, 5, 17]),
])
def test_lookalikes_are_not_times(column):
    assert propose_int_time([column]) is None


def test_named_beats_values_only_then_specificity_then_order():
    code = col("code", [20230101, 20230102])
    year = col("yearID", [2000, 2001])
    stamp = col("ts", [NOW_S])
    assert propose_int_time([code, year]).column == "yearID"    # named first
    assert propose_int_time([stamp, year]).column == "yearID"   # a year before seconds
    assert propose_int_time([year, col("season", [2000])]).column == "yearID"  # order
    assert propose_int_time([year], skip={"yearID"}) is None     # skipped: never proposed
    assert propose_int_time([IntegerColumn("year", "int64", np.zeros(0, np.int64), None,
                                           None)]) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(1 << 62), 1 << 62), min_size=1, max_size=30),
       st.sampled_from(["yearID", "period", "game_date", "created_ts", "value"]))
def test_a_proposal_always_converts_every_value(values, name):
    """Whatever the values, a proposed unit converts all of them (the build will not fail on
    a drafted time column), and a proposal's reason names the column's range."""
    from dlkit.db.time_units import int_times_to_micros

    column = col(name, values)
    guess = propose_int_time([column])
    if guess is not None:
        v = np.asarray(values, dtype=np.int64)
        _, bad = int_times_to_micros(v, np.ones(v.shape[0], dtype=bool), guess.unit,
                                     guess.position)
        assert bad == -1
        assert f"{min(values)}-{max(values)}" in guess.reason


def test_summaries_from_parquet_use_the_footer_statistics(tmp_path):
    years = np.asarray([1990] * 5 + [2015] + [2000] * 20_000, dtype=np.int64)
    table = pa.table({"yearID": years, "teamID": pa.array(["a"] * len(years)),
                      "hits": pa.array(np.arange(len(years)), pa.int32()),
                      "big": pa.array([1] * len(years), pa.uint64())})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=4_000)
    (summary, hits) = integer_columns([tmp_path / "t.parquet"], table.schema)
    assert (summary.name, summary.min, summary.max) == ("yearID", 1990, 2015)
    assert summary.sample.shape[0] == 10_000  # a sample; min and max of all row groups
    assert (hits.name, hits.min, hits.max, hits.arrow_type) == ("hits", 0, len(years) - 1,
                                                                "int32")


def test_schema_infer_drafts_a_year_time_column(tmp_path):
    rng = np.random.default_rng(1)
    n = 300
    pq.write_table(pa.table({"playerID": [f"p{i}" for i in range(30)],
                             "birthYear": rng.integers(1950, 2000, 30)}),
                   tmp_path / "People.parquet")
    pq.write_table(pa.table({"playerID": [f"p{i % 30}" for i in range(n)],
                             "yearID": rng.integers(1990, 2020, n),
                             "H": rng.integers(0, 200, n)}), tmp_path / "Batting.parquet")
    schema, text = infer_schema(tmp_path)
    batting = schema.table("Batting")
    assert (batting.time_column, batting.time_unit, batting.time_position) == (
        "yearID", TimeUnit.YEAR, TimePosition.END)
    assert schema.table("People").time_column is None  # birthYear is no row time
    assert 'time_unit = "year"' in text and 'time_position = "end"' in text
    assert "named like a year or season" in text
    assert parse_schema(text).table("Batting") == batting  # the draft parses as drafted


def test_a_key_column_is_proposed_on_its_name_only():
    """A season in a key such as (yearID, teamID) is the row's time; a key column whose values
    merely look like dates or epoch counts (an id) is not."""
    year = col("yearID", [2000, 2001])
    guess = propose_int_time([year], keys={"yearID", "teamID"})
    assert guess is not None and (guess.column, guess.unit) == ("yearID", TimeUnit.YEAR)
    assert "a key column (it still matches as the key)" in guess.reason
    assert propose_int_time([col("code", [20230101, 20230102])], keys={"code"}) is None
    assert propose_int_time([col("id", [NOW_S * 10**6])], keys={"id"}) is None
    # a named non-key column and a named key column: the earlier one, as for any two
    hits = col("season", [2000, 2001])
    assert propose_int_time([year, hits], keys={"yearID"}).column == "yearID"
