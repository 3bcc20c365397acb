"""Replay tokens, epoch seeds and config hashes (docs/nextbatch_v2.md, sections 2 and 3),
each a pure function.

A manifest selects its train sampling mode (``data.sampling_mode``); the mode decides the
NextBatch version and with it the domain-separation strings of every seed, token and config
hash (``docs/nextbatch_v3.md``). ``train_mode`` defaults to v2 everywhere.
"""

from __future__ import annotations

from enum import StrEnum
from functools import lru_cache

import numpy as np

from dlkit.encoding import cbor_sha256, require_uint, sha256
from dlkit.errors import InvalidArgumentError

SAMPLING_MODE_TRAIN = "SHUFFLE_WITHOUT_REPLACEMENT_BLOCK_AFFINE_V1"
SAMPLING_MODE_TRAIN_V3 = "SHUFFLE_WITHOUT_REPLACEMENT_FEISTEL_V3"
TRAIN_SAMPLING_MODES = (SAMPLING_MODE_TRAIN, SAMPLING_MODE_TRAIN_V3)
SAMPLING_MODE_SEQUENTIAL = "SEQUENTIAL_V1"


class TrainOrder(StrEnum):
    """A run's train order, by its NextBatch version: its value is the manifest's
    ``data.sampling_mode`` (a manifest without one is ``V2``), its ``short`` name what users
    write (``"v2"``, ``"v3"``). ``V3`` is NextBatch_v3's Feistel shuffle (the sampler's
    default: a real shuffle), ``V2`` NextBatch_v2's block-affine order (an arithmetic
    progression within a block), kept for runs that started with it."""

    V2 = SAMPLING_MODE_TRAIN
    V3 = SAMPLING_MODE_TRAIN_V3

    @property
    def short(self) -> str:
        """The order's short name: ``"v2"`` or ``"v3"``."""
        return "v2" if self is TrainOrder.V2 else "v3"

    @classmethod
    def parse(cls, value: object) -> TrainOrder:
        """``value`` (a ``TrainOrder``, its short name in any case, or its manifest name) as
        a ``TrainOrder``."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            key = value.strip().lower()
            for order in cls:
                if key == order.short or value == order.value:
                    return order
        raise InvalidArgumentError(f"sampling mode must be v3 (NextBatch_v3, Feistel shuffle) "
                                   f"or v2 (NextBatch_v2, block-affine), got {value!r}")
SUBSAMPLING_MODE_TRAIN = "SHUFFLE_WITHOUT_REPLACEMENT"
SUBSAMPLING_MODE_NONE = "NONE"
FAILURE_OPERATOR = "UML_OS.Data.NextBatch_v2"
FAILURE_OPERATOR_V3 = "UML_OS.Data.NextBatch_v3"

# Per train mode: (epoch seed tag, data_replay_t tag, config-hash constants).
_MODE_STRINGS = {
    SAMPLING_MODE_TRAIN: ("nextbatch_epoch_seed_v2", "nextbatch_v2",
                          ("epoch_seed_rule_v2", "intra_block_affine_coprime_v1",
                           "rank_contiguous_shard_v1")),
    SAMPLING_MODE_TRAIN_V3: ("nextbatch_epoch_seed_v3", "nextbatch_v3",
                             ("epoch_seed_rule_v3", "feistel_mixed_radix_6r_v1",
                              "rank_contiguous_shard_v1")),
}


@lru_cache(maxsize=64)
def kernel_replay_token(seed: int) -> bytes:
    """``SHA-256(CBOR(["kernel_replay_token_v1", uint64(seed)]))``."""
    return cbor_sha256(["kernel_replay_token_v1", require_uint(seed, 64, "seed")])


def epoch_seed(replay_token: bytes, manifest_hash: bytes, dataset_key: str, epoch: int,
               train_mode: str = SAMPLING_MODE_TRAIN) -> bytes:
    """The 16-byte Philox seed of one epoch of one dataset."""
    return cbor_sha256(
        [_MODE_STRINGS[train_mode][0], replay_token, manifest_hash, dataset_key,
         require_uint(epoch, 64, "epoch")]
    )[:16]


def epoch_seed_hash(seed_bytes: bytes) -> bytes:
    """What trace records carry instead of the raw epoch seed."""
    return sha256(seed_bytes)


def seed_words(seed_bytes: bytes) -> np.ndarray:
    """The epoch seed as Philox words ``s0..s3`` (little-endian uint32, held in uint64)."""
    return np.frombuffer(seed_bytes, dtype="<u4").astype(np.uint64)


def data_replay_token(replay_token: bytes, dataset_key: str, epoch: int, global_position: int,
                      world_size: int, rank: int, train_mode: str = SAMPLING_MODE_TRAIN) -> bytes:
    """``data_replay_t`` of one call, keyed by the cursor it started from."""
    return cbor_sha256(
        [_MODE_STRINGS[train_mode][1], replay_token, dataset_key, require_uint(epoch, 64, "epoch"),
         require_uint(global_position, 64, "global_position"),
         require_uint(world_size, 32, "world_size"), require_uint(rank, 32, "rank")]
    )


@lru_cache(maxsize=64)
def sampler_config_hash(sampling_mode: str, sampler_block_size: int, drop_last: bool,
                        train_mode: str = SAMPLING_MODE_TRAIN) -> bytes:
    """``sampling_mode`` is the call's (a train mode or SEQUENTIAL_V1); ``train_mode`` the
    manifest's, which picks the constant strings."""
    return cbor_sha256(
        [sampling_mode, require_uint(sampler_block_size, 64, "sampler_block_size"),
         bool(drop_last), *_MODE_STRINGS[train_mode][2]]
    )
