"""Where a process stands in its job: ``World``, one record for its four numbers.

A job of ``world_size`` processes (ranks) builds each global batch together, rank ``rank``
taking its contiguous slice; ``local_world_size`` of them run on this machine, this one as
``local_rank`` (which device it drives; how many copies of a database the machine holds).
torchrun sets ``$RANK``, ``$WORLD_SIZE``, ``$LOCAL_RANK`` and ``$LOCAL_WORLD_SIZE``;
``World.from_env`` reads them where a number is left out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from dlkit.errors import InvalidArgumentError
from dlkit.sampler.arguments import integer


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


@dataclass(frozen=True)
class World:
    """This process's rank among ``world_size`` and its local rank among the
    ``local_world_size`` processes of the job on this machine (validated; stored as ``int``)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    def __post_init__(self) -> None:
        # Integers are stored as ``int`` (a NumPy integer would show in repr and manifests).
        for name, minimum in (("local_rank", 0), ("local_world_size", 0), ("world_size", 1)):
            object.__setattr__(self, name, integer(getattr(self, name), name, minimum))
        object.__setattr__(self, "rank", integer(self.rank, "rank"))
        if not 0 <= self.rank < self.world_size:
            raise InvalidArgumentError(f"rank {self.rank} is not in [0, world_size "
                                       f"{self.world_size})")
        if not 1 <= self.local_world_size <= self.world_size:
            raise InvalidArgumentError(f"local_world_size {self.local_world_size} is not in "
                                       f"[1, world_size {self.world_size}]")
        if not 0 <= self.local_rank < self.local_world_size:
            raise InvalidArgumentError(f"local_rank {self.local_rank} is not in [0, "
                                       f"local_world_size {self.local_world_size})")

    @classmethod
    def from_env(cls, rank: Any = None, world_size: Any = None, local_rank: Any = None,
                 local_world_size: Any = None) -> World:
        """The world of these numbers, each left None read from torchrun's variable
        (``$RANK``, ``$WORLD_SIZE``, ``$LOCAL_RANK``, ``$LOCAL_WORLD_SIZE``), else 0, 1, 0
        and 1."""
        return cls(rank=from_env(rank, "RANK", 0, "rank"),
                   world_size=from_env(world_size, "WORLD_SIZE", 1, "world_size"),
                   local_rank=from_env(local_rank, "LOCAL_RANK", 0, "local_rank"),
                   local_world_size=from_env(local_world_size, "LOCAL_WORLD_SIZE", 1,
                                             "local_world_size"))
