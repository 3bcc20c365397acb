"""Temporal BFS over the foreign-key CSR: which rows one sequence visits, in which order.

The semantics follow the public Relational Transformer sampler and are pinned in
``docs/batch_format.md``:

1. The seed row is visited first (depth 0).
2. A visited row pushes its visible foreign-key parents on a stack (last foreign key first, so
   they pop in foreign-key column order) and its visible children into the child level
   ``depth + 1``; more than ``child_width`` visible children are cut to ``child_width`` by the
   walk's child policy, pushed in child-list order: ``CHILD_UNIFORM`` chooses them uniformly
   without replacement (Floyd's algorithm), ``CHILD_RECENT`` takes the latest ``child_width``
   (no draw), ``CHILD_QUOTA`` gives every child table its share of the width
   (``quota_of``) and chooses uniformly within each table.
3. The next row is the top of the parent stack; when the stack is empty, a uniform draw from
   the shallowest non-empty child level (swap-remove). A row already visited is skipped.
4. Stop when the visited rows hold ``max_cells`` cells (the last row may be cut by the
   linearisation) or ``max_rows`` rows, or when nothing is pending.

Visible means ``time == NO_TIME`` or ``time <= cutoff``: the visible children of a row are the
prefix of its time-ordered child list found by binary search. The caller passes
``cutoff = INT64_MAX`` for seeds without observation time. The seed row itself is always
visited (the database makes a seed's observation time its own row time).

Inputs are trusted: the database reader has validated offsets and ids, and the sampler has
validated the scalars.
"""

from __future__ import annotations

import numpy as np

from dlkit.core.codes import NO_TIME
from dlkit.core.jit import kernel
from dlkit.core.memory import prefetch
from dlkit.core.philox import MASK32
from dlkit.core.streams import UINT64_MAX, new_stream, next_draw, uniform_below

VIA_SEED = 0
VIA_PARENT = 1
VIA_CHILD = 2
VIA_EXAMPLE = 3  # the seed row of a context example (dlkit.core.examples)
HAS_PARENTS = 1
HAS_CHILDREN = 2
_EMPTY = -1
CHILD_UNIFORM = 0
CHILD_RECENT = 1
CHILD_QUOTA = 2
_RANK_SORT_MAX = 32  # Floyd's picks up to this many are placed by rank
_LEVEL_START = 512  # initial entries of a child level


@kernel
def row_set_capacity(max_rows):
    """A power of two at least twice ``max_rows`` (open addressing stays under half full)."""
    capacity = 16
    while capacity < 2 * max_rows:
        capacity *= 2
    return capacity


@kernel
def _slot(row):
    """Multiplicative hash of a row id (32-bit product: no overflow, also without the JIT)."""
    r = np.uint64(row)
    h = ((r & MASK32) * np.uint64(0x9E3779B1)) & MASK32
    return np.int64((h ^ (r >> np.uint64(32))) >> np.uint64(15))


@kernel
def row_set_insert(keys, row):
    """Insert ``row`` into the open-addressing set ``keys``; False when it was already there."""
    mask = keys.shape[0] - 1
    i = _slot(row) & mask
    while True:
        if keys[i] == _EMPTY:
            keys[i] = row
            return True
        if keys[i] == row:
            return False
        i = (i + 1) & mask


@kernel
def row_set_find(keys, values, row):
    """The value stored with ``row`` in a set built by ``row_set_put``, or -1."""
    mask = keys.shape[0] - 1
    i = _slot(row) & mask
    while True:
        if keys[i] == _EMPTY:
            return -1
        if keys[i] == row:
            return values[i]
        i = (i + 1) & mask


@kernel
def row_set_put(keys, values, row, value):
    """Map ``row`` to ``value`` unless ``row`` is present already."""
    mask = keys.shape[0] - 1
    i = _slot(row) & mask
    while True:
        if keys[i] == _EMPTY:
            keys[i] = row
            values[i] = value
            return
        if keys[i] == row:
            return
        i = (i + 1) & mask


