"""Primary-key indexes and foreign-key resolution kernels.

Integer keys use a *dense* index when their range is small (``max - min < 4 n + 1024``): a
table ``slot[key - min] = row``; otherwise a hash index (open addressing over ``mix64(key)``).
String keys are hashed (64-bit FNV-1a over the UTF-8 bytes, then a splitmix64 finaliser) into
a hash index; every hash hit is confirmed by comparing the bytes, so a hash collision can
never link a foreign key to the wrong row (colliding keys just share a probe run).

String arrays are passed as Arrow's large-string buffers: ``data`` (uint8) and ``offsets``
(int64, length n + 1).
"""

from __future__ import annotations

import numpy as np

from dlkit.core.jit import kernel

FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)


@kernel
def mix64(h):
    """splitmix64 finaliser: spreads every input bit over the whole word."""
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


@kernel
def hash_strings(data, offsets, out):
    """``out[i]`` = 64-bit hash of string ``i`` (as int64)."""
    for i in range(offsets.shape[0] - 1):
        h = FNV_OFFSET
        for j in range(offsets[i], offsets[i + 1]):
            h = (h ^ np.uint64(data[j])) * FNV_PRIME
        out[i] = np.int64(mix64(h))


@kernel
def _bytes_equal(a_data, a_start, a_end, b_data, b_start, b_end):
    if a_end - a_start != b_end - b_start:
        return False
    for k in range(a_end - a_start):
        if a_data[a_start + k] != b_data[b_start + k]:
            return False
    return True


# --- dense integer index ------------------------------------------------------------------


@kernel
def dense_index_build(keys, kmin, size):
    """``(slots, dup_row, first_row)``: slots[key - kmin] = row; first duplicate or (-1, -1)."""
    slots = np.full(size, -1, dtype=np.int64)
    for i in range(keys.shape[0]):
        s = keys[i] - kmin
        if slots[s] >= 0:
            return slots, i, slots[s]
        slots[s] = i
    return slots, -1, -1


@kernel
def resolve_rows(rows, valid, base):
    """Turn the local parent rows a lookup found (``-1``: none) into global ids in place.

    A null key (``valid[i]`` false) and a dangling key both become ``-1``. Returns
    ``(num_dangling, first_dangling_position)`` (``first = -1`` when none dangle).
    """
    dangling = 0
    first = -1
    for i in range(rows.shape[0]):
        if not valid[i]:
            rows[i] = -1
        elif rows[i] < 0:
            if dangling == 0:
                first = i
            dangling += 1
        else:
            rows[i] += base
    return dangling, first


@kernel
def dense_first_duplicate(keys, kmin, span):
    """First position whose key (in ``[kmin, kmin + span)``) appeared before, or -1.

    One bit per possible key: the uniqueness check of a table nothing refers to, which needs
    no row index.
    """
    seen = np.zeros((span + 7) >> 3, dtype=np.uint8)
    for i in range(keys.shape[0]):
        s = keys[i] - kmin
        bit = np.uint8(1 << (s & 7))
        if seen[s >> 3] & bit:
            return i
        seen[s >> 3] |= bit
    return -1


@kernel
def dense_lookup(keys, valid, kmin, slots, base, out):
    """Resolve integer foreign keys through a dense index.

    ``out[i]`` = ``base + row`` of the parent, or -1 for a null (``valid[i]`` false) or a
    dangling key. Returns ``(num_dangling, first_dangling_position)``.
    """
    size = slots.shape[0]
    for i in range(keys.shape[0]):
        s = keys[i] - kmin
        out[i] = slots[s] if valid[i] and 0 <= s < size else -1
    return resolve_rows(out, valid, base)


# --- hash index (open addressing, linear probing) ------------------------------------------
#
# ``slots`` has a power-of-two size >= 2 n; slot ``s`` holds a row or -1. Integer keys are
# placed by ``mix64(key)``, strings by their ``hash_strings`` hash. A lookup touches one slot
# (plus a short probe run), where a binary search would touch log2(n) of them.


def table_size(n: int) -> int:
    size = 16
    while size < 2 * n:
        size *= 2
    return size


