"""The run manifest (docs/nextbatch_v2.md, section 2): loading, validation and
``manifest_hash``.

A manifest is JSON holding only unsigned integers, text, booleans and objects: a float, a
duplicate key, an unknown key, a negative or > 2^64-1 integer, or a malformed hash is a
``ManifestError`` naming the offending field. Range rules that have a NextBatch failure code
(a zero batch size, a block size out of range, a zero cardinality) are *not* checked here:
``next_batch`` reports them with their codes, in the documented order (docs/nextbatch_v2.md,
section 6).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

from dlkit.encoding import UINT64_MAX, cbor_sha256, hex_digest, is_utf8, parse_hex_digest
from dlkit.errors import ManifestError
from dlkit.files import read_regular
from dlkit.nextbatch.tokens import SAMPLING_MODE_TRAIN, TRAIN_SAMPLING_MODES

DEFAULT_BLOCK_SIZE = 1_048_576

_TOP_KEYS = {"seed", "global_batch_size", "data", "datasets"}
_REQUIRED_TOP = ("seed", "global_batch_size", "datasets")
_DATA_KEYS = {"sampler_block_size", "drop_last", "sampling_mode"}
_DATASET_KEYS = ("id", "version", "cardinality", "hash")


@dataclass(frozen=True)
class DatasetEntry:
    """One dataset of the manifest: identity, cardinality and the 32-byte content hash."""

    id: str
    version: str
    cardinality: int
    hash: bytes

    def __post_init__(self) -> None:
        _require_text(self.id, "id")
        _require_text(self.version, "version")
        _require_uint64(self.cardinality, "cardinality")
        if not isinstance(self.hash, bytes) or len(self.hash) != 32:
            raise ManifestError(f"dataset hash must be 32 bytes, got {self.hash!r}")

    def to_cbor_value(self) -> dict[str, Any]:
        return {"id": self.id, "version": self.version, "cardinality": self.cardinality,
                "hash": self.hash}

    def to_json_value(self) -> dict[str, Any]:
        return {**self.to_cbor_value(), "hash": hex_digest(self.hash)}


@dataclass(frozen=True)
class DataConfig:
    """The manifest's ``data`` section with defaults filled in."""

    sampler_block_size: int = DEFAULT_BLOCK_SIZE
    drop_last: bool = False
    # The train order (docs/nextbatch_v3.md). The v2 default is never written into M, so
    # manifests that predate the key keep their manifest_hash.
    sampling_mode: str = SAMPLING_MODE_TRAIN

    def __post_init__(self) -> None:
        _require_uint64(self.sampler_block_size, "data.sampler_block_size")
        if not isinstance(self.drop_last, bool):
            raise ManifestError(f"data.drop_last must be true or false, got {self.drop_last!r}")
        if self.sampling_mode not in TRAIN_SAMPLING_MODES:
            raise ManifestError(
                f"data.sampling_mode must be one of {', '.join(TRAIN_SAMPLING_MODES)}, "
                f"got {_describe(self.sampling_mode)}")

    def to_cbor_value(self) -> dict[str, Any]:
        value: dict[str, Any] = {"sampler_block_size": self.sampler_block_size,
                                 "drop_last": self.drop_last}
        if self.sampling_mode != SAMPLING_MODE_TRAIN:
            value["sampling_mode"] = self.sampling_mode
        return value


@dataclass(frozen=True)
class RunManifest:
    """A validated run manifest. ``manifest_hash`` is computed once, from canonical CBOR."""

    seed: int
    global_batch_size: int
    datasets: Mapping[str, DatasetEntry]
    data: DataConfig = field(default_factory=DataConfig)

    def __post_init__(self) -> None:
        _require_uint64(self.seed, "seed")
        _require_uint64(self.global_batch_size, "global_batch_size")
        if not isinstance(self.data, DataConfig):
            raise ManifestError("data must be a DataConfig")
        if not self.datasets:
            raise ManifestError("datasets must name at least one dataset")
        for key, entry in self.datasets.items():
            _require_text(key, "dataset key")
            if not isinstance(entry, DatasetEntry):
                raise ManifestError(f"datasets[{key!r}] must be a DatasetEntry")
        # Freeze the mapping so the cached hash can never go stale.
        object.__setattr__(self, "datasets", MappingProxyType(dict(self.datasets)))

    def to_cbor_value(self) -> dict[str, Any]:
        """``M`` of P2: defaults filled in, hashes as byte strings."""
        return {
            "seed": self.seed,
            "global_batch_size": self.global_batch_size,
            "data": self.data.to_cbor_value(),
            "datasets": {key: entry.to_cbor_value() for key, entry in self.datasets.items()},
        }

    def to_json_value(self) -> dict[str, Any]:
        value = self.to_cbor_value()
        value["datasets"] = {key: e.to_json_value() for key, e in self.datasets.items()}
        return value

    def to_json(self) -> str:
        return json.dumps(self.to_json_value(), indent=2, sort_keys=True) + "\n"

    @cached_property
    def manifest_hash(self) -> bytes:
        return cbor_sha256(self.to_cbor_value())


