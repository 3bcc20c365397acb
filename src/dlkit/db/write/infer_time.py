"""Drafting integer time columns for ``dlkit schema infer``: years, yyyymm, yyyymmdd and
epoch counts, found by their value ranges and names.

:func:`propose_int_time` is the rule, on summaries of a table's integer columns
(:class:`IntegerColumn`: name, Arrow type, a sample of non-null values, min and max);
:func:`integer_columns` makes those summaries from a table's Parquet files (the footers'
statistics for min and max where every row group has them, a sample of the first rows);
:func:`with_int_time` applies a proposal to a draft table that has no timestamp time column.

The rule, per column (a key column only on its name: a season in a key such as
(yearID, teamID) is the row's time; its integers still match as the key):

* ``year``: every value in 1800-2100 and a name like a year (``year``, ``yearID``, ``yr``,
  ``season``): a bare count in that range (a price, an id) is not taken for a year;
* ``yyyymm``: every value a valid month of 1800-2100 (``202303``) and a name saying month or
  period;
* ``yyyymmdd``: every value a valid date of 1800-2100 (``20230315``): eight digits with a
  valid month and day are rare otherwise, so values alone suffice (a date-like name says so
  in the reason);
* ``s`` / ``ms`` / ``us`` / ``ns`` since 1970: min and max between 1990 and 2100 in that unit
  (the units' ranges do not overlap) and, for seconds (whose range ids also reach), a name
  like ``*_ts``, ``*_time``, ``timestamp``, ``created``, ``*_at``, ``epoch``; ms, us and ns
  by magnitude alone.

A name-backed guess beats a values-only one, then the more specific unit (yyyymmdd, yyyymm,
year, then the epoch units), then the earlier column. Calendar units are proposed at the
period's end (a row is visible once its period is over: the choice that never leaks; the
reason says to change it to "start" for rows known when their period begins).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dlkit.db.schema.spec import TableSpec
from dlkit.db.time_units import TimePosition, TimeUnit, int_times_to_micros

SAMPLE_ROWS = 10_000
FIRST_YEAR, LAST_YEAR = 1800, 2100
EPOCH_FIRST_YEAR = 1990  # epoch counts: from 1990 (seconds of 1970-1989 look like ids)

_YEAR_NAME = re.compile(r"(^|_)(year|yr|season)(s?)(_|id$|$)|^(year|season)", re.I)
_MONTH_NAME = re.compile(r"month|period|yyyymm|(^|_)ym($|_)", re.I)
_DATE_NAME = re.compile(r"date|day|yyyymmdd|(^|_)dt($|_)", re.I)
_LIFE_NAME = re.compile(r"birth|death|born|died", re.I)  # a person's years: not the row's time
_EPOCH_NAME = re.compile(r"(^|_)(ts|time|timestamp|epoch|unix)($|_)|created|updated|_at$|time$",
                         re.I)

# 1990-01-01 and 2101-01-01 in seconds since the epoch
_EPOCH_LO_S, _EPOCH_HI_S = 631_152_000, 4_133_980_800
_EPOCH_SCALE = {TimeUnit.S: 1, TimeUnit.MS: 10**3, TimeUnit.US: 10**6, TimeUnit.NS: 10**9}
_SPECIFICITY = {TimeUnit.YYYYMMDD: 0, TimeUnit.YYYYMM: 1, TimeUnit.YEAR: 2, TimeUnit.S: 3,
                TimeUnit.MS: 4, TimeUnit.US: 5, TimeUnit.NS: 6}


@dataclass(frozen=True, eq=False)
class IntegerColumn:
    """What the rule looks at of one integer column: its values' sample (non-null, int64)
    and the min and max of the whole column (None when it has no non-null value)."""

    name: str
    arrow_type: str
    sample: np.ndarray
    min: int | None
    max: int | None


@dataclass(frozen=True)
class TimeGuess:
    """A proposed integer time column, with a one-line reason (the draft's comment)."""

    column: str
    unit: TimeUnit
    position: TimePosition
    reason: str


def _span(c: IntegerColumn, unit: TimeUnit) -> str:
    return f"{c.arrow_type} {unit.value} values {c.min}-{c.max}"


def _all_valid(c: IntegerColumn, unit: TimeUnit) -> bool:
    values = np.concatenate([c.sample, np.asarray([c.min, c.max], dtype=np.int64)])
    _, bad = int_times_to_micros(values, np.ones(values.shape[0], dtype=bool), unit)
    return bad < 0


def _calendar(c: IntegerColumn) -> tuple[TimeUnit, bool, str] | None:
    """``(unit, named, why)`` when ``c`` reads as years, yyyymm or yyyymmdd."""
    assert c.min is not None and c.max is not None, "only columns with values are asked"
    lo, hi = c.min, c.max
    if FIRST_YEAR * 10_000 + 101 <= lo and hi <= LAST_YEAR * 10_000 + 1231 \
            and _all_valid(c, TimeUnit.YYYYMMDD):
        named = bool(_DATE_NAME.search(c.name))
        return TimeUnit.YYYYMMDD, named, ("valid dates, named like a date" if named
                                          else "every value a valid date")
    if FIRST_YEAR * 100 + 1 <= lo and hi <= LAST_YEAR * 100 + 12 \
            and _MONTH_NAME.search(c.name) and _all_valid(c, TimeUnit.YYYYMM):
        return TimeUnit.YYYYMM, True, "valid months, named like a month"
    if FIRST_YEAR <= lo and hi <= LAST_YEAR and _YEAR_NAME.search(c.name) \
            and not _LIFE_NAME.search(c.name):
        return TimeUnit.YEAR, True, "named like a year or season"
    return None


def _epoch(c: IntegerColumn) -> tuple[TimeUnit, bool, str] | None:
    assert c.min is not None and c.max is not None, "only columns with values are asked"
    named = bool(_EPOCH_NAME.search(c.name))
    for unit, scale in _EPOCH_SCALE.items():
        if _EPOCH_LO_S * scale <= c.min and c.max < _EPOCH_HI_S * scale:
            if unit is TimeUnit.S and not named:
                return None
            return unit, named, (f"{'named like a time, ' if named else ''}magnitude of "
                                 f"{unit.value} since 1970 ({EPOCH_FIRST_YEAR}-{LAST_YEAR})")
    return None


def propose_int_time(columns: Iterable[IntegerColumn],
                     skip: Iterable[str | None] = (),
                     keys: Iterable[str] = ()) -> TimeGuess | None:
    """The integer time column to propose among ``columns`` (none of ``skip``; one of
    ``keys``, the table's key columns, only when its name backs the guess), or None."""
    skipped = set(skip)
    key_set = set(keys)
    best: tuple[tuple[int, int, int], TimeGuess] | None = None
    for position, c in enumerate(columns):
        if c.name in skipped or c.min is None or c.max is None:
            continue
        found = _calendar(c) or _epoch(c)
        if found is None:
            continue
        unit, named, why = found
        if c.name in key_set:
            if not named:
                continue
            why += ", a key column (it still matches as the key)"
        if unit.calendar:
            where = TimePosition.END
            reason = (f"{_span(c, unit)}: {why}; time at the period's end (known once it is "
                      "over; time_position = \"start\" if known when it begins)")
        else:
            where = TimePosition.START
            reason = f"{_span(c, unit)}: {why}"
        rank = (0 if named else 1, _SPECIFICITY[unit], position)
        if best is None or rank < best[0]:
            best = (rank, TimeGuess(c.name, unit, where, reason))
    return best[1] if best is not None else None


def _stat_bounds(files: Sequence[pq.ParquetFile], name: str) -> tuple[int, int] | None:
    """Min and max of a top-level column from every row group's statistics, or None when
    one lacks them (a group with only nulls has none and holds no value either)."""
    lo = hi = None
    for f in files:
        meta = f.metadata
        index = next((j for j in range(meta.num_columns) if meta.schema.column(j).path == name),
                     None)
        if index is None:
            return None
        for g in range(meta.num_row_groups):
            col = meta.row_group(g).column(index)
            stats = col.statistics
            if stats is None or not stats.has_min_max:
                if stats is not None and stats.null_count == col.num_values:
                    continue
                return None
            lo = stats.min if lo is None else min(lo, stats.min)
            hi = stats.max if hi is None else max(hi, stats.max)
    return (int(lo), int(hi)) if lo is not None and hi is not None else None


def integer_columns(files: Sequence[str | Path], schema: pa.Schema,
                    skip: Iterable[str | None] = ()) -> list[IntegerColumn]:
    """Summaries of the integer columns (not in ``skip``) of a table's Parquet ``files``."""
    skipped = set(skip)
    opened = [pq.ParquetFile(f) for f in files]
    out = []
    for fld in schema:
        t = fld.type.value_type if pa.types.is_dictionary(fld.type) else fld.type
        if fld.name in skipped or not pa.types.is_integer(t) or pa.types.is_uint64(t):
            continue
        parts = []
        rows = 0
        for f in opened:
            for g in range(f.metadata.num_row_groups):
                if rows >= SAMPLE_ROWS:
                    break
                arr = f.read_row_group(g, columns=[fld.name]).column(0).drop_null()
                parts.append(arr.to_numpy().astype(np.int64)[:SAMPLE_ROWS - rows])
                rows += parts[-1].shape[0]
        sample = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        bounds = _stat_bounds(opened, fld.name)
        if bounds is None and sample.size:
            bounds = (int(sample.min()), int(sample.max()))
        out.append(IntegerColumn(fld.name, str(t), sample, *(bounds or (None, None))))
    return out


def with_int_time(spec: TableSpec, files: Sequence[str | Path], schema: pa.Schema,
                  notes: dict[tuple[str, str], str]) -> TableSpec:
    """``spec`` with a proposed integer time column when it has no time column (the column
    typed ``timestamp``, the reason in ``notes``); ``spec`` itself otherwise."""
    if spec.time_column is not None:
        return spec
    keys = spec.key_column_set()
    guess = propose_int_time(integer_columns(files, schema, spec.exclude), keys=keys)
    if guess is None:
        return spec
    notes[(spec.name, guess.column)] = guess.reason
    # a key column takes no type: it is the timestamp feature by being the time column
    types = spec.types if guess.column in keys else {**spec.types, guess.column: "timestamp"}
    return replace(spec, time_column=guess.column, time_unit=guess.unit,
                   time_position=guess.position, types=types)
