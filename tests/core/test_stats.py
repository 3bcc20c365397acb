"""Column statistics: the streaming mean and standard deviation agree with an exact
computation for any finite values, including ones whose deviations overflow a float, and do
not depend on how the rows are split into batches."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.core.stats import welford_result, welford_state, welford_update

FINITE = st.floats(allow_nan=False, allow_infinity=False)


def _fold(values: np.ndarray, valid: np.ndarray, cuts: list[int]) -> tuple[int, float, float]:
    state = welford_state()
    for lo, hi in zip([0, *cuts], [*cuts, len(values)]):
        welford_update(values[lo:hi], valid[lo:hi], state)
    return welford_result(state)


def _exact(values: list[float]) -> tuple[float, float]:
    """Mean and population std in exact rational arithmetic, rounded once at the end."""
    n = len(values)
    mean = sum(Fraction(v) for v in values) / n
    variance = sum((Fraction(v) - mean) ** 2 for v in values) / n
    if variance == 0:
        return float(mean), 0.0
    # the variance itself may pass the largest float: take the root of a scaled copy
    k = (variance.numerator.bit_length() - variance.denominator.bit_length()) // 2
    return float(mean), math.sqrt(float(variance / Fraction(4) ** k)) * 2.0 ** k


@given(st.lists(FINITE, min_size=1, max_size=40), st.data())
def test_mean_and_std_match_exact_arithmetic_at_any_magnitude(values, data):
    valid = np.array(data.draw(st.lists(st.booleans(), min_size=len(values),
                                        max_size=len(values))), dtype=bool)
    valid[0] = True
    count, mean, std = _fold(np.array(values), valid, [])
    kept = [v for v, ok in zip(values, valid) if ok]
    exact_mean, exact_std = _exact(kept)
    assert count == len(kept)
    assert math.isfinite(mean) and math.isfinite(std)
    spread = max(abs(v) for v in kept)
    # a few ulps of the largest magnitude per value folded; deviations below ~1e-154 vanish
    # when squared (as in any float64 variance), hence the absolute floor
    tolerance = 1e-12 * spread + 1e-150
    assert abs(mean - exact_mean) <= tolerance
    assert abs(std - exact_std) <= tolerance


@given(st.lists(FINITE, min_size=0, max_size=60), st.data())
def test_batches_do_not_change_a_bit(values, data):
    array = np.array(values, dtype=np.float64)
    valid = np.ones(len(values), dtype=bool)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(values)), max_size=5)))
    assert _fold(array, valid, cuts) == _fold(array, valid, [])


def test_the_extremes_of_float64():
    top = np.finfo(np.float64).max
    count, mean, std = _fold(np.array([top, -top, top, -top]), np.ones(4, bool), [])
    assert (count, mean, std) == (4, 0.0, top)
    _, mean, std = _fold(np.array([-top] + [top] * 7), np.ones(8, bool), [])
    assert math.isfinite(mean) and abs(mean - top * 0.75) <= 1e-12 * top
    assert math.isfinite(std)


@given(st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=40))
def test_timestamps_keep_their_precision(micros):
    """int64 microseconds (~1.7e15 today) with a small spread: shifting by the first value
    keeps the spread exact."""
    base = 1_700_000_000_000_000
    values = np.array([base + m % 1_000_000 for m in micros], dtype=np.int64)
    _, mean, std = _fold(values, np.ones(len(values), bool), [])
    exact_mean, exact_std = _exact([float(v) for v in values])
    assert abs(mean - exact_mean) <= 1.0 and abs(std - exact_std) <= 1e-6


# run as plain Python (make test-nojit), inf - inf warns as numpy scalars do; the NaN is expected
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_an_infinity_ends_the_fold_instead_of_rescaling_forever():
    """Callers fold finite values only; should an infinity slip through, the kernel still
    returns (a non-finite result), where rescaling could never shrink it."""
    _, mean, _ = _fold(np.array([1.0, np.inf, 2.0]), np.ones(3, bool), [])
    assert not math.isfinite(mean)