@kernel
def table_of(table_offsets, row):
    """The table of a global row: a binary search of the (cached, tiny) table offsets, which
    saves a cache miss on ``row_table`` per visited row."""
    a = 0
    b = table_offsets.shape[0] - 1
    while b - a > 1:
        mid = (a + b) >> 1
        if table_offsets[mid] <= row:
            a = mid
        else:
            b = mid
    return a


@kernel
def visible_prefix(child_times, lo, hi, cutoff):
    """How many of ``child_times[lo:hi]`` (ascending) are ``<= cutoff``: a binary search.

    The two ends are read first (their misses overlap): often every child is visible or none
    is, and then the search, a chain of dependent misses on a long list, is skipped.
    """
    if hi == lo:
        return 0
    if child_times[hi - 1] <= cutoff:
        return hi - lo
    if child_times[lo] > cutoff:
        return 0
    # child_times[base] <= cutoff throughout; each step halves the span with a conditional
    # move instead of a branch (the list is in cache by now: mispredictions would dominate).
    base = lo
    span = hi - lo
    while span > 1:
        half = span >> 1
        base = base + half if child_times[base + half] <= cutoff else base
        span -= half
    return base + 1 - lo


@kernel
def _is_among(values, count, value):
    """Whether ``value`` is one of ``values[:count]`` (every entry compared, no early exit: a
    short branch-free loop the compiler vectorises)."""
    found = False
    for q in range(count):
        found |= values[q] == value
    return found


_TIME_LIST_PREFETCH_MAX = 256  # child lists up to this long are fetched whole ahead of a search


@kernel
def prefetch_child_times(child_times, lo, hi):
    """Start reading the time-sorted child list ``child_times[lo:hi]`` that a visit will
    search: a short list whole (its lines arrive together, where the binary search would wait
    for one line after another), a long one at both ends (often enough to settle the search)."""
    if hi <= lo:
        return
    if hi - lo <= _TIME_LIST_PREFETCH_MAX:
        for i in range(lo, hi, 8):  # 8 int64 per 64-byte line
            prefetch(child_times, i)
    else:
        prefetch(child_times, lo)
    prefetch(child_times, hi - 1)


@kernel
def choose_without_replacement(k0, k1, anchor, stream, population, count, out, picks):
    """Floyd's algorithm: ``count`` distinct positions of ``[0, population)``, ascending.

    Writes them to ``out[:count]``; ``picks`` is uint64 scratch of ``count`` entries. Draw
    order: for ``j`` from ``population - count`` to ``population - 1``, ``t = uniform(j + 1)``;
    take ``t`` unless already taken, else ``j``.

    The ``count`` draws are taken from the stream first (their Philox blocks are independent,
    so they overlap), then reduced. A draw in the top ``n`` values of the 64-bit range might
    be rejected by ``uniform_below`` (probability below ``2^-32`` for any child count): the
    stream is then rewound to it and the rest is drawn one at a time, so the picks and the
    stream's end state are exactly those of ``uniform_below`` called ``count`` times.
    """
    start = stream[0]
    for q in range(count):
        picks[q] = next_draw(k0, k1, anchor, stream)
    first = population - count
    for q in range(count):
        n = np.uint64(first + q + 1)
        x = picks[q]
        if x > UINT64_MAX - n:
            stream[0] = start + np.uint64(q)
            stream[1] = x  # draw ``start + q`` when it is the odd half of its block
            for rest in range(q, count):
                t = np.uint64(uniform_below(k0, k1, anchor, stream, first + rest + 1))
                picks[rest] = np.uint64(first + rest) if _is_among(picks, rest, t) else t
            break
        t = x % n
        picks[q] = np.uint64(first + q) if _is_among(picks, q, t) else t
    if count <= _RANK_SORT_MAX:
        # Distinct values: each one's rank is how many are smaller (branch-free counting, where
        # a comparison sort of a few random values mispredicts a branch per step).
        for q in range(count):
            value = picks[q]
            rank = 0
            for r in range(count):
                rank += 1 if picks[r] < value else 0
            out[rank] = np.int64(value)
    else:
        for q in range(count):
            out[q] = np.int64(picks[q])
        out[:count].sort()


