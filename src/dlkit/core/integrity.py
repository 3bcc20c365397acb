"""Content checks of ``dlkit verify``: single passes over a database's arrays.

Each kernel returns the first position that breaks its rule (or -1), so the caller can name
it; none allocates more than a hash table, and all run without the GIL.

- :func:`first_bad_utf8`: strings ``data[offsets[i]:offsets[i+1]]`` that are not UTF-8 on
  their own (Python's strict decoder: no overlong forms, no surrogates, nothing above
  U+10FFFF, no sequence cut at the string's end).
- :func:`first_duplicate_string`: two equal strings (a hash table of row numbers over the
  strings' :func:`dlkit.core.keys.hash_strings` hashes; a hit is confirmed byte by byte).
- :func:`strictly_ascending`: values that ascend strictly, so are distinct (keys exported in
  order need no hash table to be proven unique).
- :func:`first_all_bits`: a word with every bit of a mask set; on the bits of IEEE floats
  with the exponent mask, the first NaN or infinity (float16 has no numba type, its bits do).
- :func:`first_parent_misorder`: a row whose parents are not in its foreign keys' order and
  tables (id ranges); counts the edges of each foreign key on the way.
- :func:`null_cells`, :func:`first_time_mismatch`, :func:`first_table_mismatch`,
  :func:`task_agreement`: a column's bitmap and values, a table's row times, ``row_table``
  and a task's arrays, each in one pass without a temporary array.
- :func:`edges_agree` (:func:`parent_side_sums`, :func:`child_side_sums`): the edge screen.

**The edge screen.** ``graph.bin`` stores each edge twice: in the parent lists (row ``v``'s
edge to ``parent_ids[e]``) and in the child lists (parent ``p``'s edge to ``child_ids[i]``,
with ``child_times[i]``). Compare the multisets of triples ``(parent, child, time)`` of both
sides, where the parent side takes each child's row time ``row_times[v]``. They are equal
exactly when the child lists are the transpose of the parent lists, edge for edge with
multiplicity (the ``graph.transpose`` check), and every ``child_times[i]`` is the row time of
``child_ids[i]`` (``graph.child_times``): each parent-side triple carries its child's row
time, and equal multisets carry it to every child-side triple. Equal in-degrees
(``diff(child_offsets)`` against the counts of ``parent_ids``) follow too.

The screen compares two hash sums instead of the multisets: ``H_j = sum of F_j(p, c, t) mod
2^64`` for ``j = 1, 2``, with ``F_j(p, c, t) = mix(P_j(p) ^ C_j(c, t))``, ``P_j(p) = mix(p ^
a_j)``, ``C_j(c, t) = mix(mix(c ^ b_j) ^ t)``, ``mix`` the splitmix64 finaliser (a bijection
of 64-bit words) and the keys ``a_j, b_j`` drawn at random by the caller for each run. Each
side is one sequential pass (two ``mix`` per row, three per edge), split at any row
boundary: sums do not depend on the order.

- *Honest data* always passes: equal multisets give equal sums, whatever the order.
- *Random corruption* changes the multiset (else today's checks pass too). Treating ``mix``
  under random keys as a random function, one sum misses the change only when a differing
  triple's input to the outer ``mix`` collides with another's, or the differing words cancel;
  over the keys that has a chance of at most about ``(m + 2E) / 2^64`` (``m`` differing
  triples, ``E`` edges; a multiplicity difference ``d`` raises the cancelling chance by at
  most ``d <= 2E``). The two sums use independent keys, so both miss with at most the square:
  below ``2^-62`` for any graph with int32 offsets (``E < 2^31``), about ``2^-76`` for ten
  million rows. The exact checks are no stronger in practice.
- *Crafted corruption*: someone who rewrites files and re-hashes ``manifest.json`` (the
  SHA-256 checks, the primary guard, then pass) and aims at this check. Against a fixed,
  public hash they could search for a colliding multiset (sums of public 64-bit words yield
  to generalised-birthday and lattice searches); the keys are drawn when verify runs, after
  the files were written, and are never stored, so there is nothing to aim at short of
  reading the verifying process's memory.

When the sums differ, the caller runs the exact checks (``check_child_times``, a random
access per edge, and ``transpose_matches``, a scatter into ``O(E)`` scratch) to name the
failure as before; on an intact database they never run.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from dlkit.core.csr import THREADED_MIN_EDGES, side_by_side
from dlkit.core.jit import kernel
from dlkit.core.keys import bytes_equal, mix64

# Exponent bits of IEEE binary16 and binary64: all set means NaN or infinity.
F16_EXPONENT = np.uint16(0x7C00)
F64_EXPONENT = np.uint64(0x7FF0000000000000)


@kernel
def _utf8_ok(data, a, b):
    """Whether ``data[a:b]`` is valid UTF-8 (RFC 3629, as Python decodes it)."""
    i = a
    while i < b:
        c = data[i]
        if c < 0x80:
            i += 1
            continue
        lo = 0x80
        hi = 0xBF
        if 0xC2 <= c <= 0xDF:
            need = 1
        elif 0xE0 <= c <= 0xEF:
            need = 2
            if c == 0xE0:
                lo = 0xA0  # shorter forms are overlong
            elif c == 0xED:
                hi = 0x9F  # U+D800..U+DFFF are surrogates
        elif 0xF0 <= c <= 0xF4:
            need = 3
            if c == 0xF0:
                lo = 0x90  # overlong
            elif c == 0xF4:
                hi = 0x8F  # above U+10FFFF
        else:
            return False  # a continuation byte, 0xC0/0xC1 (overlong) or 0xF5..0xFF
        if i + need >= b:
            return False
        c1 = data[i + 1]
        if c1 < lo or c1 > hi:
            return False
        for k in range(2, need + 1):
            if data[i + k] & 0xC0 != 0x80:
                return False
        i += need + 1
    return True


@kernel
def first_bad_utf8(data, offsets):
    """First string ``i`` (``data[offsets[i]:offsets[i+1]]``) that is not valid UTF-8 on its
    own, or -1. Offsets must already be checked monotone within ``data``."""
    for i in range(offsets.shape[0] - 1):
        if not _utf8_ok(data, offsets[i], offsets[i + 1]):
            return i
    return -1


@kernel
def first_duplicate_string(data, offsets, hashes, slots):
    """``(i, j)``: string ``i`` equals the earlier string ``j``; ``(-1, -1)`` when all are
    distinct. ``hashes[i]`` is string ``i``'s hash, ``slots`` a power-of-two number (> the
    number of strings) of -1s (the caller allocates it: int32 or int64)."""
    mask = slots.shape[0] - 1
    for i in range(hashes.shape[0]):
        h = hashes[i]
        a = offsets[i]
        b = offsets[i + 1]
        s = np.int64(np.uint64(h) & np.uint64(mask))
        while slots[s] >= 0:
            j = slots[s]
            if hashes[j] == h and bytes_equal(data, offsets[j], offsets[j + 1], data, a, b):
                return i, np.int64(j)
            s = (s + 1) & mask
        slots[s] = i
    return -1, -1


@kernel
def first_all_bits(words, mask):
    """First index whose word has every bit of ``mask`` set, or -1."""
    for i in range(words.shape[0]):
        if words[i] & mask == mask:
            return i
    return -1


@kernel
def strictly_ascending(values):
    """Whether every value is greater than the one before (so all are distinct): one pass
    without branches."""
    descending = False
    for i in range(1, values.shape[0]):
        descending |= values[i] <= values[i - 1]
    return not descending


@kernel
def first_parent_misorder(parent_offsets, parent_ids, first, last, key_lo, key_hi, counts):
    """First row in ``[first, last)`` whose parent list is not in foreign-key order, or -1.

    A row's parents must be one per foreign key at most, in the order of the foreign keys,
    each in its key's table: the global ids ``[key_lo[k], key_hi[k])`` of the table foreign
    key ``k`` points at. Each edge is given to the earliest key that fits (when two keys point
    at the same table the graph cannot tell them apart) and counted in ``counts[k]``.
    """
    num_keys = key_lo.shape[0]
    for v in range(first, last):
        k = 0
        for e in range(parent_offsets[v], parent_offsets[v + 1]):
            p = parent_ids[e]
            while k < num_keys and not key_lo[k] <= p < key_hi[k]:
                k += 1
            if k == num_keys:
                return v
            counts[k] += 1
            k += 1
    return -1


# --- the edge screen: both CSR directions hold the same (parent, child, child time) edges ----


@kernel
def _edge_mix(p_mixed, c_mixed):
    """One edge's word from its keyed parent and (child, time) words."""
    return mix64(p_mixed ^ c_mixed)


