"""Iterator, shard and prefetch configurations, and the strict round-robin baseline order.

An :class:`IteratorConfig` is a sequence of *positions* (``start, start+stride, ...`` below
``stop``, or unbounded) and a ``produce`` callable that turns a position into an item. Sharding
a config for worker ``i`` of ``N`` gives another ``IteratorConfig``, so a worker iterator is just
a base iterator over fewer positions:

- interleaved: worker ``i`` takes positions ``i, i+N, i+2N, ...`` of the base sequence (better
  balance; the only mode for an unbounded sequence);
- contiguous: worker ``i`` takes the ``i``-th consecutive slice (better locality); without
  ``drop_remainder`` the first ``L mod N`` slices hold one extra position.

With ``drop_remainder`` every worker gets ``L // N`` positions and the last ``L mod N`` base
positions are never produced.

Everything here is a pure function of the configuration: the order a prefetcher yields is
defined by :func:`strict_order`, never by thread timing.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from dlkit.errors import InvalidArgumentError
from dlkit.prefetch.pool import BufferSpec

if TYPE_CHECKING:
    from dlkit.prefetch.state import PrefetchState


class ShardMode(str, enum.Enum):
    INTERLEAVED = "interleaved"
    CONTIGUOUS = "contiguous"


class Policy(str, enum.Enum):
    """How the consumer picks the next worker (see ``MultiIteratorPrefetcher``)."""

    STRICT = "strict"
    BEST_EFFORT = "best-effort"


def _member(kind: type[enum.Enum], value: Any, name: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise InvalidArgumentError(f"{name} must be one of {allowed}, got {value!r}") from None


def _check_int(value: Any, name: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidArgumentError(f"{name} must be an integer >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class ShardConfig:
    """Worker ``index`` of ``num_shards`` over a base iterator."""

    index: int
    num_shards: int
    mode: ShardMode = ShardMode.INTERLEAVED
    drop_remainder: bool = False

    def __post_init__(self) -> None:
        _check_int(self.num_shards, "num_shards", 1)
        _check_int(self.index, "shard index", 0)
        if self.index >= self.num_shards:
            raise InvalidArgumentError(
                f"shard index {self.index} is not below num_shards {self.num_shards}")
        object.__setattr__(self, "mode", _member(ShardMode, self.mode, "mode"))


@dataclass(frozen=True)
class IteratorConfig:
    """Positions ``start, start+stride, ...`` (below ``stop``; ``None``: unbounded) and how to
    produce the item of each.

    ``produce(position)`` returns the item. With ``buffers`` (a :class:`BufferSpec`) the
    engine pre-allocates a pool and calls ``produce(position, out)`` with a free buffer (a dict
    of arrays) to fill; the consumer then receives a :class:`Lease` to release.

    ``advise(position)``, when given, is called in the producer thread with the position that
    thread will produce next, just before it produces the current one: the place for
    ``madvise(MADV_WILLNEED)`` of the pages the next batch will touch.

    ``produce`` and ``advise`` run in producer threads: they must be thread-safe, and they run
    in parallel only where they release the GIL (Numba ``nogil`` kernels, I/O).
    """

    produce: Callable[..., Any]
    start: int = 0
    stop: int | None = None
    stride: int = 1
    buffers: BufferSpec | None = None
    advise: Callable[[int], None] | None = None

    def __post_init__(self) -> None:
        if not callable(self.produce):
            raise InvalidArgumentError(f"produce must be callable, got {self.produce!r}")
        if self.advise is not None and not callable(self.advise):
            raise InvalidArgumentError(f"advise must be callable or None, got {self.advise!r}")
        if self.buffers is not None and not isinstance(self.buffers, BufferSpec):
            raise InvalidArgumentError(f"buffers must be a BufferSpec or None, got {self.buffers!r}")
        _check_int(self.start, "start", 0)
        _check_int(self.stride, "stride", 1)
        if self.stop is not None:
            _check_int(self.stop, "stop", 0)
            # Normalise so that equal sequences compare equal: stop = the position after the last.
            count = max(0, -(-(self.stop - self.start) // self.stride))
            object.__setattr__(self, "stop", self.start + count * self.stride)

    @property
    def length(self) -> int | None:
        """Number of positions (``None`` when unbounded)."""
        return None if self.stop is None else (self.stop - self.start) // self.stride

    def position(self, k: int) -> int:
        """The ``k``-th position (``k == length`` gives the position just past the end)."""
        return self.start + k * self.stride

    def positions(self, offset: int = 0) -> Iterator[int]:
        """Positions from the ``offset``-th on."""
        if self.stop is None:
            return itertools.count(self.position(offset), self.stride)
        return iter(range(self.position(offset), self.stop, self.stride))

    def shard(self, shard: ShardConfig) -> IteratorConfig:
        """The worker iterator of ``shard`` (a config over that worker's positions)."""
        n, i = shard.num_shards, shard.index
        length = self.length
        if length is None:
            if shard.mode is ShardMode.CONTIGUOUS:
                raise InvalidArgumentError(
                    "contiguous sharding needs a bounded iterator (stop is None); "
                    "use interleaved sharding for an unbounded one")
            return replace(self, start=self.position(i), stride=self.stride * n)
        if shard.drop_remainder:
            length = (length // n) * n
        if shard.mode is ShardMode.INTERLEAVED:
            count = max(0, -(-(length - i) // n))
            return replace(self, start=self.position(i), stride=self.stride * n,
                           stop=self.position(i) + count * self.stride * n)
        q, r = divmod(length, n)
        first = i * q + min(i, r)
        count = q + (1 if i < r else 0)
        return replace(self, start=self.position(first), stop=self.position(first + count))


@dataclass(frozen=True)
class PrefetchConfig:
    """How a ``MultiIteratorPrefetcher`` shards, orders and bounds its work.

    - ``num_workers``: producer threads, one per shard of the base iterator.
    - ``buffer_size``: items each worker may have ready ahead of the consumer (its ready
      queue's depth, "buffers ahead"); each worker also fills at most one more.
    - ``policy``: ``strict`` (deterministic round-robin) or ``best-effort``.
    - ``max_lead``: best-effort only; no worker gets more than ``max_lead`` items ahead of the
      slowest worker that still has items.
    - ``max_skips_per_round``: best-effort only; empty non-blocking scans before the consumer
      blocks until some worker has an item.
    - ``max_held``: with a buffer pool, how many leases the consumer may hold unreleased.
    - ``join_timeout``: seconds ``close()`` waits for a producer stuck inside ``produce``.
    """

    num_workers: int = 1
    buffer_size: int = 2
    policy: Policy = Policy.STRICT
    shard_mode: ShardMode = ShardMode.INTERLEAVED
    drop_remainder: bool = False
    max_lead: int = 4
    max_skips_per_round: int = 1
    max_held: int = 2
    join_timeout: float = 60.0

    def __post_init__(self) -> None:
        _check_int(self.num_workers, "num_workers", 1)
        _check_int(self.buffer_size, "buffer_size", 1)
        _check_int(self.max_lead, "max_lead", 1)
        _check_int(self.max_skips_per_round, "max_skips_per_round", 0)
        _check_int(self.max_held, "max_held", 1)
        if not self.join_timeout > 0:
            raise InvalidArgumentError(f"join_timeout must be > 0, got {self.join_timeout!r}")
        object.__setattr__(self, "policy", _member(Policy, self.policy, "policy"))
        object.__setattr__(self, "shard_mode", _member(ShardMode, self.shard_mode, "shard_mode"))

    def shards(self, base: IteratorConfig) -> tuple[IteratorConfig, ...]:
        """The worker iterators of ``base``, in worker order."""
        return tuple(base.shard(ShardConfig(i, self.num_workers, self.shard_mode,
                                            self.drop_remainder))
                     for i in range(self.num_workers))


def strict_order(base: IteratorConfig, config: PrefetchConfig,
                 state: PrefetchState | None = None) -> Iterator[int]:
    """The positions a strict prefetcher yields, computed sequentially without threads.

    Round-robin over the worker iterators in index order, skipping exhausted ones; from
    ``state`` when given (the prefix property: the stream after a checkpoint is this order
    continued from that checkpoint). The sequential baseline of the engine is
    ``(base.produce(p) for p in strict_order(base, config))``.
    """
    shards = config.shards(base)
    n = len(shards)
    if state is None:
        offsets, w = [0] * n, 0
    else:
        state.check_against(shards)
        offsets, w = list(state.produced), state.next_worker
    remaining = [None if s.length is None else s.length - o for s, o in zip(shards, offsets)]
    active = sum(1 for r in remaining if r is None or r > 0)
    while active:
        left = remaining[w]
        if left is None or left > 0:
            yield shards[w].position(offsets[w])
            offsets[w] += 1
            if left is not None:
                remaining[w] = left - 1
                active -= left == 1
        w = (w + 1) % n
