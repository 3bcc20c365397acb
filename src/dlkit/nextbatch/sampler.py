"""NextBatch_v2: the pure ``next_batch`` and its chunked streaming form.

``SamplingPlan.create`` performs the profile's P7 validation in order (everything that does
not depend on the cursor); ``plan.next_batch(cursor)`` checks the cursor and returns one
rank's micro-batch, the next cursor and the 0.I metadata. ``plan.iter_chunks`` yields many
steps per kernel call with the same semantics, for streaming whole epochs.

Which sample a position holds is the plan's epoch order (``dlkit.nextbatch.orders``: v2's
block-affine shuffle, v3's Feistel permutation, or sequential), picked once by ``create``; the
plan adds what every order shares: validation, cursor arithmetic, chunking and metadata.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from dlkit.encoding import UINT32_MAX, UINT64_MAX
from dlkit.errors import (
    BatchSizeInconsistentError,
    CardinalityMismatchError,
    ContractViolationError,
    GlobalPositionExceedsCardinalityError,
    InvalidDatasetKeyError,
    InvalidStageTypeError,
    NextBatchError,
)
from dlkit.nextbatch import tokens
from dlkit.nextbatch.cursor import Cursor
from dlkit.nextbatch.orders import TRAIN_ORDERS, EpochOrder, order_for
from dlkit.nextbatch.run_manifest import RunManifest
from dlkit.nextbatch.stage import Stage
from dlkit.text import did_you_mean

MAX_BLOCK_SIZE = 1 << 32
DEFAULT_CHUNK_INDICES = 1 << 20


@dataclass(frozen=True)
class SamplingMetadata:
    """The seed's 0.I outputs and 7) minimum metrics for one call."""

    dataset_key: str
    stage: str
    epoch: int
    global_position: int
    world_size: int
    rank: int
    is_shuffled: bool
    micro_batch_size: int
    global_batch_size: int
    effective_batch_size: int
    effective_q: float
    subsampling_mode: str
    sampling_mode: str
    sampler_block_size: int
    sampler_config_hash: bytes
    epoch_seed_hash: bytes
    data_replay_t: bytes
    blocks_materialized: int
    num_indices: int


@dataclass(frozen=True)
class BatchResult:
    indices: np.ndarray
    cursor: Cursor
    metadata: SamplingMetadata


@dataclass(frozen=True)
class StepChunk:
    """Consecutive steps of one epoch: ``indices`` split by ``counts``, one entry per step."""

    cursor_before: Cursor
    cursor_after: Cursor
    counts: np.ndarray
    indices: np.ndarray

    @property
    def num_steps(self) -> int:
        return int(self.counts.shape[0])

    def step_cursors(self, plan: SamplingPlan) -> Iterator[Cursor]:
        """The cursor before each step of the chunk."""
        cursor = self.cursor_before
        for _ in range(self.num_steps):
            yield cursor
            cursor = plan.advance(cursor)

    def split(self) -> list[np.ndarray]:
        return np.split(self.indices, np.cumsum(self.counts)[:-1])


