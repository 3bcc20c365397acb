"""Hashed character n-gram embedding kernel (the default, download-free text embedder).

For each string (UTF-8 bytes ``data[offsets[i]:offsets[i+1]]``):

1. decode to Unicode code points (invalid bytes count as U+FFFD), lowercase ASCII ``A-Z``;
2. pad with a start marker U+0002 and an end marker U+0003;
3. for every n in ``[n_min, n_max]`` and every window of n consecutive code points of the
   padded text, hash the window: ``h = seed'``, then for each code point ``c``:
   ``h = (h ^ c) * FNV_PRIME`` (64-bit), finished with splitmix64 (``mix64``), where
   ``seed' = mix64(seed ^ n)``;
4. add ``+1`` to coordinate ``h % dim`` when bit 63 of ``h`` is 0, else ``-1``;
5. scale the vector to unit L2 norm (a zero vector stays zero); the caller rounds the float32
   result to float16 (numpy ``astype``, round to nearest even).

All arithmetic is integer except the final float32 sum of squares, done in a fixed order, so
the output is bit-identical on every machine.
"""

from __future__ import annotations

import numpy as np

from dlkit.core.jit import kernel
from dlkit.core.keys import FNV_PRIME, mix64


@kernel
def _decode_utf8(data, start, end, out):
    """Code points of ``data[start:end]`` into ``out[1:]``; returns the count."""
    n = 0
    i = start
    while i < end:
        b0 = np.int64(data[i])
        cp: int | np.int64 = 0xFFFD  # (not compiled: Numba types it from the assignments)
        width = 1
        if b0 < 0x80:
            cp = b0
        elif b0 >= 0xC0 and b0 < 0xE0 and i + 1 < end:
            cp = ((b0 & 0x1F) << 6) | (np.int64(data[i + 1]) & 0x3F)
            width = 2
        elif b0 >= 0xE0 and b0 < 0xF0 and i + 2 < end:
            cp = ((b0 & 0x0F) << 12) | ((np.int64(data[i + 1]) & 0x3F) << 6) | (
                np.int64(data[i + 2]) & 0x3F)
            width = 3
        elif b0 >= 0xF0 and b0 < 0xF8 and i + 3 < end:
            cp = ((b0 & 0x07) << 18) | ((np.int64(data[i + 1]) & 0x3F) << 12) | (
                (np.int64(data[i + 2]) & 0x3F) << 6) | (np.int64(data[i + 3]) & 0x3F)
            width = 4
        if 0x41 <= cp <= 0x5A:
            cp += 0x20
        out[1 + n] = cp
        n += 1
        i += width
    return n


@kernel
def embed_ngrams(data, offsets, dim, n_min, n_max, seed, out):
    """Write the (float32) embedding of string ``i`` into ``out[i, :dim]``."""
    count = offsets.shape[0] - 1
    max_len = 0
    for i in range(count):
        if offsets[i + 1] - offsets[i] > max_len:
            max_len = offsets[i + 1] - offsets[i]
    points = np.empty(max_len + 2, dtype=np.int64)
    acc = np.zeros(dim, dtype=np.float32)
    udim = np.uint64(dim)
    for i in range(count):
        length = _decode_utf8(data, offsets[i], offsets[i + 1], points) + 2
        points[0] = 2
        points[length - 1] = 3
        acc[:] = 0.0
        for n in range(n_min, n_max + 1):
            if n > length:
                break
            start_h = mix64(np.uint64(seed) ^ np.uint64(n))
            for s in range(length - n + 1):
                h = start_h
                for k in range(n):
                    h = (h ^ np.uint64(points[s + k])) * FNV_PRIME
                h = mix64(h)
                slot = np.int64(h % udim)
                if (h >> np.uint64(63)) == np.uint64(0):
                    acc[slot] += np.float32(1.0)
                else:
                    acc[slot] -= np.float32(1.0)
        norm = np.float32(0.0)
        for d in range(dim):
            norm += acc[d] * acc[d]
        if norm > 0:
            scale = np.float32(1.0) / np.float32(np.sqrt(norm))
            for d in range(dim):
                out[i, d] = acc[d] * scale
        else:
            for d in range(dim):
                out[i, d] = np.float32(0.0)
