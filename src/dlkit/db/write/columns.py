"""Feature columns written batch by batch: values, validity bitmap, statistics, categories.

Categorical columns get provisional ids in order of first appearance (``-1`` for a null)
while the table streams by, kept in memory; when the table ends, the categories are sorted,
the ids renumbered in place and written (``finish``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from dlkit.core.stats import (
    column_stats,
    first_uses,
    map_entries,
    remap_ids,
    welford_state,
    welford_update,
)
from dlkit.db import format as fmt
from dlkit.db.write.convert import dictionary_parts, to_boolean, to_micros, to_numeric
from dlkit.db.write.hashing import HashedFile, Hasher
from dlkit.db.write.plan import ColumnPlan, TablePlan, where
from dlkit.db.write.scratch import Arrays
from dlkit.errors import DataError


class BitmapWriter:
    """Packs bool batches into an LSB-first bitmap (bit ``i % 8`` of byte ``i // 8``)."""

    def __init__(self, out: HashedFile):
        self.out = out
        self.carry = np.zeros(0, dtype=bool)

    def write(self, valid: np.ndarray) -> None:
        if self.carry.size:
            valid = np.concatenate([self.carry, valid])
        full = (valid.size // 8) * 8
        if full:
            self.out.write(np.packbits(valid[:full], bitorder="little"))
        self.carry = valid[full:].copy()

    def close(self) -> None:
        if self.carry.size:
            self.out.write(np.packbits(self.carry, bitorder="little"))
            self.carry = np.zeros(0, dtype=bool)
        self.out.close()


def first_rows(indices: np.ndarray, valid: np.ndarray, size: int, where: str) -> np.ndarray:
    """The first non-null row of the batch using each dictionary entry, ``-1`` for an entry no
    non-null row uses (dictionaries may hold extras)."""
    first = np.full(size, -1, dtype=np.int64)
    bad = int(first_uses(indices, valid, first))
    if bad >= 0:
        raise DataError(f"{where}: corrupt dictionary-encoded data: row {bad} refers to entry "
                        f"{int(indices[bad])} of a dictionary of {size}")
    return first


def map_dictionary(arr: pa.Array, ids: dict[Any, int], dtype: npt.DTypeLike, where: str,
                   ) -> tuple[np.ndarray, list[Any], np.ndarray, np.ndarray, list[int]]:
    """A batch seen through its dictionary: ``(indices, dictionary, valid, mapping, new)``.

    ``mapping[j]`` is ``ids[dictionary[j]]``, ``-1`` for an entry no non-null row uses, and
    ``-2`` for a used entry not in ``ids`` yet; ``new`` lists those entries' positions.
    """
    indices, dictionary, valid = dictionary_parts(arr, where)
    used = first_rows(indices, valid, len(dictionary), where) >= 0
    mapping = np.empty(len(dictionary), dtype=dtype)
    new = []
    for j, value in enumerate(dictionary):
        if value is None or not used[j]:
            mapping[j] = -1
        elif (known := ids.get(value)) is None:
            mapping[j] = -2
            new.append(j)
        else:
            mapping[j] = known
    return indices, dictionary, valid, mapping, new


def apply_mapping(indices: np.ndarray, mapping: np.ndarray, valid: np.ndarray,
                  null: int) -> tuple[np.ndarray, np.ndarray]:
    """``(mapping[indices], valid)``, a row whose entry maps to nothing being a null
    (``valid`` is updated in place) holding ``null``."""
    values = np.empty(len(valid), dtype=mapping.dtype)
    map_entries(indices, mapping, valid, mapping.dtype.type(null), values)
    return values, valid


class CategoryEncoder:
    """Provisional ids in order of first appearance; ``finish`` numbers the sorted categories."""

    def __init__(self) -> None:
        self.ids: dict[Any, int] = {}
        self.values: list[Any] = []

    def encode(self, arr: pa.Array, where: str) -> tuple[np.ndarray, np.ndarray]:
        """Provisional ids of a batch, ``-1`` for a null."""
        indices, dictionary, valid, mapping, new = map_dictionary(arr, self.ids, np.int32, where)
        for j in new:
            value = dictionary[j]
            cid = self.ids.get(value)  # a dictionary may repeat a value
            if cid is None:
                cid = len(self.values)
                self.ids[value] = cid
                self.values.append(value)
            mapping[j] = cid
        return apply_mapping(indices, mapping, valid, null=-1)

    def finish(self) -> tuple[list[Any], np.ndarray]:
        """``(sorted categories, provisional id -> final id)``."""
        order = sorted(range(len(self.values)), key=lambda i: self.values[i])
        final = np.empty(len(order), dtype=np.int32)
        for new, old in enumerate(order):
            final[old] = new
        return [self.values[i] for i in order], final


class ColumnWriter:
    """One feature column: values file, validity bitmap, statistics, categories."""

    def __init__(self, plan: TablePlan, col: ColumnPlan, hasher: Hasher, arrays: Arrays):
        self.plan = plan
        self.col = col
        self.where = where(plan.name, col.name)
        self.dtype = fmt.VALUE_DTYPES[col.stype]
        values_rel = fmt.column_values_file(plan.name, col.index)
        self.bitmap = BitmapWriter(hasher.open(fmt.column_valid_file(plan.name, col.index)))
        self.state = welford_state()
        self.encoder = CategoryEncoder() if col.stype == fmt.CATEGORICAL else None
        if self.encoder is None:
            self.values_out = hasher.open(values_rel)
        else:  # provisional ids, renumbered in place by finish
            self.values_out = hasher.open(values_rel)
            self.ids: np.ndarray | None = arrays.empty(self.dtype, plan.num_rows)  # finish frees
            self.pos = 0
        self.last: tuple[np.ndarray, np.ndarray] | None = None

    def convert(self, arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        stype = self.col.stype
        if stype == fmt.NUMERIC:
            return to_numeric(arr)
        if stype == fmt.BOOLEAN:
            return to_boolean(arr, self.where)
        if stype == fmt.TIMESTAMP:
            return to_micros(arr, self.where)
        if stype == fmt.CATEGORICAL:
            assert self.encoder is not None, "a categorical column has its encoder"
            return self.encoder.encode(arr, self.where)
        raise AssertionError("text columns are converted by the TextStore")

    def append(self, values: np.ndarray, valid: np.ndarray) -> None:
        if self.col.stype in (fmt.NUMERIC, fmt.TIMESTAMP):
            welford_update(values, valid, self.state)
        if self.encoder is None:
            values = np.ascontiguousarray(values, dtype=self.dtype)
            self.values_out.write(values.data.cast("B"))
        else:
            assert self.ids is not None, "values appended after finish"
            self.ids[self.pos:self.pos + values.shape[0]] = values
            self.pos += values.shape[0]
        self.bitmap.write(valid)
        self.col.num_valid += int(np.count_nonzero(valid))
        self.last = (values, valid)

    def finish(self) -> np.ndarray | None:
        """Close the files; returns the provisional -> final category map (categorical)."""
        col = self.col
        self.bitmap.close()
        self.last = None
        if col.stype in (fmt.NUMERIC, fmt.TIMESTAMP):
            col.mean, col.std = column_stats(self.state)
        if self.encoder is None:
            self.values_out.close()
            return None
        col.categories, final = self.encoder.finish()
        assert self.ids is not None, "finish called twice"
        remap_ids(self.ids[:self.pos], final)
        self.values_out.write(self.ids[:self.pos], bounded=False)
        self.values_out.close()
        self.ids = None
        return final
