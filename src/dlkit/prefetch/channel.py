"""The bounded ready queue between one producer thread and the consumer.

Unlike ``queue.Queue`` it can be closed: ``close()`` wakes a producer blocked on a full queue
(its ``put`` returns ``False``) and a consumer blocked on an empty one (``get`` raises
``SamplerShutdown``), which is what lets ``close()`` join every thread promptly.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from dlkit.errors import SamplerShutdown


class Channel:
    """FIFO of at most ``capacity`` entries; one producer, one consumer.

    ``ready``, when given, is set after every successful ``put`` (the best-effort consumer
    waits on one event shared by all workers).
    """

    __slots__ = ("capacity", "_items", "_cond", "_closed", "_ready")

    def __init__(self, capacity: int, ready: threading.Event | None = None):
        self.capacity = capacity
        self._items: deque[Any] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._closed = False
        self._ready = ready

    def put(self, entry: Any) -> bool:
        """Block while full; ``False`` (entry not queued) once the channel is closed."""
        with self._cond:
            while len(self._items) >= self.capacity and not self._closed:
                self._cond.wait()
            if self._closed:
                return False
            self._items.append(entry)
            self._cond.notify()
        if self._ready is not None:
            self._ready.set()
        return True

    def get(self) -> Any:
        """Block until an entry is available; ``SamplerShutdown`` once closed."""
        with self._cond:
            while not self._items:
                if self._closed:
                    raise SamplerShutdown("the prefetcher was closed")
                self._cond.wait()
            entry = self._items.popleft()
            self._cond.notify()
            return entry

    def try_get(self) -> Any | None:
        """The next entry, or ``None`` without blocking when there is none."""
        with self._cond:
            if not self._items:
                return None
            entry = self._items.popleft()
            self._cond.notify()
            return entry

    def close(self) -> list[Any]:
        """Close, wake both sides, and return the entries that were never taken."""
        with self._cond:
            self._closed = True
            left = list(self._items)
            self._items.clear()
            self._cond.notify_all()
            return left
