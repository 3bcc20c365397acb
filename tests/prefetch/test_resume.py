"""Checkpoint state and the prefix property: consumed items + resumed stream == baseline."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.errors import CheckpointError
from dlkit.prefetch import (
    IteratorConfig,
    IteratorState,
    MultiIteratorPrefetcher,
    PrefetchConfig,
    PrefetchState,
    ShardMode,
)

from .conftest import baseline, consume_all, delayed

modes = st.sampled_from(list(ShardMode))


def take(prefetcher: MultiIteratorPrefetcher, k: int) -> list[object]:
    return [next(prefetcher) for _ in range(k)]


def through_json(state: PrefetchState) -> PrefetchState:
    return PrefetchState.from_dict(json.loads(json.dumps(state.to_dict())))


@given(seed=st.integers(0, 2**32 - 1), length=st.integers(0, 40), workers=st.integers(1, 5),
       mode=modes, drop=st.booleans(), data=st.data())
def test_prefix_property_at_random_split_points(seed, length, workers, mode, drop, data):
    base = IteratorConfig(delayed(seed), stop=length)
    config = PrefetchConfig(num_workers=workers, buffer_size=2, shard_mode=mode,
                            drop_remainder=drop)
    expected = baseline(base, config)
    splits = data.draw(st.lists(st.integers(0, len(expected)), min_size=1, max_size=4))
    for k in splits:
        with MultiIteratorPrefetcher(base, config) as prefetcher:
            head = take(prefetcher, k)
            state = through_json(prefetcher.state())
        assert state.consumed == k
        # a new prefetcher from the state ...
        assert head + consume_all(base, config, state=state) == expected
        # ... equals the baseline continued from the state, computed without threads
        assert head + baseline(base, config, state) == expected


@given(seed=st.integers(0, 2**32 - 1), length=st.integers(1, 40), workers=st.integers(1, 4),
       mode=modes, drop=st.booleans(), data=st.data())
def test_restore_on_a_live_prefetcher_discards_prefetched_items(seed, length, workers, mode,
                                                                 drop, data):
    """Checkpoint at k, run on to k2 (so workers have prefetched further), restore, resume."""
    base = IteratorConfig(delayed(seed), stop=length)
    config = PrefetchConfig(num_workers=workers, buffer_size=3, shard_mode=mode,
                            drop_remainder=drop)
    expected = baseline(base, config)
    k = data.draw(st.integers(0, len(expected)))
    k2 = data.draw(st.integers(k, len(expected)))
    with MultiIteratorPrefetcher(base, config) as prefetcher:
        head = take(prefetcher, k)
        state = prefetcher.state()
        assert take(prefetcher, k2 - k) == expected[k:k2]
        prefetcher.restore(state)
        assert prefetcher.state() == state
        assert head + list(prefetcher) == expected


def test_chained_resumes_match_the_baseline():
    rng = random.Random(7)
    for mode in ShardMode:
        base = IteratorConfig(delayed(3), stop=57)
        config = PrefetchConfig(num_workers=4, shard_mode=mode)
        expected = baseline(base, config)
        got, state = [], None
        while len(got) < len(expected):
            with MultiIteratorPrefetcher(base, config, state=state) as prefetcher:
                got += take(prefetcher, min(rng.randrange(1, 9), len(expected) - len(got)))
                state = through_json(prefetcher.state())
        assert got == expected
        assert list(MultiIteratorPrefetcher(base, config, state=state)) == []


def test_unbounded_stream_resumes_exactly():
    base = IteratorConfig(delayed(11), start=0, stop=None)
    config = PrefetchConfig(num_workers=3, buffer_size=2)
    with MultiIteratorPrefetcher(base, config) as prefetcher:
        head = take(prefetcher, 10)
        state = prefetcher.state()
    assert state.next_worker == 1
    assert [s.next_position for s in state.worker_states] == [12, 10, 11]
    with MultiIteratorPrefetcher(base, config, state=state) as prefetcher:
        tail = take(prefetcher, 10)
    assert head + tail == [("item", p) for p in range(20)]


@given(seed=st.integers(0, 2**32 - 1), length=st.integers(0, 30), workers=st.integers(1, 4),
       mode=modes, drop=st.booleans(), data=st.data())
def test_best_effort_resume_loses_and_repeats_nothing(seed, length, workers, mode, drop, data):
    base = IteratorConfig(delayed(seed), stop=length)
    config = PrefetchConfig(num_workers=workers, policy="best-effort", max_lead=2,
                            shard_mode=mode, drop_remainder=drop)
    expected = sorted(baseline(base, config))
    k = data.draw(st.integers(0, len(expected)))
    with MultiIteratorPrefetcher(base, config) as prefetcher:
        head = take(prefetcher, k)
        state = through_json(prefetcher.state())
    rest = consume_all(base, config, state=state)
    assert sorted(head + rest) == expected


# --- the state value -----------------------------------------------------------------------


@given(st.integers(1, 6).flatmap(lambda n: st.tuples(
    st.integers(0, n - 1), st.lists(st.integers(0, 2**63), min_size=n, max_size=n),
    st.lists(st.integers(0, 2**40), min_size=n, max_size=n))))
def test_state_round_trips_through_plain_values(parts):
    next_worker, positions, produced = parts
    state = PrefetchState(next_worker, tuple(map(IteratorState, positions)), tuple(produced))
    assert through_json(state) == state


@pytest.mark.parametrize("value, message", [
    ([], "a prefetch state is a map"),
    ({"next_worker": 0, "worker_states": []}, "a prefetch state is a map with keys"),
    ({"next_worker": 0, "worker_states": [], "produced": []}, "at least one worker"),
    ({"next_worker": 2, "worker_states": [{"next_position": 0}], "produced": [0]},
     "next_worker must be a worker index below 1, got 2"),
    ({"next_worker": 0, "worker_states": [{"next_position": 0}], "produced": [0, 1]},
     "produced has 2 entries but worker_states has 1"),
    ({"next_worker": 0, "worker_states": [{"next_position": -1}], "produced": [0]},
     "next_position must be an integer >= 0, got -1"),
    ({"next_worker": 0, "worker_states": [{"position": 0}], "produced": [0]},
     r"worker_states\[0\] must be a map"),
    ({"next_worker": 0, "worker_states": [{"next_position": 0}], "produced": [True]},
     "produced must hold integers"),
])
def test_malformed_states_are_rejected(value, message):
    with pytest.raises(CheckpointError, match=message):
        PrefetchState.from_dict(value)


def test_a_state_is_checked_against_the_live_configuration():
    base = IteratorConfig(delayed(1), stop=20)
    config = PrefetchConfig(num_workers=2)
    with MultiIteratorPrefetcher(base, config) as prefetcher:
        take(prefetcher, 5)
        state = prefetcher.state()
    with pytest.raises(CheckpointError, match="the state has 2 workers, the live configuration has 3"):
        MultiIteratorPrefetcher(base, PrefetchConfig(num_workers=3), state=state)
    with pytest.raises(CheckpointError, match="worker 0: the state's next position is 6, the live "
                                              "configuration gives 9 after 3 consumed items"):
        MultiIteratorPrefetcher(IteratorConfig(base.produce, start=3, stop=20), config, state=state)
    with pytest.raises(CheckpointError, match="worker 0: the state has consumed 3 items, the live "
                                              "configuration gives that worker only 2"):
        MultiIteratorPrefetcher(IteratorConfig(base.produce, stop=4), config, state=state)
    # a failed restore leaves the live prefetcher as it was
    with MultiIteratorPrefetcher(base, config) as prefetcher:
        take(prefetcher, 2)
        before = prefetcher.state()
        with pytest.raises(CheckpointError):
            prefetcher.restore(PrefetchState.initial(PrefetchConfig(num_workers=3).shards(base)))
        assert prefetcher.state() == before
        assert next(prefetcher) == ("item", 2)
