"""A slow, plain-Python NextBatch_v2 written straight from the pinned profile.

It shares no code with ``dlkit`` (only ``cbor2`` and ``hashlib``), so agreement between the two
is evidence, not tautology. Every function mirrors one paragraph of the profile.
"""

from __future__ import annotations

import hashlib
import math
from array import array

import cbor2

MASK32 = 0xFFFFFFFF
DEFAULT_BLOCK_SIZE = 1_048_576


def philox(counter, key):
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(10):
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & MASK32
        k0 = (k0 + 0x9E3779B9) & MASK32
        k1 = (k1 + 0xBB67AE85) & MASK32
    return c0, c1, c2, c3


def h(value) -> bytes:
    return hashlib.sha256(cbor2.dumps(value, canonical=True)).digest()


def kernel_replay_token(seed: int) -> bytes:
    return h(["kernel_replay_token_v1", seed])


def manifest_hash(manifest: dict) -> bytes:
    data = {"sampler_block_size": DEFAULT_BLOCK_SIZE, "drop_last": False}
    data.update(manifest.get("data", {}))
    m = {"seed": manifest["seed"], "global_batch_size": manifest["global_batch_size"],
         "data": data,
         "datasets": {k: {**v, "hash": bytes.fromhex(v["hash"])}
                      for k, v in manifest["datasets"].items()}}
    return h(m)


def epoch_seed(manifest: dict, key: str, epoch: int) -> bytes:
    return h(["nextbatch_epoch_seed_v2", kernel_replay_token(manifest["seed"]),
              manifest_hash(manifest), key, epoch])[:16]


def draw(seed: bytes, v: int):
    s = [int.from_bytes(seed[4 * i:4 * i + 4], "little") for i in range(4)]
    return philox((v & MASK32, v >> 32, s[2], s[3]), (s[0], s[1]))


def block_permute(num_full_blocks: int, seed: bytes) -> list[int]:
    order = list(range(num_full_blocks))
    for i in range(num_full_blocks - 1):
        r0, r1, _, _ = draw(seed, i)
        j = i + (r0 | (r1 << 32)) % (num_full_blocks - i)
        order[i], order[j] = order[j], order[i]
    return order


def affine_params(block: int, m: int, seed: bytes) -> tuple[int, int]:
    if m == 1:
        return 0, 0
    r0, r1, r2, r3 = draw(seed, 2 ** 63 + block)
    k0, k1 = r0 | (r1 << 32), r2 | (r3 << 32)
    a = 1 + k0 % (m - 1)
    for i in range(m - 1):
        candidate = 1 + ((a - 1 + i) % (m - 1))
        if math.gcd(candidate, m) == 1:
            return candidate, k1 % m
    raise AssertionError("no coprime multiplier")


class Epoch:
    """One epoch's permutation, evaluated position by position."""

    def __init__(self, manifest: dict, key: str, epoch: int):
        self.n = manifest["datasets"][key]["cardinality"]
        self.block_size = manifest.get("data", {}).get("sampler_block_size", DEFAULT_BLOCK_SIZE)
        self.seed = epoch_seed(manifest, key, epoch)
        self.full_blocks = self.n // self.block_size
        self.order = block_permute(self.full_blocks, self.seed)
        self.params: dict[int, tuple[int, int, int]] = {}

    def index(self, p: int) -> int:
        block = p // self.block_size
        permuted = self.full_blocks if block == self.full_blocks else self.order[block]
        start = permuted * self.block_size
        m = min(self.block_size, self.n - start)
        if permuted not in self.params:
            self.params[permuted] = (*affine_params(permuted, m, self.seed), m)
        a, c, m = self.params[permuted]
        return start + (a * (p % self.block_size) + c) % m if m > 1 else start

    def all_indices(self) -> list[int]:
        """The whole epoch, one block at a time (a list comprehension per block keeps it fast)."""
        out: list[int] = []
        bs = self.block_size
        for block in range(-(-self.n // bs)):
            permuted = self.full_blocks if block == self.full_blocks else self.order[block]
            start = permuted * bs
            m = min(bs, self.n - start)
            a, c = affine_params(permuted, m, self.seed)
            out.extend([start + (a * x + c) % m for x in range(m)] if m > 1 else [start])
        return out


def next_batch(manifest: dict, key: str, world_size: int, rank: int, stage: str,
               cursor: tuple[int, int], epoch_class=None):
    """The seed's procedure, steps 1-14, with the profile's P7 resolutions.

    ``epoch_class`` swaps in another train order with the same procedure (NextBatch_v3).
    """
    epoch, g = cursor
    n = manifest["datasets"][key]["cardinality"]
    gbs = manifest["global_batch_size"]
    drop_last = manifest.get("data", {}).get("drop_last", False)
    micro = gbs // world_size
    rank_start = rank * micro
    limit = (n // gbs) * gbs if (stage == "train" and drop_last) else n
    if stage == "train":
        ep = (epoch_class or Epoch)(manifest, key, epoch)
        indices = []
        for i in range(micro):
            p = g + rank_start + i
            if p >= limit:
                break
            indices.append(ep.index(p))
        produced = min(gbs, limit - g)
    else:
        indices = [p for p in range(g + rank_start, g + rank_start + micro) if p < n]
        produced = gbs
    g += produced
    if g >= limit:
        epoch, g = epoch + 1, 0
    return indices, (epoch, g)


def data_replay_t(manifest: dict, key: str, epoch: int, position: int, world_size: int,
                  rank: int) -> bytes:
    return h(["nextbatch_v2", kernel_replay_token(manifest["seed"]), key, epoch, position,
              world_size, rank])


def rank_stream(full_sequence: list[int], gbs: int, world_size: int, rank: int,
                start: int = 0) -> list[int]:
    """A rank's slice of every global batch of an epoch given the world_size=1 sequence."""
    micro = gbs // world_size
    out: list[int] = []
    for g in range(start, len(full_sequence), gbs):
        out.extend(full_sequence[g + rank * micro: g + rank * micro + micro])
    return out


def digest(indices: list[int]) -> str:
    return hashlib.sha256(array("Q", indices).tobytes()).hexdigest()
