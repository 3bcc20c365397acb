"""Buffer pools: a buffer is never handed out twice while in use, and none leaks."""

from __future__ import annotations

import random
import threading
from collections import deque

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.errors import InvalidArgumentError, PrefetchError, SamplerShutdown
from dlkit.prefetch import (
    BufferPool,
    BufferSpec,
    IteratorConfig,
    Lease,
    MultiIteratorPrefetcher,
    PrefetchConfig,
    ShardMode,
    strict_order,
)

from .conftest import delay, prefetch_threads

SPEC = BufferSpec({"stamp": ((16,), np.int64), "pad": ((2, 3), np.float32)})


class Ledger:
    """Which buffers the consumer holds right now (shared with the producers)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.held: set[int] = set()
        self.violations: list[str] = []

    def stamping_producer(self, seed: int):
        def produce(position, out):
            with self.lock:
                if id(out) in self.held:
                    self.violations.append(f"position {position} got a buffer the consumer holds")
            out["stamp"][:] = position
            delay(random.Random(seed * 7919 + position))
            out["stamp"][:] = position  # written twice, across the delay
            return position * 10
        return produce


@given(seed=st.integers(0, 2**32 - 1), length=st.integers(0, 40), workers=st.integers(1, 4),
       depth=st.integers(1, 3), max_held=st.integers(1, 3), policy=st.sampled_from(["strict", "best-effort"]),
       mode=st.sampled_from(list(ShardMode)))
def test_buffers_are_never_handed_out_twice_while_in_use(seed, length, workers, depth, max_held,
                                                        policy, mode):
    ledger = Ledger()
    base = IteratorConfig(ledger.stamping_producer(seed), stop=length, buffers=SPEC)
    config = PrefetchConfig(num_workers=workers, buffer_size=depth, max_held=max_held,
                            policy=policy, shard_mode=mode)
    rng = random.Random(seed)
    held: deque[Lease] = deque()
    positions = []

    def release_one():
        # a random one, so that some leases stay held while many others cycle
        lease = held[rng.randrange(len(held))]
        held.remove(lease)
        assert (lease.buffer["stamp"] == lease.position).all(), "buffer overwritten while held"
        with ledger.lock:
            ledger.held.discard(id(lease.buffer))
        lease.release()

    with MultiIteratorPrefetcher(base, config) as prefetcher:
        for lease in prefetcher:
            assert lease.value == lease.position * 10
            positions.append(lease.position)
            with ledger.lock:
                assert id(lease.buffer) not in ledger.held
                ledger.held.add(id(lease.buffer))
            held.append(lease)
            assert len({id(h.buffer) for h in held}) == len(held)
            delay(rng)
            # keep a random number of leases, never more than allowed
            while held and (len(held) == max_held or rng.random() < 0.3):
                release_one()
        while held:
            release_one()
        assert prefetcher.pool.in_use == 0
    assert ledger.violations == []
    if policy == "strict":
        assert positions == list(strict_order(base, config))
    else:
        assert sorted(positions) == list(range(length))


def test_holding_more_than_max_held_is_an_error_not_a_deadlock():
    base = IteratorConfig(lambda p, out: p, stop=None, buffers=SPEC)
    with MultiIteratorPrefetcher(base, PrefetchConfig(num_workers=2, max_held=2)) as prefetcher:
        first, second = next(prefetcher), next(prefetcher)
        with pytest.raises(PrefetchError, match=r"holds 2 unreleased leases \(max_held=2\)"):
            next(prefetcher)
        first.release()
        third = next(prefetcher)
        assert [first.position, second.position, third.position] == [0, 1, 2]
        assert prefetcher.held == 2


@pytest.mark.parametrize("policy", ["strict", "best-effort"])
def test_no_buffer_leaks_after_early_break_failure_or_restore(policy):
    def produce(position, out):
        if position == 17:
            raise ValueError("bad row")
        out["stamp"][:] = position
        return position

    config = PrefetchConfig(num_workers=3, buffer_size=2, policy=policy)
    prefetcher = MultiIteratorPrefetcher(IteratorConfig(produce, stop=40, buffers=SPEC), config)
    pool = prefetcher.pool
    assert pool.capacity == 3 * (2 + 1) + 2
    kept = next(prefetcher)
    state = prefetcher.state()
    with next(prefetcher):
        pass
    prefetcher.restore(state)  # queued buffers come back; the held lease stays valid
    assert pool.in_use == 1 and not kept.released
    with pytest.raises(ValueError, match="bad row"):
        for lease in prefetcher:
            lease.release()
    assert pool.in_use == 1
    kept.release()
    kept.release()  # idempotent
    assert pool.in_use == 0
    # an early break with a lease still held
    prefetcher.restore(state)
    for lease in prefetcher:  # noqa: B007  (the lease taken is released below)
        break
    assert prefetch_threads() == [] and pool.in_use == 1
    lease.release()
    assert pool.in_use == 0


def test_pool_refuses_double_and_foreign_releases():
    pool = BufferPool(SPEC, 2)
    a = pool.acquire()
    b = pool.acquire()
    assert {a, b} == {0, 1} and pool.in_use == 2
    pool.release(a)
    with pytest.raises(PrefetchError, match=f"buffer {a} was released twice"):
        pool.release(a)
    with pytest.raises(PrefetchError, match="buffer 5 does not belong to this pool"):
        pool.release(5)
    assert pool.acquire() == a  # recycled, not reallocated
    assert pool.buffers[a]["pad"].shape == (2, 3)


def test_interrupt_wakes_a_blocked_acquire():
    pool = BufferPool(SPEC, 1)
    pool.acquire()
    outcome = []

    def acquirer():
        try:
            pool.acquire()
        except SamplerShutdown as exc:
            outcome.append(exc)

    thread = threading.Thread(target=acquirer)
    thread.start()
    pool.interrupt()
    thread.join()
    assert len(outcome) == 1
    pool.resume()
    pool.release(0)
    assert pool.acquire() == 0


def test_a_released_buffer_wakes_a_blocked_acquire():
    pool = BufferPool(SPEC, 1)
    slot = pool.acquire()
    got = []
    thread = threading.Thread(target=lambda: got.append(pool.acquire()))
    thread.start()
    pool.release(slot)
    thread.join()
    assert got == [slot]


@pytest.mark.parametrize("fields, message", [
    ({}, "at least one field"),
    ({"x": (5,)}, r"field 'x' must be \(shape, dtype\)"),
    ({"x": ((-1,), np.int8)}, "negative dimension"),
    ({"x": ((2,), "not-a-dtype")}, r"field 'x' must be \(shape, dtype\)"),
])
def test_buffer_spec_validates(fields, message):
    with pytest.raises(InvalidArgumentError, match=message):
        BufferSpec(fields)


def test_buffer_spec_sizes():
    assert SPEC.nbytes == 16 * 8 + 6 * 4
