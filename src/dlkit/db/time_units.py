"""Integer time columns: the units a schema may declare and their conversion to microseconds.

A time column may hold integers in one of the :class:`TimeUnit` units. The epoch units
(``s``, ``ms``, ``us``, ``ns``) count since 1970-01-01 00:00 UTC; nanoseconds are truncated
toward zero, as for Arrow timestamps. The calendar units name a period (``year``: 2023,
``yyyymm``: 202303, ``yyyymmdd``: 20230315; years 1 to 9999) and a :class:`TimePosition`
says which instant of it is the row's time: its start (the default: 00:00 UTC on the first
day of the period) or its end, the last microsecond of the period (the next period's start
minus 1 us). The end is inside the period (a timestamp feature of the row shows its own
year, month and day) and before the next period's first instant, so a prediction made at
the start of the next period sees the row, and no prediction made during the period does.

:func:`int_times_to_micros` converts a whole array at once (numpy, no Python loop); the
schema's instants given in a time column's unit (``val_from = 2010``) go through it too, so
both agree to the microsecond.
"""

from __future__ import annotations

import enum

import numpy as np

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
MIN_YEAR, MAX_YEAR = 1, 9999


class TimeUnit(enum.Enum):
    YEAR = "year"
    YYYYMM = "yyyymm"
    YYYYMMDD = "yyyymmdd"
    S = "s"
    MS = "ms"
    US = "us"
    NS = "ns"

    @property
    def calendar(self) -> bool:
        """A period (year, month, day) rather than a count since the epoch."""
        return self in (TimeUnit.YEAR, TimeUnit.YYYYMM, TimeUnit.YYYYMMDD)

    @property
    def micros(self) -> int:
        """Microseconds in one unit of an epoch unit (ns: 0, a thousandth of one)."""
        return {TimeUnit.S: 1_000_000, TimeUnit.MS: 1_000, TimeUnit.US: 1,
                TimeUnit.NS: 0}[self]

    @property
    def example(self) -> str:
        return {TimeUnit.YEAR: "2023", TimeUnit.YYYYMM: "202303 (March 2023)",
                TimeUnit.YYYYMMDD: "20230315", TimeUnit.S: "seconds since 1970",
                TimeUnit.MS: "milliseconds since 1970", TimeUnit.US: "microseconds since 1970",
                TimeUnit.NS: "nanoseconds since 1970"}[self]


class TimePosition(enum.Enum):
    """Which instant of a calendar period a row's time is."""

    START = "start"
    END = "end"


TIME_UNIT_NAMES = tuple(u.value for u in TimeUnit)
TIME_POSITION_NAMES = tuple(p.value for p in TimePosition)

_S_LIMIT = INT64_MAX // 1_000_000
_MS_LIMIT = INT64_MAX // 1_000


def _days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (integer arithmetic only: H.
    Hinnant's ``days_from_civil``), for arrays of valid years, months and days."""
    y = y - (m <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * np.where(m > 2, m - 3, m + 9) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    days: np.ndarray = era * 146_097 + doe - 719_468
    return days


_DAY_US = 86_400_000_000
# Days since 1970-01-01 of the first day of month i = (year - 1) * 12 + (month - 1), for every
# month of years 1-9999 and the one after (a table: a lookup per value instead of the date
# arithmetic per value); made on first use.
_month_days: np.ndarray | None = None


def _month_start_days() -> np.ndarray:
    global _month_days
    if _month_days is None:
        i = np.arange((MAX_YEAR - MIN_YEAR + 1) * 12 + 1, dtype=np.int64)
        _month_days = _days_from_civil(i // 12 + MIN_YEAR, i % 12 + 1, np.ones_like(i))
        _month_days.flags.writeable = False
    return _month_days


def _calendar_start(values: np.ndarray, unit: TimeUnit, next_period: bool) -> tuple[
        np.ndarray, np.ndarray]:
    """``(start microseconds, ok)`` of each period (of the next one with ``next_period``);
    ``ok`` is False where the value names no period."""
    v = values.astype(np.int64, copy=False)
    if unit is TimeUnit.YEAR:
        ok = (v >= MIN_YEAR) & (v <= MAX_YEAR)
        i = np.where(ok, v - MIN_YEAR, 0) * 12
        step = 12
    else:
        ym = v if unit is TimeUnit.YYYYMM else v // 100
        year, month = ym // 100, ym % 100
        ok = (year >= MIN_YEAR) & (year <= MAX_YEAR) & (month >= 1) & (month <= 12)
        i = np.where(ok, (year - MIN_YEAR) * 12 + month - 1, 0)
        step = 1
    table = _month_start_days()
    days = table[i]
    if unit is TimeUnit.YYYYMMDD:
        day = v % 100
        ok &= (day >= 1) & (day <= table[i + 1] - days)
        days = days + np.where(ok, day, 1) - (0 if next_period else 1)
    elif next_period:
        days = table[i + step]
    return days * _DAY_US, ok


def int_times_to_micros(values: np.ndarray, valid: np.ndarray, unit: TimeUnit,
                        position: TimePosition = TimePosition.START) -> tuple[np.ndarray, int]:
    """``(microseconds since the epoch UTC, first bad index or -1)`` of integer ``values``
    (int64 or uint64) in ``unit``; invalid positions (``valid`` False) give 0 and are never
    bad. A value is bad when it names no period (month 13, day 32, 20230230, a year outside
    1-9999) or its microseconds do not fit in int64 (minus the reserved ``INT64_MIN``)."""
    n = values.shape[0]
    if values.dtype == np.uint64:
        big = valid & (values > np.uint64(INT64_MAX))
        if big.any():
            return np.zeros(n, dtype=np.int64), int(np.flatnonzero(big)[0])
        values = values.astype(np.int64)
    v = np.where(valid, values.astype(np.int64, copy=False), 0)
    if unit.calendar:
        start, ok = _calendar_start(v, unit, next_period=position is TimePosition.END)
        out = start - 1 if position is TimePosition.END else start
    elif unit is TimeUnit.NS:
        ok = np.ones(n, dtype=bool)
        out = v // 1_000
        out += (v % 1_000 != 0) & (v < 0)  # toward zero
    elif unit is TimeUnit.US:
        ok = v != INT64_MIN
        out = v.copy()
    else:
        limit = _S_LIMIT if unit is TimeUnit.S else _MS_LIMIT
        ok = (v >= -limit) & (v <= limit)
        out = np.where(ok, v, 0) * unit.micros
    bad = valid & ~ok
    if bad.any():
        return np.zeros(n, dtype=np.int64), int(np.flatnonzero(bad)[0])
    out = np.where(valid, out, 0).astype(np.int64, copy=False)
    return out, -1


def int_time_to_micros(value: int, unit: TimeUnit,
                       position: TimePosition = TimePosition.START) -> int | None:
    """One integer in ``unit`` as microseconds, or None when it is not a valid time."""
    if not -(1 << 63) <= value < (1 << 64):
        return None
    dtype = np.uint64 if value > INT64_MAX else np.int64
    out, bad = int_times_to_micros(np.array([value], dtype=dtype), np.ones(1, dtype=bool),
                                   unit, position)
    return None if bad >= 0 else int(out[0])
