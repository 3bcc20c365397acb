"""Content checks of ``dlkit verify``: single passes over a database's arrays.

Each kernel returns the first position that breaks its rule (or -1), so the caller can name
it; none allocates more than a hash table, and all run without the GIL.

- :func:`first_bad_utf8`: strings ``data[offsets[i]:offsets[i+1]]`` that are not UTF-8 on
  their own (Python's strict decoder: no overlong forms, no surrogates, nothing above
  U+10FFFF, no sequence cut at the string's end).
- :func:`first_duplicate_string`: two equal strings (a hash table of row numbers over the
  strings' :func:`dlkit.core.keys.hash_strings` hashes; a hit is confirmed byte by byte).
- :func:`first_all_bits`: a word with every bit of a mask set; on the bits of IEEE floats
  with the exponent mask, the first NaN or infinity (float16 has no numba type, its bits do).
- :func:`first_parent_misorder`: a row whose parents are not in its foreign keys' order and
  tables (id ranges); counts the edges of each foreign key on the way.
"""

from __future__ import annotations

import numpy as np

from dlkit.core.jit import kernel
from dlkit.core.keys import bytes_equal

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