@kernel
def quota_of(counts, width, quotas):
    """Each table's share of ``width`` children when table ``t`` has ``counts[t]`` of them
    (written to ``quotas``; ``sum(counts) > width`` assumed).

    Water-filling: with ``left`` tables still open and ``remaining`` places, a table whose
    count is at most ``remaining // left`` takes all its children and passes the rest of
    its share on; repeated until no open table fits. Each still open table then gets
    ``remaining // left``, and the first ``remaining % left`` of them in table order one more.
    """
    remaining = width
    left = 0
    for t in range(counts.shape[0]):
        quotas[t] = -1 if counts[t] > 0 else 0
        left += 1 if counts[t] > 0 else 0
    settled = True
    while settled and left > 0:
        settled = False
        share = remaining // left
        for t in range(counts.shape[0]):
            if quotas[t] < 0 and counts[t] <= share:
                quotas[t] = counts[t]
                remaining -= counts[t]
                left -= 1
                settled = True
    if left > 0:
        share = remaining // left
        extra = remaining - share * left
        for t in range(counts.shape[0]):
            if quotas[t] < 0:
                quotas[t] = share + (1 if extra > 0 else 0)
                extra -= 1 if extra > 0 else 0


@kernel
def choose_by_quota(k0, k1, anchor, stream, child_tables, visible, width, out, picks):
    """Positions of ``width`` of the ``visible`` children whose tables are
    ``child_tables[:visible]``, ascending in ``out[:width]``: each table's ``quota_of``
    share, chosen by Floyd's algorithm among that table's children (tables in order; a table
    taking all its children draws nothing). ``picks`` is uint64 scratch of ``width``."""
    num_tables = 0
    for q in range(visible):
        num_tables = max(num_tables, child_tables[q] + 1)
    counts = np.zeros(num_tables, dtype=np.int64)
    for q in range(visible):
        counts[child_tables[q]] += 1
    quotas = np.empty(num_tables, dtype=np.int64)
    quota_of(counts, width, quotas)
    taken = np.zeros(visible, dtype=np.bool_)
    ranks = np.empty(max(width, 1), dtype=np.int64)
    for t in range(num_tables):
        if quotas[t] == 0:
            continue
        full = quotas[t] == counts[t]
        if not full:
            choose_without_replacement(k0, k1, anchor, stream, counts[t], quotas[t], ranks,
                                       picks)
        rank = 0
        at = 0
        for q in range(visible):
            if child_tables[q] != t:
                continue
            if full or (at < quotas[t] and ranks[at] == rank):
                taken[q] = True
                at += 1
            rank += 1
    n = 0
    for q in range(visible):
        if taken[q]:
            out[n] = q
            n += 1


@kernel
def _grow(buffer, at_least):
    """A copy of ``buffer`` with room for at least ``at_least`` entries along axis 0."""
    bigger = np.empty((max(buffer.shape[0] * 2, at_least),) + buffer.shape[1:],
                      dtype=buffer.dtype)
    bigger[: buffer.shape[0]] = buffer
    return bigger


@kernel
def _links(parent_offsets, child_offsets, table_offsets, table_links, row):
    """``(parent_lo, parent_hi, child_lo, child_hi)`` of ``row``'s CSR ranges (empty without
    reading memory when its table has no parent or no child edge at all)."""
    links = table_links[table_of(table_offsets, row)]
    parent_lo = parent_hi = child_lo = child_hi = 0
    if links & HAS_PARENTS:
        parent_lo = parent_offsets[row]
        parent_hi = parent_offsets[row + 1]
    if links & HAS_CHILDREN:
        child_lo = child_offsets[row]
        child_hi = child_offsets[row + 1]
    return parent_lo, parent_hi, child_lo, child_hi


