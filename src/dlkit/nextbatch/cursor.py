"""The cursor and checkpoints.

A checkpoint file is exactly one canonical CBOR map (see docs/nextbatch_v2.md, "Checkpoint
files")::

    {"data_cursors": {key: {"epoch": e, "global_index": g}, ...},
     "dataset_key": key,            # the dataset the writing run sampled
     "manifest_hash": h'32 bytes',  # the run manifest it sampled it with
     "stage": "train",              # the stage it sampled it for: train, eval or infer
     "checksum": h'32 bytes'}       # SHA-256 of the canonical CBOR of the map without it

``dataset_key``, ``manifest_hash`` and ``stage`` bind the checkpoint to its run: ``dlkit
sample --resume`` refuses one written with another manifest, for another dataset or at
another stage (a cursor is a position in its stage's order: train's is shuffled, eval's and
infer's are not). ``checksum`` makes any changed byte (a flipped bit that would still decode
to another valid cursor, say) a refusal. Older checkpoints are still read: dlkit 0.1's
(``data_cursors`` alone), 0.2's (no ``checksum``, no ``stage``) and those with a
``checksum`` but no ``stage``. Every stage could write those, so which one did is unknown:
they resume at any stage, unchecked. A ``stage`` comes only with a ``checksum`` (no dlkit
wrote one without). Loading is strict: the bytes must be one canonical CBOR item of that
shape, so truncation, trailing garbage, non-canonical re-encodings, a checksum that does not
match and foreign files are rejected with a ``CheckpointError`` that names the file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cbor2

from dlkit.atomic import atomic_write_bytes
from dlkit.encoding import UINT64_MAX, canonical_cbor
from dlkit.errors import CheckpointError, ContractViolationError
from dlkit.files import read_regular
from dlkit.nextbatch.stage import Stage


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


@dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint file holds: a cursor per dataset and, since dlkit 0.2, the run it
    belongs to (``manifest_hash``, 32 bytes, and the ``dataset_key`` that run sampled), since
    0.3 with the ``stage`` it sampled it for (``None`` in an older one: not recorded)."""

    cursors: Mapping[str, Cursor]
    manifest_hash: bytes | None = None
    dataset_key: str | None = None
    stage: Stage | None = None

    def __post_init__(self) -> None:
        if (self.manifest_hash is None) != (self.dataset_key is None):
            raise ValueError("manifest_hash and dataset_key come together or not at all")
        if self.stage is not None and self.manifest_hash is None:
            raise ValueError("a stage comes with the manifest_hash and dataset_key it binds")
        if self.stage is not None and not isinstance(self.stage, Stage):
            raise ValueError(f"stage must be a Stage, got {self.stage!r}")
        if self.manifest_hash is not None and (not isinstance(self.manifest_hash, bytes)
                                               or len(self.manifest_hash) != 32):
            raise ValueError("manifest_hash must be 32 bytes")
        if self.dataset_key is not None and not isinstance(self.dataset_key, str):
            raise ValueError("dataset_key must be text")

    def to_cbor_value(self) -> dict[str, Any]:
        value: dict[str, Any] = {"data_cursors": {key: c.to_value()
                                                  for key, c in self.cursors.items()}}
        if self.manifest_hash is not None:
            value["manifest_hash"] = self.manifest_hash
            value["dataset_key"] = self.dataset_key
        if self.stage is not None:
            value["stage"] = self.stage.value
        return value

    def to_json_value(self) -> dict[str, Any]:
        """The readable form (``dlkit sample --json`` prints the same cursors)."""
        value = self.to_cbor_value()
        if self.manifest_hash is not None:
            value["manifest_hash"] = self.manifest_hash.hex()
        return value


def _checksum(value: Mapping[str, Any]) -> bytes:
    return hashlib.sha256(canonical_cbor(dict(value))).digest()


def checkpoint_bytes(cursors: Mapping[str, Cursor] | Checkpoint) -> bytes:
    """The file's bytes: the checkpoint's map with the ``checksum`` of its other entries."""
    checkpoint = cursors if isinstance(cursors, Checkpoint) else Checkpoint(cursors)
    value = checkpoint.to_cbor_value()
    return canonical_cbor({**value, "checksum": _checksum(value)})


def save_checkpoint(path: str | os.PathLike[str], cursors: Mapping[str, Cursor] | Checkpoint
                    ) -> None:
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
    """Decode checkpoint bytes to their cursors; raise ``ValueError`` describing the first
    problem."""
    return dict(parse_checkpoint_file(data).cursors)


def parse_checkpoint_file(data: bytes) -> Checkpoint:
    """Decode checkpoint bytes; raise ``ValueError`` describing the first problem."""
    if not data:
        raise ValueError("empty file")
    try:
        value = cbor2.loads(data)
    except (cbor2.CBORDecodeError, ValueError, TypeError, RecursionError) as exc:
        raise ValueError(f"not a CBOR checkpoint ({exc})") from None
    if not isinstance(value, dict) or set(value) - {"checksum"} not in _LAYOUTS:
        raise ValueError("not a dlkit checkpoint: expected a map with the keys data_cursors, "
                         "dataset_key, manifest_hash, stage and checksum (or data_cursors "
                         "alone)")
    checksum = value.pop("checksum", None)
    if "stage" in value and checksum is None:
        raise ValueError("not a dlkit checkpoint: a stage without a checksum (every dlkit "
                         "that records the stage writes the checksum)")
    cursors_value = value["data_cursors"]
    if not isinstance(cursors_value, dict):
        raise ValueError("data_cursors must be a map")
    cursors = {}
    for key, item in cursors_value.items():
        if not isinstance(key, str):
            raise ValueError(f"dataset key {key!r} is not text")
        cursors[key] = _cursor_from_value(item, key)
    try:
        checkpoint = Checkpoint(cursors, value.get("manifest_hash"), value.get("dataset_key"),
                                _stage_from_value(value["stage"]) if "stage" in value else None)
    except ValueError as exc:
        raise ValueError(f"not a dlkit checkpoint: {exc}") from None
    if checksum is not None and checksum != _checksum(checkpoint.to_cbor_value()):
        # a changed byte: whatever it decodes to, it is not what was written
        raise ValueError("checksum mismatch: the file was changed or corrupted after it was "
                         "written")
    written = checkpoint_bytes(checkpoint) if checksum is not None else \
        canonical_cbor(checkpoint.to_cbor_value())
    if written != data:
        raise ValueError("bytes are not the canonical encoding (trailing data or a corrupted byte)")
    return checkpoint


_BOUND_KEYS = {"data_cursors", "dataset_key", "manifest_hash"}
# dlkit 0.1; 0.2 and the first checksummed ones; with the stage
_LAYOUTS = ({"data_cursors"}, _BOUND_KEYS, _BOUND_KEYS | {"stage"})


def _stage_from_value(value: Any) -> Stage:
    try:
        return Stage(value)
    except ValueError:  # a non-text value, or a text that names no stage
        names = ", ".join(s.value for s in Stage)
        raise ValueError(f"stage must be one of {names}, got {value!r}") from None


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Cursor]:
    """The cursors of the checkpoint file ``path``."""
    return dict(read_checkpoint(path).cursors)


def read_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """The checkpoint file ``path``, with the run it is bound to."""
    path = Path(path)
    try:
        data = read_regular(path)
    except FileNotFoundError:
        raise CheckpointError("no such file", path=path) from None
    except OSError as exc:
        raise CheckpointError(f"cannot read: {exc.strerror}", path=path) from None
    try:
        return parse_checkpoint_file(data)
    except ValueError as exc:
        raise CheckpointError(str(exc), path=path) from None
