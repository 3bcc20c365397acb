"""Composite keys: a batch of tuples of integer and string parts, each as one canonical byte
string (the encoding: :mod:`dlkit.db.keys`). A tuple with any null part is null (a foreign
key: no edge; a primary key: an error).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from dlkit.db.keys import INT_BYTES, LEN_BYTES, MAX_PART_BYTES
from dlkit.db.write.convert import check_utf8, plain, to_int_keys, to_string_buffers


@dataclass(frozen=True)
class EncodedKeys:
    """A batch of composite keys: ``data[offsets[i]:offsets[i + 1]]`` is row i's key (empty
    when ``valid[i]`` is false)."""

    data: np.ndarray  # uint8
    offsets: np.ndarray  # int64[n + 1], from 0
    valid: np.ndarray  # bool[n]


def encode_keys(arrays: list[pa.Array], families: tuple[str, ...], where: str,
                utf8: bool = False) -> EncodedKeys:
    """The canonical bytes of each row's tuple of ``arrays`` (part ``i`` of type family
    ``families[i]``, "integer" or "string"). ``utf8``: check string parts are valid UTF-8
    (primary keys; a foreign key that is not simply dangles)."""
    n = len(arrays[0])
    valid = np.ones(n, dtype=bool)
    lengths = np.zeros(n, dtype=np.int64)
    parts: list[tuple[np.ndarray, np.ndarray | None, np.ndarray | None]] = []
    held = []
    for arr, family in zip(arrays, families):
        if family == "integer":
            keys, ok = to_int_keys(arr, where)
            be = np.ascontiguousarray(keys, dtype=">i8").view(np.uint8).reshape(n, INT_BYTES)
            parts.append((be, None, None))
            lengths += INT_BYTES
        else:
            if utf8:
                check_utf8(plain(arr), where)
            data, offsets, ok, keep = to_string_buffers(arr)
            held.append(keep)
            plen = np.where(ok, np.diff(offsets), 0).astype(np.int64)
            if n and int(plen.max()) > MAX_PART_BYTES:
                raise ValueError(f"{where}: a key part is longer than {MAX_PART_BYTES} bytes")
            parts.append((data, offsets[:-1], plen))
            lengths += LEN_BYTES + plen
        valid &= ok
    lengths[~valid] = 0
    out_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_offsets[1:])
    out = np.empty(int(out_offsets[-1]), dtype=np.uint8)
    rows = np.flatnonzero(valid)
    cursor = out_offsets[:-1][rows].copy()
    for data, starts, part_lengths in parts:
        if starts is None or part_lengths is None:
            out[cursor[:, None] + np.arange(INT_BYTES)] = data[rows]
            cursor += INT_BYTES
            continue
        lens = part_lengths[rows]
        head = lens.astype(">u4").view(np.uint8).reshape(len(rows), LEN_BYTES)
        out[cursor[:, None] + np.arange(LEN_BYTES)] = head
        cursor += LEN_BYTES
        total = int(lens.sum())
        if total:
            before = np.cumsum(lens) - lens
            within = np.arange(total, dtype=np.int64) - np.repeat(before, lens)
            out[np.repeat(cursor, lens) + within] = data[np.repeat(starts[rows], lens) + within]
        cursor += lens
    return EncodedKeys(data=out, offsets=out_offsets, valid=valid)