@kernel
def table_links_of(parent_offsets, child_offsets, table_offsets):
    """Per table: ``HAS_PARENTS`` if any of its rows has a parent, ``HAS_CHILDREN`` if any has
    a child (from the CSR itself, so it can never disagree with it)."""
    out = np.zeros(table_offsets.shape[0] - 1, dtype=np.int8)
    for t in range(out.shape[0]):
        a, b = table_offsets[t], table_offsets[t + 1]
        if parent_offsets[b] > parent_offsets[a]:
            out[t] |= HAS_PARENTS
        if child_offsets[b] > child_offsets[a]:
            out[t] |= HAS_CHILDREN
    return out


RECORD_WIDTH = 4  # int64 fields of an edge record: 32 bytes, never split across cache lines
_COUNT_SHIFT = np.int64(32)
_COUNT_MASK = np.int64(0xFFFFFFFF)


@kernel
def parent_edge_records(parent_ids, row_times, parent_offsets, child_offsets, out):
    """Per child -> parent edge ``e``: ``(parent, parent time, parent's child edges lo, child
    count << 32 | parent count)``.

    What a parent push reads about the parent, in one line next to the edge itself instead of
    reads that must wait for the parent's id (``out`` is int64[E, 4]; callers use it only for
    graphs of fewer than 2^31 edges each way, so every count fits 32 bits). The parent's own
    parent range starts at ``parent_offsets[parent]``, read only when the count is not 0.
    """
    for e in range(parent_ids.shape[0]):
        parent = parent_ids[e]
        child_lo = child_offsets[parent]
        out[e, 0] = parent
        out[e, 1] = row_times[parent]
        out[e, 2] = child_lo
        out[e, 3] = ((child_offsets[parent + 1] - child_lo) << _COUNT_SHIFT) | (
            parent_offsets[parent + 1] - parent_offsets[parent])


@kernel
def child_edge_records(child_ids, parent_offsets, child_offsets, out):
    """Per parent -> child edge ``e``: ``(child, child's parent edges lo, child's child edges
    lo, parent count << 32 | child count)``: a drawn child's CSR ranges with its id (``out``
    is int64[E, 4]; callers use it only for graphs of fewer than 2^31 edges each way, so
    every count fits 32 bits)."""
    for e in range(child_ids.shape[0]):
        child = child_ids[e]
        parent_lo = parent_offsets[child]
        child_lo = child_offsets[child]
        out[e, 0] = child
        out[e, 1] = parent_lo
        out[e, 2] = child_lo
        out[e, 3] = ((parent_offsets[child + 1] - parent_lo) << _COUNT_SHIFT) | (
            child_offsets[child + 1] - child_lo)


