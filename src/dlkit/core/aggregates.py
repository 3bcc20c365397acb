"""As-of aggregates of a row's children: the prefix sums a database stores, and the cells a
batch gets from them.

A parent row's children are stored sorted by (time, id) (``graph.bin``'s child lists), so the
children visible at a cut-off are a prefix of the list, found by a binary search. For a child
edge type (the edges from rows of one child table into one parent table) the database stores,
at every position ``i`` of a parent's child list, the running count of that type's children
in the list up to and including ``i`` (and, for a selected child column, the running sum of
its non-null values and the running count of those values), restarting at each parent. The
aggregate of the first ``k`` visible children is then one read at position ``lo + k - 1``
(0 when ``k = 0``). Positions of other edge types repeat the running value. Each array spans
the child lists of the parent table's rows, which are consecutive in the CSR. A recency cell's
running value is the time of the type's latest child so far (``NO_TIME`` before the first):
lists are time-sorted, so the latest child of the first ``k`` is the last one among them.

Cells (``fill_aggregates``) are numeric: a count ``n`` is ``log1p(n)``, a sum ``s`` is
``sign(s) * log1p(|s|)``, each z-scored with the statistics the database stores for the cell
(over the parent rows' totals); a mean is ``sum / count`` z-scored like the child column (a
boolean column's mean is the fraction of ``true``), null when no value is visible; a recency
is ``log1p(days)`` since the last visible child, z-scored over the gaps between consecutive
children (``prefix_latest``), null without such a child with a time. The layout is pinned in
``docs/database_format.md`` and the cells in ``docs/batch_format.md``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dlkit.core.bfs import visible_prefix
from dlkit.core.codes import NO_TIME
from dlkit.core.jit import kernel

COUNT = 0
SUM = 1
MEAN = 2
RECENCY = 3
KINDS = ("count", "sum", "mean", "recency")
INT64_MAX = np.iinfo(np.int64).max
DAY_US = 86_400e6  # microseconds per day: a recency cell counts days


class Aggregates(NamedTuple):
    """The aggregate cells of a catalog (``dlkit.sampler.catalog``): catalog column ``c`` is
    aggregate ``col_agg[c]`` (-1: a column of the table). Aggregate ``j`` of kind ``kind[j]``
    reads ``counts[count_at[j] + i]`` / ``sums[sum_at[j] + i]`` at position ``i`` of its
    parent table's child lists (global edge position minus ``base[j]``); ``source_col[j]`` is
    the catalog column of its child column (-1 for a count or a recency), ``mean[j]`` /
    ``std[j]`` its z-score statistics (a mean's are its child column's: 0 and 1 for a
    boolean). A recency reads ``counts`` (child times) like a count."""

    col_agg: np.ndarray  # int64[C]
    kind: np.ndarray  # int64[A]
    source_col: np.ndarray  # int64[A]
    count_at: np.ndarray  # int64[A]: -1 for a sum
    sum_at: np.ndarray  # int64[A]: -1 for a count or a recency
    base: np.ndarray  # int64[A]
    mean: np.ndarray  # float64[A]
    std: np.ndarray  # float64[A]
    counts: np.ndarray  # int64[...] (aggregates/counts.bin)
    sums: np.ndarray  # float64[...] (aggregates/sums.bin)


def no_aggregates(num_columns: int) -> Aggregates:
    """The record of a catalog without aggregate cells."""
    empty_i = np.zeros(0, dtype=np.int64)
    return Aggregates(np.full(num_columns, -1, dtype=np.int64), empty_i, empty_i, empty_i,
                      empty_i, empty_i, np.zeros(0), np.zeros(0), empty_i, np.zeros(0))


# --- build ---------------------------------------------------------------------------------


@kernel
def prefix_counts(child_offsets, child_ids, first_row, last_row, child_first, child_last, out):
    """``out[i - child_offsets[first_row]]``: how many children in rows ``child_first ..
    child_last - 1`` the child list of parent ``p`` holds up to and including position ``i``,
    for every parent ``p`` in ``first_row .. last_row - 1``."""
    base = child_offsets[first_row]
    for p in range(first_row, last_row):
        run = 0
        for i in range(child_offsets[p], child_offsets[p + 1]):
            c = child_ids[i]
            if child_first <= c < child_last:
                run += 1
            out[i - base] = run


@kernel
def elapsed_days(earlier, later):
    """``(later - earlier) / DAY_US`` for ``earlier <= later`` (0 otherwise), the difference
    taken exactly in int64 unless it overflows (the two ends more than 292,000 years apart)."""
    if later <= earlier:
        return 0.0
    if earlier < 0 and later > INT64_MAX + earlier:
        return (np.float64(later) - np.float64(earlier)) / DAY_US
    return np.float64(later - earlier) / DAY_US


@kernel
def prefix_latest(child_offsets, child_ids, child_times, first_row, last_row, child_first,
                  child_last, out, gaps):
    """Like ``prefix_counts``, the time (``child_times``) of the latest child in rows
    ``child_first .. child_last - 1`` up to and including position ``i``: the last one, the
    list being time-sorted; ``NO_TIME`` before the first (or when that child has no time).

    In the same pass, the values a recency cell's statistics are taken over, into
    ``gaps[:n]``; returns ``n``: ``log1p(days)`` of the gap from each such child with a time
    to the previous one in the same parent's list (a child without a predecessor gives
    none). Children without a time sort first, so none follows a timed one."""
    base = child_offsets[first_row]
    n = 0
    for p in range(first_row, last_row):
        latest = NO_TIME
        for i in range(child_offsets[p], child_offsets[p + 1]):
            c = child_ids[i]
            if child_first <= c < child_last:
                t = child_times[i]
                if t != NO_TIME and latest != NO_TIME:
                    gaps[n] = np.log1p(elapsed_days(latest, t))
                    n += 1
                latest = t
            out[i - base] = latest
    return n


@kernel
def prefix_sums(child_offsets, child_ids, first_row, last_row, child_first, values, bitmap,
                sums, counts):
    """Like ``prefix_counts`` for one column of the child table (rows ``child_first ..
    child_first + values.shape[0] - 1``; validity ``bitmap``): the running float64 sum of its
    non-null values (in list order) into ``sums`` and their running count into ``counts``."""
    base = child_offsets[first_row]
    child_last = child_first + values.shape[0]
    for p in range(first_row, last_row):
        total = 0.0
        n = 0
        for i in range(child_offsets[p], child_offsets[p + 1]):
            c = child_ids[i]
            if child_first <= c < child_last:
                local = c - child_first
                if (bitmap[local >> 3] >> (local & 7)) & 1 != 0:
                    total += np.float64(values[local])
                    n += 1
            sums[i - base] = total
            counts[i - base] = n


@kernel
def row_totals(child_offsets, first_row, last_row, prefix, out):
    """Each parent row's total (its running value at the end of its list; 0 without
    children): ``out[p - first_row]``."""
    base = child_offsets[first_row]
    for p in range(first_row, last_row):
        lo = child_offsets[p]
        hi = child_offsets[p + 1]
        out[p - first_row] = prefix[hi - 1 - base] if hi > lo else 0


@kernel
def signed_log(value):
    """``sign(v) * log1p(|v|)`` (a sum's cell before its z-score)."""
    if value < 0:
        return -np.log1p(-value)
    return np.log1p(value)


# --- batches -------------------------------------------------------------------------------


@kernel
def mark_aggregate_cells(layout, col_agg, skip):
    """``skip`` set on every aggregate cell (the fill kernels leave them to
    ``fill_aggregates``); returns how many there are."""
    marked = 0
    for b in range(layout.cell_counts.shape[0]):
        for p in range(layout.cell_counts[b]):
            if col_agg[layout.col[b, p]] >= 0:
                skip[b, p] = 1
                marked += 1
    return marked


@kernel
def aggregate_cutoff(obs_time, strict, lag):
    """The last child time whose value an aggregate of a column with lag ``lag`` may count:
    visible (``time <= obs_time - strict``) and known (``time + lag <= obs_time``); children
    without a time (``NO_TIME``) always count. ``obs_time = NO_TIME`` sees everything."""
    if obs_time == NO_TIME:
        return INT64_MAX
    cutoff = obs_time - strict
    if lag > 0:
        # time + lag <= obs_time without overflow: lags are below 2^62, and an observation
        # time within a lag of INT64_MIN knows only the rows without a time
        known = NO_TIME if obs_time < NO_TIME + lag else obs_time - lag
        if known < cutoff:
            cutoff = known
    return cutoff


@kernel
def fill_aggregates(obs_times, strict, target_col, layout, col_table, table_offsets,
                    child_offsets, child_times, label_lag, aggregates, out):
    """The value of every aggregate cell of every sequence ``b`` (observation time
    ``obs_times[b]``; ``strict`` the task's boundary, 0/1), for the row it belongs to.

    A count counts the row's visible children of its edge type (every one, whatever the
    walk's child width). A sum or mean counts a child's value only when it is visible and
    known: ``time + L <= obs_time`` for the column's lag ``L`` (``label_lag`` of its catalog
    column). The column of the batch's target (``target_col``) counts with ``L >= 1``, so the
    seed's own target (and any other at the observation time) never enters; with no
    observation time its aggregates are hidden (``is_hidden``, like a label not known yet).
    A mean of no value is a null cell. A recency reads the count's visible prefix (row times
    only: no column lag applies) and counts the days from its last child to the cut-off; a
    null cell without such a child, when that child has no time, or without an observation
    time. Values and flags not written stay 0.
    """
    col_agg = aggregates.col_agg
    kind = aggregates.kind
    source_col = aggregates.source_col
    count_at = aggregates.count_at
    sum_at = aggregates.sum_at
    base = aggregates.base
    agg_mean = aggregates.mean
    agg_std = aggregates.std
    counts = aggregates.counts
    sums = aggregates.sums
    numbers = out.numeric_values
    is_null = out.is_null
    is_hidden = out.is_hidden
    for b in range(obs_times.shape[0]):
        obs_time = obs_times[b]
        for p in range(layout.cell_counts[b]):
            c = layout.col[b, p]
            j = col_agg[c]
            if j < 0:
                continue
            row = table_offsets[col_table[c]] + layout.row[b, p]
            lo = child_offsets[row]
            hi = child_offsets[row + 1]
            lag = 0
            x = source_col[j]
            if x >= 0:
                lag = label_lag[x]
                if x == target_col:
                    if obs_time == NO_TIME:
                        is_hidden[b, p] = 1
                        continue
                    if lag < 1:
                        lag = 1
            cutoff = aggregate_cutoff(obs_time, strict, lag)
            k = visible_prefix(child_times, lo, hi, cutoff)
            at = lo + k - 1 - base[j]
            if kind[j] == COUNT:
                n = counts[count_at[j] + at] if k > 0 else 0
                value = np.log1p(np.float64(n))
            elif kind[j] == SUM:
                total = sums[sum_at[j] + at] if k > 0 else 0.0
                value = signed_log(total)
            elif kind[j] == RECENCY:
                last = counts[count_at[j] + at] if k > 0 else NO_TIME
                if last == NO_TIME or obs_time == NO_TIME:
                    is_null[b, p] = 1
                    continue
                value = np.log1p(elapsed_days(last, cutoff))
            else:
                n = counts[count_at[j] + at] if k > 0 else 0
                if n == 0:
                    is_null[b, p] = 1
                    continue
                value = sums[sum_at[j] + at] / np.float64(n)
            numbers[b, p] = np.float32((value - agg_mean[j]) / agg_std[j])
