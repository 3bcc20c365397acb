"""Column statistics and id remapping kernels for preprocessing.

``welford_update`` folds values into a state (:func:`welford_state`) one element at a time in
row order, so the result does not depend on how the rows were split into batches: the same
column always gives bit-identical statistics. Values are shifted by the first valid value
(``shift``) before they are folded, so large offsets with a small spread (timestamps: ~1.7e15
microseconds, seconds apart) keep their precision; the mean is ``shift + mean``.

Every finite column has a finite mean and standard deviation, but its deviations can
overflow on the way (``1e308 - (-1e308)``, or any deviation beyond 1e154 squared). So values
are folded halved (``x/2 - shift/2`` cannot overflow) and divided by ``scale``, a power of
two that starts at 1 and grows by ``2^RESCALE_BITS`` whenever a folded value passes
``2^RESCALE_BITS`` (mean and m2 rescaled with it). Powers of two are exact for normal
floats: below that size the statistics are bit for bit those of the plain Welford
recurrence. At the other end, deviations below ~1e-154 vanish when squared, as in any
float64 variance (two bits sooner here, and subnormal values round differently when halved).
"""

from __future__ import annotations

import numpy as np

from dlkit.core.jit import kernel

RESCALE_BITS = 480
_RESCALE = float(2.0 ** RESCALE_BITS)
_INV_RESCALE = float(2.0 ** -RESCALE_BITS)


def welford_state() -> np.ndarray:
    """A fresh state: ``[count, mean, m2, shift, scale]`` (mean and m2 of the folded values)."""
    return np.array([0.0, 0.0, 0.0, 0.0, 1.0])


@kernel
def welford_update(values, valid, state):
    count = state[0]
    mean = state[1]
    m2 = state[2]
    shift = state[3]
    scale = state[4]
    inv_scale = 1.0 / scale
    for i in range(values.shape[0]):
        if valid[i]:
            v = np.float64(values[i])
            if count == 0.0:
                shift = v
            x = (0.5 * v - 0.5 * shift) * inv_scale
            while _RESCALE < abs(x) < np.inf:  # (an infinity would never shrink)
                scale *= _RESCALE
                inv_scale *= _INV_RESCALE
                x *= _INV_RESCALE
                mean *= _INV_RESCALE
                m2 *= _INV_RESCALE * _INV_RESCALE
            count += 1.0
            # the reciprocal depends on the count only, so the division runs ahead of the
            # mean's chain of dependent operations instead of inside it (twice as fast)
            inv = 1.0 / count
            delta = x - mean
            mean += delta * inv
            m2 += delta * (x - mean)
    state[0] = count
    state[1] = mean
    state[2] = m2
    state[3] = shift
    state[4] = scale


def welford_result(state) -> tuple[int, float, float]:
    """``(count, mean, population std)`` of a Welford state."""
    count, mean, m2, shift, scale = (float(x) for x in state)
    if count == 0:
        return 0, 0.0, 0.0
    # halves first: shift + 2 * scale * mean may pass the largest float on the way
    return int(count), 2.0 * (0.5 * shift + scale * mean), 2.0 * scale * (m2 / count) ** 0.5


def column_stats(state) -> tuple[float, float]:
    """The ``(mean, std)`` a column's metadata records for a Welford state: std 1.0 where it
    would be 0 (a constant or empty column), so z-scoring always divides by a positive
    number."""
    _count, mean, std = welford_result(state)
    return mean, (std if std > 0 and np.isfinite(std) else 1.0)


@kernel
def convert_fixed_width(src, bitmap, bit_offset, finite_only, values, valid):
    """An Arrow fixed-width array read from its buffers: ``values[i] = src[i]`` converted to
    ``values``' dtype, or 0 for a null; ``valid[i]`` whether it is not null. ``bitmap`` is
    Arrow's validity bitmap (bit ``bit_offset + i``, LSB first), empty when there are no
    nulls; with ``finite_only``, NaN and +-inf count as nulls too."""
    has_bitmap = bitmap.shape[0] > 0
    for i in range(src.shape[0]):
        ok = True
        if has_bitmap:
            bit = bit_offset + i
            ok = (bitmap[bit >> 3] >> (bit & 7)) & 1 == 1
        x = src[i]
        if finite_only and not np.isfinite(x):
            ok = False
        if ok:
            values[i] = x
        else:
            values[i] = 0
        valid[i] = ok


@kernel
def gather_seeds(valid, first_row, row_times, values, anchor_row, obs_time, target):
    """A batch's task seeds (rows with ``valid``): their row ids (``first_row`` + position),
    times and targets (as float64), packed from position 0; returns how many."""
    n = 0
    for i in range(valid.shape[0]):
        if valid[i]:
            anchor_row[n] = first_row + i
            obs_time[n] = row_times[i]
            target[n] = np.float64(values[i])
            n += 1
    return n


@kernel
def first_uses(indices, valid, first):
    """``first[k]`` = the first valid row whose index is ``k`` (entries no valid row uses keep
    what the caller put there, ``-1``); returns the first valid row whose index lies outside
    ``first`` (-1 when none), where it stops."""
    size = first.shape[0]
    for i in range(indices.shape[0]):
        if valid[i]:
            k = indices[i]
            if k < 0 or k >= size:
                return i
            if first[k] < 0:
                first[k] = i
    return -1


@kernel
def map_entries(indices, mapping, valid, null, values):
    """``values[i] = mapping[indices[i]]`` for valid rows whose entry maps to an id (``>= 0``);
    every other row becomes a null: ``valid[i] = False``, ``values[i] = null``. The valid
    rows' indices must lie inside ``mapping`` (checked by :func:`first_uses`)."""
    for i in range(indices.shape[0]):
        v = mapping[indices[i]] if valid[i] else -1
        if v >= 0:
            values[i] = v
        else:
            valid[i] = False
            values[i] = null


@kernel
def remap_ids(values, mapping):
    """``values[i] = mapping[values[i]]`` in place; a negative value (a null) becomes 0."""
    for i in range(values.shape[0]):
        v = values[i]
        if v >= 0:
            values[i] = mapping[np.int64(v)]
        else:
            values[i] = 0
