"""Epoch orders: which sample each position of an epoch holds, one class per order.

A manifest's ``data.sampling_mode`` names its NextBatch version, and with it the train order
(NextBatch_v2's block-affine shuffle or NextBatch_v3's Feistel permutation) and the
domain-separation strings of its seeds, tokens and hashes. :func:`order_for` picks the order
once, when a ``SamplingPlan`` is created: the version's train order for the train stage,
:class:`SequentialOrder` (position ``p`` is sample ``p``) for eval and infer, which keeps the
version's seeds and tokens. Every order is a pure function of (manifest, dataset key, epoch,
position); the per-epoch state is recomputed from those inputs (and cached, which changes
nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar, Protocol

import numpy as np

from dlkit.core.feistel import FEISTEL_MAX_N, feistel_round_keys, resolve_feistel
from dlkit.core.nextbatch import resolve_sequential, resolve_shuffled, seeded_block_permute
from dlkit.nextbatch import tokens
from dlkit.nextbatch.run_manifest import RunManifest

# The v2 block order is materialised per epoch (8 bytes a block); past this it cannot fit.
MAX_FULL_BLOCKS = 1 << 28

EpochState = tuple[bytes, np.ndarray, np.ndarray]


class EpochOrder(Protocol):
    """What a ``SamplingPlan`` asks of the order of its dataset's epochs."""

    @property
    def sampling_mode(self) -> str:
        """The mode a call reports (``SamplingMetadata.sampling_mode``)."""
        ...

    @property
    def train_mode(self) -> str:
        """The manifest's ``data.sampling_mode``: the NextBatch version whose strings key the
        seeds, ``data_replay_t`` and ``sampler_config_hash``."""
        ...

    @property
    def failure_operator(self) -> str:
        """The operator a failure record names (``UML_OS.Data.NextBatch_v2`` or ``_v3``)."""
        ...

    def limit_error(self) -> str | None:
        """Why this order cannot serve its dataset (a ``CONTRACT_VIOLATION``), or ``None``."""
        ...

    def epoch_seed(self, epoch: int) -> bytes:
        """The 16-byte seed of ``epoch``."""
        ...

    def epoch_state(self, epoch: int) -> EpochState:
        """``epoch``'s seed, its Philox words and the order's table for the kernels (v2: the
        block order; v3: the Feistel round keys)."""
        ...

    def resolve(self, epoch: int, starts: np.ndarray, counts: np.ndarray,
                out: np.ndarray) -> np.ndarray:
        """Fill ``out`` with the samples at the position slices ``(starts, counts)``."""
        ...

    def blocks_materialized(self, start: int, count: int) -> int:
        """Blocks whose per-block state one call from ``start`` computes (a metric)."""
        ...


@lru_cache(maxsize=8)
def _block_affine_epoch(replay_token: bytes, manifest_hash: bytes, dataset_key: str, epoch: int,
                        num_full_blocks: int) -> EpochState:
    seed = tokens.epoch_seed(replay_token, manifest_hash, dataset_key, epoch)
    words = tokens.seed_words(seed)
    block_order = seeded_block_permute(words, num_full_blocks)
    block_order.setflags(write=False)
    return seed, words, block_order


@lru_cache(maxsize=8)
def _feistel_epoch(replay_token: bytes, manifest_hash: bytes, dataset_key: str,
                   epoch: int) -> EpochState:
    seed = tokens.epoch_seed(replay_token, manifest_hash, dataset_key, epoch,
                             tokens.SAMPLING_MODE_TRAIN_V3)
    words = tokens.seed_words(seed)
    round_keys = feistel_round_keys(words)
    round_keys.setflags(write=False)
    return seed, words, round_keys


@dataclass(frozen=True)
class _DatasetEpochs:
    """What a train order derives one dataset's epochs from. ``shuffled``: whether the plan
    emits this order (train) or only uses its version's seeds (eval, infer). Nothing is
    computed until an epoch is asked for."""

    manifest: RunManifest
    dataset_key: str  # a key of the manifest's datasets
    shuffled: bool

    @property
    def cardinality(self) -> int:
        return self.manifest.datasets[self.dataset_key].cardinality

    @property
    def block_size(self) -> int:
        return self.manifest.data.sampler_block_size

    def _epoch_inputs(self) -> tuple[bytes, bytes, str]:
        return (tokens.kernel_replay_token(self.manifest.seed), self.manifest.manifest_hash,
                self.dataset_key)

    def epoch_seed(self, epoch: int) -> bytes:
        return self.epoch_state(epoch)[0]

    def epoch_state(self, epoch: int) -> EpochState:
        raise NotImplementedError


