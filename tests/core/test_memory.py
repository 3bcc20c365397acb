"""``prefetch`` compiles for every array kind the kernels use and never changes a result;
``load_u64_le`` reads the same word as the bytes spell, at any alignment."""

from __future__ import annotations

import numpy as np
import pytest

from dlkit.core.jit import kernel
from dlkit.core.memory import load_u64_le, prefetch


@kernel
def _sum_with_prefetch(values, ahead):
    total = 0.0
    for i in range(values.shape[0]):
        prefetch(values, i + ahead)  # past the end too: a hint never faults
        total += values[i]
    return total


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.float64])
def test_prefetch_is_only_a_hint(dtype):
    values = np.arange(1000, dtype=dtype) % 97
    readonly = values.copy()
    readonly.setflags(write=False)
    for array in (values, readonly):
        for ahead in (0, 16, 10_000):
            assert _sum_with_prefetch(array, ahead) == float(values.astype(np.float64).sum())
    assert prefetch(values, 3) is None  # the Python function (what NUMBA_DISABLE_JIT runs)


@kernel
def _words(data, starts):
    out = np.empty(starts.shape[0], dtype=np.uint64)
    for i in range(starts.shape[0]):
        out[i] = load_u64_le(data, starts[i])
    return out


def test_unaligned_word_loads_read_little_endian_bytes():
    rng = np.random.default_rng(5)
    data = rng.integers(0, 256, 64).astype(np.uint8)
    starts = np.arange(0, 57)  # every alignment, up to the last whole word
    expect = [int.from_bytes(data[s:s + 8].tobytes(), "little") for s in starts]
    readonly = data.copy()
    readonly.setflags(write=False)
    for array in (data, readonly, data[3:][:60]):
        shift = 3 if array.shape[0] == 60 else 0
        got = _words(array, starts[:array.shape[0] - 7])
        assert got.tolist() == expect[shift:shift + got.shape[0]]
    # the Python function (what NUMBA_DISABLE_JIT runs) agrees
    assert [int(load_u64_le(data, int(s))) for s in starts] == expect
