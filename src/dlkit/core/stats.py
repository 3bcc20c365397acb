"""Column statistics and id remapping kernels for preprocessing.

``welford_update`` folds values into ``state = [count, mean, m2, shift]`` one element at a
time in row order, so the result does not depend on how the rows were split into batches: the
same column always gives bit-identical statistics. Values are shifted by the first valid value
(``shift``) before they are folded, so large offsets with a small spread (timestamps: ~1.7e15
microseconds, seconds apart) keep their precision; the mean is ``shift + mean``.
"""

from __future__ import annotations

import numpy as np

from dlkit.core.jit import kernel


@kernel
def welford_update(values, valid, state):
    count = state[0]
    mean = state[1]
    m2 = state[2]
    shift = state[3]
    for i in range(values.shape[0]):
        if valid[i]:
            if count == 0.0:
                shift = np.float64(values[i])
            x = np.float64(values[i]) - shift
            count += 1.0
            delta = x - mean
            mean += delta / count
            m2 += delta * (x - mean)
    state[0] = count
    state[1] = mean
    state[2] = m2
    state[3] = shift


def welford_result(state) -> tuple[int, float, float]:
    """``(count, mean, population std)`` of a Welford state."""
    count, mean, m2, shift = (float(x) for x in state)
    if count == 0:
        return 0, 0.0, 0.0
    return int(count), shift + mean, (m2 / count) ** 0.5


@kernel
def remap_ids(values, mapping):
    """``values[i] = mapping[values[i]]`` in place; a negative value (a null) becomes 0."""
    for i in range(values.shape[0]):
        v = values[i]
        if v >= 0:
            values[i] = mapping[np.int64(v)]
        else:
            values[i] = 0
