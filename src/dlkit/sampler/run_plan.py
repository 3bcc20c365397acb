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

from dlkit.errors import InvalidArgumentError
from dlkit.nextbatch import RunManifest, Stage
from dlkit.sampler.arguments import integer
from dlkit.sampler.database import SamplerDatabase
from dlkit.sampler.schedule import SplitStream, TrainSchedule, ValSchedule, open_streams
from dlkit.sampler.splits import (
    DEFAULT_SAMPLING_MODE,
    SplitRatios,
    TaskSplits,
    build_run_manifest,
    check_seed,
    compute_splits,
    dataset_key,
    split_index,
    train_sampling_mode,
)
from dlkit.sampler.state import ChannelState
from dlkit.sampler.tasks import TaskView


@dataclass(frozen=True)
class RunConfig:
    """The run manifest's inputs and this rank's place in the global batch (validated)."""

    seed: int
    batch_size: int
    rank: int = 0
    world_size: int = 1
    split_seed: int = 0
    split_ratios: SplitRatios = field(default_factory=SplitRatios)
    sampling_mode: str = DEFAULT_SAMPLING_MODE
    sampler_block_size: int | None = None

    def __post_init__(self) -> None:
        check_seed(self.seed, "seed")
        check_seed(self.split_seed, "split_seed")
        integer(self.batch_size, "batch_size", 1)
        integer(self.world_size, "world_size", 1)
        if not 0 <= integer(self.rank, "rank") < self.world_size:
            raise InvalidArgumentError(f"rank {self.rank} is not in [0, world_size "
                                       f"{self.world_size})")
        if not isinstance(self.split_ratios, SplitRatios):
            raise InvalidArgumentError(f"split_ratios must be SplitRatios (see "
                                       f"SplitRatios.parse), got {self.split_ratios!r}")
        train_sampling_mode(self.sampling_mode)

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

    def streams(self, split: str, views: Sequence[TaskView],
                weights: Mapping[str, float] | None = None) -> tuple[SplitStream, ...]:
        """This rank's streams of ``split`` of the tasks ``views`` (weight 0: the user left
        the task out of training); datasets without seeds here are skipped with a warning."""
        index = split_index(split)
        keys = [(dataset_key(self.database_id, view.name, split), view,
                 self.splits[view.index].positions[index])
                for view in views if weights is None or weights[view.name] != 0]
        stage = Stage.TRAIN if split == "train" else Stage.EVAL
        return tuple(open_streams(self.manifest, keys, self.config.world_size,
                                  self.config.rank, stage))

    def train_schedule(self, streams: Sequence[SplitStream], weights: Sequence[float],
                       state: ChannelState) -> TrainSchedule:
        """Train steps from ``state`` on, the task of each step drawn by ``weights``."""
        return TrainSchedule(streams, weights, self.config.seed, state.step, state.cursors)

    @staticmethod
    def eval_schedule(streams: Sequence[SplitStream], state: ChannelState) -> ValSchedule:
        """Val or test steps from ``state`` on, every stream in order, round and round."""
        return ValSchedule(streams, state.step, state.current, state.cursors)


def initial_state(channel: str, streams: Sequence[SplitStream]) -> ChannelState:
    """Channel ``channel``'s state before its first batch, over ``streams``."""
    return ChannelState.initial(channel, [stream.key for stream in streams])
