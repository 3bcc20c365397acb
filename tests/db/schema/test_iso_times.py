"""ISO 8601 texts as UTC timestamps, checked against the standard library's reading."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from dlkit.db.schema.iso_times import first_non_time, iso_times


def _reference(text: str) -> dt.datetime:
    value = dt.datetime.fromisoformat(text.replace("z", "Z"))
    return value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value


_instants = st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2100, 1, 1))
_offsets = st.one_of(st.none(), st.just("Z"), st.integers(-14 * 60, 14 * 60))


def _text(instant: dt.datetime, offset: object, sep: str) -> str:
    text = instant.isoformat(sep=sep)
    if offset is None:
        return text
    if offset == "Z":
        return text + "Z"
    assert isinstance(offset, int)
    sign = "+" if offset >= 0 else "-"
    return text + f"{sign}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}"


@given(st.lists(st.tuples(_instants, _offsets, st.sampled_from(["T", " "])), max_size=20))
def test_texts_with_and_without_offsets_read_as_utc(rows):
    texts = [_text(*row) for row in rows]
    got = iso_times(pa.array(texts, pa.string()))
    assert got is not None and got.type == pa.timestamp("us")
    assert got.to_pylist() == [_reference(t) for t in texts]


def test_dates_nulls_and_short_offsets():
    texts = ["2024-01-02", None, "2024-01-02 03:04:05+05", "2024-01-02T03:04:05.5-0130"]
    got = iso_times(pa.array(texts, pa.string()))
    assert got is not None
    assert got.to_pylist() == [dt.datetime(2024, 1, 2), None, dt.datetime(2024, 1, 1, 22, 4, 5),
                               dt.datetime(2024, 1, 2, 4, 34, 5, 500000)]


def test_the_first_text_that_is_no_time_is_found():
    values = pa.array(["2024-01-02", "2024-01-02T00:00:00Z", "soon", "never"], pa.string())
    assert iso_times(values) is None
    assert first_non_time(values) == 2
    assert first_non_time(pa.array(["2024-01-02"], pa.string())) is None
