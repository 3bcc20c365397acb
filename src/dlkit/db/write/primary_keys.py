"""Primary keys: stage ``keys`` of preprocessing (read, check, write ``key.*``), the key index
of a table and foreign-key resolution through it (wrapping ``dlkit.core.keys``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from dlkit.core import keys as kk
from dlkit.db import format as fmt
from dlkit.db.keys import (
    Allocate,
    check_unique_ints,
    decode_key,
    dense,
    duplicate_key,
    heap_empty,
    no_rows,
)
from dlkit.db.write.composite import encode_keys
from dlkit.db.write.convert import check_utf8, to_int_keys, to_string_buffers, valid_mask
from dlkit.db.write.hashing import Hasher
from dlkit.db.write.plan import COMPOSITE, TablePlan, check_rows
from dlkit.db.write.report import Progress
from dlkit.db.write.scratch import Arrays
from dlkit.db.write.strings import StringColumn
from dlkit.errors import DataError


@dataclass
class KeyIndex:
    """Maps key values of one table to its local rows."""

    family: str  # "integer" | "string" (composite keys are indexed as their encoded bytes)
    num_rows: int
    slots: np.ndarray  # dense/hash slots; for strings the (hash, row, key, length) table
    keys: np.ndarray | None = None  # integer keys (hash index only)
    kmin: int | None = None  # dense integer index when set
    data: np.ndarray | None = None  # string keys' bytes (the slots hold where each starts)

    @classmethod
    def build_int(cls, keys: np.ndarray, where: str, bounds: tuple[int, int] | None = None,
                  empty: Allocate = heap_empty) -> KeyIndex:
        """Index integer ``keys`` (``bounds``: their min and max, when already known; the
        slots from ``empty(dtype, n)``)."""
        n = keys.shape[0]
        if n:
            kmin, kmax = bounds if bounds is not None else (int(keys.min()), int(keys.max()))
            span = kmax - kmin + 1
            if dense(span, n):
                slots = no_rows(empty, span, n)
                dup, first = kk.dense_index_build(keys, np.int64(kmin), slots)
                if dup >= 0:
                    raise duplicate_key(where, int(keys[dup]), first, dup)
                return cls(family="integer", num_rows=n, slots=slots, kmin=kmin)
        slots = no_rows(empty, kk.table_size(n), n)
        dup, first = kk.hash_index_ints(keys, slots)
        if dup >= 0:
            raise duplicate_key(where, int(keys[dup]), first, dup)
        return cls(family="integer", num_rows=n, slots=slots, keys=keys)

    @classmethod
    def build_str(cls, data: np.ndarray, offsets: np.ndarray, where: str,
                  empty: Allocate = heap_empty,
                  families: tuple[str, ...] = ()) -> KeyIndex:
        """Index the string keys ``data``/``offsets`` (Arrow's large-string buffers; the index
        keeps ``data``; the slots from ``empty(dtype, n)``)."""
        n = offsets.shape[0] - 1
        hashes = empty(np.dtype(np.int64), n)
        kk.hash_strings(data, offsets, hashes)
        slots = empty(np.dtype(np.int64), kk.table_size(n) * kk.STRING_SLOT).reshape(
            -1, kk.STRING_SLOT)
        dup, first = kk.hash_index_strings(hashes, data, offsets, slots)
        del hashes
        if dup >= 0:
            raw = bytes(data[offsets[dup]:offsets[dup + 1]])
            value = decode_key(raw, families) if families else raw.decode(errors="replace")
            raise duplicate_key(where, value, first, dup)
        return cls(family="string", num_rows=n, slots=slots, data=data)

    def lookup(self, arr: pa.Array, base: int, out: np.ndarray, where: str) -> tuple[int, int, int]:
        """Resolve a batch of foreign keys into ``out`` (global parent id or -1).

        Returns ``(num_valid, num_dangling, first_dangling_position)``.
        """
        if self.family == "integer":
            keys, valid = to_int_keys(arr, where)
            if self.kmin is not None:
                dangling, first = kk.dense_lookup(keys, valid, np.int64(self.kmin), self.slots,
                                                  np.int64(base), out)
            else:
                dangling, first = kk.hash_lookup_ints(keys, valid, self.keys, self.slots,
                                                      np.int64(base), out)
        else:
            data, offsets, valid, _held = to_string_buffers(arr)
            return self.lookup_bytes(data, offsets, valid, base, out)
        return int(np.count_nonzero(valid)), int(dangling), int(first)

    def lookup_bytes(self, data: np.ndarray, offsets: np.ndarray, valid: np.ndarray, base: int,
                     out: np.ndarray) -> tuple[int, int, int]:
        """:meth:`lookup` of keys given as bytes (string keys, or encoded composite keys)."""
        assert self.family == "string", "byte keys look up in a string index"
        hashes = np.empty(len(valid), dtype=np.int64)
        kk.hash_strings(data, offsets, hashes)
        dangling, first = kk.hash_lookup_strings(hashes, valid, data, offsets, self.slots,
                                                 self.data, np.int64(base), out)
        return int(np.count_nonzero(valid)), int(dangling), int(first)


class PrimaryKeys:
    """A table's primary keys, fed batch by batch in row order, then checked unique and
    indexed by :meth:`finish`. Integer keys are written as they come; string keys when the
    table is complete (their offsets need the whole column)."""

    def __init__(self, plan: TablePlan, hasher: Hasher, arrays: Arrays):
        assert plan.primary_key is not None, "only a table with a primary key has keys"
        self.plan = plan
        self.arrays = arrays
        self.where = plan.pk_where
        self.hasher = hasher
        self.integer = plan.pk_family == "integer"
        self.composite = plan.pk_family == COMPOSITE
        self.pos = 0
        if self.integer:
            self.out = hasher.open(fmt.key_values_file(plan.name))
            # released by finish
            self.keys: np.ndarray | None = arrays.empty(np.int64, plan.num_rows)
            self.bounds = (0, 0)
        else:  # a string column in the budget's arrays, written when complete
            self.strings = StringColumn(arrays, plan.num_rows)

    def add(self, column: dict[str, pa.Array]) -> None:
        """The next batch of keys, ``column[name]`` for each key column (the caller checks the
        row count against the footer)."""
        for name in self.plan.pk_columns:
            arr = column[name]
            if arr.null_count:
                row = self.pos + int(np.flatnonzero(~valid_mask(arr))[0])
                raise DataError(f"{self.where}: null primary key at row {row}")
        arr = column[self.plan.pk_columns[0]]
        if self.composite:
            enc = encode_keys([column[c] for c in self.plan.pk_columns], self.plan.pk_families,
                              self.where, utf8=True)
            self.strings.extend(enc.data, enc.offsets)
        elif self.integer:
            assert self.keys is not None, "a key added after finish"
            chunk = self.keys[self.pos:self.pos + len(arr)]
            chunk[:] = to_int_keys(arr, self.where)[0]
            # the keys stay in memory until finish: queued without a copy (page aligned
            # batches go to disk straight from them)
            self.out.write(chunk, bounded=False)
            if chunk.size:
                lo, hi = int(chunk.min()), int(chunk.max())
                if self.pos:
                    lo, hi = min(lo, self.bounds[0]), max(hi, self.bounds[1])
                self.bounds = (lo, hi)
        else:
            data, offsets, _valid, keys = to_string_buffers(arr)
            check_utf8(keys, self.where)
            self.strings.extend(data, offsets)
        self.pos += len(arr)

    def finish(self, referenced: bool) -> tuple[KeyIndex | None, int]:
        """Check uniqueness, write what is left: ``(index, bytes written)``; the index is
        only kept when a foreign key refers to the table (``referenced``)."""
        if self.integer:
            self.out.close()
            assert self.keys is not None, "finish called twice"
            keys, self.keys = self.keys[:self.pos], None
            if not referenced:
                check_unique_ints(keys, self.where, self.bounds, self.arrays.empty)
                return None, self.out.size
            index = KeyIndex.build_int(keys, self.where, self.bounds if self.pos else None,
                                       self.arrays.empty)
            return index, self.out.size
        offsets, data = self.strings.offsets, self.strings.data
        index = KeyIndex.build_str(data, offsets, self.where, self.arrays.empty,
                                   self.plan.pk_families if self.composite else ())
        with self.hasher.open(fmt.key_offsets_file(self.plan.name)) as f:
            f.write(offsets, bounded=False)
        with self.hasher.open(fmt.key_values_file(self.plan.name)) as f:
            f.write(data, bounded=False)
        del self.strings  # the index keeps them while a foreign key needs them
        return (index if referenced else None), offsets.nbytes + data.nbytes


def read_primary_keys(plan: TablePlan, batch_rows: int, hasher: Hasher, progress: Progress,
                      arrays: Arrays, referenced: bool = True) -> tuple[KeyIndex | None, int]:
    """Stage ``keys`` for one table: read the primary-key column on its own, check it (no
    null, no duplicate), write ``key.*``. Returns ``(index, bytes written)``. (A table no
    earlier table refers to gets this done during its own pass instead.)"""
    keys = PrimaryKeys(plan, hasher, arrays)
    columns = list(plan.pk_columns)
    assert columns, "only a table with a primary key has keys"
    what = ", ".join(f"column {c!r}" for c in columns)
    for batch in plan.source.iter_batches(columns, batch_rows):
        check_rows(plan, what, keys.pos + batch.num_rows)
        keys.add(dict(zip(batch.schema.names, batch.columns)))
        progress.advance(batch.num_rows)
    check_rows(plan, what, keys.pos, final=True)
    return keys.finish(referenced)
