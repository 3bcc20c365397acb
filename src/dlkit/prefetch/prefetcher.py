"""``MultiIteratorPrefetcher``: N producer threads over the shards of one base iterator.

Ordering (``PrefetchConfig.policy``):

- strict (default): round-robin over the workers in index order, exhausted workers skipped.
  The consumer blocks on the worker whose turn it is, so the output is exactly
  :func:`~dlkit.prefetch.config.strict_order` whatever the thread timing.
- best-effort: the consumer scans the workers (from the one after the last it took from)
  without blocking and takes the first ready item of a worker that is less than ``max_lead``
  items ahead of the slowest worker that still has items; after ``max_skips_per_round`` empty
  scans it blocks until some worker has an item. Not deterministic across schedules.

Checkpoint and resume: ``state()`` is the state after the last consumed item; ``restore(state)``
(or the ``state=`` argument) rebuilds the workers from it and discards prefetched items, so the
resumed stream continues the baseline exactly (the prefix property).

Lifetime: threads start on ``start()``, entering ``with``, or the first pull. ``close()`` --
also run on leaving ``with``, when a ``for`` loop over the prefetcher ends or breaks, and on a
producer failure -- stops and joins every thread and returns queued buffers to the pool. A
producer's exception is raised in the consumer, with its traceback, at the pull that would
have returned that item.

One consumer thread pulls; leases may be released from any thread.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

from dlkit.errors import PrefetchError, SamplerShutdown
from dlkit.prefetch.channel import Channel
from dlkit.prefetch.config import IteratorConfig, Policy, PrefetchConfig
from dlkit.prefetch.pool import BufferPool, Lease
from dlkit.prefetch.state import IteratorState, PrefetchState
from dlkit.prefetch.worker import Entry, Worker


def _abandon(live: list[Worker], pool: BufferPool | None) -> None:
    """Finaliser of a prefetcher that was dropped without ``close()``: stop its threads."""
    if pool is not None:
        pool.interrupt()
    for worker in live:
        worker.stop()


class MultiIteratorPrefetcher:
    """Prefetch the items of ``base`` with ``config.num_workers`` producer threads.

    Yields ``base.produce(position)`` values, or :class:`Lease` objects when ``base.buffers``
    is set (release each one; at most ``config.max_held`` may be held at once).
    """

    def __init__(self, base: IteratorConfig, config: PrefetchConfig | None = None, *,
                 state: PrefetchState | None = None, name: str = "dlkit-prefetch"):
        self.base = base
        self.config = config = config or PrefetchConfig()
        self.shards = config.shards(base)
        self.name = name
        self._n = config.num_workers
        self._lengths = [shard.length for shard in self.shards]
        self._strict = config.policy is Policy.STRICT
        self._pool = None
        if base.buffers is not None:
            # Each worker holds at most buffer_size queued + 1 being filled; the consumer at
            # most max_held: with this many buffers a producer never waits for a buffer.
            capacity = self._n * (config.buffer_size + 1) + config.max_held
            self._pool = BufferPool(base.buffers, capacity)
        self._ready = None if self._strict else threading.Event()
        self._held = 0
        self._held_lock = threading.Lock()
        self._workers: list[Worker] | None = None
        self._live: list[Worker] = []
        self._closed = False
        if state is not None:
            state.check_against(self.shards)
        self._set_state(state if state is not None else PrefetchState.initial(self.shards))
        self._finalizer = weakref.finalize(self, _abandon, self._live, self._pool)

    # --- state ------------------------------------------------------------------------------

    def _set_state(self, state: PrefetchState) -> None:  # checked by the caller
        self._consumed = list(state.produced)
        self._next_worker = state.next_worker

    def state(self) -> PrefetchState:
        """The checkpoint state after the last consumed item."""
        return PrefetchState(
            self._next_worker,
            tuple(IteratorState(s.position(c)) for s, c in zip(self.shards, self._consumed)),
            tuple(self._consumed))

    def restore(self, state: PrefetchState) -> None:
        """Continue from ``state``: stop the workers, drop what they prefetched, rebuild them.

        The state is checked against this prefetcher's configuration first; on a mismatch
        (``CheckpointError``) nothing changes. Leases still held stay valid.
        """
        state.check_against(self.shards)
        self._stop_workers()
        self._closed = False
        self._set_state(state)

    @property
    def pool(self) -> BufferPool | None:
        """The buffer pool (``None`` unless ``base.buffers`` is set)."""
        return self._pool

    @property
    def held(self) -> int:
        """Leases handed out and not yet released."""
        return self._held

    # --- lifetime ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the producer threads (idempotent)."""
        if self._workers is not None:
            return
        if self._closed:
            raise SamplerShutdown("the prefetcher is closed; restore() a state to reuse it")
        workers = [Worker(w, shard, self._consumed[w], Channel(self.config.buffer_size, self._ready),
                          self._pool, self.name)
                   for w, shard in enumerate(self.shards)]
        self._workers = workers
        self._live[:] = workers
        for worker, length, done in zip(workers, self._lengths, self._consumed):
            if length is None or done < length:
                worker.start()

    def close(self) -> None:
        """Stop and join every producer thread; further pulls raise ``SamplerShutdown``."""
        self._closed = True
        self._stop_workers()

    def _stop_workers(self) -> None:
        workers, self._workers = self._workers, None
        if workers is None:
            return
        pool = self._pool
        if pool is not None:
            pool.interrupt()
        leftovers = [entry for worker in workers for entry in worker.stop()]
        if self._ready is not None:
            self._ready.set()
        deadline = time.monotonic() + self.config.join_timeout
        for worker in workers:
            if worker.thread.is_alive():
                worker.thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [worker.thread.name for worker in workers if worker.thread.is_alive()]
        if stuck:
            raise PrefetchError(
                f"producer thread(s) {', '.join(stuck)} did not stop within "
                f"{self.config.join_timeout}s: produce() is not returning")
        self._live.clear()
        if pool is not None:
            for _, _, slot, _ in leftovers:
                if slot is not None:
                    pool.release(slot)
            pool.resume()

    def __enter__(self) -> MultiIteratorPrefetcher:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- pulling ----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        """Iterate to the end; the prefetcher is closed when the loop ends, breaks or raises."""
        try:
            while True:
                try:
                    item = self.__next__()
                except StopIteration:
                    return
                yield item
        finally:
            self.close()

    def __next__(self) -> Any:
        if self._workers is None:
            self.start()
        if self._pool is not None and self._held >= self.config.max_held:
            raise PrefetchError(
                f"the consumer holds {self._held} unreleased leases (max_held="
                f"{self.config.max_held}): release a lease before pulling the next one")
        worker, entry = self._take_strict() if self._strict else self._take_best_effort()
        position, value, slot, error = entry
        if error is not None:
            self._fail(worker, position, error)
        self._consumed[worker] += 1
        self._next_worker = (worker + 1) % self._n
        if slot is None:
            return value
        assert self._pool is not None, "a slot comes from the pool"
        with self._held_lock:
            self._held += 1
        return Lease(position, worker, value, self._pool.buffers[slot], slot, self._release)

    def _take_strict(self) -> tuple[int, Entry]:
        consumed, lengths, workers = self._consumed, self._lengths, self._workers
        if workers is None:  # closed by another thread since __next__ looked
            raise SamplerShutdown("the prefetcher was closed")
        for _ in range(self._n):
            w = self._next_worker
            length = lengths[w]
            if length is None or consumed[w] < length:
                return w, workers[w].channel.get()
            self._next_worker = (w + 1) % self._n
        raise StopIteration

    def _take_best_effort(self) -> tuple[int, Entry]:
        n, consumed, lengths, ready = self._n, self._consumed, self._lengths, self._ready
        assert ready is not None, "best-effort: the producers signal readiness"
        skips = 0
        while True:
            active = [w for w, length in enumerate(lengths)
                      if length is None or consumed[w] < length]
            if not active:
                raise StopIteration
            limit = min(consumed[w] for w in active) + self.config.max_lead
            ready.clear()
            # Read after clear(): close() drops the workers before it sets ``ready``.
            workers = self._workers
            if workers is None:
                raise SamplerShutdown("the prefetcher was closed")
            for k in range(n):
                w = (self._next_worker + k) % n
                length = lengths[w]
                if consumed[w] < limit and (length is None or consumed[w] < length):
                    entry = workers[w].channel.try_get()
                    if entry is not None:
                        return w, entry
            if skips < self.config.max_skips_per_round:
                skips += 1
                time.sleep(0)  # let the producers run
            else:
                ready.wait()

    def _fail(self, worker: int, position: int, error: BaseException) -> None:
        self.close()
        error.add_note(f"raised by produce({position}) in prefetch worker {worker} "
                       f"(thread {self.name}-w{worker})")
        raise error

    def _release(self, slot: int) -> None:
        with self._held_lock:
            self._held -= 1
        assert self._pool is not None, "a lease's slot comes from the pool"
        self._pool.release(slot)
