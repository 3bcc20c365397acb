"""NextBatch_v3 kernels: a keyed mixed-radix Feistel permutation of ``[0, N)``.

The normative definition is ``docs/nextbatch_v3.md``. In short, position ``p`` of an epoch is
split into a high part ``h < a`` and a low part ``l < 2^kb`` (``a * 2^kb >= N`` and
``a * 2^kb - N < 2^kb``), put through a 6-round Feistel network whose rounds alternate
``l ^= F(h)`` and ``h = (h + F(l)) mod a``, and cycle-walked back into ``[0, N)``. There are no
blocks: every index costs one O(1) evaluation, so consecutive positions land anywhere.

Two resolution paths compute the same function (the tests hold them to the plain-Python
reference ``tests/naive_feistel.py``):

- ``resolve_feistel_u32`` for ``3 <= N <= 2^32``: both parts fit 16 bits, so every round runs in
  32-bit lanes. It works round-major over tiles of consecutive positions of one grid row (round
  0's offset is one value per row), two rounds per pass, so LLVM vectorises each pass instead of
  the code waiting on the six-round latency chain of every index.
- ``resolve_feistel_u64`` for any ``N`` up to ``FEISTEL_MAX_N``: the same tiling in 64-bit
  lanes (``a`` can reach 2^32 there, so the scaling needs a 64-bit product).

Kernels trust their inputs (``dlkit.nextbatch`` validates ``N`` and positions first).
"""

from __future__ import annotations

import numpy as np

from dlkit.core.jit import kernel
from dlkit.core.philox import philox_draw

FEISTEL_ROUNDS = 6
# The largest N whose grid a * 2^kb still fits in uint64 (a * 2^kb < N + 2^kb).
FEISTEL_MAX_N = (1 << 64) - (1 << 32)
TILE = 512

_U32_MASK = np.uint64(0xFFFFFFFF)
_MIX_MUL_1 = np.uint64(0x85EBCA6B)
_MIX_MUL_2 = np.uint64(0xC2B2AE35)
_MIX_MUL_1_U32 = np.uint32(0x85EBCA6B)
_MIX_MUL_2_U32 = np.uint32(0xC2B2AE35)


@kernel
def feistel_round_keys(seed_words):
    """Round keys ``K_0..K_5``: words ``R0..R3`` of Philox draw 0, then ``R0, R1`` of draw 1."""
    words = np.empty(8, dtype=np.uint32)
    for draw in range(2):
        r0, r1, r2, r3 = philox_draw(seed_words, np.uint64(draw))
        words[4 * draw] = np.uint32(r0)
        words[4 * draw + 1] = np.uint32(r1)
        words[4 * draw + 2] = np.uint32(r2)
        words[4 * draw + 3] = np.uint32(r3)
    return words[:FEISTEL_ROUNDS].copy()


@kernel
def feistel_domain(n):
    """``(a, kb)``: the grid ``[0, a) x [0, 2^kb)`` with ``kb = floor(bitlen(n-1) / 2)``."""
    n = np.uint64(n)
    bits = np.uint64(0)
    while bits < np.uint64(64) and (n - np.uint64(1)) >> bits != np.uint64(0):
        bits += np.uint64(1)
    kb = bits // np.uint64(2)
    b = np.uint64(1) << kb
    a = n // b + (np.uint64(1) if n % b != np.uint64(0) else np.uint64(0))
    return a, kb


@kernel
def mix32(value, key):
    """Round function ``F``: multiply, xor-shift, multiply (32-bit) of ``value ^ key``.

    Both uses read its high bits (``floor(F * m / 2^32)``), which the last multiply mixes best.
    """
    h = (np.uint64(value) ^ np.uint64(key)) & _U32_MASK
    h = (h * _MIX_MUL_1) & _U32_MASK
    h ^= h >> np.uint64(13)
    return (h * _MIX_MUL_2) & _U32_MASK


@kernel
def feistel_encrypt(x, keys, a, kb):
    """One pass of the network over the grid: ``x < a * 2^kb`` -> ``y < a * 2^kb``."""
    x = np.uint64(x)
    a = np.uint64(a)
    kb = np.uint64(kb)
    b = np.uint64(1) << kb
    hi = x >> kb
    lo = x & (b - np.uint64(1))
    for i in range(FEISTEL_ROUNDS):
        if i % 2 == 0:
            lo ^= (mix32(hi, keys[i]) * b) >> np.uint64(32)
        else:
            hi += (mix32(lo, keys[i]) * a) >> np.uint64(32)
            if hi >= a:
                hi -= a
    return (hi << kb) | lo


