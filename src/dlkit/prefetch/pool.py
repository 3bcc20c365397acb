"""Pre-allocated batch buffers, recycled once the consumer releases them.

A :class:`BufferSpec` names the arrays of one batch buffer; a :class:`BufferPool` allocates a
fixed number of them up front and hands each to at most one holder at a time (a producer
filling it, the ready queue, or the consumer). The consumer receives a :class:`Lease` and
gives the buffer back with ``release()`` or by leaving ``with lease:``.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlkit.errors import InvalidArgumentError, PrefetchError, SamplerShutdown


@dataclass(frozen=True)
class BufferSpec:
    """The arrays of one batch buffer: ``{name: (shape, dtype)}``."""

    fields: Mapping[str, tuple[tuple[int, ...], Any]]

    def __post_init__(self) -> None:
        if not isinstance(self.fields, Mapping) or not self.fields:
            raise InvalidArgumentError("a BufferSpec needs at least one field")
        normalised = {}
        for name, value in self.fields.items():
            try:
                shape, dtype = value
                shape = tuple(int(d) for d in shape)
                dtype = np.dtype(dtype)
            except (TypeError, ValueError):
                raise InvalidArgumentError(
                    f"field {name!r} must be (shape, dtype), got {value!r}") from None
            if any(d < 0 for d in shape):
                raise InvalidArgumentError(f"field {name!r} has a negative dimension: {shape}")
            normalised[str(name)] = (shape, dtype)
        object.__setattr__(self, "fields", normalised)

    @property
    def nbytes(self) -> int:
        return sum(int(np.prod(shape)) * dtype.itemsize for shape, dtype in self.fields.values())

    def allocate(self) -> dict[str, np.ndarray]:
        return {name: np.empty(shape, dtype) for name, (shape, dtype) in self.fields.items()}


class BufferPool:
    """``capacity`` buffers of ``spec``; ``acquire`` blocks while all are in use.

    Tracks which slots are in use, so a buffer is never handed out twice while held and a
    double or foreign ``release`` is a ``PrefetchError`` instead of silent corruption.
    """

    def __init__(self, spec: BufferSpec, capacity: int):
        if capacity < 1:
            raise InvalidArgumentError(f"a pool needs capacity >= 1, got {capacity}")
        self.spec = spec
        self.buffers = tuple(spec.allocate() for _ in range(capacity))
        self._free = deque(range(capacity))
        self._in_use = [False] * capacity
        self._cond = threading.Condition(threading.Lock())
        self._interrupted = False

    @property
    def capacity(self) -> int:
        return len(self.buffers)

    @property
    def in_use(self) -> int:
        with self._cond:
            return self.capacity - len(self._free)

    def acquire(self) -> int:
        """A free slot (index into ``buffers``); raises ``SamplerShutdown`` when interrupted."""
        with self._cond:
            while not self._free and not self._interrupted:
                self._cond.wait()
            if self._interrupted:
                raise SamplerShutdown("the buffer pool was interrupted (prefetcher closing)")
            slot = self._free.popleft()
            if self._in_use[slot]:  # cannot happen unless the free list is corrupted
                raise PrefetchError(f"buffer {slot} is on the free list but still in use")
            self._in_use[slot] = True
            return slot

    def release(self, slot: int) -> None:
        with self._cond:
            if not 0 <= slot < self.capacity:
                raise PrefetchError(f"buffer {slot} does not belong to this pool "
                                    f"(capacity {self.capacity})")
            if not self._in_use[slot]:
                raise PrefetchError(f"buffer {slot} was released twice")
            self._in_use[slot] = False
            self._free.append(slot)
            self._cond.notify()

    def interrupt(self) -> None:
        """Wake every blocked ``acquire`` with ``SamplerShutdown`` (until ``resume``)."""
        with self._cond:
            self._interrupted = True
            self._cond.notify_all()

    def resume(self) -> None:
        with self._cond:
            self._interrupted = False


class Lease:
    """A filled batch buffer on loan to the consumer.

    ``buffer`` is the dict of arrays ``produce`` filled, ``value`` what it returned,
    ``position`` the base position and ``worker`` the producing worker. The arrays stay valid
    until ``release()`` (idempotent; also called on leaving ``with lease:``); afterwards the
    pool reuses them for another batch.
    """

    __slots__ = ("position", "worker", "value", "buffer", "slot", "_on_release")

    def __init__(self, position: int, worker: int, value: Any, buffer: dict[str, np.ndarray],
                 slot: int, on_release: Callable[[int], None]):
        self.position = position
        self.worker = worker
        self.value = value
        self.buffer = buffer
        self.slot = slot
        self._on_release: Callable[[int], None] | None = on_release

    @property
    def released(self) -> bool:
        return self._on_release is None

    def release(self) -> None:
        on_release, self._on_release = self._on_release, None
        if on_release is not None:
            on_release(self.slot)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"Lease(position={self.position}, worker={self.worker}, slot={self.slot}, {state})"
