"""Primary-key indexes and foreign-key resolution kernels.

Integer keys use a *dense* index when their range is small (``max - min < 4 n + 1024``): a
table ``slot[key - min] = row``; otherwise a hash index (open addressing over ``mix64(key)``).
Their slots are int32 for tables under 2^31 rows: half the memory a lookup misses into.
String keys are hashed (the UTF-8 bytes eight at a time, FNV style, then a splitmix64
finaliser) into a hash index; every hash hit is confirmed by comparing the bytes, so a hash
collision can never link a foreign key to the wrong row (colliding keys just share a probe
run).

String arrays are passed as Arrow's large-string buffers: ``data`` (uint8) and ``offsets``
(int64, length n + 1).
"""

from __future__ import annotations

import numpy as np

from dlkit.core.jit import kernel
from dlkit.core.memory import load_u64_le, prefetch

FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)


@kernel
def mix64(h):
    """splitmix64 finaliser: spreads every input bit over the whole word."""
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


@kernel
def word_at(data, start, end):
    """Bytes ``data[start:min(end, start + 8)]`` as a little-endian word, zero padded."""
    if end - start >= 8:
        return load_u64_le(data, start)
    w = np.uint64(0)
    for k in range(min(end - start, 8)):
        w |= np.uint64(data[start + k]) << np.uint64(8 * k)
    return w


@kernel
def hash_strings(data, offsets, out):
    """``out[i]`` = 64-bit hash of string ``i`` (as int64): its bytes eight at a time, then
    its length, through splitmix64."""
    for i in range(offsets.shape[0] - 1):
        a = offsets[i]
        b = offsets[i + 1]
        h = FNV_OFFSET
        for j in range(a, b, 8):
            h = (h ^ word_at(data, j, b)) * FNV_PRIME
        out[i] = np.int64(mix64(h ^ np.uint64(b - a)))


@kernel
def bytes_equal(a_data, a_start, a_end, b_data, b_start, b_end):
    if a_end - a_start != b_end - b_start:
        return False
    for k in range(a_end - a_start):
        if a_data[a_start + k] != b_data[b_start + k]:
            return False
    return True


# --- dense integer index ------------------------------------------------------------------


@kernel
def dense_index_build(keys, kmin, slots):
    """``slots[key - kmin] = row`` into ``slots`` (all -1, one per key in the range); returns
    ``(dup_row, first_row)`` of the first duplicate, or (-1, -1)."""
    for i in range(keys.shape[0]):
        s = keys[i] - kmin
        if slots[s] >= 0:
            return i, np.int64(slots[s])
        slots[s] = i
    return -1, -1


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
def hash_index_ints(keys, slots):
    """Integer keys into ``slots`` (all -1, a power-of-two count of them); returns
    ``(dup_row, first_row)`` of the first duplicate, or (-1, -1)."""
    size = slots.shape[0]
    mask = np.uint64(size - 1)
    for i in range(keys.shape[0]):
        k = keys[i]
        s = np.int64(mix64(np.uint64(k)) & mask)
        while slots[s] >= 0:
            if keys[slots[s]] == k:
                return i, np.int64(slots[s])
            s = (s + 1) & (size - 1)
        slots[s] = i
    return -1, -1


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


# A string slot is four int64: (hash, row, key, length); row -1 marks an empty slot. ``key``
# is the key itself for a key of up to eight bytes (its bytes as a word), confirmed from the
# slot alone, and where its bytes start in the stored keys for a longer one, whose bytes are
# then compared: one cache miss beyond the slot's, not two (its offset, then its bytes).
STRING_SLOT = 4


@kernel
def slot_key(data, a, b):
    """The ``key`` field of a slot for key ``data[a:b]`` (see ``STRING_SLOT``)."""
    if b - a <= 8:
        return np.int64(word_at(data, a, b))
    return np.int64(a)


@kernel
def slot_holds(table, s, h, data, a, b, key, stored):
    """Whether slot ``s`` holds key ``data[a:b]`` (hash ``h``, slot key field ``key``), the
    slot's longer keys read from ``stored``."""
    n = b - a
    if table[s, 0] != h or table[s, 3] != n:
        return False
    if n <= 8:
        return table[s, 2] == key
    start = table[s, 2]
    return bytes_equal(data, a, b, stored, start, start + n)


@kernel
def clear_string_table(table):
    """Every slot of a string table empty (see ``STRING_SLOT``)."""
    table[:, :] = 0
    table[:, 1] = -1