@kernel
def temporal_bfs(graph, tables, walk, seed_row, cutoff, sequence_stream, visit, parents, used):
    """Visit rows of ``graph`` (a ``records.Graph``) from ``seed_row``, seeing rows up to
    ``cutoff``, within the limits of ``walk`` (a ``records.Walk``); fill ``visit`` (a
    ``records.Visit``) and return ``(n, parents, used)``: ``visit.*[:n]`` hold the walk.

    ``visit.source[i]`` is the visit index of the row that discovered row ``i`` (-1 for the
    seed) and ``visit.via[i]`` how (``VIA_PARENT``: row i is a parent of its source,
    ``VIA_CHILD``: a child). The ids of row ``i``'s foreign-key parents, in edge order, are
    appended to ``parents`` (from position ``used``; a full buffer is replaced by a larger
    copy, which is returned with the new fill) at ``visit.parent_start[i]:
    visit.parent_start[i + 1]`` (``parent_start`` has ``max_rows + 1`` entries): the walk
    reads them anyway, and the structure pass would find them evicted from the cache.
    Randomness is ``sequence_stream`` (a ``records.Stream``).
    ``tables`` (a ``records.Tables``) gives each row's table, its cell count and its
    ``links``: rows of tables without parents / children skip reading those offsets (a cache
    miss each). ``graph.parent_records`` / ``child_records`` are the edge records of
    ``parent_edge_records`` / ``child_edge_records``, or empty (int64[0, 4]) to read the CSR
    alone: the walk is the same.
    """
    # Every field the loop reads, bound once: a field read in the loop would update the
    # array's reference count each time.
    parent_offsets = graph.parent_offsets
    parent_ids = graph.parent_ids
    child_offsets = graph.child_offsets
    child_ids = graph.child_ids
    child_times = graph.child_times
    row_times = graph.row_times
    parent_records = graph.parent_records
    child_records = graph.child_records
    table_offsets = tables.offsets
    table_num_cells = tables.num_cells
    table_links = tables.links
    out_rows, out_depth, out_source, out_via, out_parent_start = visit
    child_width = walk.child_width
    child_policy = walk.child_policy
    max_cells = walk.max_cells
    max_rows = walk.max_rows
    k0, k1, anchor = sequence_stream
    records = parent_records.shape[0] > 0 or child_records.shape[0] > 0
    parent_record_words = parent_records.reshape(-1)  # 1-D, for prefetch
    visited = np.full(row_set_capacity(max_rows), _EMPTY, dtype=np.int64)
    # (row, depth, source, parent_lo, parent_hi, child_lo, child_hi): a parent's CSR offsets
    # are read when it is pushed, so the cache misses of all of a row's parents overlap.
    stack = np.empty((16, 7), dtype=np.int64)
    top = 0
    # Per depth: (child edge, source). An entry keeps the edge, not the child's id: most queued
    # children are never drawn, so the id (a cache miss) is read only for those that are.
    # Every visit of a row with many children queues child_width of them, so a level soon
    # holds thousands: it starts large rather than doubling from 16.
    levels = [np.empty((_LEVEL_START, 2), dtype=np.int64)]
    level_sizes = [0]
    picked = np.empty(max(child_width, 1), dtype=np.int64)
    picks = np.empty(max(child_width, 1), dtype=np.uint64)
    shallowest = 0
    stream = new_stream()
    count = 0
    cells = 0
    row = np.int64(seed_row)
    parent_lo, parent_hi, child_lo, child_hi = _links(parent_offsets, child_offsets,
                                                      table_offsets, table_links, row)
    depth = 0
    source = -1
    via = VIA_SEED
    have_next = True
    while True:
        if not have_next:
            if top > 0:
                top -= 1
                row = stack[top, 0]
                depth = stack[top, 1]
                source = stack[top, 2]
                parent_lo = stack[top, 3]
                parent_hi = stack[top, 4]
                child_lo = stack[top, 5]
                child_hi = stack[top, 6]
                via = VIA_PARENT
            else:
                # Pushes only ever go below the level last drawn from, so the search for the
                # shallowest non-empty level resumes there.
                level = -1
                for d in range(shallowest, len(level_sizes)):
                    if level_sizes[d] > 0:
                        level = d
                        break
                if level < 0:
                    break
                shallowest = level
                size = level_sizes[level]
                r = uniform_below(k0, k1, anchor, stream, size)
                entries = levels[level]
                edge = entries[r, 0]
                source = entries[r, 1]
                entries[r, 0] = entries[size - 1, 0]
                entries[r, 1] = entries[size - 1, 1]
                level_sizes[level] = size - 1
                depth = level
                via = VIA_CHILD
                if records:
                    row = child_records[edge, 0]
                    parent_lo = child_records[edge, 1]
                    child_lo = child_records[edge, 2]
                    counts = child_records[edge, 3]
                    parent_hi = parent_lo + (counts >> _COUNT_SHIFT)
                    child_hi = child_lo + (counts & _COUNT_MASK)
                    # Both reads the visit starts with, issued together.
                    if parent_hi > parent_lo:
                        prefetch(parent_record_words, parent_lo * RECORD_WIDTH)
                else:
                    row = child_ids[edge]
                    parent_lo, parent_hi, child_lo, child_hi = _links(
                        parent_offsets, child_offsets, table_offsets, table_links, row)
                prefetch_child_times(child_times, child_lo, child_hi)
        have_next = False
        if not row_set_insert(visited, row):
            continue
        out_rows[count] = row
        out_depth[count] = depth
        out_source[count] = source
        out_via[count] = via
        me = count
        count += 1
        cells += table_num_cells[table_of(table_offsets, row)]
        last = cells >= max_cells or count >= max_rows
        if used + parent_hi - parent_lo > parents.shape[0]:
            parents = _grow(parents, used + parent_hi - parent_lo)
        out_parent_start[me] = used
        first_parent = used
        used += parent_hi - parent_lo
        lo = child_lo
        hi = child_hi
        for e in range(parent_hi - 1, parent_lo - 1, -1):
            if records:
                parent = parent_records[e, 0]
            else:
                parent = parent_ids[e]
            parents[first_parent + e - parent_lo] = parent
            if last:
                continue
            t = parent_records[e, 1] if records else row_times[parent]
            if t != NO_TIME and t > cutoff:
                continue
            if top == stack.shape[0]:
                stack = _grow(stack, top + 1)
            stack[top, 0] = parent
            stack[top, 1] = depth + 1
            stack[top, 2] = me
            if records:
                counts = parent_records[e, 3]
                below_lo = parent_records[e, 2]
                below_hi = below_lo + (counts >> _COUNT_SHIFT)
                above_lo = np.int64(0)
                above_hi = np.int64(0)
                if counts & _COUNT_MASK:
                    above_lo = parent_offsets[parent]
                    above_hi = above_lo + (counts & _COUNT_MASK)
            else:
                above_lo, above_hi, below_lo, below_hi = _links(
                    parent_offsets, child_offsets, table_offsets, table_links, parent)
            stack[top, 3] = above_lo
            stack[top, 4] = above_hi
            stack[top, 5] = below_lo
            stack[top, 6] = below_hi
            top += 1
            # A pushed parent is visited soon: start the reads its visit begins with now, so
            # they overlap with the other parents' instead of queueing behind them.
            if above_hi > above_lo:
                if records:
                    prefetch(parent_record_words, above_lo * RECORD_WIDTH)
                else:
                    prefetch(parent_ids, above_lo)
            prefetch_child_times(child_times, below_lo, below_hi)
        if last:
            break
        visible = visible_prefix(child_times, lo, hi, cutoff)
        if visible == 0:
            continue
        child_level = depth + 1
        while len(level_sizes) <= child_level:
            levels.append(np.empty((_LEVEL_START, 2), dtype=np.int64))
            level_sizes.append(0)
        take = visible if visible <= child_width else child_width
        if visible > child_width:
            if child_policy == CHILD_RECENT:
                for q in range(child_width):
                    picked[q] = visible - child_width + q
            elif child_policy == CHILD_QUOTA:
                child_tables = np.empty(visible, dtype=np.int64)
                for q in range(visible):
                    child = child_records[lo + q, 0] if records else child_ids[lo + q]
                    child_tables[q] = table_of(table_offsets, child)
                choose_by_quota(k0, k1, anchor, stream, child_tables, visible, child_width,
                                picked, picks)
            else:
                choose_without_replacement(k0, k1, anchor, stream, visible, child_width,
                                           picked, picks)
        # Bind the level once: every list item access costs a reference count update.
        size = level_sizes[child_level]
        entries = levels[child_level]
        if size + take > entries.shape[0]:
            entries = _grow(entries, size + take)
            levels[child_level] = entries
        for q in range(take):
            e = lo + (q if visible <= child_width else picked[q])
            entries[size + q, 0] = e
            entries[size + q, 1] = me
        level_sizes[child_level] = size + take
    out_parent_start[count] = used
    return count, parents, used
