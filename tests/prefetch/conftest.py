"""Helpers for the prefetch tests: injected producer delays and a thread-leak check.

Delays are real work or real waits inside ``produce`` (never sleeps standing in for
synchronisation): whatever they do to the schedule, the assertions must hold.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

import pytest

from dlkit.prefetch import IteratorConfig, MultiIteratorPrefetcher, PrefetchConfig, strict_order

THREAD_PREFIX = "dlkit-prefetch"


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]


@pytest.fixture(autouse=True)
def no_thread_leaks():
    """Every test must leave no producer thread alive (close() joins them)."""
    assert prefetch_threads() == []
    yield
    leaked = prefetch_threads()
    for thread in leaked:  # let a leaking test fail without poisoning the next ones
        thread.join(timeout=5)
    assert leaked == [], f"threads left alive: {[t.name for t in leaked]}"


def spin(iterations: int) -> int:
    """A tiny compute loop that holds the GIL (a producer that is slow in Python)."""
    acc = 0
    for i in range(iterations):
        acc = (acc * 31 + i) & 0xFFFF
    return acc


def delay(rng: random.Random) -> None:
    """One random delay: none, a compute loop, or a real (bounded) wait on an event."""
    kind = rng.randrange(4)
    if kind == 1:
        spin(rng.randrange(2000))
    elif kind == 2:
        threading.Event().wait(rng.random() * 0.002)


def delayed(seed: int, fn: Callable[[int], object] = lambda p: ("item", p)) -> Callable[[int], object]:
    """``fn`` behind a delay that is a pure function of (seed, position)."""
    def produce(position: int) -> object:
        delay(random.Random(seed * 1_000_003 + position))
        return fn(position)
    return produce


def consume_all(base: IteratorConfig, config: PrefetchConfig, seed: int | None = None,
                **kwargs) -> list[object]:
    """Pull everything (with random consumer-side delays when ``seed`` is given)."""
    rng = random.Random(seed)
    out = []
    with MultiIteratorPrefetcher(base, config, **kwargs) as prefetcher:
        for item in prefetcher:
            out.append(item)
            if seed is not None:
                delay(rng)
    return out


def baseline(base: IteratorConfig, config: PrefetchConfig, state=None) -> list[object]:
    """The sequential round-robin baseline: no threads, no prefetch."""
    return [base.produce(p) for p in strict_order(base, config, state)]
