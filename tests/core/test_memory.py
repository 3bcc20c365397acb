"""``prefetch``: compiles for every array kind the kernels use and never changes a result."""

from __future__ import annotations

import numpy as np
import pytest

from dlkit.core.jit import kernel
from dlkit.core.memory import prefetch


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