@kernel
def hash_index_ints(keys, size):
    """``(slots, dup_row, first_row)`` for integer keys; the first duplicate or (-1, -1)."""
    mask = np.uint64(size - 1)
    slots = np.full(size, -1, dtype=np.int64)
    for i in range(keys.shape[0]):
        k = keys[i]
        s = np.int64(mix64(np.uint64(k)) & mask)
        while slots[s] >= 0:
            if keys[slots[s]] == k:
                return slots, i, slots[s]
            s = (s + 1) & (size - 1)
        slots[s] = i
    return slots, -1, -1


# Lookups go in blocks of PROBE_BLOCK keys: first the home slot of every key in the block is
# read (independent loads, so their cache misses overlap), then each probe starts from what
# was read. Done one key at a time, each probe would wait for its own miss.
PROBE_BLOCK = 32


@kernel
def hash_lookup_ints(fk, valid, keys, slots, base, out):
    """Resolve integer foreign keys through :func:`hash_index_ints`; see :func:`dense_lookup`."""
    size = slots.shape[0]
    mask = np.uint64(size - 1)
    home = np.empty(PROBE_BLOCK, dtype=np.int64)
    for block in range(0, fk.shape[0], PROBE_BLOCK):
        end = min(block + PROBE_BLOCK, fk.shape[0])
        for i in range(block, end):
            home[i - block] = slots[np.int64(mix64(np.uint64(fk[i])) & mask)]
        for i in range(block, end):
            row = -1
            if valid[i]:
                k = fk[i]
                s = np.int64(mix64(np.uint64(k)) & mask)
                candidate = home[i - block]
                while candidate >= 0:
                    if keys[candidate] == k:
                        row = candidate
                        break
                    s = (s + 1) & (size - 1)
                    candidate = slots[s]
            out[i] = row
    return resolve_rows(out, valid, base)


@kernel
def hash_index_strings(hashes, data, offsets, size):
    """``(table, dup_row, first_row)`` for string keys with precomputed ``hashes``.

    ``table`` is ``int64[size, 4]``: per slot ``(hash, row, start, end)`` with ``row = -1`` for
    an empty slot, so a probe reads one cache line and the key bytes, nothing else.
    """
    mask = np.uint64(size - 1)
    table = np.zeros((size, 4), dtype=np.int64)
    table[:, 1] = -1
    for i in range(hashes.shape[0]):
        h = hashes[i]
        s = np.int64(np.uint64(h) & mask)
        while table[s, 1] >= 0:
            if table[s, 0] == h and _bytes_equal(data, table[s, 2], table[s, 3], data, offsets[i],
                                                 offsets[i + 1]):
                return table, i, table[s, 1]
            s = (s + 1) & (size - 1)
        table[s, 0] = h
        table[s, 1] = i
        table[s, 2] = offsets[i]
        table[s, 3] = offsets[i + 1]
    return table, -1, -1


@kernel
def hash_lookup_strings(fk_hashes, valid, data, offsets, table, pk_data, base, out):
    """Resolve string foreign keys: one probe run, hash compared first, then the bytes."""
    size = table.shape[0]
    mask = np.uint64(size - 1)
    home_hash = np.empty(PROBE_BLOCK, dtype=np.int64)
    home_byte = np.empty(PROBE_BLOCK, dtype=np.int64)  # first key byte of the home slot
    for block in range(0, fk_hashes.shape[0], PROBE_BLOCK):
        end = min(block + PROBE_BLOCK, fk_hashes.shape[0])
        for i in range(block, end):
            s = np.int64(np.uint64(fk_hashes[i]) & mask)
            home_hash[i - block] = table[s, 0]
            home_byte[i - block] = table[s, 2]
        for j in range(end - block):  # the home slots' key bytes: independent loads too
            start = home_byte[j]
            home_byte[j] = np.int64(pk_data[start]) if start < pk_data.shape[0] else -1
        for i in range(block, end):
            row = -1
            if valid[i]:
                h = fk_hashes[i]
                a = offsets[i]
                b = offsets[i + 1]
                s = np.int64(np.uint64(h) & mask)
                if (table[s, 1] >= 0 and home_hash[i - block] == h
                        and (a == b or home_byte[i - block] == data[a])
                        and _bytes_equal(data, a, b, pk_data, table[s, 2], table[s, 3])):
                    row = table[s, 1]
                else:
                    while table[s, 1] >= 0:
                        if table[s, 0] == h and _bytes_equal(data, a, b, pk_data, table[s, 2],
                                                              table[s, 3]):
                            row = table[s, 1]
                            break
                        s = (s + 1) & (size - 1)
            out[i] = row
    return resolve_rows(out, valid, base)
