"""Strings a build holds while it runs (primary keys, distinct texts), in working arrays of
the budget: in memory while they fit, spilled to scratch files beyond (:class:`Arrays`)."""

from __future__ import annotations

import numpy as np

from dlkit.db.write.scratch import Arrays

_MIN_BYTES = 1 << 16


class StringColumn:
    """Strings appended batch by batch: ``data`` (uint8) and ``offsets`` (int64, ``count + 1``
    of them, from 0), Arrow's large-string layout. Both live in arrays from ``arrays`` that
    double when full, so appending ``n`` bytes costs O(n) and the column is never larger
    than twice its contents."""

    def __init__(self, arrays: Arrays, strings: int = 0):
        self.arrays = arrays
        self.count = 0
        self.offsets_buffer = arrays.zeros(np.int64, max(strings, 15) + 1)
        self.data_buffer = arrays.empty(np.uint8, _MIN_BYTES)

    @property
    def offsets(self) -> np.ndarray:
        return self.offsets_buffer[:self.count + 1]

    @property
    def data(self) -> np.ndarray:
        return self.data_buffer[:self.nbytes]

    @property
    def nbytes(self) -> int:
        return int(self.offsets_buffer[self.count])

    def string(self, i: int) -> bytes:
        return bytes(self.data_buffer[self.offsets_buffer[i]:self.offsets_buffer[i + 1]])

    def reserve(self, strings: int, nbytes: int) -> None:
        """Room for ``strings`` more strings of ``nbytes`` bytes in all: after this, a kernel
        may write them into ``data_buffer`` and ``offsets_buffer`` in place."""
        end = self.nbytes
        if self.count + strings + 1 > self.offsets_buffer.shape[0]:
            self.offsets_buffer = _grown(self.arrays, self.offsets_buffer, self.count + 1,
                                         self.count + strings + 1)
        if end + nbytes > self.data_buffer.shape[0]:
            self.data_buffer = _grown(self.arrays, self.data_buffer, end, end + nbytes)

    def extend(self, data: np.ndarray, offsets: np.ndarray) -> None:
        """Append the strings of ``data``/``offsets`` (Arrow's large-string buffers)."""
        n = offsets.shape[0] - 1
        first, last = int(offsets[0]), int(offsets[-1])
        self.reserve(n, last - first)
        end = self.nbytes
        self.data_buffer[end:end + last - first] = data[first:last]
        np.add(offsets[1:], end - first, out=self.offsets_buffer[self.count + 1:self.count + n + 1])
        self.count += n


def _grown(arrays: Arrays, array: np.ndarray, used: int, needed: int) -> np.ndarray:
    """A larger copy of ``array``'s first ``used`` items, room for ``needed`` at least: twice
    the size, or more when that is not enough. The old array is freed with its last view."""
    grown = arrays.empty(array.dtype, max(needed, 2 * array.shape[0]))
    grown[:used] = array[:used]
    return grown
