"""One way from an open database and a configuration to the seeds of every step.

``RunConfig`` is what decides which seeds each step takes on one rank: the sampling and
split seeds, the split ratios, the train order and the global batch (``batch_size`` per rank
times ``world_size``). ``RunPlan`` turns a database and a ``RunConfig`` into the hash
splits, the run manifest, each (task, split) stream of this rank and their schedules. The
``Sampler``, ``dlkit batches`` and ``dlkit manifest`` all assemble their streams here (a
manifest alone is the plan of one rank whose batch is the global batch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlkit.errors import InvalidArgumentError
from dlkit.nextbatch import RunManifest, Stage
from dlkit.nextbatch.tokens import TrainOrder
from dlkit.sampler import knobs
from dlkit.sampler.arguments import integer
from dlkit.sampler.database import SamplerDatabase
from dlkit.sampler.schedule import SplitStream, TrainSchedule, ValSchedule, open_streams
from dlkit.sampler.splits import (
    DEFAULT_TRAIN_ORDER,
    Split,
    SplitRatios,
    TaskSplits,
    build_run_manifest,
    check_seed,
    compute_splits,
    dataset_key,
)
from dlkit.sampler.state import ChannelState
from dlkit.sampler.tasks import TaskView
from dlkit.sampler.world import World


@dataclass(frozen=True)
class RunConfig:
    """The run manifest's inputs and this rank's place in the global batch (validated)."""

    seed: int
    batch_size: int
    world: World = field(default_factory=World)
    split_seed: int = knobs.SPLIT_SEED
    split_ratios: SplitRatios = field(default_factory=SplitRatios)
    sampling_mode: TrainOrder = DEFAULT_TRAIN_ORDER
    sampler_block_size: int | None = None

    def __post_init__(self) -> None:
        # The one check of the seeds (stored as ``int``: a NumPy integer would show in
        # manifests): the Sampler, dlkit batches and dlkit manifest all pass through here.
        object.__setattr__(self, "seed", check_seed(self.seed, "seed"))
        object.__setattr__(self, "split_seed", check_seed(self.split_seed, "split_seed"))
        object.__setattr__(self, "batch_size", integer(self.batch_size, "batch_size", 1))
        if not isinstance(self.world, World):
            raise InvalidArgumentError(f"world must be a World, got {self.world!r}")
        if not isinstance(self.split_ratios, SplitRatios):
            raise InvalidArgumentError(f"split_ratios must be SplitRatios (see "
                                       f"SplitRatios.parse), got {self.split_ratios!r}")
        if not isinstance(self.sampling_mode, TrainOrder):
            raise InvalidArgumentError(f"sampling_mode must be a TrainOrder (see "
                                       f"TrainOrder.parse), got {self.sampling_mode!r}")

    @classmethod
    def parse(cls, *, seed: Any = knobs.SEED, batch_size: Any = knobs.BATCH_SIZE,
              world: World | None = None, split_seed: Any = knobs.SPLIT_SEED,
              split_ratios: Any = knobs.SPLIT_RATIOS, sampling_mode: Any = knobs.TRAIN_ORDER,
              sampler_block_size: int | None = None) -> RunConfig:
        """The run of these arguments as a user gives them: ratios may be text or a
        sequence, the train order a ``TrainOrder`` or its name."""
        return cls(seed=seed, batch_size=batch_size, world=World() if world is None else world,
                   split_seed=split_seed, split_ratios=SplitRatios.parse(split_ratios),
                   sampling_mode=TrainOrder.parse(sampling_mode),
                   sampler_block_size=sampler_block_size)

    @property
    def rank(self) -> int:
        return self.world.rank

    @property
    def world_size(self) -> int:
        return self.world.world_size

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.world_size


class RunPlan:
    """The splits, run manifest, streams and schedules of ``config`` over ``db``.

    Splits and the manifest are made on construction (a bad configuration fails here);
    streams and schedules on request, since a run may never open its test stream.
    """

    def __init__(self, db: SamplerDatabase, config: RunConfig):
        self.config = config
        self.database_id = db.database_id
        self.splits: tuple[TaskSplits, ...] = compute_splits(db.tasks, config.split_seed,
                                                             config.split_ratios)
        self.manifest: RunManifest = build_run_manifest(
            db.database_id, db.database_hash, self.splits, seed=config.seed,
            global_batch_size=config.global_batch_size, split_seed=config.split_seed,
            ratios=config.split_ratios, sampler_block_size=config.sampler_block_size,
            sampling_mode=config.sampling_mode)

    def streams(self, split: Split, views: Sequence[TaskView],
                weights: Mapping[str, float] | None = None, database: int = 0
                ) -> tuple[SplitStream, ...]:
        """This rank's streams of ``split`` of the tasks ``views`` (weight 0: the user left
        the task out of training) of the database at position ``database`` of the sampler's
        list; datasets without seeds here are skipped with a warning."""
        index = split.code
        keys = [(dataset_key(self.database_id, view.name, split.value), view,
                 self.splits[view.index].positions[index])
                for view in views if weights is None or weights[view.name] != 0]
        stage = Stage.TRAIN if split is Split.TRAIN else Stage.EVAL
        return tuple(open_streams(self.manifest, keys, self.config.world_size,
                                  self.config.rank, stage, database))

    def train_schedule(self, streams: Sequence[SplitStream], weights: Sequence[float],
                       state: ChannelState) -> TrainSchedule:
        """Train steps from ``state`` on, the task of each step drawn by ``weights``."""
        return TrainSchedule(streams, weights, self.config.seed, state.step, state.cursors)

    @staticmethod
    def eval_schedule(streams: Sequence[SplitStream], state: ChannelState) -> ValSchedule:
        """Val or test steps from ``state`` on, every stream in order, round and round."""
        return ValSchedule(streams, state.step, state.current, state.cursors)


def initial_state(channel: Split, streams: Sequence[SplitStream]) -> ChannelState:
    """Channel ``channel``'s state before its first batch, over ``streams``."""
    return ChannelState.initial(channel.value, [stream.key for stream in streams])