# --- parsing ------------------------------------------------------------------------------


def _require_uint64(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManifestError(f"{what} must be an unsigned integer, got {_describe(value)}")
    if not 0 <= value <= UINT64_MAX:
        raise ManifestError(f"{what} must lie in [0, 2^64-1], got {value}")
    return value


def _require_text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ManifestError(f"{what} must be text, got {_describe(value)}")
    return value


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"boolean {json.dumps(value)}"
    if isinstance(value, float):
        return f"float {value!r}"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if value is None:
        return "null"
    return repr(value)


def _require_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ManifestError(f"{what} must be an object, got {_describe(value)}")
    return value


def _check_keys(obj: dict[str, Any], allowed: set[str] | tuple[str, ...], what: str,
                required: tuple[str, ...] = ()) -> None:
    unknown = sorted(set(obj) - set(allowed))
    if unknown:
        raise ManifestError(
            f"unknown key {unknown[0]!r} in {what} (allowed: {', '.join(sorted(allowed))})"
        )
    for key in required:
        if key not in obj:
            raise ManifestError(f"{what} is missing the required key {key!r}")


def _reject_float(text: str) -> float:
    raise ManifestError(f"floating-point number {text} is not allowed: the manifest is integer-only")


def _reject_constant(text: str) -> float:
    raise ManifestError(f"{text} is not allowed: the manifest is integer-only")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise ManifestError(f"duplicate key {key!r}")
        for text in (key, value) if isinstance(value, str) else (key,):
            if not is_utf8(text):
                raise ManifestError(f"{text!r} is not UTF-8 text (a lone surrogate)")
        obj[key] = value
    return obj


def manifest_from_value(value: Any) -> RunManifest:
    """Validate a parsed JSON value and build the manifest (hashes given as hex text)."""
    top = _require_object(value, "the manifest")
    _check_keys(top, _TOP_KEYS, "the manifest", _REQUIRED_TOP)
    data_obj = _require_object(top.get("data", {}), "data")
    _check_keys(data_obj, _DATA_KEYS, "data")
    data = DataConfig(
        sampler_block_size=_require_uint64(
            data_obj.get("sampler_block_size", DEFAULT_BLOCK_SIZE), "data.sampler_block_size"),
        drop_last=data_obj.get("drop_last", False),
        sampling_mode=data_obj.get("sampling_mode", SAMPLING_MODE_TRAIN),
    )
    datasets_obj = _require_object(top["datasets"], "datasets")
    datasets: dict[str, DatasetEntry] = {}
    for key, raw in datasets_obj.items():
        where = f"datasets[{key!r}]"
        entry = _require_object(raw, where)
        _check_keys(entry, _DATASET_KEYS, where, _DATASET_KEYS)
        try:
            digest = parse_hex_digest(entry["hash"], f"{where}.hash")
        except ValueError as exc:
            raise ManifestError(str(exc)) from None
        datasets[key] = DatasetEntry(
            id=_require_text(entry["id"], f"{where}.id"),
            version=_require_text(entry["version"], f"{where}.version"),
            cardinality=_require_uint64(entry["cardinality"], f"{where}.cardinality"),
            hash=digest,
        )
    return RunManifest(
        seed=_require_uint64(top["seed"], "seed"),
        global_batch_size=_require_uint64(top["global_batch_size"], "global_batch_size"),
        datasets=datasets,
        data=data,
    )


def parse_manifest(text: str | bytes) -> RunManifest:
    """Parse manifest JSON text strictly (no floats, no duplicate keys, no NaN)."""
    try:
        value = json.loads(
            text,
            parse_float=_reject_float,
            parse_constant=_reject_constant,
            object_pairs_hook=_no_duplicate_keys,
        )
    except json.JSONDecodeError as exc:
        raise ManifestError(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except UnicodeDecodeError:
        raise ManifestError("not valid JSON: the file is not UTF-8 text") from None
    except ManifestError:
        raise
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise ManifestError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise ManifestError("not valid JSON: nested too deeply") from None
    return manifest_from_value(value)


def load_manifest(path: str | os.PathLike[str]) -> RunManifest:
    """Read and validate a manifest file; every problem is a ``ManifestError`` naming the file."""
    path = Path(path)
    try:
        raw = read_regular(path)
    except FileNotFoundError:
        raise ManifestError("no such file", path=path) from None
    except IsADirectoryError:
        raise ManifestError("is a directory, expected a manifest JSON file", path=path) from None
    except OSError as exc:
        raise ManifestError(f"cannot read: {exc.strerror}", path=path) from None
    try:
        return parse_manifest(raw)
    except ManifestError as exc:
        raise ManifestError(exc.message, path=path) from None
