"""Picks per train stream before a step, against the plain-Python task picks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.errors import DlkitError, InvalidArgumentError
from dlkit.sampler.picks import MAX_COUNTED_STEPS, PickCounts
from tests import naive_sampler as naive

WEIGHTS = st.lists(st.floats(0.01, 100.0), min_size=1, max_size=5)


def reference_counts(seed: int, weights: list[float], origin: int, step: int) -> list[int]:
    picks = [naive.task_pick(seed, k, weights) for k in range(origin, step)]
    return [picks.count(t) for t in range(len(weights))]


def counter(seed: int, weights: list[float], origin: int, **limits: int) -> PickCounts:
    return PickCounts(seed, np.cumsum(np.asarray(weights, dtype=np.float64)), origin, **limits)


@given(seed=st.integers(0, 2**64 - 1), weights=WEIGHTS, origin=st.integers(0, 2**62),
       interval=st.sampled_from([1, 2, 3, 7, 64]), max_landmarks=st.sampled_from([2, 4, 6]),
       steps=st.lists(st.integers(0, 400), min_size=1, max_size=25))
def test_counts_before_any_step_in_any_order_are_the_reference_tallies(
        seed, weights, origin, interval, max_landmarks, steps):
    picks = counter(seed, weights, origin, interval=interval, max_landmarks=max_landmarks)
    whole = [naive.task_pick(seed, origin + k, weights) for k in range(max(steps))]
    for offset in steps:
        want = [whole[:offset].count(t) for t in range(len(weights))]
        assert picks.before(origin + offset).tolist() == want
        assert picks.pick(origin + offset) == naive.task_pick(seed, origin + offset, weights)
        # however far it went, what it keeps is bounded
        assert len(picks._landmarks) <= max_landmarks  # noqa: SLF001


def test_one_stream_is_picked_at_every_step_in_constant_time():
    picks = counter(3, [2.0], 10)
    assert picks.before(2**63 - 1).tolist() == [2**63 - 1 - 10]
    assert picks.pick(2**63 - 1) == 0


def test_landmarks_thin_out_and_keep_going_back_exact():
    picks = counter(9, [1.0, 3.0, 0.5], 0, interval=4, max_landmarks=4)
    assert picks.before(100).tolist() == reference_counts(9, [1.0, 3.0, 0.5], 0, 100)
    # 100 steps with at most 4 landmarks: the interval doubled from 4 to 32
    assert picks.interval == 32 and len(picks._landmarks) == 4  # noqa: SLF001
    for step in (0, 1, 31, 32, 33, 64, 95, 96, 99):
        assert picks.before(step).tolist() == reference_counts(9, [1.0, 3.0, 0.5], 0, step)


def test_a_step_too_far_from_every_known_one_is_one_line_naming_it_and_the_limit():
    picks = counter(1, [1.0, 1.0], 0, max_counted=1000)
    with pytest.raises(InvalidArgumentError) as caught:
        picks.before(1001)
    message = str(caught.value)
    assert "\n" not in message and "train step 1001" in message and "at most 1000" in message
    assert isinstance(caught.value, DlkitError) and caught.value.code == "INVALID_ARGUMENT"
    # nearer steps first reach it, and going back stays within the limit
    assert picks.before(1000).sum() == 1000
    assert picks.before(1001).tolist() == reference_counts(1, [1.0, 1.0], 0, 1001)
    assert picks.before(5).tolist() == reference_counts(1, [1.0, 1.0], 0, 5)
    with pytest.raises(InvalidArgumentError, match="train step 6 is before this schedule's first step 7"):
        counter(1, [1.0, 1.0], 7).before(6)


def test_the_default_limit_is_refused_before_any_draw_is_counted():
    picks = counter(1, [1.0, 1.0], 0)
    with pytest.raises(InvalidArgumentError, match=f"at most {MAX_COUNTED_STEPS}"):
        picks.before(10**12)
    assert picks.before(3).tolist() == reference_counts(1, [1.0, 1.0], 0, 3)
