"""``SamplerSettings`` and ``SamplerConfig``: everything that decides batches, parsed once.

``SamplerSettings`` is the composed configuration of a stream of batches: its ``RunConfig``
(seeds, split ratios, train order, ``World`` and batch size: which seeds each step takes,
``dlkit.sampler.run_plan``) and its ``BatchConfig`` (sequence length, row budget, child width
and policy, context examples: what one sequence holds). ``SamplerSettings.parse`` turns the arguments as a user
gives them (text ratios, order and policy names) into the two records once; the ``Sampler``,
``dlkit batches`` (``BatchRequest``), ``dlkit show`` (``describe_sequence``) and ``dlkit
manifest`` (``make_run_manifest``) all go through it, with the defaults of
``dlkit.sampler.knobs``. ``SamplerConfig`` adds what only the ``Sampler`` has: task weights
and the prefetch knobs (``SamplerConfig.create`` resolves its ``World`` from the torchrun
environment and its task weights by name).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dlkit.errors import InvalidArgumentError
from dlkit.nextbatch.tokens import TrainOrder
from dlkit.sampler import knobs
from dlkit.sampler.arguments import integer
from dlkit.sampler.arguments import weights as checked_weights
from dlkit.sampler.batch import BatchConfig, ChildPolicy, ContextExamplePolicy
from dlkit.sampler.run_plan import RunConfig
from dlkit.sampler.splits import SplitRatios
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
    return checked_weights("task", names, values, f"tasks ({', '.join(names)})",
                           "no task could be sampled")


@dataclass(frozen=True)
class SamplerSettings:
    """What decides a stream's batches: which seeds each step takes (``run``) and what each
    sequence holds (``batch``); both validated records, made once."""

    run: RunConfig
    batch: BatchConfig

    def __post_init__(self) -> None:
        if not isinstance(self.run, RunConfig):
            raise InvalidArgumentError(f"run must be a RunConfig, got {self.run!r}")
        if not isinstance(self.batch, BatchConfig):
            raise InvalidArgumentError(f"batch must be a BatchConfig, got {self.batch!r}")

    @classmethod
    def parse(cls, *, seed: Any = knobs.SEED, split_seed: Any = knobs.SPLIT_SEED,
              split_ratios: Any = knobs.SPLIT_RATIOS, batch_size: Any = knobs.BATCH_SIZE,
              world: World | None = None, sampling_mode: Any = knobs.TRAIN_ORDER,
              sequence_length: Any = knobs.SEQUENCE_LENGTH, max_rows: Any = knobs.MAX_ROWS,
              bfs_child_width: Any = knobs.BFS_CHILD_WIDTH,
              bfs_child_policy: Any = knobs.CHILD_POLICY,
              huge_pages: bool | None = False,
              context_examples: Any = knobs.CONTEXT_EXAMPLES,
              context_example_policy: Any = knobs.CONTEXT_EXAMPLE_POLICY) -> SamplerSettings:
        """The settings of these arguments as a user gives them (ratios as text or numbers,
        the train order and the child policy as enums or names); the batch's knobs are
        checked first, then the run's."""
        batch = BatchConfig(sequence_length, max_rows, bfs_child_width, huge_pages,
                            ChildPolicy.parse(bfs_child_policy), context_examples,
                            ContextExamplePolicy.parse(context_example_policy))
        run = RunConfig.parse(seed=seed, batch_size=batch_size, world=world,
                              split_seed=split_seed, split_ratios=split_ratios,
                              sampling_mode=sampling_mode)
        return cls(run, batch)


@dataclass(frozen=True)
class SamplerConfig:
    """Everything that decides a ``Sampler``'s batches (``settings``, its task weights) and
    the prefetch knobs that do not; the settings' fields read through as attributes."""

    settings: SamplerSettings
    task_weights: tuple[float, ...] | None
    num_prefetch: int = knobs.NUM_PREFETCH
    num_threads: int = knobs.NUM_THREADS

    def __post_init__(self) -> None:
        if not isinstance(self.settings, SamplerSettings):
            raise InvalidArgumentError(f"settings must be SamplerSettings (see "
                                       f"SamplerSettings.parse), got {self.settings!r}")
        # Integers are stored as ``int`` (a NumPy integer would show in repr and manifests).
        for name, minimum in (("num_prefetch", 0), ("num_threads", 1)):
            object.__setattr__(self, name, integer(getattr(self, name), name, minimum))

    @classmethod
    def create(cls, tasks: Sequence[str], *, rank: Any, world_size: Any, local_rank: Any,
               local_world_size: Any, task_weights: Any, num_prefetch: Any, num_threads: Any,
               **settings: Any) -> SamplerConfig:
        """The configuration of a ``Sampler`` over a database with tasks ``tasks``: ranks
        left None come from ``$RANK``, ``$WORLD_SIZE``, ``$LOCAL_RANK`` and
        ``$LOCAL_WORLD_SIZE``, weights may be a mapping by task name; ``settings`` are
        ``SamplerSettings.parse``'s arguments. A single bad argument fails as it always has
        (the world, ratios and weights are checked first, then the prefetch knobs)."""
        world = World.from_env(rank, world_size, local_rank, local_world_size)
        split_ratios = SplitRatios.parse(settings.pop("split_ratios", knobs.SPLIT_RATIOS))
        weights = task_weights_for(tasks, task_weights)
        integer(num_prefetch, "num_prefetch", 0)
        integer(num_threads, "num_threads", 1)
        parsed = SamplerSettings.parse(**settings, split_ratios=split_ratios, world=world)
        return cls(parsed, weights, num_prefetch, num_threads)

    @property
    def run(self) -> RunConfig:
        return self.settings.run

    @property
    def batch_config(self) -> BatchConfig:
        return self.settings.batch

    @property
    def world(self) -> World:
        return self.settings.run.world

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
    def seed(self) -> int:
        return self.run.seed

    @property
    def split_seed(self) -> int:
        return self.run.split_seed

    @property
    def split_ratios(self) -> SplitRatios:
        return self.run.split_ratios

    @property
    def sampling_mode(self) -> TrainOrder:
        return self.run.sampling_mode

    @property
    def batch_size(self) -> int:
        return self.run.batch_size

    @property
    def global_batch_size(self) -> int:
        return self.run.global_batch_size

    @property
    def sequence_length(self) -> int:
        return self.batch_config.sequence_length

    @property
    def max_rows(self) -> int:
        return self.batch_config.max_rows

    @property
    def bfs_child_width(self) -> int:
        return self.batch_config.bfs_child_width

    @property
    def bfs_child_policy(self) -> ChildPolicy:
        return self.batch_config.bfs_child_policy

    @property
    def context_examples(self) -> int:
        return self.batch_config.context_examples

    @property
    def context_example_policy(self) -> ContextExamplePolicy:
        return self.batch_config.context_example_policy

    @property
    def huge_pages(self) -> bool | None:
        return self.batch_config.huge_pages