@kernel
def _parent_word(p, key):
    return mix64(np.uint64(p) ^ key)


@kernel
def _child_word(c, t, key):
    return mix64(mix64(np.uint64(c) ^ key) ^ np.uint64(t))


@kernel
def parent_side_sums(parent_offsets, parent_ids, row_times, first, last, keys):
    """``(s1, s2)``: the sums mod 2^64 of both edge hashes over the parent lists of rows
    ``[first, last)``: row ``v``'s edges ``(parent_ids[e], v, row_times[v])``.

    ``keys`` is ``uint64[4]``: ``a_1, b_1, a_2, b_2`` of the module doc. Offsets and ids must
    already be checked (monotone, in range).
    """
    s1 = np.uint64(0)
    s2 = np.uint64(0)
    for v in range(first, last):
        t = row_times[v]
        c1 = _child_word(v, t, keys[1])
        c2 = _child_word(v, t, keys[3])
        for e in range(parent_offsets[v], parent_offsets[v + 1]):
            p = parent_ids[e]
            s1 += _edge_mix(_parent_word(p, keys[0]), c1)
            s2 += _edge_mix(_parent_word(p, keys[2]), c2)
    return s1, s2


@kernel
def child_side_sums(child_offsets, child_ids, child_times, first, last, keys):
    """``(s1, s2)``: as :func:`parent_side_sums`, over the child lists of parents
    ``[first, last)``: parent ``p``'s edges ``(p, child_ids[i], child_times[i])``."""
    s1 = np.uint64(0)
    s2 = np.uint64(0)
    for p in range(first, last):
        p1 = _parent_word(p, keys[0])
        p2 = _parent_word(p, keys[2])
        for i in range(child_offsets[p], child_offsets[p + 1]):
            c = child_ids[i]
            t = child_times[i]
            s1 += _edge_mix(p1, _child_word(c, t, keys[1]))
            s2 += _edge_mix(p2, _child_word(c, t, keys[3]))
    return s1, s2