@kernel
def feistel_index(position, keys, n, a, kb):
    """The original index at ``position`` (< n): encrypt, then cycle-walk into ``[0, n)``."""
    n = np.uint64(n)
    y = feistel_encrypt(position, keys, a, kb)
    while y >= n:
        y = feistel_encrypt(y, keys, a, kb)
    return y


@kernel
def _tile_u64(keys, row, first_lo, run, a, kb, his, los, out, written, n):
    """``_tile_u32`` in 64-bit lanes, for any grid (``a`` up to 2^32, ``kb`` up to 32)."""
    b = np.uint64(1) << kb
    offset0 = (mix32(row, keys[0]) * b) >> np.uint64(32)
    for j in range(run):
        his[j] = row
        los[j] = (first_lo + np.uint64(j)) ^ offset0
    for i in range(1, FEISTEL_ROUNDS):
        key = np.uint64(keys[i])
        if i % 2 == 1:
            for j in range(run):
                hi = his[j] + ((mix32(los[j], key) * a) >> np.uint64(32))
                his[j] = hi - a if hi >= a else hi
        else:
            for j in range(run):
                los[j] ^= (mix32(his[j], key) * b) >> np.uint64(32)
    largest = np.uint64(0)
    for j in range(run):
        y = (his[j] << kb) | los[j]
        out[written + np.uint64(j)] = y
        largest = max(largest, y)
    return largest >= n


@kernel
def _cycle_walk(out, written, run, n, keys, a, kb):
    """Re-encrypt the tile's values that landed on grid cells beyond ``n`` until they are below it."""
    for j in range(run):
        y = out[written + np.uint64(j)]
        while y >= n:
            y = feistel_encrypt(y, keys, a, kb)
        out[written + np.uint64(j)] = y


@kernel
def _resolve_tiles(keys, n, starts, lengths, out, narrow):
    """Fill ``out`` with the indices of the slices ``[start, start+length)``, back to back, one
    tile of a grid row at a time: in 32-bit lanes (``_tile_u32``) when ``narrow``, else in
    64-bit lanes (``_tile_u64``)."""
    n = np.uint64(n)
    a, kb = feistel_domain(n)
    b = np.uint64(1) << kb
    his = np.empty(TILE if not narrow else 0, dtype=np.uint64)
    los = np.empty(TILE if not narrow else 0, dtype=np.uint64)
    keys32 = keys.astype(np.uint32) if narrow else np.empty(0, dtype=np.uint32)
    his32 = np.empty(TILE if narrow else 0, dtype=np.uint32)
    los32 = np.empty(TILE if narrow else 0, dtype=np.uint32)
    written = np.uint64(0)
    for s in range(starts.shape[0]):
        position = np.uint64(starts[s])
        remaining = np.uint64(lengths[s])
        while remaining > np.uint64(0):
            row = position >> kb
            first_lo = position & (b - np.uint64(1))
            run = min(remaining, b - first_lo, np.uint64(TILE))
            if narrow:
                spilled = _tile_u32(keys32, np.uint32(row), np.uint32(first_lo), run,
                                    np.uint32(a), np.uint32(kb), his32, los32, out, written, n)
            else:
                spilled = _tile_u64(keys, row, first_lo, run, a, kb, his, los, out, written, n)
            if spilled:  # rare: the grid has fewer than 2^kb cells beyond n
                _cycle_walk(out, written, run, n, keys, a, kb)
            written += run
            position += run
            remaining -= run
    return out


@kernel
def resolve_feistel_u64(keys, n, starts, lengths, out):
    """The slices' indices for every ``n`` up to ``FEISTEL_MAX_N``: round-major over row tiles
    like the 32-bit path, in 64-bit lanes."""
    return _resolve_tiles(keys, n, starts, lengths, out, False)


# --- the 32-bit tiled path ----------------------------------------------------------------


@kernel
def _mix32_u32(value, key):
    h = np.uint32(np.uint32(value ^ key) * _MIX_MUL_1_U32)
    h = np.uint32(h ^ np.uint32(h >> np.uint32(13)))
    return np.uint32(h * _MIX_MUL_2_U32)


