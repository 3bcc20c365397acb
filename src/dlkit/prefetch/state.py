"""Checkpoint state of a ``MultiIteratorPrefetcher``: ``{next_worker, worker_states, produced}``.

The state describes the stream *after the last consumed item*; items a producer has prepared
but the consumer has not taken are not part of it (they are regenerated after a restore). A
state is checked against the live configuration when it is restored: a mismatch is a
``CheckpointError`` that shows both values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlkit.errors import CheckpointError

if TYPE_CHECKING:
    from dlkit.prefetch.config import IteratorConfig


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True)
class IteratorState:
    """Where one worker iterator stands: the base position it produces next.

    For an exhausted worker this is the position just past its last one.
    """

    next_position: int

    def __post_init__(self) -> None:
        if not _is_count(self.next_position):
            raise CheckpointError(
                f"next_position must be an integer >= 0, got {self.next_position!r}")


@dataclass(frozen=True)
class PrefetchState:
    """``next_worker``: the worker the consumer tries next; ``worker_states[w]``: worker
    ``w``'s iterator state after its last consumed item; ``produced[w]``: how many of worker
    ``w``'s items were consumed."""

    next_worker: int
    worker_states: tuple[IteratorState, ...]
    produced: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "worker_states", tuple(self.worker_states))
        object.__setattr__(self, "produced", tuple(self.produced))
        n = len(self.worker_states)
        if n == 0:
            raise CheckpointError("a prefetch state needs at least one worker")
        if len(self.produced) != n:
            raise CheckpointError(
                f"produced has {len(self.produced)} entries but worker_states has {n}")
        if not all(isinstance(s, IteratorState) for s in self.worker_states):
            raise CheckpointError("worker_states must hold IteratorState values")
        if not all(_is_count(p) for p in self.produced):
            raise CheckpointError(f"produced must hold integers >= 0, got {list(self.produced)}")
        if not _is_count(self.next_worker) or self.next_worker >= n:
            raise CheckpointError(
                f"next_worker must be a worker index below {n}, got {self.next_worker!r}")

    @property
    def num_workers(self) -> int:
        return len(self.worker_states)

    @property
    def consumed(self) -> int:
        """Items consumed in total."""
        return sum(self.produced)

    @classmethod
    def initial(cls, shards: Sequence[IteratorConfig]) -> PrefetchState:
        """The state before anything is consumed."""
        return cls(0, tuple(IteratorState(s.position(0)) for s in shards), (0,) * len(shards))

    def check_against(self, shards: Sequence[IteratorConfig]) -> None:
        """Raise ``CheckpointError`` unless this state fits the live worker iterators."""
        if len(shards) != self.num_workers:
            raise CheckpointError(
                f"the state has {self.num_workers} workers, the live configuration has "
                f"{len(shards)}")
        for w, (shard, ws, done) in enumerate(zip(shards, self.worker_states, self.produced)):
            if shard.length is not None and done > shard.length:
                raise CheckpointError(
                    f"worker {w}: the state has consumed {done} items, the live configuration "
                    f"gives that worker only {shard.length}")
            expected = shard.position(done)
            if ws.next_position != expected:
                raise CheckpointError(
                    f"worker {w}: the state's next position is {ws.next_position}, the live "
                    f"configuration gives {expected} after {done} consumed items")

    # --- plain values (JSON / CBOR) ----------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "next_worker": self.next_worker,
            "worker_states": [{"next_position": s.next_position} for s in self.worker_states],
            "produced": list(self.produced),
        }

    @classmethod
    def from_dict(cls, value: Any) -> PrefetchState:
        """Rebuild a state from :meth:`to_dict`'s value; anything else is a CheckpointError."""
        expected = {"next_worker", "worker_states", "produced"}
        if not isinstance(value, Mapping) or set(value) != expected:
            keys = sorted(value) if isinstance(value, Mapping) else type(value).__name__
            raise CheckpointError(f"a prefetch state is a map with keys {sorted(expected)}, "
                                  f"got {keys}")
        states = value["worker_states"]
        produced = value["produced"]
        if not isinstance(states, (list, tuple)) or not isinstance(produced, (list, tuple)):
            raise CheckpointError("worker_states and produced must be lists")
        worker_states = []
        for w, item in enumerate(states):
            if not isinstance(item, Mapping) or set(item) != {"next_position"}:
                raise CheckpointError(
                    f"worker_states[{w}] must be a map with the single key next_position")
            worker_states.append(IteratorState(item["next_position"]))
        return cls(value["next_worker"], tuple(worker_states), tuple(produced))
