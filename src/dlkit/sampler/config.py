"""``SamplerConfig``: everything that decides a ``Sampler``'s batches, validated once.

``SamplerConfig.create`` resolves the ``Sampler``'s arguments (its ``World`` from the
torchrun environment, split ratios from text, task weights by name) into one frozen record;
its ``run`` is the ``RunConfig`` the streams are assembled from (``dlkit.sampler.run_plan``),
which checks the seeds, the ratios and the train order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dlkit.errors import InvalidArgumentError
from dlkit.nextbatch.tokens import TrainOrder
from dlkit.sampler.arguments import integer, is_number
from dlkit.sampler.batch import BatchConfig, ChildPolicy
from dlkit.sampler.run_plan import RunConfig
from dlkit.sampler.splits import DEFAULT_TRAIN_ORDER, SplitRatios
from dlkit.sampler.world import World
from dlkit.text import unknown_name


def task_weights_for(names: Sequence[str], weights: Any) -> tuple[float, ...]:
    """One non-negative finite weight per task named ``names`` (uniform by default)."""
    if weights is None:
        return tuple(1.0 for _ in names)
    if isinstance(weights, Mapping):
        unknown = sorted(set(weights) - set(names))
        if unknown:
            # worded as every unknown task: the caller may have taken it from a --task
            raise InvalidArgumentError(unknown_name("task", unknown[0], names, "the database"))
        values = [weights.get(name, 0.0) for name in names]
    else:
        values = list(weights)
        if len(values) != len(names):
            raise InvalidArgumentError(f"task_weights has {len(values)} values for "
                                       f"{len(names)} tasks ({', '.join(names)})")
    for name, v in zip(names, values):
        if not is_number(v, 0):
            raise InvalidArgumentError(f"task weight of {name!r} must be a finite number >= 0, "
                                       f"got {v!r}")
    if not any(values):
        raise InvalidArgumentError("task_weights are all zero: no task could be sampled")
    return tuple(float(v) for v in values)


@dataclass(frozen=True)
class SamplerConfig:
    """Everything that decides the batches (and the prefetch knobs that do not)."""

    world: World
    split_ratios: SplitRatios
    split_seed: int
    seed: int
    num_prefetch: int
    batch_size: int
    sequence_length: int
    max_rows: int
    bfs_child_width: int
    task_weights: tuple[float, ...] | None
    num_threads: int
    sampling_mode: TrainOrder = DEFAULT_TRAIN_ORDER
    huge_pages: bool | None = None
    bfs_child_policy: ChildPolicy = ChildPolicy.UNIFORM

    def __post_init__(self) -> None:
        object.__setattr__(self, "bfs_child_policy", ChildPolicy.parse(self.bfs_child_policy))
        object.__setattr__(self, "sampling_mode", TrainOrder.parse(self.sampling_mode))
        self.batch_config  # noqa: B018 - validates S, R, the child width and huge_pages
        # Integers are stored as ``int`` (a NumPy integer would show in repr and manifests).
        for name, minimum in (("num_prefetch", 0), ("batch_size", 1), ("num_threads", 1)):
            object.__setattr__(self, name, integer(getattr(self, name), name, minimum))
        if not isinstance(self.world, World):
            raise InvalidArgumentError(f"world must be a World (see World.from_env), got "
                                       f"{self.world!r}")
        run = self.run  # validates the seeds, the ratios and the train order
        object.__setattr__(self, "seed", run.seed)
        object.__setattr__(self, "split_seed", run.split_seed)

    @classmethod
    def create(cls, tasks: Sequence[str], *, rank: Any, world_size: Any, split_ratios: Any,
               task_weights: Any, local_rank: Any, local_world_size: Any,
               **arguments: Any) -> SamplerConfig:
        """The configuration of a ``Sampler`` over a database with tasks ``tasks``: ranks
        left None come from ``$RANK``, ``$WORLD_SIZE``, ``$LOCAL_RANK`` and
        ``$LOCAL_WORLD_SIZE``, ratios may be text, weights a mapping by task name; the other
        ``arguments`` are fields as they are."""
        return cls(world=World.from_env(rank, world_size, local_rank, local_world_size),
                   split_ratios=SplitRatios.parse(split_ratios),
                   task_weights=task_weights_for(tasks, task_weights),
                   **arguments)

    @property
    def rank(self) -> int:
        return self.world.rank

    @property
    def world_size(self) -> int:
        return self.world.world_size

    @property
    def local_rank(self) -> int:
        return self.world.local_rank

    @property
    def local_world_size(self) -> int:
        return self.world.local_world_size

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.world_size

    @property
    def batch_config(self) -> BatchConfig:
        return BatchConfig(self.sequence_length, self.max_rows, self.bfs_child_width,
                           self.huge_pages, self.bfs_child_policy)

    @property
    def run(self) -> RunConfig:
        return RunConfig(seed=self.seed, batch_size=self.batch_size,
                          world=World(self.rank, self.world_size), split_seed=self.split_seed,
                          split_ratios=self.split_ratios, sampling_mode=self.sampling_mode)
