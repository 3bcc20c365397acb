"""Context examples: the neighbourhoods of other seeds of a task filling a short sequence.

When a seed's own temporal BFS stops before the sequence is full, the rest may be filled with
the walks of up to ``Examples.limit`` other seeds of the same task observed no later than it
(in-context examples; ``docs/batch_format.md`` §4 pins the rules):

1. Candidates are the task's seeds, other than the sequence's own, whose observation time is
   visible at the sequence's cutoff (``NO_TIME`` or ``<= T``), in (observation time, anchor
   row) order. ``EXAMPLES_RECENT`` takes the latest ``limit``; ``EXAMPLES_RANDOM`` chooses
   ``limit`` of them by Floyd's algorithm from the example stream (``streams.example_key``,
   the sequence's own anchor); either way they are used latest first. ``EXAMPLES_PARENT``
   takes the seed row's siblings (seeds among its foreign-key parents' visible children)
   first, then the latest others.
2. Example ``j`` of ``k`` chosen gets ``ceil(room / (k - j))`` of the cells and of the rows
   still free. It is walked like a sequence of its own (its anchor's stream) but with the
   *current* sequence's cutoff, so nothing later than the current observation time enters;
   its visited rows are appended in visit order, rows already in the sequence skipped, until
   its share of cells or of rows is reached.

Values are then filled as for any row: the example's target cell shows its label unless the
label lag hides it at the current observation time (``collate.hide_unknown_values``).
"""

from __future__ import annotations

import numpy as np

from dlkit.core.bfs import (
    VIA_EXAMPLE,
    choose_without_replacement,
    row_set_capacity,
    row_set_find,
    row_set_insert,
    row_set_put,
    table_of,
    temporal_bfs,
    visible_prefix,
)
from dlkit.core.codes import NO_TIME
from dlkit.core.jit import kernel
from dlkit.core.records import Stream, Walk
from dlkit.core.streams import new_stream

EXAMPLES_RECENT = 0
EXAMPLES_RANDOM = 1
EXAMPLES_PARENT = 2


@kernel
def choose_examples(examples, rank, cutoff, k0, k1, anchor, out, picks):
    """Positions in ``examples.anchors`` of the context examples of the seed at position
    ``rank`` with visibility ``cutoff``, latest first, in ``out``; returns how many.
    ``(k0, k1)`` is the example key, ``anchor`` the seed's own anchor row; ``out`` and
    ``picks`` (uint64) hold ``examples.limit`` entries."""
    times = examples.times
    visible = visible_prefix(times, 0, times.shape[0], cutoff)
    own = 1 if rank < visible else 0  # the visible seeds are a prefix of the time order
    population = visible - own
    count = min(examples.limit, population)
    if count <= 0:
        return 0
    if examples.policy == EXAMPLES_RECENT:
        at = visible - 1
        for q in range(count):
            if at == rank:
                at -= 1
            out[q] = at
            at -= 1
        return count
    chosen = np.empty(count, dtype=np.int64)
    choose_without_replacement(k0, k1, anchor, new_stream(), population, count, chosen, picks)
    for q in range(count):
        p = chosen[count - 1 - q]
        out[q] = p + 1 if own == 1 and p >= rank else p  # candidate p skips the seed itself
    return count


@kernel
def parent_examples(graph, tables, examples, seed_row, rank, cutoff, max_scan, out):
    """``EXAMPLES_PARENT``: positions in ``examples.anchors`` of the context examples of the
    seed at position ``rank`` (global row ``seed_row``) in ``out``; returns how many.

    First its siblings: for each foreign-key parent of the seed row in edge order, its
    visible children latest first (at most the last ``max_scan`` of them), each one a seed of
    the task observed at a visible time, other than the seed itself and not taken yet; then,
    while fewer than ``examples.limit``, the latest visible seeds not taken yet."""
    parent_offsets = graph.parent_offsets
    parent_ids = graph.parent_ids
    child_offsets = graph.child_offsets
    child_ids = graph.child_ids
    child_times = graph.child_times
    times = examples.times
    seed_rows = examples.seed_rows
    ranks = examples.ranks
    limit = examples.limit
    t = table_of(tables.offsets, seed_row)
    first_row = tables.offsets[t]
    end_row = tables.offsets[t + 1]
    taken = np.full(row_set_capacity(limit), -1, dtype=np.int64)
    count = 0
    for e in range(parent_offsets[seed_row], parent_offsets[seed_row + 1]):
        if count == limit:
            break
        parent = parent_ids[e]
        lo = child_offsets[parent]
        top = lo + visible_prefix(child_times, lo, child_offsets[parent + 1], cutoff)
        for c in range(top - 1, max(lo, top - max_scan) - 1, -1):
            child = child_ids[c]
            if child < first_row or child >= end_row:
                continue
            local = child - first_row
            i = np.searchsorted(seed_rows, local)
            if i == seed_rows.shape[0] or seed_rows[i] != local:
                continue
            position = ranks[i]
            when = times[position]
            if position == rank or (when != NO_TIME and when > cutoff):
                continue
            if row_set_insert(taken, position):
                out[count] = position
                count += 1
                if count == limit:
                    break
    at = visible_prefix(times, 0, times.shape[0], cutoff) - 1
    while count < limit and at >= 0:
        if at != rank and row_set_insert(taken, at):
            out[count] = at
            count += 1
        at -= 1
    return count