@dataclass(frozen=True)
class BlockAffineOrder(_DatasetEpochs):
    """NextBatch_v2's train order: full blocks in a seeded permutation, positions inside each
    block through a seeded affine map, the tail block in place."""

    sampling_mode: ClassVar[str] = tokens.SAMPLING_MODE_TRAIN
    train_mode: ClassVar[str] = tokens.SAMPLING_MODE_TRAIN
    failure_operator: ClassVar[str] = tokens.FAILURE_OPERATOR

    @property
    def num_full_blocks(self) -> int:
        """Blocks the epoch permutes; none when nothing is shuffled (only the seed is used)."""
        return self.cardinality // self.block_size if self.shuffled else 0

    def limit_error(self) -> str | None:
        if self.num_full_blocks <= MAX_FULL_BLOCKS:
            return None
        return (f"dataset {self.dataset_key!r}: {self.num_full_blocks} full blocks of "
                f"{self.block_size} would need {8 * self.num_full_blocks / 2**30:.0f} GiB of "
                f"block order; use a larger sampler_block_size (at most {MAX_FULL_BLOCKS} blocks)")

    def epoch_state(self, epoch: int) -> EpochState:
        return _block_affine_epoch(*self._epoch_inputs(), epoch, self.num_full_blocks)

    def resolve(self, epoch: int, starts: np.ndarray, counts: np.ndarray,
                out: np.ndarray) -> np.ndarray:
        _, words, block_order = self.epoch_state(epoch)
        # uint64 scalars: a Python int above 2^63 would not fit the kernel's int64 argument.
        rows: np.ndarray = resolve_shuffled(block_order, words, np.uint64(self.cardinality),
                                            np.uint64(self.block_size), starts, counts, out)
        return rows

    def blocks_materialized(self, start: int, count: int) -> int:
        if not count:
            return 0
        return (start + count - 1) // self.block_size - start // self.block_size + 1


@dataclass(frozen=True)
class FeistelOrder(_DatasetEpochs):
    """NextBatch_v3's train order: a six-round Feistel permutation of the whole epoch, cycle
    walked into ``[0, n)``; no per-block state."""

    sampling_mode: ClassVar[str] = tokens.SAMPLING_MODE_TRAIN_V3
    train_mode: ClassVar[str] = tokens.SAMPLING_MODE_TRAIN_V3
    failure_operator: ClassVar[str] = tokens.FAILURE_OPERATOR_V3

    def limit_error(self) -> str | None:
        if self.cardinality <= FEISTEL_MAX_N:
            return None
        return (f"dataset {self.dataset_key!r} has cardinality {self.cardinality}: "
                f"NextBatch_v3's Feistel grid overflows uint64 above {FEISTEL_MAX_N}")

    def epoch_state(self, epoch: int) -> EpochState:
        return _feistel_epoch(*self._epoch_inputs(), epoch)

    def resolve(self, epoch: int, starts: np.ndarray, counts: np.ndarray,
                out: np.ndarray) -> np.ndarray:
        _, _, round_keys = self.epoch_state(epoch)
        rows: np.ndarray = resolve_feistel(round_keys, np.uint64(self.cardinality), starts,
                                           counts, out)
        return rows

    def blocks_materialized(self, start: int, count: int) -> int:
        return 0


@dataclass(frozen=True)
class SequentialOrder:
    """Eval and infer: position ``p`` is sample ``p``. Seeds, tokens and failure records stay
    those of the manifest's version (``version``)."""

    version: BlockAffineOrder | FeistelOrder
    sampling_mode: ClassVar[str] = tokens.SAMPLING_MODE_SEQUENTIAL

    @property
    def train_mode(self) -> str:
        return self.version.train_mode

    @property
    def failure_operator(self) -> str:
        return self.version.failure_operator

    def limit_error(self) -> str | None:
        return self.version.limit_error()

    def epoch_seed(self, epoch: int) -> bytes:
        return self.version.epoch_seed(epoch)

    def epoch_state(self, epoch: int) -> EpochState:
        return self.version.epoch_state(epoch)

    def resolve(self, epoch: int, starts: np.ndarray, counts: np.ndarray,
                out: np.ndarray) -> np.ndarray:
        rows: np.ndarray = resolve_sequential(starts, counts, out)
        return rows

    def blocks_materialized(self, start: int, count: int) -> int:
        return 0


TRAIN_ORDERS: dict[str, type[BlockAffineOrder] | type[FeistelOrder]] = {
    order.sampling_mode: order for order in (BlockAffineOrder, FeistelOrder)}


def order_for(manifest: RunManifest, dataset_key: str, *, shuffled: bool) -> EpochOrder:
    """The order of ``dataset_key``'s epochs (a key of ``manifest``): the manifest's train
    order when ``shuffled``, else :class:`SequentialOrder` keeping that order's seeds."""
    version = TRAIN_ORDERS[manifest.data.sampling_mode](manifest, dataset_key, shuffled)
    return version if shuffled else SequentialOrder(version)
