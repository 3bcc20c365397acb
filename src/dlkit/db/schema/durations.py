"""Durations and instants as ``dlkit.toml`` writes them: ``label_lag``/``known_after``
(``"6h"``, or an integer in an epoch time column's unit) and ``val_from``/``test_from`` (a
date or date-time, or an integer in the table's time unit), each as UTC microseconds."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from dlkit.db.time_units import TimeUnit, int_time_to_micros
from dlkit.errors import SchemaError

if TYPE_CHECKING:
    from dlkit.db.schema.spec import TableSpec

_DURATION_PART = re.compile(r"(\d+)\s*(us|µs|ms|s|m|h|d|w)")
DURATION_US = {"us": 1, "µs": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000,
                "h": 3_600_000_000, "d": 86_400_000_000, "w": 604_800_000_000}
MAX_DURATION_US = (1 << 62)


def _err(source: str, message: str) -> SchemaError:
    return SchemaError(message, path=source)


def parse_duration(value: Any, what: str, source: str) -> int:
    """Microseconds of a duration like ``"6h"``, ``"1d12h"``, ``"90s"`` or ``"250ms"``
    (units us, ms, s, m, h, d, w; 0 needs no unit)."""
    if isinstance(value, str):
        text = value.strip()
        if text == "0":
            return 0
        total, pos = 0, 0
        for match in _DURATION_PART.finditer(text):
            if text[pos:match.start()].strip():
                break
            total += int(match.group(1)) * DURATION_US[match.group(2)]
            pos = match.end()
        else:
            if pos and not text[pos:].strip():
                if total > MAX_DURATION_US:
                    raise _err(source, f"{what} {value!r} is too long: at most "
                                       f"{MAX_DURATION_US // DURATION_US['d']:,}d (2^62 us)")
                return total
    raise _err(source, f"{what} must be a duration like \"6h\", \"7d\" or \"1d12h\" (units "
                       f"us, ms, s, m, h, d, w), got {value!r}")


def parse_instant(value: Any, what: str, source: str) -> int:
    """Microseconds since the epoch (UTC) of a TOML date or date-time, or an ISO 8601 string
    (a time without an offset is UTC)."""
    import datetime as dt

    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise _err(source, f"{what} must be a date or date-time like 2024-01-01 or "
                               f"2024-01-01T12:00:00Z, got {value!r}") from None
    if isinstance(value, dt.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
    elif isinstance(value, dt.date):
        moment = dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC)
    else:
        raise _err(source, f"{what} must be a date or date-time like 2024-01-01, got {value!r}")
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    delta = moment - epoch
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def parse_lag(value: Any, what: str, table: TableSpec, source: str) -> int:
    """Microseconds of a lag (``label_lag``, ``known_after``): a duration like ``"6h"``, or,
    for a table whose time column counts seconds, ms, us or ns since the epoch, an integer in
    that unit (nanoseconds rounded up to whole microseconds: a value is never shown early)."""
    unit = table.time_unit
    if not isinstance(value, int) or isinstance(value, bool) or unit is None:
        return parse_duration(value, what, source)
    if unit.calendar:
        raise _err(source, f"{what}: an integer lag in the time unit {unit.value!r} is not a "
                           "fixed duration (years and months differ in length); write a "
                           "duration like \"365d\" or \"31d\"")
    us = -(-value // 1_000) if unit is TimeUnit.NS else value * unit.micros
    if not 0 <= us <= MAX_DURATION_US:
        raise _err(source, f"{what} must be between 0 and 2^62 microseconds, got {value!r} "
                           f"({unit.value})")
    return us


def parse_table_instant(value: Any, what: str, table: TableSpec, source: str) -> int:
    """Microseconds of an instant for ``table``'s rows (``val_from``, ``test_from``): a date
    or date-time, or, for an integer time column, an integer in its unit converted exactly as
    the column's values are (``val_from = 2010`` for a year column is where 2010's rows are)."""
    unit = table.time_unit
    if not isinstance(value, int) or isinstance(value, bool) or unit is None:
        return parse_instant(value, what, source)
    us = int_time_to_micros(value, unit, table.time_position)
    if us is None:
        raise _err(source, f"{what}: {value!r} is not a valid time in unit {unit.value!r} "
                           f"(e.g. {unit.example})")
    return us
