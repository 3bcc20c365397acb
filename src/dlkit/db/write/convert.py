"""Arrow arrays to the database's value arrays, one record batch at a time.

Every function returns ``(values, valid)``: a read-only numpy array in the column's stored
dtype, with invalid (null) positions set to 0, and a bool mask (True = not null). Read-only
whether it is a new array or Arrow's own buffer (an array of the stored dtype without nulls
comes back uncopied), so each kernel taking them is compiled for one type. Rules:

* numeric: integers, floats, decimals and booleans as float64; NaN and +-inf count as null.
* boolean: booleans (or integers 0/1) as uint8 0/1; another integer is a :class:`DataError`.
* timestamp: int64 microseconds since the epoch, UTC (timezone-aware values are already UTC
  in Arrow; naive ones are taken as UTC); nanoseconds are truncated toward zero; dates are
  midnight UTC; an integer time column with a ``time_unit`` is converted by
  :func:`int_to_micros` (``dlkit.db.time_units``).
* keys: integers as int64 (a uint64 key above 2^63-1 is an error); strings as Arrow
  large-string buffers (``data`` uint8, ``offsets`` int64[n + 1]).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from dlkit.core.calendar_units import YEAR, YYYYMM, YYYYMMDD, calendar_to_micros
from dlkit.core.stats import convert_fixed_width
from dlkit.db import format as fmt
from dlkit.db.time_units import TimePosition, TimeUnit, int_times_to_micros
from dlkit.errors import DataError


def plain(arr: pa.Array) -> pa.Array:
    """Dictionary-encoded arrays decoded; string views as large strings."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    check = getattr(pa.types, "is_string_view", None)
    if check is not None and check(arr.type):
        arr = arr.cast(pa.large_string())
    return arr


def valid_mask(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    valid: np.ndarray = arr.is_valid().to_numpy(zero_copy_only=False)
    return valid


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


_NO_BITMAP = _read_only(np.zeros(0, dtype=np.uint8))


def _from_buffers(arr: pa.Array, dtype: npt.DTypeLike,
                  finite_only: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(values, valid)`` of a primitive array (integers, floats, timestamps) read straight
    from its Arrow buffers: Arrow's values themselves when they are already stored as they
    are (``dtype``, no null, nothing to check), else converted by one kernel (no cast, null
    fill or mask array in between)."""
    n = len(arr)
    validity, data = arr.buffers()[:2]
    storage = np.dtype(arr.type.to_pandas_dtype() if not pa.types.is_timestamp(arr.type)
                       else np.int64)
    # Arrow's buffers are writable or not depending on where they came from: read-only
    # either way (an empty array too), so one compiled kernel per dtype
    src = _read_only(np.frombuffer(data if n else b"", dtype=storage, count=n,
                                   offset=arr.offset * storage.itemsize if n else 0))
    if storage == dtype and not finite_only and not arr.null_count:
        return src, np.ones(n, dtype=bool)
    bitmap = (_read_only(np.frombuffer(validity, dtype=np.uint8))
              if validity is not None and arr.null_count else _NO_BITMAP)
    values = np.empty(n, dtype=dtype)
    valid = np.empty(n, dtype=bool)
    convert_fixed_width(src, bitmap, arr.offset, finite_only, values, valid)
    return _read_only(values), valid


def _fast_numeric(t: pa.DataType) -> bool:
    return pa.types.is_floating(t) and not pa.types.is_float16(t) or pa.types.is_integer(t)


def to_numeric(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    arr = plain(arr)
    if _fast_numeric(arr.type):
        return _from_buffers(arr, np.float64, finite_only=pa.types.is_floating(arr.type))
    values = np.array(arr.cast(pa.float64(), safe=False).fill_null(0.0).to_numpy(zero_copy_only=False),
                      dtype=np.float64, copy=True)
    valid = valid_mask(arr)
    finite = np.isfinite(values)
    if not finite.all():
        valid &= finite
        values[~finite] = 0.0
    return _read_only(values), valid


def to_boolean(arr: pa.Array, where: str) -> tuple[np.ndarray, np.ndarray]:
    arr = plain(arr)
    valid = valid_mask(arr)
    if pa.types.is_boolean(arr.type):
        values = np.array(arr.fill_null(False).to_numpy(zero_copy_only=False), dtype=np.uint8)
        return _read_only(values), valid
    ints = arr.cast(pa.int64()).fill_null(0).to_numpy()
    bad = np.flatnonzero((ints != 0) & (ints != 1))
    if bad.size:
        raise DataError(f"{where}: boolean column holds {int(ints[bad[0]])}; only 0 and 1 "
                        f"(or true/false) are booleans")
    return _read_only(ints.astype(np.uint8)), valid


def to_micros(arr: pa.Array, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Timestamps and dates as int64 microseconds since the epoch (UTC), nulls 0."""
    arr = plain(arr)
    t = arr.type
    if pa.types.is_timestamp(t) and t.unit == "us":
        values, valid = _from_buffers(arr, np.int64)
        if values.size and values.min() == fmt.NO_TIME:
            row = int(np.flatnonzero((values == fmt.NO_TIME) & valid)[0])
            raise DataError(f"{where}: timestamp out of range at row {row}: the smallest int64 "
                            "microsecond value is reserved for 'no time'")
    elif pa.types.is_timestamp(t) or pa.types.is_date(t):
        tz = t.tz if pa.types.is_timestamp(t) else None
        # ns -> us only drops sub-microsecond digits and cannot overflow; every other unit
        # and the dates are cast checked, so a value beyond int64 microseconds raises
        lossy = pa.types.is_timestamp(t) and t.unit == "ns"
        try:
            us = arr.cast(pa.timestamp("us", tz=tz), safe=not lossy)
        except pa.ArrowInvalid as exc:
            raise DataError(f"{where}: timestamp out of range: {exc}") from None
        valid = valid_mask(arr)
        # a cast result is never NO_TIME: from s, ms and dates a multiple of 1000, from ns
        # far above int64's minimum
        values = _read_only(np.array(us.cast(pa.int64()).fill_null(0).to_numpy(), dtype=np.int64))
    else:
        raise DataError(f"{where}: type {t} is not a timestamp or date")
    return values, valid


_CALENDAR = {TimeUnit.YEAR: YEAR, TimeUnit.YYYYMM: YYYYMM, TimeUnit.YYYYMMDD: YYYYMMDD}


def int_to_micros(arr: pa.Array, unit: TimeUnit, position: TimePosition, where: str,
                  first_row: int) -> tuple[np.ndarray, np.ndarray]:
    """An integer time column's batch (its first row is the table's ``first_row``) as int64
    microseconds since the epoch (UTC), nulls 0; a value that is no valid time in ``unit``
    is a :class:`DataError` naming its row and value."""
    arr = plain(arr)
    if not pa.types.is_integer(arr.type):
        raise DataError(f"{where}: type {arr.type} is not an integer (time_unit "
                        f"{unit.value!r})")
    valid = valid_mask(arr)
    raw = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False))
    if unit.calendar and raw.dtype != np.uint64:  # the kernel; the epoch units are numpy's
        ints = raw.astype(np.int64, copy=False).view()
        ints.flags.writeable = False  # Arrow's buffer or not: one compiled kernel
        values = np.empty(raw.shape[0], dtype=np.int64)
        bad = calendar_to_micros(ints, valid, _CALENDAR[unit], position is TimePosition.END,
                                 values)
    else:
        values, bad = int_times_to_micros(raw, valid, unit, position)
    if bad >= 0:
        raise DataError(f"{where}: row {first_row + bad} holds {int(raw[bad])}, which is not a "
                        f"valid time in unit {unit.value!r} (e.g. {unit.example})")
    return _read_only(values), valid


