"""Keys as the format stores them, and the uniqueness check of integer keys.

A composite key (``primary_key = ["yearID", "teamID"]``) is matched, stored and checked as the
bytes of its parts one after the other: an integer part as its 8 bytes (int64, big-endian), a
string part as its length (uint32, big-endian) then its UTF-8 bytes. The encoding is
injective for a fixed list of part types (every part's extent is known from the bytes before
it), so two keys are equal exactly when their byte strings are: the string-key index
(``dlkit.core.keys``: hash, then compare the bytes) matches them with no false match.
:func:`decode_key` reads one back (the reader, error messages); the build encodes whole
batches (``dlkit.db.write.composite``).

:func:`check_unique_ints` is the uniqueness check of integer primary keys, shared by the build
and by ``dlkit verify``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dlkit.core import integrity
from dlkit.core import keys as kk
from dlkit.db import format as fmt
from dlkit.errors import DataError

INT_BYTES = 8
LEN_BYTES = 4
MAX_PART_BYTES = (1 << 32) - 1

Allocate = Callable[[np.dtype, int], np.ndarray]  # ``empty(dtype, n)``


def decode_key(raw: bytes, families: tuple[str, ...]) -> tuple[int | str, ...]:
    """The tuple of one encoded key. Raises ``ValueError`` when ``raw`` is not one."""
    parts: list[int | str] = []
    pos = 0
    for family in families:
        if family == "integer":
            if pos + INT_BYTES > len(raw):
                raise ValueError("a composite key ends inside an integer part")
            parts.append(int.from_bytes(raw[pos:pos + INT_BYTES], "big", signed=True))
            pos += INT_BYTES
        else:
            if pos + LEN_BYTES > len(raw):
                raise ValueError("a composite key ends inside a string part's length")
            size = int.from_bytes(raw[pos:pos + LEN_BYTES], "big")
            pos += LEN_BYTES
            if pos + size > len(raw):
                raise ValueError("a composite key ends inside a string part")
            parts.append(raw[pos:pos + size].decode("utf-8"))
            pos += size
    if pos != len(raw):
        raise ValueError("a composite key has bytes after its last part")
    return tuple(parts)


def encode_key(values: tuple[int | str, ...]) -> bytes:
    """The canonical bytes of one tuple (plain Python; the reference of :func:`encode_keys`)."""
    out = bytearray()
    for value in values:
        if isinstance(value, str):
            raw = value.encode("utf-8")
            out += len(raw).to_bytes(LEN_BYTES, "big") + raw
        else:
            out += int(value).to_bytes(INT_BYTES, "big", signed=True)
    return bytes(out)


def heap_empty(dtype: np.dtype, n: int) -> np.ndarray:
    return np.empty(n, dtype=dtype)


def row_dtype(n: int) -> np.dtype:
    """The slots' dtype for a table of ``n`` rows (and -1): the graph's row id dtype, which
    holds every row id of the table."""
    return fmt.graph_id_dtype(n)


def no_rows(empty: Allocate, size: int, n: int) -> np.ndarray:
    """``size`` slots of a table of ``n`` rows, each -1 (no row)."""
    slots = empty(row_dtype(n), size)
    slots.fill(-1)
    return slots


def dense(span: int, n: int) -> bool:
    """Whether keys spanning ``span`` values get a dense index (a slot per possible key)."""
    return span <= 4 * n + 1024


def duplicate_key(where: str, value: object, row_a: int, row_b: int) -> DataError:
    a, b = sorted((int(row_a), int(row_b)))
    return DataError(f"{where}: duplicate primary key {value!r} (rows {a} and {b})")


def check_unique_ints(keys: np.ndarray, where: str, bounds: tuple[int, int] | None = None,
                      empty: Allocate = heap_empty) -> None:
    """The uniqueness check of integer keys no foreign key refers to (no row index kept;
    ``bounds``: their min and max, when already known). Keys in strictly ascending order,
    as tables are often exported, are distinct without building anything; otherwise a dense
    or a hashed index of the keys finds the first repeated one (``DataError``)."""
    n = keys.shape[0]
    if n < 2 or integrity.strictly_ascending(keys):
        return
    kmin, kmax = bounds if bounds is not None else (int(keys.min()), int(keys.max()))
    if dense(kmax - kmin + 1, n):
        dup = int(kk.dense_first_duplicate(keys, np.int64(kmin), kmax - kmin + 1))
        if dup >= 0:
            first = int(np.flatnonzero(keys[:dup] == keys[dup])[0])
            raise duplicate_key(where, int(keys[dup]), first, dup)
    else:
        slots = no_rows(empty, kk.table_size(n), n)
        dup, first = kk.hash_index_ints(keys, slots)
        if dup >= 0:
            raise duplicate_key(where, int(keys[dup]), first, dup)
