"""ISO 8601 texts (how SQLite stores dates and times) as naive microsecond timestamps.

A text with a zone offset (``2024-01-02T03:04:05+05:00``, ``...-0130``, ``...+05``,
``...Z``) is moved to UTC (``2024-01-01 22:04:05``); one without is taken as UTC already, as
every naive time in dlkit is. A column may mix both. Arrow parses (its cast to a timestamp),
a whole batch at once; only a batch that fails is looked at value by value, to name the
first text that is no time.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

# A time of day then a zone offset ("2024-01-02" ends in "-02", which is a day, not one)
_ZONE_OFFSET = r":\d\d(\.\d*)?(Z|z|[+-]\d\d(:?\d\d)?)$"
_NAIVE = pa.timestamp("us")
_UTC = pa.timestamp("us", "UTC")


def _zoned(values: pa.Array) -> pa.Array:
    return pc.fill_null(pc.match_substring_regex(values, _ZONE_OFFSET), False)


def iso_times(values: pa.Array) -> pa.Array | None:
    """``values`` (strings) as ``timestamp[us]`` in UTC, or None when a text is no time."""
    try:
        return pc.cast(values, _NAIVE)
    except pa.ArrowInvalid:
        pass
    zoned = _zoned(values)
    try:
        # a tz-aware timestamp cast to a naive one keeps its instant: the UTC wall clock
        in_utc = pc.cast(pc.cast(pc.if_else(zoned, values, None), _UTC), _NAIVE)
        return pc.if_else(zoned, in_utc, pc.cast(pc.if_else(zoned, None, values), _NAIVE))
    except pa.ArrowInvalid:
        return None


def first_non_time(values: pa.Array) -> int | None:
    """The index of the first text of ``values`` that :func:`iso_times` cannot read."""
    for i, (text, has_zone) in enumerate(zip(values.to_pylist(), _zoned(values).to_pylist())):
        try:
            pc.cast(pa.array([text], pa.string()), _UTC if has_zone else _NAIVE)
        except pa.ArrowInvalid:
            return i
    return None