@kernel
def _scale_u32(f, m):
    """``floor(f * m / 2^32)`` for ``m <= 2^16`` without leaving 32-bit lanes.

    With ``f = fh * 2^16 + fl``: ``f*m / 2^32 = (fh*m + fl*m / 2^16) / 2^16``, and neither
    product nor their sum exceeds ``2^32 - 1`` when ``m <= 2^16``.
    """
    high = np.uint32(np.uint32(f >> np.uint32(16)) * m)
    low = np.uint32(np.uint32(np.uint32(f & np.uint32(0xFFFF)) * m) >> np.uint32(16))
    return np.uint32(np.uint32(high + low) >> np.uint32(16))


@kernel
def _odd_round_u32(hi, lo, key, a):
    """``hi <- (hi + floor(mix(lo) * a / 2^32)) mod a``."""
    hi = np.uint32(hi + _scale_u32(_mix32_u32(lo, key), a))
    # min(hi, hi - a) is hi mod a for hi < 2a: hi - a wraps around when hi < a.
    return min(hi, np.uint32(hi - a))


@kernel
def _even_round_u32(hi, lo, key, low_shift):
    """``lo <- lo ^ floor(mix(hi) * 2^kb / 2^32)``, i.e. ``mix >> (32 - kb)`` for ``kb >= 1``.

    ``& 31`` tells LLVM the count is below 32 so the shift stays in 32-bit lanes (this path
    never sees ``kb = 0``, which would need a shift by 32).
    """
    f = _mix32_u32(hi, key)
    return np.uint32(lo ^ np.uint32(f >> (low_shift & np.uint32(31))))


@kernel
def _tile_u32(keys, row, first_lo, run, a, kb, his, los, out, written, n):
    """Encrypt positions ``row * 2^kb + first_lo + j`` (``j < run``) into ``out[written:]``.

    Rounds are applied to the whole tile two at a time, so each loop body is short and its
    iterations independent (vectorised, and not bound by the six-round latency chain).
    Returns whether some value landed outside ``[0, n)`` and needs cycle walking.
    """
    low_shift = np.uint32(np.uint32(32) - kb)
    # Round 0 xors the same offset into every position of the row.
    offset0 = _even_round_u32(row, np.uint32(0), keys[0], low_shift)
    k1 = keys[1]
    k2 = keys[2]
    for j in range(run):
        lo = np.uint32(np.uint32(first_lo + np.uint32(j)) ^ offset0)
        hi = _odd_round_u32(row, lo, k1, a)
        his[j] = hi
        los[j] = _even_round_u32(hi, lo, k2, low_shift)
    for i in range(3, FEISTEL_ROUNDS - 1, 2):
        ko = keys[i]
        ke = keys[i + 1]
        for j in range(run):
            hi = _odd_round_u32(his[j], los[j], ko, a)
            his[j] = hi
            los[j] = _even_round_u32(hi, los[j], ke, low_shift)
    k_last = keys[FEISTEL_ROUNDS - 1]
    # The grid has at most 2^32 cells here, so y fits 32 bits until it is widened for ``out``.
    last = np.uint32(n - np.uint64(1))
    largest = np.uint32(0)
    for j in range(run):
        hi = _odd_round_u32(his[j], los[j], k_last, a)
        y = np.uint32(np.uint32(hi << (kb & np.uint32(31))) | los[j])
        los[j] = y
        largest = max(largest, y)
    for j in range(run):
        out[written + np.uint64(j)] = np.uint64(los[j])
    return largest > last


@kernel
def resolve_feistel_u32(keys, n, starts, lengths, out):
    """``resolve_feistel_u64`` for ``3 <= n <= 2^32``, tiled and vectorised (same results).

    Here ``kb`` is in ``[1, 16]`` and ``a <= 2^16``, so ``a * 2^kb <= 2^32``: every value fits
    32 bits and ``_scale_u32`` applies.
    """
    return _resolve_tiles(keys, n, starts, lengths, out, True)


@kernel
def resolve_feistel(keys, n, starts, lengths, out):
    """Original indices of the position slices (all below ``n``), written back to back."""
    if np.uint64(3) <= np.uint64(n) <= np.uint64(1 << 32):
        return resolve_feistel_u32(keys, n, starts, lengths, out)
    return resolve_feistel_u64(keys, n, starts, lengths, out)