@kernel
def add_examples(graph, tables, walk, examples, b, cutoff, sequence_stream, example_stream,
                 visit, count, parents, used, scratch):
    """Append the context examples of sequence ``b`` (its first ``count`` visits in
    ``visit``, walked with ``cutoff``) to ``visit``; returns ``(count, parents, used)`` as
    ``temporal_bfs`` does, the parents of the appended rows compacted after the sequence's.

    ``sequence_stream`` gives the key of the walks (each example walks with its own anchor),
    ``example_stream`` the key and anchor of the random choice. ``scratch`` is a
    ``records.Visit`` of ``walk.max_rows`` rows for the examples' walks."""
    max_cells = walk.max_cells
    max_rows = walk.max_rows
    table_offsets = tables.offsets
    table_num_cells = tables.num_cells
    rows = visit.rows
    cells = 0
    for i in range(count):
        cells += table_num_cells[table_of(table_offsets, rows[i])]
    if cells >= max_cells or count >= max_rows:
        return count, parents, used
    chosen = np.empty(examples.limit, dtype=np.int64)
    picks = np.empty(examples.limit, dtype=np.uint64)
    e0, e1, own_anchor = example_stream
    rank = examples.ranks[examples.batch[b]]
    if examples.policy == EXAMPLES_PARENT:
        k = parent_examples(graph, tables, examples, rows[0], rank, cutoff, max_cells, chosen)
    else:
        k = choose_examples(examples, rank, cutoff, e0, e1, own_anchor, chosen, picks)
    if k == 0:
        return count, parents, used
    k0, k1, _ = sequence_stream
    keys = np.full(row_set_capacity(max_rows), -1, dtype=np.int64)
    index = np.empty(keys.shape[0], dtype=np.int64)
    for i in range(count):
        row_set_put(keys, index, rows[i], i)
    placed = np.empty(max_rows, dtype=np.int64)  # example visit -> sequence row
    for j in range(k):
        if cells >= max_cells or count >= max_rows:
            break
        left = k - j
        share_cells = (max_cells - cells + left - 1) // left
        share_rows = (max_rows - count + left - 1) // left
        anchor = examples.anchors[chosen[j]]
        # Rows already in the sequence (at most ``count`` of them, ``cells`` cells) are
        # skipped, so these limits always reach the share: the walk is a prefix of an
        # unlimited one, and stopping it there changes nothing before.
        limits = Walk(walk.child_width, cells + share_cells, count + share_rows,
                      walk.child_policy)
        n, parents, _ = temporal_bfs(graph, tables, limits, anchor + examples.row_offset,
                                       cutoff, Stream(k0, k1, anchor), scratch, parents, used)
        at = used  # the walk appended its parents from ``used``: kept ones move down
        added_cells = 0
        added_rows = 0
        for i in range(n):
            row = scratch.rows[i]
            found = row_set_find(keys, index, row)
            if found >= 0:
                placed[i] = found
                continue
            me = count
            row_set_put(keys, index, row, me)
            placed[i] = me
            source = scratch.source[i]
            rows[me] = row
            visit.depth[me] = scratch.depth[i]
            visit.source[me] = -1 if source < 0 else placed[source]
            visit.via[me] = VIA_EXAMPLE if source < 0 else scratch.via[i]
            visit.parent_start[me] = at
            for e in range(scratch.parent_start[i], scratch.parent_start[i + 1]):
                parents[at] = parents[e]
                at += 1
            count += 1
            row_cells = table_num_cells[table_of(table_offsets, row)]
            cells += row_cells
            added_cells += row_cells
            added_rows += 1
            if added_cells >= share_cells or added_rows >= share_rows:
                break
        visit.parent_start[count] = at
        used = at
    return count, parents, used


@kernel
def mark_examples(layout, own_counts, is_context_example):
    """``is_context_example = 1`` on the cells of every sequence's rows after its own walk's
    ``own_counts[b]`` rows."""
    for b in range(own_counts.shape[0]):
        for p in range(layout.row_first[b, own_counts[b]], layout.cell_counts[b]):
            is_context_example[b, p] = 1