@dataclass(frozen=True)
class SamplingPlan:
    """A validated (manifest, dataset, world size, rank, stage): everything but the cursor.

    ``order`` is the order of the dataset's epochs, chosen once here (``orders.order_for``):
    the manifest's train order for the train stage, sequential for eval and infer."""

    manifest: RunManifest
    dataset_key: str
    world_size: int
    rank: int
    stage: Stage
    cardinality: int
    micro_batch_size: int
    epoch_limit: int
    order: EpochOrder

    @classmethod
    def create(cls, manifest: RunManifest, dataset_key: str, world_size: int, rank: int,
               stage: str | Stage = Stage.TRAIN, *,
               actual_cardinality: int | None = None) -> SamplingPlan:
        """Validate in the profile's order (P7); raise the matching coded error."""
        operator = TRAIN_ORDERS[manifest.data.sampling_mode].failure_operator
        entry = manifest.datasets.get(dataset_key) if isinstance(dataset_key, str) else None
        if entry is None:
            known = ", ".join(sorted(manifest.datasets))
            raise InvalidDatasetKeyError(
                f"dataset key {dataset_key!r} is not in the manifest (known: {known})"
                f"{did_you_mean(dataset_key, manifest.datasets)}",
                record={"dataset_key": dataset_key if isinstance(dataset_key, str) else None,
                        "failure_operator": operator})
        failure = {"dataset_key": dataset_key, "failure_operator": operator}
        try:
            stage = Stage(stage)
        except ValueError:
            raise InvalidStageTypeError(
                f"stage {stage!r} is not one of train, eval, infer", record=failure) from None
        for name, value in (("world_size", world_size), ("rank", rank)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= UINT32_MAX:
                raise ContractViolationError(f"{name} must be a uint32, got {value!r}", record=failure)
        n = entry.cardinality
        gbs = manifest.global_batch_size
        block_size = manifest.data.sampler_block_size
        drop_last = manifest.data.drop_last
        if gbs == 0:
            raise BatchSizeInconsistentError("global_batch_size is 0", record=failure)
        if world_size == 0:
            raise BatchSizeInconsistentError("world_size is 0", record=failure)
        if gbs % world_size != 0:
            raise BatchSizeInconsistentError(
                f"global_batch_size {gbs} is not divisible by world_size {world_size}",
                record=failure)
        if rank >= world_size:
            raise BatchSizeInconsistentError(
                f"rank {rank} is not below world_size {world_size}", record=failure)
        if not 1 <= block_size <= MAX_BLOCK_SIZE:
            raise BatchSizeInconsistentError(
                f"sampler_block_size {block_size} is outside [1, 2^32]", record=failure)
        if stage is Stage.TRAIN and drop_last and gbs > n:
            raise BatchSizeInconsistentError(
                f"train with drop_last needs global_batch_size {gbs} <= cardinality {n}: "
                "every epoch would be empty", record=failure)
        if actual_cardinality is not None and actual_cardinality != n:
            raise CardinalityMismatchError(
                f"dataset {dataset_key!r} declares cardinality {n} but the data has "
                f"{actual_cardinality} rows", record=failure)
        if n == 0:
            raise CardinalityMismatchError(f"dataset {dataset_key!r} has cardinality 0",
                                           record=failure)
        order = order_for(manifest, dataset_key, shuffled=stage.is_shuffled)
        problem = order.limit_error()
        if problem is not None:
            raise ContractViolationError(problem, record=failure)
        epoch_limit = (n // gbs) * gbs if (stage is Stage.TRAIN and drop_last) else n
        return cls(manifest, dataset_key, world_size, rank, stage, n, gbs // world_size,
                   epoch_limit, order)

    @property
    def train_mode(self) -> str:
        """The manifest's train sampling mode (v2's block-affine order or v3's Feistel)."""
        return self.order.train_mode

    # --- cursor arithmetic (docs/nextbatch_v2.md, section 6) -------------------------------

    @property
    def global_batch_size(self) -> int:
        return self.manifest.global_batch_size

    @property
    def rank_start(self) -> int:
        return self.rank * self.micro_batch_size

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.epoch_limit // self.global_batch_size)

    def steps_to_epoch_end(self, cursor: Cursor) -> int:
        """Calls left in ``cursor``'s epoch, the current one included."""
        return -(-(self.epoch_limit - cursor.global_index) // self.global_batch_size)

    def check_cursor(self, cursor: Cursor) -> None:
        if cursor.global_index >= self.epoch_limit:
            raise GlobalPositionExceedsCardinalityError(
                f"cursor global_index {cursor.global_index} is not below the epoch limit "
                f"{self.epoch_limit} of dataset {self.dataset_key!r}",
                record=self._failure_record(cursor))

    def advance(self, cursor: Cursor) -> Cursor:
        """The cursor after one call (no validation: ``cursor`` has been checked)."""
        g = cursor.global_index
        if self.stage is Stage.TRAIN:
            g += min(self.global_batch_size, self.epoch_limit - g)
        else:
            g += self.global_batch_size
            if g > UINT64_MAX:
                raise ContractViolationError(
                    f"global_index {cursor.global_index} + global_batch_size "
                    f"{self.global_batch_size} overflows uint64",
                    record=self._failure_record(cursor))
        if g < self.epoch_limit:
            return Cursor(cursor.epoch, g)
        if cursor.epoch == UINT64_MAX:
            raise ContractViolationError("epoch counter overflows uint64",
                                         record=self._failure_record(cursor))
        return Cursor(cursor.epoch + 1, 0)

    def advance_by(self, cursor: Cursor, calls: int) -> Cursor:
        """The cursor after ``calls`` calls from ``cursor`` (``advance`` that many times, in
        O(1)): the calls left in ``cursor``'s epoch, then whole epochs of ``steps_per_epoch``
        calls, each call but an epoch's last moving one global batch on."""
        left = self.steps_to_epoch_end(cursor)
        if self.stage is not Stage.TRAIN and calls:
            # eval positions are not clamped: ``advance`` refuses a call whose position
            # overflows, so the furthest call of the first epoch, then of the next, is tried
            gbs = self.global_batch_size
            furthest = [Cursor(cursor.epoch, cursor.global_index + (min(calls, left) - 1) * gbs)]
            if calls > left and cursor.epoch < UINT64_MAX:
                later = min(calls - left, self.steps_per_epoch) - 1
                furthest.append(Cursor(cursor.epoch + 1, later * gbs))
            for last in furthest:
                if last.global_index + gbs > UINT64_MAX:
                    self.advance(last)  # raises its overflow error
        if calls < left:
            return Cursor(cursor.epoch, cursor.global_index + calls * self.global_batch_size)
        epochs, call = divmod(calls - left, self.steps_per_epoch)
        epoch = cursor.epoch + 1 + epochs
        if epoch > UINT64_MAX:
            raise ContractViolationError("epoch counter overflows uint64",
                                         record=self._failure_record(cursor))
        return Cursor(epoch, call * self.global_batch_size)

    def cursor_at(self, step: int) -> Cursor:
        """The cursor after ``step`` calls from the start (epoch 0, position 0)."""
        return self.advance_by(Cursor(), step)

    def slice_of(self, cursor: Cursor) -> tuple[int, int]:
        """(first position, count) of this rank's micro-batch at ``cursor``."""
        start = cursor.global_index + self.rank_start
        count = max(0, min(self.micro_batch_size, self.epoch_limit - start))
        return start, count

    # --- emitting -------------------------------------------------------------------------

    def epoch_seed(self, epoch: int) -> bytes:
        return self.order.epoch_seed(epoch)

    def resolve(self, epoch: int, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Original indices of the position slices (all below the epoch limit) of ``epoch``."""
        out = np.empty(int(counts.sum()), dtype=np.uint64)
        if out.shape[0] == 0:
            return out
        return self.order.resolve(epoch, starts, counts, out)

    def next_batch(self, cursor: Cursor) -> BatchResult:
        """One call of NextBatch_v2: this rank's indices, the next cursor, the metadata."""
        self.check_cursor(cursor)
        cursor_next = self.advance(cursor)
        start, count = self.slice_of(cursor)
        indices = self.resolve(cursor.epoch, np.array([start if count else 0], dtype=np.uint64),
                               np.array([count], dtype=np.uint64))
        return BatchResult(indices, cursor_next, self.metadata(cursor))

    def iter_chunks(self, cursor: Cursor, steps: int | None = None,
                    max_chunk_indices: int = DEFAULT_CHUNK_INDICES) -> Iterator[StepChunk]:
        """Yield ``steps`` consecutive calls from ``cursor`` (``None``: to the end of its epoch).

        Each chunk stays within one epoch and holds at most about ``max_chunk_indices``
        indices, so a whole epoch of any size streams in bounded memory.
        """
        self.check_cursor(cursor)
        remaining = steps
        steps_per_chunk = max(1, max_chunk_indices // max(1, self.micro_batch_size))
        gbs = self.global_batch_size
        while remaining is None or remaining > 0:
            g = cursor.global_index
            left_in_epoch = -(-(self.epoch_limit - g) // gbs)
            k = left_in_epoch if remaining is None else min(remaining, left_in_epoch)
            k = min(k, steps_per_chunk)
            last_step_ends_epoch = k == left_in_epoch
            # Every step but an epoch's last has a full micro-batch starting below the limit.
            full = k - 1 if last_step_ends_epoch else k
            starts = (np.uint64(g + self.rank_start) + np.arange(full, dtype=np.uint64) * np.uint64(gbs)
                      if full else np.empty(0, dtype=np.uint64))
            counts = np.full(full, self.micro_batch_size, dtype=np.uint64)
            if last_step_ends_epoch:
                start, count = self.slice_of(Cursor(cursor.epoch, g + full * gbs))
                starts = np.append(starts, np.uint64(start if count else 0))
                counts = np.append(counts, np.uint64(count))
            cursor_after = Cursor(cursor.epoch, g + k * gbs) if not last_step_ends_epoch else \
                self.advance(Cursor(cursor.epoch, g + full * gbs))
            indices = self.resolve(cursor.epoch, starts, counts)
            yield StepChunk(cursor, cursor_after, counts, indices)
            cursor = cursor_after
            if remaining is None:
                if last_step_ends_epoch:
                    return
            else:
                remaining -= k

    def count_indices(self, cursor: Cursor, steps: int | None) -> int:
        """How many indices ``iter_chunks(cursor, steps)`` emits, without computing them."""
        self.check_cursor(cursor)
        total = 0
        remaining = steps
        while remaining is None or remaining > 0:
            g = cursor.global_index
            left_in_epoch = -(-(self.epoch_limit - g) // self.global_batch_size)
            k = left_in_epoch if remaining is None else min(remaining, left_in_epoch)
            if k == left_in_epoch:
                last = Cursor(cursor.epoch, g + (k - 1) * self.global_batch_size)
                total += (k - 1) * self.micro_batch_size + self.slice_of(last)[1]
                cursor = self.advance(last)
                if remaining is None:
                    return total
                remaining -= k
                # every epoch from its start emits the same: whole epochs at once, so a
                # count of any size is O(1), not a walk over its epochs
                per_epoch_steps = self.steps_to_epoch_end(cursor)
                whole = remaining // per_epoch_steps
                if whole:
                    total += whole * self.count_indices(cursor, per_epoch_steps)
                    remaining -= whole * per_epoch_steps
                    if cursor.epoch + whole > UINT64_MAX:
                        raise ContractViolationError("epoch counter overflows uint64",
                                                     record=self._failure_record(cursor))
                    cursor = Cursor(cursor.epoch + whole, 0)
            else:
                total += k * self.micro_batch_size
                remaining = None if remaining is None else remaining - k
        return total

    # --- metadata --------------------------------------------------------------------------

    def metadata(self, cursor: Cursor) -> SamplingMetadata:
        start, count = self.slice_of(cursor)
        block_size = self.manifest.data.sampler_block_size
        train = self.stage is Stage.TRAIN
        mode = self.order.sampling_mode
        return SamplingMetadata(
            dataset_key=self.dataset_key,
            stage=self.stage.value,
            epoch=cursor.epoch,
            global_position=cursor.global_index,
            world_size=self.world_size,
            rank=self.rank,
            is_shuffled=train,
            micro_batch_size=self.micro_batch_size,
            global_batch_size=self.global_batch_size,
            effective_batch_size=self.global_batch_size,
            effective_q=float(self.global_batch_size) / float(self.cardinality),
            subsampling_mode=tokens.SUBSAMPLING_MODE_TRAIN if train else tokens.SUBSAMPLING_MODE_NONE,
            sampling_mode=mode,
            sampler_block_size=block_size,
            sampler_config_hash=tokens.sampler_config_hash(mode, block_size,
                                                           self.manifest.data.drop_last,
                                                           self.train_mode),
            epoch_seed_hash=tokens.epoch_seed_hash(self.epoch_seed(cursor.epoch)),
            data_replay_t=self._data_replay_t(cursor),
            blocks_materialized=self.order.blocks_materialized(start, count),
            num_indices=count,
        )

    def _data_replay_t(self, cursor: Cursor) -> bytes:
        return tokens.data_replay_token(tokens.kernel_replay_token(self.manifest.seed),
                                        self.dataset_key, cursor.epoch, cursor.global_index,
                                        self.world_size, self.rank, self.train_mode)

    def _failure_record(self, cursor: Cursor) -> dict[str, object]:
        return {"dataset_key": self.dataset_key,
                "failure_operator": self.order.failure_operator,
                "data_replay_t": self._data_replay_t(cursor).hex()}


def next_batch(manifest: RunManifest, dataset_key: str, world_size: int, rank: int,
               stage: str | Stage, cursor_in: Cursor, *,
               actual_cardinality: int | None = None) -> BatchResult:
    """NextBatch_v2 as one pure call: validate, then emit this rank's micro-batch.

    Raises a ``NextBatchError`` subclass carrying the profile's failure code before any index
    is emitted.
    """
    if not isinstance(cursor_in, Cursor):
        raise ContractViolationError(f"cursor_in must be a Cursor, got {cursor_in!r}")
    plan = SamplingPlan.create(manifest, dataset_key, world_size, rank, stage,
                               actual_cardinality=actual_cardinality)
    return plan.next_batch(cursor_in)


__all__ = ["BatchResult", "NextBatchError", "SamplingMetadata", "SamplingPlan", "Stage",
           "StepChunk", "next_batch"]
