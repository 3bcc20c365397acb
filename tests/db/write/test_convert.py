"""Arrow arrays to value arrays: the kernel that reads primitive arrays from their buffers
agrees with Arrow's own casts, for every primitive type, nulls, NaN/inf and sliced arrays."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlkit.db.format import NO_TIME
from dlkit.db.write import convert as cv
from dlkit.errors import DataError

INTEGERS = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(),
            pa.uint32(), pa.uint64()]
FLOATS = [pa.float32(), pa.float64()]


def _array(data, t: pa.DataType, n: int) -> pa.Array:
    """A random array of type ``t``, nulls and (for floats) NaN/inf, sliced at random."""
    if pa.types.is_floating(t):
        values = np.array(data.draw(st.lists(
            st.floats(width=t.bit_width, allow_nan=True, allow_infinity=True),
            min_size=n, max_size=n)), dtype=t.to_pandas_dtype())
    else:
        info = np.iinfo(t.to_pandas_dtype())
        values = np.array(data.draw(st.lists(st.integers(int(info.min), int(info.max)),
                                             min_size=n, max_size=n)), dtype=t.to_pandas_dtype())
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    arr = pa.array(values, type=t, mask=mask if mask.any() else None)
    start = data.draw(st.integers(0, n))
    return arr.slice(start, data.draw(st.integers(0, n - start)))


def _reference(arr: pa.Array, target: pa.DataType) -> tuple[np.ndarray, np.ndarray]:
    values = arr.cast(target, safe=False).fill_null(0).to_numpy(zero_copy_only=False)
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_floating(target):
        valid = valid & np.isfinite(values)
        values = np.where(valid, values, 0.0)
    return values, valid


@settings(max_examples=60)
@given(st.data(), st.sampled_from(INTEGERS + FLOATS), st.integers(0, 70))
def test_numeric_from_buffers_matches_arrow_cast(data, t, n):
    arr = _array(data, t, n)
    values, valid = cv.to_numeric(arr)
    expect_values, expect_valid = _reference(arr, pa.float64())
    assert values.dtype == np.float64 and valid.dtype == bool and not values.flags.writeable
    assert np.array_equal(valid, expect_valid)
    assert np.array_equal(values, expect_values)  # nulls and non-finite values hold 0


@settings(max_examples=40)
@given(st.data(), st.sampled_from(INTEGERS[:-1]), st.integers(0, 70))
def test_integer_keys_from_buffers_match_arrow_cast(data, t, n):
    arr = _array(data, t, n)
    keys, valid = cv.to_int_keys(arr, "t")
    expect_keys, expect_valid = _reference(arr, pa.int64())
    assert keys.dtype == np.int64 and not keys.flags.writeable
    assert np.array_equal(keys, expect_keys) and np.array_equal(valid, expect_valid)


@settings(max_examples=40)
@given(st.data(), st.integers(0, 70))
def test_microsecond_timestamps_from_buffers(data, n):
    ints = _array(data, pa.int64(), n)
    arr = ints.cast(pa.timestamp("us"))
    expect_values, expect_valid = _reference(ints, pa.int64())
    if (expect_values[expect_valid] == NO_TIME).any():  # the value that means "no time"
        with pytest.raises(DataError, match="reserved for 'no time'"):
            cv.to_micros(arr, "t")
        return
    values, valid = cv.to_micros(arr, "t")
    assert not values.flags.writeable
    assert np.array_equal(values, expect_values) and np.array_equal(valid, expect_valid)


@pytest.mark.parametrize("arr,micros", [
    (pa.array([0, -1, None, 19_000], pa.date32()), [0, -86_400_000_000, 0, 19_000 * 86_400_000_000]),
    (pa.array([3_000, None], pa.date64()), [3_000_000, 0]),
    (pa.array([1_500, -2], pa.timestamp("ms", tz="UTC")), [1_500_000, -2_000]),
    (pa.array([1_999, -1_999], pa.timestamp("ns")), [1, -1]),  # truncated toward zero
    (pa.array([2**62], pa.timestamp("us")), [2**62]),
])
def test_dates_and_other_units_become_microseconds(arr, micros):
    values, valid = cv.to_micros(arr, "t")
    assert values.tolist() == micros and valid.tolist() == arr.is_valid().to_pylist()


@pytest.mark.parametrize("arr", [
    pa.array([2**31 - 1], pa.date32()),
    pa.array([0, -2**31], pa.date32()),
    pa.array([2**62], pa.date64()),
    pa.array([2**62], pa.timestamp("s")),
    pa.array([0, -2**63], pa.timestamp("us")),
])
def test_times_beyond_int64_microseconds_are_refused_not_wrapped(arr):
    with pytest.raises(DataError, match="table 't', column 'c': timestamp out of range"):
        cv.to_micros(arr, "table 't', column 'c'")


def test_uint64_keys_beyond_int64_are_still_an_error():
    with pytest.raises(DataError, match="does not fit in int64"):
        cv.to_int_keys(pa.array([1, 2**63], pa.uint64()), "table 't', column 'k'")
    keys, valid = cv.to_int_keys(pa.array([1, None, 2**63 - 1], pa.uint64()), "t")
    assert keys.tolist() == [1, 0, 2**63 - 1] and valid.tolist() == [True, False, True]


def test_values_already_stored_as_they_are_come_back_uncopied():
    base = pa.array(np.arange(100, dtype=np.int64))
    arr = base.slice(7, 50)
    for values, _valid in (cv.to_int_keys(arr, "t"),
                           cv.to_micros(arr.cast(pa.timestamp("us")), "t")):
        # Arrow's own buffer, from the slice's first value on; read-only all the same
        assert values.ctypes.data == base.buffers()[1].address + 7 * 8
        assert values.tolist() == list(range(7, 57)) and not values.flags.writeable
    with_null = pa.array([1, None, 3], pa.int64())
    values, valid = cv.to_int_keys(with_null, "t")  # a null: copied, its slot zeroed
    assert values.ctypes.data != with_null.buffers()[1].address
    assert values.tolist() == [1, 0, 3] and valid.tolist() == [True, False, True]
