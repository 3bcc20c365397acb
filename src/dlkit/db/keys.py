"""Primary keys: stage ``keys`` of preprocessing (read, check, write ``key.*``), the key index
of a table and foreign-key resolution through it (wrapping ``dlkit.core.keys``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from dlkit.core import keys as kk
from dlkit.db import format as fmt
from dlkit.db.convert import to_int_keys, to_string_buffers, valid_mask
from dlkit.db.hashing import Hasher
from dlkit.db.plan import TablePlan, check_rows, where
from dlkit.db.report import Progress
from dlkit.db.scratch import empty_small_pages
from dlkit.errors import DataError


@dataclass
class KeyIndex:
    """Maps key values of one table to its local rows."""

    family: str  # "integer" | "string"
    num_rows: int
    slots: np.ndarray  # dense/hash slots; for strings the (hash, row, start, end) table
    keys: np.ndarray | None = None  # integer keys
    kmin: int | None = None  # dense integer index when set
    data: np.ndarray | None = None
    offsets: np.ndarray | None = None
    _hold: object = None

    @classmethod
    def build_int(cls, keys: np.ndarray, where: str,
                  bounds: tuple[int, int] | None = None) -> KeyIndex:
        """Index integer ``keys`` (``bounds``: their min and max, when already known)."""
        n = keys.shape[0]
        if n:
            kmin, kmax = bounds if bounds is not None else (int(keys.min()), int(keys.max()))
            span = kmax - kmin + 1
            if _dense(span, n):
                slots, dup, first = kk.dense_index_build(keys, np.int64(kmin), span)
                if dup >= 0:
                    raise _duplicate(where, int(keys[dup]), first, dup)
                return cls(family="integer", num_rows=n, slots=slots, keys=keys, kmin=kmin)
        slots, dup, first = kk.hash_index_ints(keys, kk.table_size(n))
        if dup >= 0:
            raise _duplicate(where, int(keys[dup]), first, dup)
        return cls(family="integer", num_rows=n, slots=slots, keys=keys)

    @classmethod
    def build_str(cls, array: pa.Array, where: str) -> KeyIndex:
        data, offsets, _valid, held = to_string_buffers(array)
        n = len(held)
        hashes = np.empty(n, dtype=np.int64)
        kk.hash_strings(data, offsets, hashes)
        slots, dup, first = kk.hash_index_strings(hashes, data, offsets, kk.table_size(n))
        if dup >= 0:
            raise _duplicate(where, held[int(dup)].as_py(), first, dup)
        return cls(family="string", num_rows=n, slots=slots, data=data, offsets=offsets,
                   _hold=held)

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
            hashes = np.empty(len(valid), dtype=np.int64)
            kk.hash_strings(data, offsets, hashes)
            dangling, first = kk.hash_lookup_strings(hashes, valid, data, offsets, self.slots,
                                                     self.data, np.int64(base), out)
        return int(np.count_nonzero(valid)), int(dangling), int(first)


def _dense(span: int, n: int) -> bool:
    """Whether keys spanning ``span`` values get a dense index (a slot per possible key)."""
    return span <= 4 * n + 1024


def check_unique_ints(keys: np.ndarray, where: str, bounds: tuple[int, int]) -> None:
    """The uniqueness check of integer keys no foreign key refers to (no row index kept)."""
    kmin, kmax = bounds
    n = keys.shape[0]
    if n and _dense(kmax - kmin + 1, n):
        dup = int(kk.dense_first_duplicate(keys, np.int64(kmin), kmax - kmin + 1))
        if dup >= 0:
            first = int(np.flatnonzero(keys[:dup] == keys[dup])[0])
            raise _duplicate(where, int(keys[dup]), first, dup)
    else:
        KeyIndex.build_int(keys, where, bounds)


def _duplicate(where: str, value, row_a, row_b) -> DataError:
    a, b = sorted((int(row_a), int(row_b)))
    return DataError(f"{where}: duplicate primary key {value!r} (rows {a} and {b})")


def _key_batches(plan: TablePlan, batch_rows: int, progress: Progress, where_: str):
    """The primary-key column in batches, checked: no nulls, the footer's row count."""
    pos = 0
    for arr in plan.source.iter_column(plan.primary_key, batch_rows):
        if arr.null_count:
            row = pos + int(np.flatnonzero(~valid_mask(arr))[0])
            raise DataError(f"{where_}: null primary key at row {row}")
        pos += len(arr)
        check_rows(plan, f"column {plan.primary_key!r}", pos)
        yield arr
        progress.advance(len(arr))
    check_rows(plan, f"column {plan.primary_key!r}", pos, final=True)


def read_primary_keys(plan: TablePlan, batch_rows: int, hasher: Hasher, progress: Progress,
                      referenced: bool = True) -> tuple[KeyIndex | None, int]:
    """Stage ``keys`` for one table: read the primary keys, check them (no null, no
    duplicate), write ``key.*``. Returns ``(index, bytes written)``; the index is only kept
    when a foreign key refers to the table (``referenced``).
    """
    where_ = where(plan.name, plan.primary_key)
    if plan.pk_family == "integer":
        n = plan.num_rows
        keys = empty_small_pages(np.int64, n)
        kmin = kmax = pos = 0
        with hasher.open(fmt.key_values_file(plan.name)) as f:
            for arr in _key_batches(plan, batch_rows, progress, where_):
                chunk = to_int_keys(arr, where_)[0].astype("<i8", copy=False)
                f.write(chunk)
                if chunk.size:
                    lo, hi = int(chunk.min()), int(chunk.max())
                    kmin, kmax = (lo, hi) if pos == 0 else (min(kmin, lo), max(kmax, hi))
                    keys[pos:pos + chunk.size] = chunk
                    pos += chunk.size
        if not referenced:
            if n:
                check_unique_ints(keys, where_, (kmin, kmax))
            return None, f.size
        return KeyIndex.build_int(keys, where_, (kmin, kmax) if n else None), f.size
    chunks = [a.cast(pa.large_string()) for a in _key_batches(plan, batch_rows, progress, where_)]
    array = pa.concat_arrays(chunks) if chunks else pa.array([], type=pa.large_string())
    del chunks
    index = KeyIndex.build_str(array, where_)
    base = int(index.offsets[0])
    end = int(index.offsets[-1])
    with hasher.open(fmt.key_offsets_file(plan.name)) as f:
        f.write((index.offsets - base).astype("<i8"))
    with hasher.open(fmt.key_values_file(plan.name)) as f:
        f.write(index.data[base:end])
    return (index if referenced else None), index.offsets.nbytes + end - base
