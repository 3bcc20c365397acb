"""Temporal BFS over the foreign-key CSR: which rows one sequence visits, in which order.

The semantics follow the public Relational Transformer sampler and are pinned in
``docs/batch_format.md``:

1. The seed row is visited first (depth 0).
2. A visited row pushes its visible foreign-key parents on a stack (last foreign key first, so
   they pop in foreign-key column order) and its visible children into the child level
   ``depth + 1``; more than ``child_width`` visible children are cut to ``child_width`` chosen
   uniformly without replacement (Floyd's algorithm), pushed in child-list order.
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

from dlkit.core.jit import kernel
from dlkit.core.memory import prefetch
from dlkit.core.philox import MASK32
from dlkit.core.streams import new_stream, uniform_below

NO_TIME = np.iinfo(np.int64).min
VIA_SEED = 0
VIA_PARENT = 1
VIA_CHILD = 2
HAS_PARENTS = 1
HAS_CHILDREN = 2
_EMPTY = -1


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
def row_set_contains(keys, row):
    """Whether ``row`` is in the open-addressing set ``keys``."""
    mask = keys.shape[0] - 1
    i = _slot(row) & mask
    while True:
        if keys[i] == _EMPTY:
            return False
        if keys[i] == row:
            return True
        i = (i + 1) & mask


@kernel
def _insert_of(keys, b, row):
    """``row_set_insert`` on the set ``keys[b]`` of a batch of sets (no view is made)."""
    mask = keys.shape[1] - 1
    i = _slot(row) & mask
    while True:
        if keys[b, i] == _EMPTY:
            keys[b, i] = row
            return True
        if keys[b, i] == row:
            return False
        i = (i + 1) & mask


@kernel
def _contains_of(keys, b, row):
    """``row_set_contains`` on the set ``keys[b]`` of a batch of sets."""
    mask = keys.shape[1] - 1
    i = _slot(row) & mask
    while True:
        if keys[b, i] == _EMPTY:
            return False
        if keys[b, i] == row:
            return True
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
    """How many of ``child_times[lo:hi]`` (ascending) are ``<= cutoff``: a binary search."""
    a = lo
    b = hi
    while a < b:
        mid = (a + b) >> 1
        if child_times[mid] <= cutoff:
            a = mid + 1
        else:
            b = mid
    return a - lo


@kernel
def choose_without_replacement(k0, k1, anchor, stream, population, count, out):
    """Floyd's algorithm: ``count`` distinct positions of ``[0, population)``, ascending.

    Writes them to ``out[:count]``. Draw order: for ``j`` from ``population - count`` to
    ``population - 1``, ``t = uniform(j + 1)``; take ``t`` unless already taken, else ``j``.
    """
    taken = 0
    for j in range(population - count, population):
        t = uniform_below(k0, k1, anchor, stream, j + 1)
        seen = False
        for q in range(taken):
            if out[q] == t:
                seen = True
                break
        out[taken] = j if seen else t
        taken += 1
    out[:count].sort()


@kernel
def _grow(buffer, at_least):
    bigger = np.empty((max(buffer.shape[0] * 2, at_least), buffer.shape[1]), dtype=buffer.dtype)
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


# --- the walk of a whole batch, in lockstep ---------------------------------------------------
#
# One visit reads memory in a chain: the row's CSR offsets, then its parent ids and child
# times, then the parents' times and offsets and the chosen children's ids. On a large
# database each link is a cache (and TLB) miss of several hundred nanoseconds. The sequences
# of a batch are independent, so ``bfs_batch`` walks them in lockstep: each sequence runs its
# visit in three stages, prefetches what its next stage reads and yields to the next sequence;
# by the time its turn comes back the lines have arrived. Every sequence makes exactly the
# draws and visits it makes alone (its own stream, its own state): only the interleaving of
# independent work changes, never a result.

# Columns of the per-sequence state array.
_STAGE = 0  # what the sequence does on its next turn (one of the stages below)
_ROW = 1  # the row being visited
_DEPTH = 2
_ME = 3  # its visit index
_PLO = 4  # its parent and child CSR ranges
_PHI = 5
_CLO = 6
_CHI = 7
_VISIBLE = 8  # how many of its children are visible
_TOP = 9  # parent stack height
_CELLS = 10
_SHALLOWEST = 11  # every child level above this one is empty
_STATE_COLUMNS = 12

# Stages of one visit; each prefetches what the next one reads.
_READ_LINKS = 0  # read the CSR offsets, fetch parent ids and child times
_SEARCH = 1  # find the visible children, choose some, fetch their ids and the parents' data
_EXPAND = 2  # push parents, queue children, pick and record the next row, fetch its offsets
_DONE = 3

_LINE = 8  # int64 values per 64-byte cache line
_SHORT_SPAN = 32 * _LINE  # child lists up to this long are prefetched whole for the search
_PROBE_NODES = 31  # longer ones: the first five levels of the binary search's probes
_MAX_PREFETCH_IDS = 64 * _LINE  # prefetch at most this many child ids of one visit


@kernel
def _prefetch_span(array, lo, hi):
    """Prefetch every cache line of ``array[lo:hi]``."""
    for i in range(lo, hi, _LINE):
        prefetch(array, i)
    if hi > lo:
        prefetch(array, hi - 1)


@kernel
def _prefetch_links(parent_offsets, child_offsets, table_offsets, table_links, row):
    """Prefetch the CSR offsets ``_links`` will read for ``row``; True when there are any."""
    links = table_links[table_of(table_offsets, row)]
    if links & HAS_PARENTS:
        prefetch(parent_offsets, row)
        prefetch(parent_offsets, row + 1)
    if links & HAS_CHILDREN:
        prefetch(child_offsets, row)
        prefetch(child_offsets, row + 1)
    return links != 0


@kernel
def _prefetch_search(child_times, lo, hi, probes):
    """Prefetch what ``visible_prefix`` reads of ``child_times[lo:hi]``: all of a short list,
    else the probes of its first levels (``probes`` is int64[2 * _PROBE_NODES + 2, 2] scratch
    holding the search ranges as a binary heap)."""
    if hi - lo <= _SHORT_SPAN:
        _prefetch_span(child_times, lo, hi)
        return
    probes[0, 0] = lo
    probes[0, 1] = hi
    for k in range(_PROBE_NODES):
        a = probes[k, 0]
        b = probes[k, 1]
        mid = (a + b) >> 1
        if a >= b:  # an empty range has empty halves
            mid = a - 1
            b = a
        else:
            prefetch(child_times, mid)
        probes[2 * k + 1, 0] = a
        probes[2 * k + 1, 1] = max(mid, a)
        probes[2 * k + 2, 0] = mid + 1
        probes[2 * k + 2, 1] = b


@kernel
def _grow_axis1(buffer, at_least):
    """``buffer`` with axis 1 at least ``at_least`` long (doubling; contents kept)."""
    shape = (buffer.shape[0], max(buffer.shape[1] * 2, at_least)) + buffer.shape[2:]
    bigger = np.empty(shape, dtype=buffer.dtype)
    bigger[:, : buffer.shape[1]] = buffer
    return bigger


@kernel
def _grow_axis2(buffer, at_least):
    """``buffer`` with axis 2 at least ``at_least`` long (doubling; contents kept)."""
    shape = buffer.shape[:2] + (max(buffer.shape[2] * 2, at_least),) + buffer.shape[3:]
    bigger = np.empty(shape, dtype=buffer.dtype)
    bigger[:, :, : buffer.shape[2]] = buffer
    return bigger


@kernel
def _record(state, b, row, depth, source, via, table_offsets, table_num_cells, max_cells,
            max_rows, out_rows, out_depth, out_source, out_via, out_counts):
    """Append the visit of ``row`` to sequence ``b``; True when the sequence is now full."""
    me = out_counts[b]
    out_rows[b, me] = row
    out_depth[b, me] = depth
    out_source[b, me] = source
    out_via[b, me] = via
    out_counts[b] = me + 1
    state[b, _ROW] = row
    state[b, _DEPTH] = depth
    state[b, _ME] = me
    state[b, _CELLS] += table_num_cells[table_of(table_offsets, row)]
    return state[b, _CELLS] >= max_cells or me + 1 >= max_rows


@kernel
def bfs_batch(parent_offsets, parent_ids, child_offsets, child_ids, child_times, row_times,
              table_offsets, table_num_cells, table_links, seed_rows, cutoffs, child_width,
              max_cells, max_rows, k0, k1, anchors, out_rows, out_depth, out_source, out_via,
              out_counts):
    """Walk the sequence of every seed ``seed_rows[b]`` (cut-off ``cutoffs[b]``, stream
    ``(k0, k1, anchors[b])``); fill ``out_*[b, :n]`` and ``out_counts[b] = n``.

    ``out_source[b, i]`` is the visit index of the row that discovered row ``i`` (-1 for the
    seed) and ``out_via[b, i]`` how (``VIA_PARENT``: row i is a parent of its source,
    ``VIA_CHILD``: a child). ``table_links[t]`` has bit ``HAS_PARENTS`` / ``HAS_CHILDREN`` when
    some row of table ``t`` has a parent / a child: rows of other tables read no offsets.
    """
    B = seed_rows.shape[0]
    visited = np.full((B, row_set_capacity(max_rows)), _EMPTY, dtype=np.int64)
    # Parent stack entries: (row, depth, source, parent_lo, parent_hi, child_lo, child_hi); a
    # parent's offsets are read when it is pushed (prefetched by the stage before).
    stack = np.empty((B, 16, 7), dtype=np.int64)
    # Child levels: levels[b, depth, k] = (row, source); level_sizes[b, depth] entries each.
    levels = np.empty((B, 4, 64, 2), dtype=np.int64)
    level_sizes = np.zeros((B, 4), dtype=np.int64)
    picked = np.empty((B, max(min(child_width, 64), 1)), dtype=np.int64)
    streams = np.zeros((B, 2), dtype=np.uint64)
    state = np.zeros((B, _STATE_COLUMNS), dtype=np.int64)
    probes = np.empty((2 * _PROBE_NODES + 2, 2), dtype=np.int64)
    active = np.empty(B, dtype=np.int64)
    num_active = 0
    for b in range(B):
        out_counts[b] = 0
        row = np.int64(seed_rows[b])
        _insert_of(visited, b, row)
        if _record(state, b, row, 0, -1, VIA_SEED, table_offsets, table_num_cells, max_cells,
                   max_rows, out_rows, out_depth, out_source, out_via, out_counts):
            continue
        state[b, _PLO] = -1  # offsets not read yet
        _prefetch_links(parent_offsets, child_offsets, table_offsets, table_links, row)
        active[num_active] = b
        num_active += 1
    while num_active > 0:
        i = 0
        while i < num_active:
            b = active[i]
            stage = state[b, _STAGE]
            cutoff = cutoffs[b]
            anchor = anchors[b]
            while True:  # run stages until one has prefetches in flight
                if stage == _READ_LINKS:
                    stage = _SEARCH
                    if state[b, _PLO] < 0:
                        lo_p, hi_p, lo_c, hi_c = _links(parent_offsets, child_offsets,
                                                        table_offsets, table_links,
                                                        state[b, _ROW])
                        state[b, _PLO] = lo_p
                        state[b, _PHI] = hi_p
                        state[b, _CLO] = lo_c
                        state[b, _CHI] = hi_c
                    issued = False
                    if state[b, _PHI] > state[b, _PLO]:
                        _prefetch_span(parent_ids, state[b, _PLO], state[b, _PHI])
                        issued = True
                    if state[b, _CHI] > state[b, _CLO]:
                        _prefetch_search(child_times, state[b, _CLO], state[b, _CHI], probes)
                        issued = True
                    if issued:
                        break
                if stage == _SEARCH:
                    # Choose the children to queue; Floyd's draws come before the next
                    # row's draw, as in a lone walk.
                    stage = _EXPAND
                    issued = False
                    for e in range(state[b, _PLO], state[b, _PHI]):
                        parent = parent_ids[e]
                        if not _contains_of(visited, b, parent):  # else skipped at pop
                            prefetch(row_times, parent)
                            _prefetch_links(parent_offsets, child_offsets, table_offsets,
                                            table_links, parent)
                            issued = True
                    lo = state[b, _CLO]
                    visible = 0
                    if state[b, _CHI] > lo:
                        visible = visible_prefix(child_times, lo, state[b, _CHI], cutoff)
                    state[b, _VISIBLE] = visible
                    if visible > child_width:
                        if picked.shape[1] < child_width:
                            picked = _grow_axis1(picked, child_width)
                        choose_without_replacement(k0, k1, anchor, streams[b], visible,
                                                   child_width, picked[b])
                        for q in range(min(child_width, _MAX_PREFETCH_IDS)):
                            prefetch(child_ids, lo + picked[b, q])
                        issued = True
                    elif visible > 0:
                        _prefetch_span(child_ids, lo, lo + min(visible, _MAX_PREFETCH_IDS))
                        issued = True
                    if issued:
                        break
                # _EXPAND: push the visible parents (last foreign key first, so they pop in
                # foreign-key order), queue the chosen children one level down, then take
                # the next unvisited row: the stack's top, else a uniform draw from the
                # shallowest non-empty level.
                depth = state[b, _DEPTH]
                me = state[b, _ME]
                top = state[b, _TOP]
                for e in range(state[b, _PHI] - 1, state[b, _PLO] - 1, -1):
                    parent = parent_ids[e]
                    t = row_times[parent]
                    if t != NO_TIME and t > cutoff:
                        continue
                    if top == stack.shape[1]:
                        stack = _grow_axis1(stack, top + 1)
                    lo_p, hi_p, lo_c, hi_c = _links(parent_offsets, child_offsets,
                                                    table_offsets, table_links, parent)
                    stack[b, top, 0] = parent
                    stack[b, top, 1] = depth + 1
                    stack[b, top, 2] = me
                    stack[b, top, 3] = lo_p
                    stack[b, top, 4] = hi_p
                    stack[b, top, 5] = lo_c
                    stack[b, top, 6] = hi_c
                    top += 1
                visible = state[b, _VISIBLE]
                if visible > 0:
                    child_level = depth + 1
                    if child_level >= levels.shape[1]:
                        levels = _grow_axis1(levels, child_level + 1)
                        sizes = np.zeros((B, levels.shape[1]), dtype=np.int64)
                        sizes[:, : level_sizes.shape[1]] = level_sizes
                        level_sizes = sizes
                    take = visible if visible <= child_width else child_width
                    size = level_sizes[b, child_level]
                    if size + take > levels.shape[2]:
                        levels = _grow_axis2(levels, size + take)
                    lo = state[b, _CLO]
                    for q in range(take):
                        e = lo + (q if visible <= child_width else picked[b, q])
                        levels[b, child_level, size + q, 0] = child_ids[e]
                        levels[b, child_level, size + q, 1] = me
                    level_sizes[b, child_level] = size + take
                full = False
                done = False
                while True:
                    if top > 0:
                        top -= 1
                        row = stack[b, top, 0]
                        if not _insert_of(visited, b, row):
                            continue
                        state[b, _PLO] = stack[b, top, 3]
                        state[b, _PHI] = stack[b, top, 4]
                        state[b, _CLO] = stack[b, top, 5]
                        state[b, _CHI] = stack[b, top, 6]
                        full = _record(state, b, row, stack[b, top, 1], stack[b, top, 2],
                                       VIA_PARENT, table_offsets, table_num_cells, max_cells,
                                       max_rows, out_rows, out_depth, out_source, out_via,
                                       out_counts)
                        break
                    # Pushes only ever go below the level last drawn from, so the search
                    # for the shallowest non-empty level resumes there.
                    level = -1
                    for d in range(state[b, _SHALLOWEST], level_sizes.shape[1]):
                        if level_sizes[b, d] > 0:
                            level = d
                            break
                    if level < 0:
                        done = True
                        break
                    state[b, _SHALLOWEST] = level
                    size = level_sizes[b, level]
                    r = uniform_below(k0, k1, anchor, streams[b], size)
                    row = levels[b, level, r, 0]
                    source = levels[b, level, r, 1]
                    levels[b, level, r, 0] = levels[b, level, size - 1, 0]
                    levels[b, level, r, 1] = levels[b, level, size - 1, 1]
                    level_sizes[b, level] = size - 1
                    if not _insert_of(visited, b, row):
                        continue
                    state[b, _PLO] = -1  # offsets unknown: fetch them first
                    _prefetch_links(parent_offsets, child_offsets, table_offsets, table_links,
                                    row)
                    full = _record(state, b, row, level, source, VIA_CHILD, table_offsets,
                                   table_num_cells, max_cells, max_rows, out_rows, out_depth,
                                   out_source, out_via, out_counts)
                    break
                state[b, _TOP] = top
                if done or full:
                    stage = _DONE
                    break
                stage = _READ_LINKS
                if state[b, _PLO] < 0:
                    break  # the next row's offsets are on their way
            state[b, _STAGE] = stage
            if stage == _DONE:
                num_active -= 1
                active[i] = active[num_active]
            else:
                i += 1


@kernel
def temporal_bfs(parent_offsets, parent_ids, child_offsets, child_ids, child_times, row_times,
                 table_offsets, table_num_cells, table_links, seed_row, cutoff, child_width,
                 max_cells, max_rows, k0, k1, anchor, out_rows, out_depth, out_source, out_via):
    """Visit rows from ``seed_row``; fill ``out_*[:n]`` and return ``n``: ``bfs_batch`` of
    one sequence (the same walk, without a batch to overlap with)."""
    counts = np.zeros(1, dtype=np.int64)
    bfs_batch(parent_offsets, parent_ids, child_offsets, child_ids, child_times, row_times,
              table_offsets, table_num_cells, table_links,
              np.full(1, seed_row, dtype=np.int64), np.full(1, cutoff, dtype=np.int64),
              child_width, max_cells, max_rows, k0, k1, np.full(1, anchor, dtype=np.int64),
              out_rows.reshape((1, out_rows.shape[0])), out_depth.reshape((1, out_depth.shape[0])),
              out_source.reshape((1, out_source.shape[0])),
              out_via.reshape((1, out_via.shape[0])), counts)
    return counts[0]