# Bytes of random key per screen: a parent and a child key for each of the two hashes.
EDGE_KEY_BYTES = 32


def edges_agree(parent_offsets, parent_ids, row_times, child_offsets, child_ids, child_times,
                keys) -> bool:
    """Whether the child CSR holds exactly the parent CSR's edges, each with its child's row
    time: the multisets of ``(parent, child, time)`` of both sides have equal hash sums.

    Offsets and ids must already be checked. ``keys`` is ``uint64[4]`` (``a_1, b_1, a_2,
    b_2``), drawn at random for each run: the module doc says why this is as strong as the
    exact checks it screens. The two sides of a large graph run on two threads.
    """
    if parent_ids.shape[0] != child_ids.shape[0]:
        return False
    rows = parent_offsets.shape[0] - 1
    parent, child = side_by_side(
        partial(parent_side_sums, parent_offsets, parent_ids, row_times, 0, rows, keys),
        partial(child_side_sums, child_offsets, child_ids, child_times, 0, rows, keys),
        threaded=parent_ids.shape[0] >= THREADED_MIN_EDGES)
    return bool(parent == child)


# --- columns, row times and tasks: one pass each over a bitmap and its values ---------------


@kernel
def _bit(bitmap, r):
    return (bitmap[r >> 3] >> (r & 7)) & 1


@kernel
def null_cells(values, bitmap):
    """``(valid rows, first null row whose cell is not 0, or -1)`` of a column: ``values[r]``
    is valid when bit ``r`` of ``bitmap`` (little-endian bit order) is set."""
    valid = 0
    first = -1
    for r in range(values.shape[0]):
        if _bit(bitmap, r):
            valid += 1
        elif first < 0 and values[r] != 0:
            first = r
    return valid, first


@kernel
def first_time_mismatch(row_times, values, bitmap, no_time):
    """First row whose time is not the time column's value (``no_time`` for a null), or -1.
    An empty ``values`` means no time column: every row's time is ``no_time``."""
    for r in range(row_times.shape[0]):
        if values.shape[0] == 0 or not _bit(bitmap, r):
            expected = no_time
        else:
            expected = values[r]
        if row_times[r] != expected:
            return r
    return -1


@kernel
def first_table_mismatch(row_table, table_offsets):
    """First row whose table index disagrees with ``table_offsets``, or -1."""
    if table_offsets[0] != 0:
        return 0
    for t in range(table_offsets.shape[0] - 1):
        for r in range(max(table_offsets[t], 0), min(table_offsets[t + 1], row_table.shape[0])):
            if row_table[r] != t:
                return r
    if table_offsets[-1] != row_table.shape[0]:
        return min(table_offsets[-1], row_table.shape[0])
    return -1


@kernel
def _bits_set(bitmap, num_rows):
    """How many of the first ``num_rows`` bits of ``bitmap`` are set."""
    count = np.int64(0)  # interpreted, 0 + a uint8 bit stays uint8 (NEP 50) and wraps at 256
    for r in range(num_rows):
        count += _bit(bitmap, r)
    return count


@kernel
def task_agreement(anchor, bitmap, num_rows, values, target, target_valid, obs_time,
                   row_times, row_offset):
    """What a task's arrays agree with: ``(ascending, seeds, targets, target_valid, obs_time)``.

    Anchor rows strictly ascending; exactly the rows with a valid target (bit set in
    ``bitmap``); targets the column's values as float64; ``target_valid`` all 1; observation
    times the anchor rows' ``row_times[row_offset + row]`` (an empty ``row_times``: not
    checked). Anchor rows must already be checked in ``[0, num_rows)``.

    Passes without branches (no early exit: an intact task is read whole anyway). The
    anchor rows are the valid rows exactly when they ascend strictly, each has its bit set,
    and there are as many as bits set.
    """
    n = anchor.shape[0]
    ascending = strictly_ascending(anchor)
    unset = False
    targets_differ = False
    invalid = False
    times_differ = False
    for i in range(n):
        r = anchor[i]
        unset |= _bit(bitmap, r) == 0
        targets_differ |= target[i] != np.float64(values[r])
        invalid |= target_valid[i] != 1
    if row_times.shape[0] > 0:
        for i in range(n):
            times_differ |= obs_time[i] != row_times[row_offset + anchor[i]]
    seeds = ascending and not unset and _bits_set(bitmap, num_rows) == n
    return ascending, seeds, not targets_differ, not invalid, not times_differ
