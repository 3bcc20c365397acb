"""One producer thread: produces its shard's items in order into its ready queue."""

from __future__ import annotations

import threading
from typing import Any

from dlkit.errors import SamplerShutdown
from dlkit.prefetch.channel import Channel
from dlkit.prefetch.config import IteratorConfig
from dlkit.prefetch.pool import BufferPool

# A ready-queue entry is ``(position, value, slot, error)``: ``slot`` is the pool buffer the
# value lives in (``None`` without a pool); ``error`` is the exception ``produce`` raised
# (then ``value`` and ``slot`` are ``None``), after which the worker stops.
Entry = tuple[int, Any, "int | None", "BaseException | None"]


class Worker:
    """Producer of one worker iterator from its ``offset``-th position on.

    The thread references only this object (never the prefetcher), so an abandoned prefetcher
    can be garbage collected and its finaliser can stop the thread.
    """

    def __init__(self, index: int, shard: IteratorConfig, offset: int, channel: Channel,
                 pool: BufferPool | None, name: str):
        self.index = index
        self.shard = shard
        self.offset = offset
        self.channel = channel
        self.pool = pool
        self._stopped = False
        self.thread = threading.Thread(target=self._run, name=f"{name}-w{index}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> list[Entry]:
        """Ask the thread to stop; return the entries it queued that were never taken."""
        self._stopped = True
        return self.channel.close()

    def _run(self) -> None:
        shard, pool, channel = self.shard, self.pool, self.channel
        produce, advise = shard.produce, shard.advise
        positions = shard.positions(self.offset)
        upcoming = next(positions, None)
        if advise is not None and upcoming is not None:
            try:
                advise(upcoming)
            except BaseException as exc:  # noqa: BLE001 - every failure goes to the consumer
                channel.put((upcoming, None, None, exc))
                return
        while upcoming is not None and not self._stopped:
            position, upcoming = upcoming, next(positions, None)
            slot = None
            if pool is not None:
                try:
                    slot = pool.acquire()
                except SamplerShutdown:
                    return
            try:
                if advise is not None and upcoming is not None:
                    advise(upcoming)
                # (slot is None exactly when pool is: a slot comes from the pool)
                value = (produce(position) if pool is None or slot is None
                         else produce(position, pool.buffers[slot]))
            except BaseException as exc:  # noqa: BLE001 - every failure goes to the consumer
                if pool is not None and slot is not None:
                    pool.release(slot)
                channel.put((position, None, None, exc))
                return
            if not channel.put((position, value, slot, None)):
                if pool is not None and slot is not None:
                    pool.release(slot)
                return
