"""Composite keys: a tuple of integer and string parts as one canonical byte string.

A composite key (``primary_key = ["yearID", "teamID"]``) is matched, stored and checked as the
bytes of its parts one after the other: an integer part as its 8 bytes (int64, big-endian), a
string part as its length (uint32, big-endian) then its UTF-8 bytes. The encoding is
injective for a fixed list of part types (every part's extent is known from the bytes before
it), so two keys are equal exactly when their byte strings are: the string-key index
(``dlkit.core.keys``: hash, then compare the bytes) matches them with no false match. A
tuple with any null part is null (a foreign key: no edge; a primary key: an error).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from dlkit.db.write.convert import check_utf8, plain, to_int_keys, to_string_buffers

INT_BYTES = 8
LEN_BYTES = 4
MAX_PART_BYTES = (1 << 32) - 1


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
