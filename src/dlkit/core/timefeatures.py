"""The 15 features of a timestamp cell: calendar phases as sines and cosines, and a z-score.

The calendar (month, day, day of year, weekday) of a microsecond count comes from integer
arithmetic alone (no time zone, no library), so the features are the same on every
machine; the format is pinned in ``docs/batch_format.md`` section 5.
"""

from __future__ import annotations

import numpy as np

from dlkit.core.jit import kernel

NUM_TIME_FEATURES = 15
_MICROS_PER_SECOND = 1_000_000
_SECONDS_PER_DAY = 86_400
_DAYS_PER_ERA = 146_097  # the Gregorian calendar repeats every 400 years, weekdays included
_MARCH_1_YEAR_0 = 719_468  # days from 0000-03-01 to 1970-01-01


@kernel
def calendar_of(days):
    """``(month 1-12, day 1-31, day of year 1-366, weekday 0-6 = Monday..Sunday)`` of a day
    count since 1970-01-01 (proleptic Gregorian; H. Hinnant's civil-from-days algorithm).

    Days are first moved by whole 400-year eras to a count ``z >= 0`` from 0000-03-01, which
    changes none of the four results, so every later step is an unsigned division by a
    constant (a multiply and a shift). Years start in March here, which puts the leap day last.
    """
    z = days + _MARCH_1_YEAR_0
    if z < 0:
        z += ((_DAYS_PER_ERA - 1 - z) // _DAYS_PER_ERA) * _DAYS_PER_ERA
    u = np.uint64(z)
    day_of_era = u % np.uint64(_DAYS_PER_ERA)
    year_of_era = (day_of_era - day_of_era // np.uint64(1460) + day_of_era // np.uint64(36524)
                   - day_of_era // np.uint64(146096)) // np.uint64(365)
    day_of_march_year = day_of_era - (np.uint64(365) * year_of_era + year_of_era // np.uint64(4)
                                      - year_of_era // np.uint64(100))
    mp = (np.uint64(5) * day_of_march_year + np.uint64(2)) // np.uint64(153)
    day = np.int64(day_of_march_year - (np.uint64(153) * mp + np.uint64(2)) // np.uint64(5)) + 1
    if mp < np.uint64(10):  # March..December: January, February and the leap day precede
        month = np.int64(mp) + 3
        leap = year_of_era % np.uint64(4) == np.uint64(0) and (
            year_of_era % np.uint64(100) != np.uint64(0) or year_of_era == np.uint64(0))
        day_of_year = np.int64(day_of_march_year) + 60 + (1 if leap else 0)
    else:  # January, February: the last 61 days of the March-based year
        month = np.int64(mp) - 9
        day_of_year = np.int64(day_of_march_year) - 305
    # 1970-01-01 was a Thursday (3) and z - days = 719468 = 1 (mod 7); eras are whole weeks.
    weekday = np.int64((u + np.uint64(2)) % np.uint64(7))
    return month, day, day_of_year, weekday


def _phase_table(period: int) -> np.ndarray:
    """``[sin, cos](2*pi*k/period)`` as float32 for ``k`` in ``0..period-1``."""
    angle = 2.0 * np.pi * (np.arange(period, dtype=np.float64) / period)
    return np.stack([np.sin(angle), np.cos(angle)], axis=1).astype(np.float32)


# Every phase is k/period for an integer k, so the sines and cosines are looked up.
SECOND_TABLE = _phase_table(60)
MINUTE_TABLE = _phase_table(60)
HOUR_TABLE = _phase_table(24)
WEEKDAY_TABLE = _phase_table(7)
DAY_TABLE = _phase_table(31)
MONTH_TABLE = _phase_table(12)
YEAR_DAY_TABLE = _phase_table(366)


@kernel
def _put_phase(table, k, out, at):
    out[at] = table[k, 0]
    out[at + 1] = table[k, 1]


@kernel
def time_features(t, mean, std, out):
    """The 15 timestamp features of ``t`` (microseconds, UTC) into ``out[0:15]``.

    ``sin, cos`` of ``2*pi*phase`` for the phases second/60, minute/60, hour/24, weekday/7
    (Monday 0), (day of month - 1)/31, (month - 1)/12, (day of year - 1)/366, then the z-score
    ``(t - mean) / std``.
    """
    if t >= 0:  # the common case: unsigned division by a constant is a multiply and a shift
        seconds = np.int64(np.uint64(t) // np.uint64(_MICROS_PER_SECOND))
        days = np.int64(np.uint64(seconds) // np.uint64(_SECONDS_PER_DAY))
    else:
        seconds = t // _MICROS_PER_SECOND
        days = seconds // _SECONDS_PER_DAY
    second_of_day = seconds - days * _SECONDS_PER_DAY
    month, day, day_of_year, weekday = calendar_of(days)
    _put_phase(SECOND_TABLE, second_of_day % 60, out, 0)
    _put_phase(MINUTE_TABLE, (second_of_day // 60) % 60, out, 2)
    _put_phase(HOUR_TABLE, second_of_day // 3600, out, 4)
    _put_phase(WEEKDAY_TABLE, weekday, out, 6)
    _put_phase(DAY_TABLE, day - 1, out, 8)
    _put_phase(MONTH_TABLE, month - 1, out, 10)
    _put_phase(YEAR_DAY_TABLE, day_of_year - 1, out, 12)
    out[14] = np.float32((np.float64(t) - mean) / std)
