"""The cursor (seed I.A) and checkpoints (profile P8).

A checkpoint file is exactly ``CBOR_CANONICAL({"data_cursors": {key: {"epoch": e,
"global_index": g}}})``. Loading is strict: the bytes must be one canonical CBOR item of that
shape, so truncation, trailing garbage, non-canonical re-encodings and foreign files are
rejected with a ``CheckpointError`` that names the file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cbor2

from dlkit.atomic import atomic_write_bytes
from dlkit.errors import CheckpointError, ContractViolationError
from dlkit.files import read_regular
from dlkit.nextbatch.cbor import UINT64_MAX, canonical_cbor


@dataclass(frozen=True, order=True)
class Cursor:
    """Where a dataset's stream stands: ``global_index`` positions into ``epoch``."""

    epoch: int = 0
    global_index: int = 0

    def __post_init__(self) -> None:
        for name in ("epoch", "global_index"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= UINT64_MAX:
                raise ContractViolationError(f"cursor {name} must be a uint64, got {value!r}")

    def to_value(self) -> dict[str, int]:
        return {"epoch": self.epoch, "global_index": self.global_index}

    def __str__(self) -> str:
        return f"epoch {self.epoch}, index {self.global_index}"


def checkpoint_bytes(cursors: Mapping[str, Cursor]) -> bytes:
    return canonical_cbor({"data_cursors": {key: c.to_value() for key, c in cursors.items()}})


def save_checkpoint(path: str | os.PathLike[str], cursors: Mapping[str, Cursor]) -> None:
    """Write a checkpoint atomically (the old file survives a crash mid-write)."""
    atomic_write_bytes(path, checkpoint_bytes(cursors))


def _cursor_from_value(value: Any, key: str) -> Cursor:
    if not isinstance(value, dict) or set(value) != {"epoch", "global_index"}:
        raise ValueError(f"cursor of {key!r} must be a map with exactly epoch and global_index")
    try:
        return Cursor(value["epoch"], value["global_index"])
    except ContractViolationError as exc:
        raise ValueError(f"cursor of {key!r}: {exc.message}") from None


def parse_checkpoint(data: bytes) -> dict[str, Cursor]:
    """Decode checkpoint bytes; raise ``ValueError`` describing the first problem."""
    if not data:
        raise ValueError("empty file")
    try:
        value = cbor2.loads(data)
    except (cbor2.CBORDecodeError, ValueError, TypeError, RecursionError) as exc:
        raise ValueError(f"not a CBOR checkpoint ({exc})") from None
    if not isinstance(value, dict) or set(value) != {"data_cursors"}:
        raise ValueError("not a dlkit checkpoint: expected a map with the single key data_cursors")
    cursors_value = value["data_cursors"]
    if not isinstance(cursors_value, dict):
        raise ValueError("data_cursors must be a map")
    cursors = {}
    for key, item in cursors_value.items():
        if not isinstance(key, str):
            raise ValueError(f"dataset key {key!r} is not text")
        cursors[key] = _cursor_from_value(item, key)
    if checkpoint_bytes(cursors) != data:
        raise ValueError("bytes are not the canonical encoding (trailing data or a corrupted byte)")
    return cursors


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Cursor]:
    path = Path(path)
    try:
        data = read_regular(path)
    except FileNotFoundError:
        raise CheckpointError("no such file", path=path) from None
    except OSError as exc:
        raise CheckpointError(f"cannot read: {exc.strerror}", path=path) from None
    try:
        return parse_checkpoint(data)
    except ValueError as exc:
        raise CheckpointError(str(exc), path=path) from None
