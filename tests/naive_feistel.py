"""A slow, plain-Python NextBatch_v3 written straight from docs/nextbatch_v3.md.

It shares no code with ``dlkit`` (only ``cbor2`` and ``hashlib``), so agreement between the two
is evidence, not tautology. Each function mirrors one section of the definition (§ numbers).
"""

from __future__ import annotations

import hashlib
from array import array

import cbor2

MASK32 = 0xFFFFFFFF
DEFAULT_BLOCK_SIZE = 1_048_576
V2_MODE = "SHUFFLE_WITHOUT_REPLACEMENT_BLOCK_AFFINE_V1"
V3_MODE = "SHUFFLE_WITHOUT_REPLACEMENT_FEISTEL_V3"
ROUNDS = 6


def h(value) -> bytes:
    return hashlib.sha256(cbor2.dumps(value, canonical=True)).digest()


def philox(counter, key):
    """Philox4x32-10 (profile P4)."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(10):
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & MASK32
        k0 = (k0 + 0x9E3779B9) & MASK32
        k1 = (k1 + 0xBB67AE85) & MASK32
    return c0, c1, c2, c3


def draw(seed: bytes, v: int):
    s = [int.from_bytes(seed[4 * i:4 * i + 4], "little") for i in range(4)]
    return philox((v & MASK32, v >> 32, s[2], s[3]), (s[0], s[1]))


# --- §2 manifest and seeds ------------------------------------------------------------------


def kernel_replay_token(seed: int) -> bytes:
    return h(["kernel_replay_token_v1", seed])


def manifest_hash(manifest: dict) -> bytes:
    """M: defaults filled in, except a v2 (default) sampling_mode, which is never written."""
    data = {"sampler_block_size": DEFAULT_BLOCK_SIZE, "drop_last": False}
    data.update(manifest.get("data", {}))
    if data.get("sampling_mode", V2_MODE) == V2_MODE:
        data.pop("sampling_mode", None)
    m = {"seed": manifest["seed"], "global_batch_size": manifest["global_batch_size"],
         "data": data,
         "datasets": {k: {**v, "hash": bytes.fromhex(v["hash"])}
                      for k, v in manifest["datasets"].items()}}
    return h(m)


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


def next_batch(manifest: dict, key: str, world_size: int, rank: int, stage: str,
               cursor: tuple[int, int]):
    epoch, g = cursor
    n = manifest["datasets"][key]["cardinality"]
    gbs = manifest["global_batch_size"]
    drop_last = manifest.get("data", {}).get("drop_last", False)
    micro = gbs // world_size
    rank_start = rank * micro
    limit = (n // gbs) * gbs if (stage == "train" and drop_last) else n
    if stage == "train":
        ep = Epoch(manifest, key, epoch)
        indices = [ep.index(p) for p in range(g + rank_start, min(g + rank_start + micro, limit))]
        produced = min(gbs, limit - g)
    else:
        indices = [p for p in range(g + rank_start, g + rank_start + micro) if p < n]
        produced = gbs
    g += produced
    if g >= limit:
        epoch, g = epoch + 1, 0
    return indices, (epoch, g)


def rank_stream(full_sequence: list[int], gbs: int, world_size: int, rank: int,
                start: int = 0) -> list[int]:
    """A rank's slice of every global batch from ``start`` given the world_size=1 sequence."""
    micro = gbs // world_size
    out: list[int] = []
    for g in range(start, len(full_sequence), gbs):
        out.extend(full_sequence[g + rank * micro: g + rank * micro + micro])
    return out


def digest(indices: list[int]) -> str:
    return hashlib.sha256(array("Q", indices).tobytes()).hexdigest()
