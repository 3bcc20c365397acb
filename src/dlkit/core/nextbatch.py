"""NextBatch_v2 kernels: block permutation, intra-block affine map, position resolution.

These implement the train order of an epoch and one call's positions
(``docs/nextbatch_v2.md``, sections 5 and 6) over arrays. They trust their
inputs: the Python layer (``dlkit.nextbatch``) validates cardinality, block size and positions
before calling, so every position passed in is below ``n`` and ``block_order`` is the epoch's
permutation of ``n // block_size`` full blocks.
"""

from __future__ import annotations

import numpy as np

from dlkit.core.jit import kernel
from dlkit.core.philox import philox_draw_u64_pair

INTRA_BLOCK_STREAM = np.uint64(1 << 63)


@kernel
def seeded_block_permute(seed_words, num_full_blocks):
    """SeededBlockPermute_v1: Fisher-Yates over the full blocks with draw ``v = i``."""
    order = np.arange(num_full_blocks, dtype=np.uint64)
    count = np.uint64(num_full_blocks)
    for i in range(num_full_blocks - 1 if num_full_blocks > 0 else 0):
        r, _ = philox_draw_u64_pair(seed_words, np.uint64(i))
        j = np.uint64(i) + r % (count - np.uint64(i))
        order[i], order[j] = order[j], order[i]
    return order


@kernel
def _gcd(a, b):
    while b != 0:
        a, b = b, a % b
    return a


@kernel
def intra_block_params(seed_words, block_id, m):
    """SeededIntraBlockMap_v1's ``(a, c)`` for a block of length ``m`` (``j = a*x + c mod m``).

    ``a`` starts at ``1 + k0 mod (m-1)`` and scans forward cyclically over ``[1, m-1]`` to the
    first value coprime with ``m``; ``c = k1 mod m``. A block of length 1 is the identity.
    Returns ``(0, 0)`` for ``m == 1`` and ``(0, m)`` in the unreachable no-coprime case, which
    the caller reports as CONTRACT_VIOLATION.
    """
    m = np.uint64(m)
    if m <= np.uint64(1):
        return np.uint64(0), np.uint64(0)
    k0, k1 = philox_draw_u64_pair(seed_words, INTRA_BLOCK_STREAM + np.uint64(block_id))
    span = m - np.uint64(1)
    first = k0 % span
    for step in range(span):
        candidate = np.uint64(1) + (first + np.uint64(step)) % span
        if _gcd(candidate, m) == np.uint64(1):
            return candidate, k1 % m
    return np.uint64(0), m


@kernel
def resolve_shuffled(block_order, seed_words, n, block_size, starts, lengths, out):
    """Fill ``out`` with the original indices of the position slices ``[start, start+length)``.

    Slices are written back to back. Block parameters are computed once per run of positions
    inside one block (and reused across consecutive slices in the same block); within a run the
    affine map advances by one modular addition per index, so there is no division per index.
    """
    n = np.uint64(n)
    block_size = np.uint64(block_size)
    num_full_blocks = n // block_size
    cached_block = np.uint64(0xFFFFFFFFFFFFFFFF)
    a = np.uint64(0)
    c = np.uint64(0)
    m = np.uint64(1)
    base = np.uint64(0)
    written = 0
    for s in range(starts.shape[0]):
        position = np.uint64(starts[s])
        remaining = np.uint64(lengths[s])
        while remaining > np.uint64(0):
            block = position // block_size
            local = position - block * block_size
            permuted = block if block == num_full_blocks else block_order[block]
            if permuted != cached_block:
                cached_block = permuted
                base = permuted * block_size
                m = min(block_size, n - base)
                a, c = intra_block_params(seed_words, permuted, m)
            run = min(remaining, m - local)
            j = (a * local + c) % m if m > np.uint64(1) else np.uint64(0)
            for k in range(run):
                out[written + k] = base + j
                j += a
                if j >= m:
                    j -= m
            written += run
            position += run
            remaining -= run
    return out


@kernel
def resolve_sequential(starts, lengths, out):
    """Eval/infer order: position ``p`` is index ``p`` (slices written back to back)."""
    written: int | np.uint64 = 0  # (a local's annotation is not compiled: Numba never sees it)
    for s in range(starts.shape[0]):
        start = np.uint64(starts[s])
        for k in range(np.uint64(lengths[s])):
            out[written + k] = start + np.uint64(k)
        written += np.uint64(lengths[s])
    return out