def to_int_keys(arr: pa.Array, where: str) -> tuple[np.ndarray, np.ndarray]:
    arr = plain(arr)
    if pa.types.is_integer(arr.type) and not pa.types.is_uint64(arr.type):
        return _from_buffers(arr, np.int64)  # every value fits
    try:
        values = arr.cast(pa.int64()).fill_null(0).to_numpy()
    except pa.ArrowInvalid as exc:
        raise DataError(f"{where}: key does not fit in int64: {exc}") from None
    return _read_only(np.array(values, dtype=np.int64)), valid_mask(arr)


def to_string_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, pa.Array]:
    """``(data, offsets, valid, large_string_array)``; keep the array alive while using data."""
    arr = plain(arr).cast(pa.large_string())
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + n + 1]
    buf = arr.buffers()[2]
    data = np.frombuffer(buf, dtype=np.uint8) if buf is not None else np.zeros(0, dtype=np.uint8)
    return data, offsets, valid_mask(arr), arr


def check_utf8(strings: pa.Array, where: str) -> None:
    """Raise :class:`DataError` unless every string of ``strings`` is valid UTF-8 (Parquet
    does not guarantee it, and Python text cannot hold anything else); other types pass."""
    if pa.types.is_string(strings.type) or pa.types.is_large_string(strings.type):
        try:
            strings.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise DataError(f"{where}: a string is not valid UTF-8 text ({exc})") from None


def _as_python(values: pa.Array, where: str) -> list[Any]:
    """``values.to_pylist()``: its decoding is the UTF-8 check, so only a string that fails it
    costs Arrow's full validation, which then names the problem."""
    try:
        python: list[Any] = values.to_pylist()
        return python
    except UnicodeDecodeError:
        check_utf8(values, where)
        raise


def unique_values(arr: pa.Array, where: str) -> list[Any]:
    """Distinct non-null values of a batch (Python objects)."""
    return _as_python(pc.unique(plain(arr).drop_null()), where)


def dictionary_parts(arr: pa.Array, where: str) -> tuple[np.ndarray, list[Any], np.ndarray]:
    """``(indices int32, dictionary values, valid)`` of a batch, nulls at index 0; every
    distinct string is checked to be valid UTF-8 (the dictionary holds each once)."""
    if pa.types.is_boolean(arr.type):
        indices = np.asarray(arr.fill_null(False).to_numpy(zero_copy_only=False), dtype=np.int32)
        return _read_only(indices), [False, True], valid_mask(arr)
    indices, dictionary, valid = dictionary_arrow(arr)
    return indices, _as_python(dictionary, where), valid


def dictionary_arrow(arr: pa.Array) -> tuple[np.ndarray, pa.Array, np.ndarray]:
    """``(indices int32, dictionary, valid)`` of a batch of any type but boolean, the
    dictionary an Arrow array (not checked); nulls at index 0."""
    valid = valid_mask(arr)
    if not pa.types.is_dictionary(arr.type):
        arr = plain(arr).dictionary_encode()
    codes = arr.indices
    if codes.null_count:
        codes = codes.fill_null(0)
    # Arrow's own buffer when there is nothing to fill; int32 whatever the index width (a
    # batch's dictionary never has 2^31 entries)
    indices = codes.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    # read-only whether Arrow's buffer or a new array: one kernel
    return _read_only(indices), arr.dictionary, valid
