"""``SamplerConfig``: everything that decides a ``Sampler``'s batches, validated once.

``SamplerConfig.create`` resolves the ``Sampler``'s arguments (ranks from the torchrun
environment, split ratios from text, task weights by name) into one frozen record; its
``run`` is the ``RunConfig`` the streams are assembled from (``dlkit.sampler.run_plan``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dlkit.errors import InvalidArgumentError
from dlkit.sampler.arguments import integer, is_number
from dlkit.sampler.batch import BatchConfig, ChildPolicy
from dlkit.sampler.run_plan import RunConfig
from dlkit.sampler.splits import DEFAULT_SAMPLING_MODE, SplitRatios, check_seed
from dlkit.text import unknown_name


def from_env(value: Any, variable: str, default: int, name: str) -> int:
    """``value`` (an integer >= 0), else ``$variable``, else ``default``."""
    if value is not None:
        return integer(value, name)
    text = os.environ.get(variable)
    if text is None or text == "":
        return default
    try:
        return integer(int(text), f"{name} (from ${variable})")
    except ValueError:
        raise InvalidArgumentError(f"${variable} must be an integer, got {text!r}") from None


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

    rank: int
    world_size: int
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
    sampling_mode: str = DEFAULT_SAMPLING_MODE
    huge_pages: bool | None = None
    local_rank: int = 0
    local_world_size: int = 1
    bfs_child_policy: ChildPolicy = ChildPolicy.UNIFORM

    def __post_init__(self) -> None:
        object.__setattr__(self, "bfs_child_policy", ChildPolicy.parse(self.bfs_child_policy))
        self.batch_config  # noqa: B018 - validates S, R, the child width and huge_pages
        # Integers are stored as ``int`` (a NumPy integer would show in repr and manifests).
        for name, minimum in (("num_prefetch", 0), ("batch_size", 1), ("num_threads", 1),
                              ("local_rank", 0), ("local_world_size", 0)):
            object.__setattr__(self, name, integer(getattr(self, name), name, minimum))
        for name in ("seed", "split_seed"):
            object.__setattr__(self, name, check_seed(getattr(self, name), name))
        self.run  # noqa: B018 - validates the ranks, the ratios and the train order
        if not 1 <= self.local_world_size <= self.world_size:
            raise InvalidArgumentError(f"local_world_size {self.local_world_size} is not in "
                                       f"[1, world_size {self.world_size}]")
        if not 0 <= self.local_rank < self.local_world_size:
            raise InvalidArgumentError(f"local_rank {self.local_rank} is not in [0, "
                                       f"local_world_size {self.local_world_size})")

    @classmethod
    def create(cls, tasks: Sequence[str], *, rank: Any, world_size: Any, split_ratios: Any,
               task_weights: Any, local_rank: Any, local_world_size: Any,
               **arguments: Any) -> SamplerConfig:
        """The configuration of a ``Sampler`` over a database with tasks ``tasks``: ranks
        left None come from ``$RANK``, ``$WORLD_SIZE``, ``$LOCAL_RANK`` and
        ``$LOCAL_WORLD_SIZE``, ratios may be text, weights a mapping by task name; the other
        ``arguments`` are fields as they are."""
        return cls(rank=from_env(rank, "RANK", 0, "rank"),
                   world_size=from_env(world_size, "WORLD_SIZE", 1, "world_size"),
                   split_ratios=SplitRatios.parse(split_ratios),
                   task_weights=task_weights_for(tasks, task_weights),
                   local_rank=from_env(local_rank, "LOCAL_RANK", 0, "local_rank"),
                   local_world_size=from_env(local_world_size, "LOCAL_WORLD_SIZE", 1,
                                             "local_world_size"),
                   **arguments)

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.world_size

    @property
    def batch_config(self) -> BatchConfig:
        return BatchConfig(self.sequence_length, self.max_rows, self.bfs_child_width,
                           self.huge_pages, self.bfs_child_policy)

    @property
    def run(self) -> RunConfig:
        return RunConfig(seed=self.seed, batch_size=self.batch_size, rank=self.rank,
                          world_size=self.world_size, split_seed=self.split_seed,
                          split_ratios=self.split_ratios, sampling_mode=self.sampling_mode)
