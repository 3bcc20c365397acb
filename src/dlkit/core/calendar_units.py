"""Integer calendar periods (years, yyyymm, yyyymmdd) as microseconds since 1970, UTC.

Integer arithmetic alone (H. Hinnant's days-from-civil algorithm, proleptic Gregorian), the
same on every machine; the rules are ``dlkit.db.time_units``' (its numpy version is the
reference the tests check this kernel against).
"""

from __future__ import annotations

from dlkit.core.jit import kernel

YEAR, YYYYMM, YYYYMMDD = 0, 1, 2
_DAY_US = 86_400_000_000
_MARCH_1_YEAR_0 = 719_468  # days from 0000-03-01 to 1970-01-01


@kernel
def days_from_civil(year, month, day):
    """Days since 1970-01-01 of a valid date (years counted from March: leap day last)."""
    y = year - 1 if month <= 2 else year
    era = y // 400
    yoe = y - era * 400
    mp = month - 3 if month > 2 else month + 9
    doy = (153 * mp + 2) // 5 + day - 1
    return era * 146_097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - _MARCH_1_YEAR_0


@kernel
def days_in_month(year, month):
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


@kernel
def calendar_to_micros(values, valid, unit, end, out):
    """``out[i]``: the start (``end`` False) or last microsecond (``end`` True) of the period
    ``values[i]`` names in ``unit`` (YEAR, YYYYMM, YYYYMMDD; years 1-9999), 0 where not
    ``valid``. Returns the index of the first valid value that names no period, or -1 (``out``
    is then not filled beyond it)."""
    for i in range(values.shape[0]):
        if not valid[i]:
            out[i] = 0
            continue
        v = values[i]
        if unit == YEAR:
            year, month, day = v, 1, 1
        elif unit == YYYYMM:
            year, month, day = v // 100, v % 100, 1
        else:
            year, month, day = v // 10_000, (v // 100) % 100, v % 100
        if year < 1 or year > 9999 or month < 1 or month > 12 or day < 1 \
                or day > days_in_month(year, month):
            return i
        if not end:
            out[i] = days_from_civil(year, month, day) * _DAY_US
            continue
        if unit == YEAR:
            days = days_from_civil(year + 1, 1, 1)
        elif unit == YYYYMM:
            days = days_from_civil(year + 1, 1, 1) if month == 12 else \
                days_from_civil(year, month + 1, 1)
        else:
            days = days_from_civil(year, month, day) + 1
        out[i] = days * _DAY_US - 1
    return -1
