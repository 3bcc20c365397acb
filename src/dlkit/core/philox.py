"""Philox4x32-10 (Salmon et al., SC'11; the Random123 reference) as Numba kernels.

All words are carried as ``uint64`` holding 32-bit values: Numba promotes mixed signed and
unsigned integers to float64, so every constant here is an explicit ``np.uint64``.
"""

from __future__ import annotations

import numpy as np

from dlkit.core.jit import kernel

MASK32 = np.uint64(0xFFFFFFFF)
SHIFT32 = np.uint64(32)
PHILOX_M0 = np.uint64(0xD2511F53)
PHILOX_M1 = np.uint64(0xCD9E8D57)
PHILOX_W0 = np.uint64(0x9E3779B9)
PHILOX_W1 = np.uint64(0xBB67AE85)
PHILOX_ROUNDS = 10


@kernel
def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """One Philox4x32-10 block: counter (c0..c3), key (k0, k1) -> four 32-bit words."""
    c0 = np.uint64(c0)
    c1 = np.uint64(c1)
    c2 = np.uint64(c2)
    c3 = np.uint64(c3)
    k0 = np.uint64(k0)
    k1 = np.uint64(k1)
    for _ in range(PHILOX_ROUNDS):
        product0 = PHILOX_M0 * c0
        product1 = PHILOX_M1 * c2
        c0, c1, c2, c3 = (
            (product1 >> SHIFT32) ^ c1 ^ k0,
            product1 & MASK32,
            (product0 >> SHIFT32) ^ c3 ^ k1,
            product0 & MASK32,
        )
        k0 = (k0 + PHILOX_W0) & MASK32
        k1 = (k1 + PHILOX_W1) & MASK32
    return c0, c1, c2, c3


@kernel
def philox_draw(seed_words, v):
    """Draw ``v`` of a 128-bit seed (docs/nextbatch_v2.md, section 4): counter (lo32 v, hi32 v,
    s2, s3), key (s0, s1)."""
    v = np.uint64(v)
    return philox4x32_10(
        v & MASK32, v >> SHIFT32, seed_words[2], seed_words[3], seed_words[0], seed_words[1]
    )


@kernel
def philox_draw_u64_pair(seed_words, v):
    """Draw ``v`` as two uint64 values: ``(R0 | R1 << 32, R2 | R3 << 32)``."""
    r0, r1, r2, r3 = philox_draw(seed_words, v)
    return r0 | (r1 << SHIFT32), r2 | (r3 << SHIFT32)
