"""Strict ordering equals the sequential baseline whatever the timing; best-effort's bounds."""

from __future__ import annotations

import random
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.prefetch import IteratorConfig, MultiIteratorPrefetcher, PrefetchConfig, ShardMode

from .conftest import baseline, consume_all, delay, delayed

modes = st.sampled_from(list(ShardMode))


@given(seed=st.integers(0, 2**32 - 1), length=st.integers(0, 40), workers=st.integers(1, 5),
       mode=modes, drop=st.booleans(), depth=st.integers(1, 4))
def test_strict_equals_baseline_under_random_delays(seed, length, workers, mode, drop, depth):
    base = IteratorConfig(delayed(seed), stop=length)
    config = PrefetchConfig(num_workers=workers, buffer_size=depth, shard_mode=mode,
                            drop_remainder=drop)
    assert consume_all(base, config, seed=seed) == baseline(base, config)


@pytest.mark.parametrize("seed", range(40))
def test_strict_equals_baseline_many_seeds(seed):
    rng = random.Random(seed)
    base = IteratorConfig(delayed(seed), start=rng.randrange(5), stop=rng.randrange(20, 80),
                          stride=rng.randrange(1, 3))
    config = PrefetchConfig(num_workers=rng.randrange(1, 6), buffer_size=rng.randrange(1, 4),
                            shard_mode=rng.choice(list(ShardMode)),
                            drop_remainder=rng.random() < 0.3)
    assert consume_all(base, config, seed=seed + 1) == baseline(base, config)


@pytest.mark.parametrize("workers, depth", [(2, 1), (3, 2), (4, 3)])
def test_strict_waits_for_a_worker_whose_later_peers_finished_first(workers, depth):
    """Worker 0's first item is held back until every other worker has produced all the items
    it can hold (its ready queue plus the one it is filling); the consumer must still start
    with worker 0's item. The hold is a real event, set by the producers, not a timing guess."""
    length = workers * (depth + 3)
    done = {w: 0 for w in range(1, workers)}
    lock = threading.Lock()
    others_full = threading.Event()

    def produce(position):
        w = position % workers
        if position == 0:
            others_full.wait()
        elif w and position < workers * (depth + 1):
            with lock:
                done[w] += 1
                if all(count >= depth + 1 for count in done.values()):
                    others_full.set()
        return position

    base = IteratorConfig(produce, stop=length)
    got = consume_all(base, PrefetchConfig(num_workers=workers, buffer_size=depth))
    assert got == list(range(length))


@given(seed=st.integers(0, 2**32 - 1), length=st.integers(0, 40), workers=st.integers(1, 5),
       mode=modes, drop=st.booleans(), max_lead=st.integers(1, 4), skips=st.integers(0, 3))
def test_best_effort_never_exceeds_max_lead(seed, length, workers, mode, drop, max_lead, skips):
    base = IteratorConfig(delayed(seed), stop=length)
    config = PrefetchConfig(num_workers=workers, buffer_size=3, policy="best-effort",
                            shard_mode=mode, drop_remainder=drop, max_lead=max_lead,
                            max_skips_per_round=skips)
    lengths = [shard.length for shard in config.shards(base)]
    rng = random.Random(seed)
    got = []
    with MultiIteratorPrefetcher(base, config) as prefetcher:
        for item in prefetcher:
            got.append(item)
            produced = prefetcher.state().produced
            active = [c for c, n in zip(produced, lengths) if c < n]
            if active:  # no worker (exhausted or not) leads the slowest active one by more
                assert max(produced) - min(active) <= max_lead
            delay(rng)
    assert sorted(got) == sorted(baseline(base, config))


@pytest.mark.parametrize("workers, max_lead", [(2, 1), (2, 3), (3, 2)])
def test_best_effort_reaches_but_never_passes_max_lead(workers, max_lead):
    """Worker 0 cannot produce until the consumer has taken every item the lead bound allows
    from the other workers: the consumer must take exactly that many, then wait for worker 0."""
    allowed = (workers - 1) * max_lead
    release = threading.Event()

    def produce(position):
        if position % workers == 0:
            release.wait()
        return position

    base = IteratorConfig(produce, stop=workers * (max_lead + 4))
    config = PrefetchConfig(num_workers=workers, buffer_size=max_lead + 2, policy="best-effort",
                            max_lead=max_lead)
    first = []
    with MultiIteratorPrefetcher(base, config) as prefetcher:
        for _ in range(allowed):
            first.append(next(prefetcher))
        assert prefetcher.state().produced == (0,) + (max_lead,) * (workers - 1)
        release.set()
        rest = list(prefetcher)
    assert all(p % workers for p in first)
    assert sorted(first + rest) == list(range(workers * (max_lead + 4)))


def test_best_effort_takes_ready_items_out_of_order():
    """A blocked worker does not block the others (up to max_lead)."""
    release = threading.Event()

    def produce(position):
        if position == 0:
            release.wait()
        return position

    base = IteratorConfig(produce, stop=8)
    config = PrefetchConfig(num_workers=2, policy="best-effort", max_lead=3)
    with MultiIteratorPrefetcher(base, config) as prefetcher:
        head = [next(prefetcher) for _ in range(3)]
        release.set()
        tail = list(prefetcher)
    assert head == [1, 3, 5]
    assert sorted(head + tail) == list(range(8))