@kernel
def hash_index_strings(hashes, data, offsets, table):
    """Index string keys with precomputed ``hashes`` into ``table`` (``int64[size,
    STRING_SLOT]``, any contents; see ``STRING_SLOT``; ``size`` a power of two, at least
    ``table_size`` of the key count). Returns ``(dup_row, first_row)``, the first duplicate,
    or ``(-1, -1)``. The caller allocates the table: within the build's memory budget.
    """
    size = table.shape[0]
    mask = np.uint64(size - 1)
    clear_string_table(table)
    for i in range(hashes.shape[0]):
        h = hashes[i]
        a = offsets[i]
        b = offsets[i + 1]
        key = slot_key(data, a, b)
        s = np.int64(np.uint64(h) & mask)
        while table[s, 1] >= 0:
            if slot_holds(table, s, h, data, a, b, key, data):
                return i, table[s, 1]
            s = (s + 1) & (size - 1)
        table[s, 0] = h
        table[s, 1] = i
        table[s, 2] = key
        table[s, 3] = b - a
    return -1, -1


@kernel
def hash_lookup_strings(fk_hashes, valid, data, offsets, table, pk_data, base, out):
    """Resolve string foreign keys through :func:`hash_index_strings` (built over the keys
    ``pk_data``); see :func:`dense_lookup`.

    The home slots of a block of keys are prefetched first, then, for the keys over eight
    bytes whose home slot holds their hash, the stored key's bytes: their cache misses
    overlap instead of following each other. A key of up to eight bytes is confirmed from
    its slot alone.
    """
    size = table.shape[0]
    mask = np.uint64(size - 1)
    slots = table.reshape(-1)  # the same memory, for prefetch
    for block in range(0, fk_hashes.shape[0], PROBE_BLOCK):
        end = min(block + PROBE_BLOCK, fk_hashes.shape[0])
        for i in range(block, end):
            prefetch(slots, np.int64(np.uint64(fk_hashes[i]) & mask) * STRING_SLOT)
        for i in range(block, end):
            s = np.int64(np.uint64(fk_hashes[i]) & mask)
            if table[s, 1] >= 0 and table[s, 0] == fk_hashes[i] and table[s, 3] > 8:
                prefetch(pk_data, table[s, 2])
        for i in range(block, end):
            row = -1
            if valid[i]:
                h = fk_hashes[i]
                a = offsets[i]
                b = offsets[i + 1]
                key = slot_key(data, a, b)
                s = np.int64(np.uint64(h) & mask)
                while table[s, 1] >= 0:
                    if slot_holds(table, s, h, data, a, b, key, pk_data):
                        row = table[s, 1]
                        break
                    s = (s + 1) & (size - 1)
            out[i] = row
    return resolve_rows(out, valid, base)


# --- interning: distinct strings numbered as they come ------------------------------------


@kernel
def rehash_strings(old, new):
    """Every entry of the string table ``old`` into ``new`` (any contents; its size a power
    of two above twice the entries), each at its hash's slot: a table grown in place of one
    that filled up."""
    size = new.shape[0]
    mask = np.uint64(size - 1)
    clear_string_table(new)
    for t in range(old.shape[0]):
        if old[t, 1] >= 0:
            s = np.int64(np.uint64(old[t, 0]) & mask)
            while new[s, 1] >= 0:
                s = (s + 1) & (size - 1)
            new[s, :] = old[t, :]


@kernel
def intern_strings(order, hashes, data, offsets, table, store_data, store_offsets, count, ids):
    """Intern strings ``order[0], order[1], ...`` of ``data``/``offsets`` (``hashes`` their
    :func:`hash_strings`): ``ids[i]`` gets the id of string ``i`` in the store
    ``store_data``/``store_offsets`` of ``count`` strings, indexed by ``table`` (as
    :func:`hash_index_strings`), a string not yet there being appended with id ``count``,
    ``count + 1``, ... in turn. The caller reserves room for every string (store capacity,
    and a table of at least ``table_size`` of the final count). Returns the new count."""
    size = table.shape[0]
    mask = np.uint64(size - 1)
    slots = table.reshape(-1)  # the same memory, for prefetch
    for k in range(order.shape[0]):
        if k % PROBE_BLOCK == 0:  # the home slots of the next block, their misses overlapped
            for ahead in range(k, min(k + PROBE_BLOCK, order.shape[0])):
                prefetch(slots, np.int64(np.uint64(hashes[order[ahead]]) & mask) * STRING_SLOT)
        i = order[k]
        h = hashes[i]
        a = offsets[i]
        b = offsets[i + 1]
        key = slot_key(data, a, b)
        s = np.int64(np.uint64(h) & mask)
        found = -1
        while table[s, 1] >= 0:
            if slot_holds(table, s, h, data, a, b, key, store_data):
                found = table[s, 1]
                break
            s = (s + 1) & (size - 1)
        if found < 0:
            found = count
            start = store_offsets[count]
            store_data[start:start + b - a] = data[a:b]
            store_offsets[count + 1] = start + b - a
            table[s, 0] = h
            table[s, 1] = count
            table[s, 2] = slot_key(store_data, start, start + b - a)
            table[s, 3] = b - a
            count += 1
        ids[i] = found
    return count
