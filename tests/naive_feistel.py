"""A slow, plain-Python NextBatch_v3 written straight from docs/nextbatch_v3.md.

It shares no code with ``dlkit`` (only ``cbor2`` and ``hashlib``), so agreement between the two
is evidence, not tautology. Each function mirrors one section of the definition (§ numbers).
"""

from __future__ import annotations

import functools

# v3 is v2's procedure, Philox and hashing with another train order: those parts come from the
# v2 reference, which is itself independent of dlkit.
from tests.naive_nextbatch import (  # noqa: F401  (re-exported for the v3 tests)
    DEFAULT_BLOCK_SIZE,
    MASK32,
    digest,
    draw,
    h,
    kernel_replay_token,
    philox,
    rank_stream,
)
from tests.naive_nextbatch import manifest_hash as _v2_manifest_hash
from tests.naive_nextbatch import next_batch as _v2_procedure

V2_MODE = "SHUFFLE_WITHOUT_REPLACEMENT_BLOCK_AFFINE_V1"
V3_MODE = "SHUFFLE_WITHOUT_REPLACEMENT_FEISTEL_V3"
ROUNDS = 6


# --- §2 manifest and seeds ------------------------------------------------------------------


def manifest_hash(manifest: dict) -> bytes:
    """M as in v2, except that a v2 (default) sampling_mode is never written into it."""
    if manifest.get("data", {}).get("sampling_mode", V2_MODE) == V2_MODE:
        manifest = {**manifest, "data": {k: v for k, v in manifest.get("data", {}).items()
                                         if k != "sampling_mode"}}
    return _v2_manifest_hash(manifest)


def epoch_seed(manifest: dict, key: str, epoch: int) -> bytes:
    return h(["nextbatch_epoch_seed_v3", kernel_replay_token(manifest["seed"]),
              manifest_hash(manifest), key, epoch])[:16]


def data_replay_t(manifest: dict, key: str, epoch: int, position: int, world_size: int,
                  rank: int) -> bytes:
    return h(["nextbatch_v3", kernel_replay_token(manifest["seed"]), key, epoch, position,
              world_size, rank])


def sampler_config_hash(sampling_mode: str, block_size: int, drop_last: bool) -> bytes:
    return h([sampling_mode, block_size, drop_last, "epoch_seed_rule_v3",
              "feistel_mixed_radix_6r_v1", "rank_contiguous_shard_v1"])


# --- §3 the permutation ---------------------------------------------------------------------


def round_keys(seed: bytes) -> list[int]:
    return (list(draw(seed, 0)) + list(draw(seed, 1)))[:ROUNDS]


def grid(n: int) -> tuple[int, int]:
    """(a, kb) with kb = floor(bitlen(n - 1) / 2) and a = ceil(n / 2^kb)."""
    kb = (n - 1).bit_length() // 2
    return -(-n // (1 << kb)), kb


def round_function(value: int, key: int) -> int:
    x = (value ^ key) & MASK32
    x = (x * 0x85EBCA6B) & MASK32
    x ^= x >> 13
    return (x * 0xC2B2AE35) & MASK32


def encrypt(x: int, keys: list[int], a: int, kb: int) -> int:
    b = 1 << kb
    high, low = x >> kb, x & (b - 1)
    for i, key in enumerate(keys):
        if i % 2 == 0:
            low ^= (round_function(high, key) * b) >> 32
        else:
            high = (high + ((round_function(low, key) * a) >> 32)) % a
    return high * b + low


def index(position: int, n: int, keys: list[int]) -> int:
    a, kb = grid(n)
    y = encrypt(position, keys, a, kb)
    while y >= n:
        y = encrypt(y, keys, a, kb)
    return y


class Epoch:
    """The train order of one epoch: ``index(p)`` for any position p < N."""

    def __init__(self, manifest: dict, key: str, epoch: int):
        self.n = manifest["datasets"][key]["cardinality"]
        self.keys = round_keys(epoch_seed(manifest, key, epoch))

    def index(self, position: int) -> int:
        return index(position, self.n, self.keys)

    def all_indices(self) -> list[int]:
        return [self.index(p) for p in range(self.n)]


# --- §4 the procedure (v2's, with v3's order) ------------------------------------------------


next_batch = functools.partial(_v2_procedure, epoch_class=Epoch)
