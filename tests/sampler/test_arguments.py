"""The sampler's one rule for integer and number arguments."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dlkit.errors import CheckpointError, InvalidArgumentError
from dlkit.sampler.arguments import integer, is_integer, is_number, is_probability


@pytest.mark.parametrize("value,ok", [(0, True), (np.int64(3), True), (np.uint8(1), True),
                                      (True, False), (np.bool_(True), False), (1.0, False),
                                      ("1", False), (None, False), (-1, False)])
def test_an_integer_is_an_int_or_a_numpy_integer_never_a_bool(value, ok):
    assert is_integer(value, 0) is ok


def test_integer_bounds_and_messages():
    assert integer(np.int64(5), "n", 1) == 5 and type(integer(np.int64(5), "n", 1)) is int
    with pytest.raises(InvalidArgumentError, match=r"^n must be an integer >= 1, got 0$"):
        integer(0, "n", 1)
    with pytest.raises(InvalidArgumentError, match=r"^seed must be in range, got 10$"):
        integer(10, "seed", 0, 9, expected="in range")
    with pytest.raises(CheckpointError, match="step must be an integer >= 0, got True"):
        integer(True, "step", error=CheckpointError)


@pytest.mark.parametrize("value,ok", [(0, True), (0.5, True), (1, True), (1.0000001, False),
                                      (-0.0, True), (math.nan, False), (math.inf, False),
                                      (10**400, False), (False, False), ("0.5", False)])
def test_a_probability_is_a_finite_number_from_0_to_1(value, ok):
    assert is_probability(value) is ok


def test_a_number_without_an_upper_bound_is_still_finite():
    assert is_number(10**400, 0)  # an int is finite however large (no float overflow)
    assert not is_number(math.inf, 0) and not is_number(math.nan, 0)
    assert not is_number(-1e-9, 0)
