"""Canonical CBOR (RFC 8949 §4.2.1) and SHA-256 helpers shared by every hashed artefact.

The profile (P1) pins ``CBOR_CANONICAL`` to core deterministic encoding; for the value kinds
dlkit hashes (unsigned integers, text, byte strings, booleans, arrays, text-keyed maps and the
occasional float64 metric) ``cbor2``'s canonical mode produces exactly that. ``canonical_cbor``
range-checks integers first, because a negative or > 2^64-1 integer has no uint64 encoding.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import cbor2

from dlkit.errors import CheckpointError, ContractViolationError

UINT64_MAX = (1 << 64) - 1
UINT32_MAX = (1 << 32) - 1


def is_utf8(text: str) -> bool:
    """Whether ``text`` is encodable UTF-8: Python strings may hold lone surrogates (from a
    JSON ``\\ud800`` escape), which no CBOR text string can."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_encodable(value: Any) -> None:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int):
        if not 0 <= value <= UINT64_MAX:
            raise ContractViolationError(f"integer {value} is outside uint64 [0, 2^64-1]")
        return
    if isinstance(value, str):
        if not is_utf8(value):
            raise ContractViolationError(f"text {value!r} is not UTF-8 (a lone surrogate)")
        return
    if isinstance(value, (bytes, float)):
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ContractViolationError(f"map key {key!r} is not text")
            _check_encodable(key)
            _check_encodable(item)
        return
    if isinstance(value, Sequence):
        for item in value:
            _check_encodable(item)
        return
    raise ContractViolationError(f"value of type {type(value).__name__} has no canonical encoding")


def canonical_cbor(value: Any) -> bytes:
    """``CBOR_CANONICAL(value)``: deterministic bytes for hashing and for files."""
    _check_encodable(value)
    return cbor2.dumps(value, canonical=True)


def sha256(data: bytes | bytearray | memoryview) -> bytes:
    """FIPS 180-4 SHA-256, 32 raw bytes."""
    return hashlib.sha256(data).digest()


def cbor_sha256(value: Any) -> bytes:
    """``SHA-256(CBOR_CANONICAL(value))``, the contract-critical hash primitive."""
    return sha256(canonical_cbor(value))


def hex_digest(digest: bytes) -> str:
    """32 raw bytes as 64 lowercase hex digits (the JSON and command-line form)."""
    return digest.hex()


def parse_hex_digest(text: str, what: str) -> bytes:
    """Parse 64 lowercase hex digits; raise ``ValueError`` naming ``what`` otherwise."""
    if not isinstance(text, str) or len(text) != 64 or text != text.lower():
        raise ValueError(f"{what} must be 64 lowercase hex digits, got {text!r}")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise ValueError(f"{what} must be 64 lowercase hex digits, got {text!r}") from None


def require_uint(value: Any, bits: int, what: str) -> int:
    """Return ``value`` if it is a Python int (not bool) in ``[0, 2^bits - 1]``."""
    limit = (1 << bits) - 1
    if isinstance(value, bool) or not isinstance(value, int):
        raise ContractViolationError(f"{what} must be an unsigned integer, got {value!r}")
    if not 0 <= value <= limit:
        raise ContractViolationError(f"{what} must lie in [0, 2^{bits}-1], got {value}")
    return value


# --- checksummed JSON states (Sampler.state_dict, dlkit.torch's dataset state) ---------------

STATE_CHECKSUM_KEY = "checksum"


def state_checksum(state: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of ``state`` without its ``checksum`` entry: keys
    sorted, no spaces, ASCII. The same after any JSON, pickle or ``torch.save`` round trip."""
    body = {key: value for key, value in state.items() if key != STATE_CHECKSUM_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def with_checksum(state: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` with its ``checksum`` added (last)."""
    return {**state, STATE_CHECKSUM_KEY: state_checksum(state)}


def check_state_checksum(state: Mapping[str, Any], what: str,
                         unchecksummed_keys: frozenset[str]) -> None:
    """Refuse ``state`` (a ``CheckpointError`` naming ``what``) unless its ``checksum`` is
    that of its other entries. A state of a version before checksums (no ``checksum``) passes
    only with no key outside ``unchecksummed_keys``: a damaged ``checksum`` key is refused."""
    if STATE_CHECKSUM_KEY not in state:
        unknown = sorted(map(repr, set(state) - unchecksummed_keys))
        if unknown:
            raise CheckpointError(f"{what}: no checksum, and unknown entries {', '.join(unknown)}")
        return
    try:
        expected = state_checksum(state)
    except (TypeError, ValueError, RecursionError) as exc:
        raise CheckpointError(f"{what}: not a JSON state ({exc})") from None
    if state[STATE_CHECKSUM_KEY] != expected:
        raise CheckpointError(f"{what}: checksum mismatch: the state was changed or corrupted "
                              "after it was taken")
