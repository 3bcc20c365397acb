"""Exceptions reach the consumer; no thread outlives close(), an early break or an error."""

from __future__ import annotations

import gc
import threading
import traceback

import pytest

from dlkit.errors import PrefetchError, SamplerShutdown
from dlkit.prefetch import IteratorConfig, MultiIteratorPrefetcher, PrefetchConfig, ShardMode

from .conftest import baseline, delayed, prefetch_threads

POLICIES = ["strict", "best-effort"]


class Boom(Exception):
    pass


def failing_at(bad: int, error: BaseException | None = None):
    error = error if error is not None else Boom(f"cannot produce {bad}")

    def produce_or_fail(position):
        if position == bad:
            raise error
        return position
    return produce_or_fail, error


# --- exception propagation ------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(ShardMode))
@pytest.mark.parametrize("workers", [1, 2, 4])
def test_producer_exception_reaches_the_consumer_in_order(workers, mode):
    produce, error = failing_at(13)
    base = IteratorConfig(produce, stop=30)
    config = PrefetchConfig(num_workers=workers, shard_mode=mode)
    order = [p for p in baseline(IteratorConfig(lambda p: p, stop=30), config)]
    got = []
    prefetcher = MultiIteratorPrefetcher(base, config)
    with pytest.raises(Boom) as caught:
        for item in prefetcher:
            got.append(item)
    assert caught.value is error
    # strict: everything before the failing item was delivered, exactly as in the baseline
    assert got == order[:order.index(13)]
    # the traceback runs through the producer's frame, and a note names the worker
    frames = [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
    assert "produce_or_fail" in frames and "_run" in frames
    assert any("raised by produce(13) in prefetch worker" in note
               for note in caught.value.__notes__)
    assert prefetch_threads() == []
    with pytest.raises(SamplerShutdown):
        next(prefetcher)


def test_after_a_failure_the_state_resumes_once_the_cause_is_fixed():
    produce, _ = failing_at(9)
    config = PrefetchConfig(num_workers=3)
    prefetcher = MultiIteratorPrefetcher(IteratorConfig(produce, stop=20), config)
    got = []
    with pytest.raises(Boom):
        for item in prefetcher:
            got.append(item)
    state = prefetcher.state()
    fixed = IteratorConfig(lambda p: p, stop=20)
    assert got + list(MultiIteratorPrefetcher(fixed, config, state=state)) == list(range(20))


@pytest.mark.parametrize("policy", POLICIES)
def test_base_exceptions_propagate_too(policy):
    class Stop(BaseException):
        pass

    produce, error = failing_at(0, Stop())
    with pytest.raises(Stop) as caught:
        list(MultiIteratorPrefetcher(IteratorConfig(produce, stop=5),
                                     PrefetchConfig(num_workers=2, policy=policy)))
    assert caught.value is error


def test_best_effort_raises_a_failure_on_the_next_pull():
    produce, error = failing_at(1)
    prefetcher = MultiIteratorPrefetcher(IteratorConfig(produce, stop=4),
                                         PrefetchConfig(num_workers=2, policy="best-effort"))
    with pytest.raises(Boom) as caught:
        list(prefetcher)
    assert caught.value is error


def test_an_advise_failure_is_a_producer_failure():
    def advise(position):
        if position == 3:
            raise Boom("madvise failed")

    base = IteratorConfig(lambda p: p, stop=8, advise=advise)
    with pytest.raises(Boom, match="madvise failed"):
        list(MultiIteratorPrefetcher(base, PrefetchConfig(num_workers=2)))


def test_advise_sees_each_workers_next_position_before_it_is_produced():
    seen: dict[int, list[int]] = {}
    lock = threading.Lock()

    def advise(position):
        with lock:
            seen.setdefault(position % 3, []).append(position)

    base = IteratorConfig(lambda p: p, stop=10, advise=advise)
    assert list(MultiIteratorPrefetcher(base, PrefetchConfig(num_workers=3))) == list(range(10))
    assert seen == {0: [0, 3, 6, 9], 1: [1, 4, 7], 2: [2, 5, 8]}


# --- shutdown ---------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_early_break_stops_every_thread(policy):
    base = IteratorConfig(delayed(5), stop=None)
    for item in MultiIteratorPrefetcher(base, PrefetchConfig(num_workers=3, policy=policy)):
        if item == ("item", 7):
            break
    assert prefetch_threads() == []


@pytest.mark.parametrize("policy", POLICIES)
def test_close_while_producers_block_on_full_queues(policy):
    started = threading.Barrier(4)
    produced = []

    def produce(position):
        if position < 3:
            started.wait()
        produced.append(position)
        return position

    prefetcher = MultiIteratorPrefetcher(IteratorConfig(produce, stop=None),
                                         PrefetchConfig(num_workers=3, buffer_size=2, policy=policy))
    prefetcher.start()
    started.wait()
    assert len(prefetch_threads()) == 3
    prefetcher.close()
    assert prefetch_threads() == []
    prefetcher.close()  # idempotent
    with pytest.raises(SamplerShutdown, match="closed"):
        next(prefetcher)


def test_leaving_a_with_block_on_a_consumer_error_stops_every_thread():
    with pytest.raises(KeyError):
        with MultiIteratorPrefetcher(IteratorConfig(delayed(2), stop=None),
                                     PrefetchConfig(num_workers=2)) as prefetcher:
            next(prefetcher)
            raise KeyError("consumer failed")
    assert prefetch_threads() == []


@pytest.mark.parametrize("policy", POLICIES)
def test_close_from_another_thread_wakes_a_blocked_consumer(policy):
    gate = threading.Event()
    base = IteratorConfig(lambda p: gate.wait() and p, stop=None)
    prefetcher = MultiIteratorPrefetcher(base, PrefetchConfig(num_workers=2, policy=policy))
    prefetcher.start()
    outcome = []

    def consumer():
        try:
            outcome.append(next(prefetcher))
        except SamplerShutdown as exc:
            outcome.append(exc)

    thread = threading.Thread(target=consumer)
    thread.start()
    # close() wakes the consumer before it joins the producers, which are stuck until the gate
    # opens: so the consumer ends while no item can exist yet.
    closer = threading.Thread(target=prefetcher.close)
    closer.start()
    thread.join()
    assert len(outcome) == 1 and isinstance(outcome[0], SamplerShutdown)
    gate.set()
    closer.join()
    assert prefetch_threads() == []


def test_many_epochs_leave_no_threads():
    for epoch in range(25):
        base = IteratorConfig(delayed(epoch), stop=epoch % 7)
        config = PrefetchConfig(num_workers=1 + epoch % 4)
        assert list(MultiIteratorPrefetcher(base, config)) == baseline(base, config)
        assert prefetch_threads() == []


def test_an_abandoned_prefetcher_stops_its_threads():
    prefetcher = MultiIteratorPrefetcher(IteratorConfig(lambda p: p, stop=None),
                                         PrefetchConfig(num_workers=2))
    assert next(prefetcher) == 0
    threads = prefetch_threads()
    assert len(threads) == 2
    del prefetcher
    gc.collect()
    for thread in threads:  # the finaliser asked them to stop; they exit on their own
        thread.join(timeout=10)
    assert prefetch_threads() == []


def test_a_producer_stuck_in_produce_is_reported_by_close():
    gate = threading.Event()
    base = IteratorConfig(lambda p: gate.wait() and p, stop=None)
    prefetcher = MultiIteratorPrefetcher(base, PrefetchConfig(num_workers=1, join_timeout=0.05))
    prefetcher.start()
    with pytest.raises(PrefetchError, match=r"dlkit-prefetch-w0 did not stop within 0.05s"):
        prefetcher.close()
    gate.set()
    for thread in prefetch_threads():
        thread.join(timeout=10)


def test_restore_after_close_reopens():
    base = IteratorConfig(lambda p: p, stop=10)
    prefetcher = MultiIteratorPrefetcher(base, PrefetchConfig(num_workers=2))
    head = [next(prefetcher) for _ in range(4)]
    state = prefetcher.state()
    prefetcher.close()
    prefetcher.restore(state)
    assert head + list(prefetcher) == list(range(10))
