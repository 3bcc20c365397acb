"""Trace records (docs/nextbatch_v2.md, "Trace format") and their replay.

A trace is an RFC 8742 CBOR sequence of canonical-CBOR maps: one ``run_header``, one ``iter``
record per NextBatch_v2 call, an optional ``failure`` record, and one ``run_end``. Records hold
no wall-clock values, so the same run always writes the same bytes.

``replay_trace`` recomputes every ``iter`` record from its ``cursor_before`` and reports the
first field that differs.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

import cbor2
import numpy as np

from dlkit.atomic import atomic_writer
from dlkit.encoding import canonical_cbor, hex_digest, sha256
from dlkit.errors import ContractViolationError, NextBatchError, ReplayMismatchError, TraceError
from dlkit.files import open_regular
from dlkit.nextbatch.cursor import Cursor
from dlkit.nextbatch.run_manifest import RunManifest
from dlkit.nextbatch.sampler import SamplingMetadata, SamplingPlan, Stage
from dlkit.nextbatch.tokens import kernel_replay_token

TRACE_FORMAT = "dlkit_trace_v1"

# Fields of an ``iter`` record taken verbatim from SamplingMetadata.
_METADATA_FIELDS = (
    "epoch", "global_position", "is_shuffled", "micro_batch_size", "global_batch_size",
    "effective_batch_size", "subsampling_mode", "sampling_mode", "sampler_config_hash",
    "effective_q", "epoch_seed_hash", "data_replay_t", "blocks_materialized", "num_indices",
)


def indices_digest(indices: np.ndarray) -> bytes:
    """SHA-256 of indices as little-endian uint64 (the ``indices_sha256`` of a record)."""
    return sha256(np.ascontiguousarray(indices, dtype="<u8").tobytes())


def header_record(plan: SamplingPlan, cursor_start: Cursor) -> dict[str, Any]:
    manifest = plan.manifest
    return {
        "type": "run_header",
        "format": TRACE_FORMAT,
        "dataset_key": plan.dataset_key,
        "cardinality": plan.cardinality,
        "sampler_block_size": manifest.data.sampler_block_size,
        "drop_last": manifest.data.drop_last,
        "is_shuffled_per_stage": {s.value: s.is_shuffled for s in Stage},
        "stage": plan.stage.value,
        "world_size": plan.world_size,
        "rank": plan.rank,
        "global_batch_size": manifest.global_batch_size,
        "manifest_hash": manifest.manifest_hash,
        "kernel_replay_token": kernel_replay_token(manifest.seed),
        "cursor_start": cursor_start.to_value(),
    }


def iter_record(t: int, metadata: SamplingMetadata, indices: np.ndarray, cursor_before: Cursor,
                cursor_after: Cursor) -> dict[str, Any]:
    record: dict[str, Any] = {"type": "iter", "t": t}
    for name in _METADATA_FIELDS:
        record[name] = getattr(metadata, name)
    record["indices_sha256"] = indices_digest(indices)
    record["cursor_before"] = cursor_before.to_value()
    record["cursor_after"] = cursor_after.to_value()
    return record


class TraceWriter:
    """Writes a trace atomically: the file appears, complete, only when the run ends.

    Use as a context manager. A NextBatch failure inside the block is recorded as a
    ``failure`` record followed by ``run_end`` (status ``failed``) and re-raised; any other
    exception discards the partial trace. Given an open ``stream`` instead of a path (one
    file of several that are committed together, as ``dlkit sample`` does), the records go
    to it and committing is the caller's.
    """

    def __init__(self, path: str | os.PathLike[str] | None, plan: SamplingPlan,
                 cursor_start: Cursor, *, stream: BinaryIO | None = None):
        if (path is None) == (stream is None):
            raise TypeError("TraceWriter needs a path or a stream, not both")
        self._plan = plan
        self._cursor = cursor_start
        self._t = 0
        self._samples = 0
        self._writer = None if path is None else atomic_writer(Path(path))
        self._stream: BinaryIO | None = stream
        self._header = header_record(plan, cursor_start)
        self._checksum = hashlib.sha256()  # of the trace, but run_end's own checksum

    def _write(self, record: dict[str, Any]) -> None:
        assert self._stream is not None
        data = canonical_cbor(record)
        self._checksum.update(data)
        self._stream.write(data)

    def __enter__(self) -> TraceWriter:
        if self._writer is not None:
            self._stream = self._writer.__enter__()
        assert self._stream is not None
        self._write(self._header)
        return self

    def record(self, indices: np.ndarray, cursor_before: Cursor, cursor_after: Cursor) -> None:
        assert self._stream is not None, "TraceWriter used outside its with-block"
        metadata = self._plan.metadata(cursor_before)
        self._write(iter_record(self._t, metadata, indices, cursor_before, cursor_after))
        self._t += 1
        self._samples += int(indices.shape[0])
        self._cursor = cursor_after

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        assert self._stream is not None
        if exc is None or isinstance(exc, NextBatchError):
            if isinstance(exc, NextBatchError):
                failure = {"type": "failure", "t": self._t, "message": exc.message,
                           **{k: v for k, v in exc.record.items() if v is not None}}
                self._write(failure)
            end = {
                "type": "run_end",
                "status": "success" if exc is None else "failed",
                "num_records": self._t,
                "final_cursor": self._cursor.to_value(),
                "final_epoch": self._cursor.epoch,
                "total_samples_seen": self._samples,
            }
            self._checksum.update(canonical_cbor(end))
            self._stream.write(canonical_cbor({**end, "checksum": self._checksum.digest()}))
            if self._writer is not None:
                self._writer.__exit__(None, None, None)
        elif self._writer is not None:
            self._writer.__exit__(exc_type, exc, tb)
        return False


# --- reading ------------------------------------------------------------------------------


@dataclass
class TraceContents:
    header: dict[str, Any]
    iters: list[dict[str, Any]] = field(default_factory=list)
    failure: dict[str, Any] | None = None
    end: dict[str, Any] | None = None


def iter_trace_records(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Decode a CBOR sequence record by record, checking each is a canonical map."""
    for record, _data in _records_and_bytes(path):
        yield record


def _records_and_bytes(path: str | os.PathLike[str]
                       ) -> Iterator[tuple[dict[str, Any], bytes]]:
    """Each record of the CBOR sequence at ``path``, checked to be a canonical map, with its
    bytes."""
    path = Path(path)
    try:
        stream = os.fdopen(open_regular(path), "rb")
    except OSError as exc:
        raise TraceError(f"cannot read: {exc.strerror}", path=path) from None
    with stream:
        size = os.fstat(stream.fileno()).st_size
        decoder = cbor2.CBORDecoder(stream)
        number = 0
        while stream.tell() < size:
            start = stream.tell()
            try:
                record = decoder.decode()
            except (cbor2.CBORDecodeError, ValueError, TypeError, EOFError, RecursionError) as exc:
                raise TraceError(f"record {number} (byte {start}) is not valid CBOR: {exc}",
                                 path=path) from None
            if not isinstance(record, dict) or not isinstance(record.get("type"), str):
                raise TraceError(f"record {number} is not a trace record map", path=path)
            end = stream.tell()
            stream.seek(start)
            try:
                canonical = canonical_cbor(record)
            except (ContractViolationError, RecursionError) as exc:  # e.g. a negative integer
                raise TraceError(f"record {number} (byte {start}) is not a trace record: "
                                 f"{exc}", path=path) from None
            if stream.read(end - start) != canonical:
                raise TraceError(f"record {number} is not canonically encoded (corrupted bytes)",
                                 path=path)
            yield record, canonical
            number += 1


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_digest(value: Any) -> bool:
    return isinstance(value, bytes) and len(value) == 32


def _is_cursor(value: Any) -> bool:
    return (isinstance(value, dict) and set(value) == {"epoch", "global_index"}
            and all(_is_count(v) for v in value.values()))


def _is_stage_map(value: Any) -> bool:
    return (isinstance(value, dict) and bool(value)
            and all(isinstance(k, str) and isinstance(v, bool) for k, v in value.items()))


def _is(kind: type) -> Any:
    return lambda value: isinstance(value, kind)


# The fields of each record kind and what each holds (docs/nextbatch_v2.md, "Trace format").
# A trace carries no checksum, so its shape is what tells a damaged file (a flipped byte in a
# field name or a value of another type) from a run that differs from its replay.
_SHAPES: dict[str, dict[str, Any]] = {
    "run_header": {
        "type": _is(str), "format": _is(str), "dataset_key": _is(str), "cardinality": _is_count,
        "sampler_block_size": _is_count, "drop_last": _is(bool),
        "is_shuffled_per_stage": _is_stage_map, "stage": _is(str), "world_size": _is_count,
        "rank": _is_count, "global_batch_size": _is_count, "manifest_hash": _is_digest,
        "kernel_replay_token": _is_digest, "cursor_start": _is_cursor},
    "iter": {
        "type": _is(str), "t": _is_count, "epoch": _is_count, "global_position": _is_count,
        "is_shuffled": _is(bool), "micro_batch_size": _is_count,
        "global_batch_size": _is_count, "effective_batch_size": _is_count,
        "subsampling_mode": _is(str), "sampling_mode": _is(str),
        "sampler_config_hash": _is_digest, "effective_q": _is(float),
        "epoch_seed_hash": _is_digest, "data_replay_t": _is_digest,
        "blocks_materialized": _is_count, "num_indices": _is_count,
        "indices_sha256": _is_digest, "cursor_before": _is_cursor, "cursor_after": _is_cursor},
    "run_end": {
        "type": _is(str), "status": _is(str), "num_records": _is_count,
        "final_cursor": _is_cursor, "final_epoch": _is_count, "total_samples_seen": _is_count},
}
# Fields a record may lack: a trace of dlkit 0.2 has no checksum (its shape is still checked)
_OPTIONAL: dict[str, dict[str, Any]] = {"run_end": {"checksum": _is_digest}}
# A failure record holds these, and what the failed call's error recorded besides.
_FAILURE_SHAPE: dict[str, Any] = {"type": _is(str), "t": _is_count, "message": _is(str),
                                  "failure_code": _is(str)}


def _check_shape(record: dict[str, Any], number: int, path: str | os.PathLike[str]) -> None:
    """Refuse (``TraceError``) a record without exactly its kind's fields, each of its type."""
    kind = record["type"]
    shape = _SHAPES.get(kind, _FAILURE_SHAPE)
    optional = _OPTIONAL.get(kind, {})
    where = f"record {number} ({kind})"
    missing = sorted(set(shape) - set(record))
    if missing:
        raise TraceError(f"{where} has no field {missing[0]!r} (a damaged trace)", path=path)
    extra = sorted(set(record) - set(shape) - set(optional)) if kind in _SHAPES else []
    if extra:
        raise TraceError(f"{where} has an unknown field {extra[0]!r} (a damaged trace)",
                         path=path)
    for name, holds in {**shape, **optional}.items():
        if name in record and not holds(record[name]):
            raise TraceError(f"{where}: field {name!r} holds {record[name]!r}, not a value of "
                             "its type (a damaged trace)", path=path)


def read_trace(path: str | os.PathLike[str]) -> TraceContents:
    """Read and validate a whole trace before anything replays it: header first, run_end
    last, every record with exactly its kind's fields, each of its type, and run_end's
    checksum (when it has one: dlkit 0.2 wrote none) the SHA-256 of every record before it
    and of run_end without its checksum."""
    records = _records_and_bytes(path)
    first, data = next(records, (None, b""))
    if first is None or first.get("type") != "run_header":
        raise TraceError("does not start with a run_header record", path=path)
    if first.get("format") != TRACE_FORMAT:
        raise TraceError(f"unknown trace format {first.get('format')!r}, expected {TRACE_FORMAT}",
                         path=path)
    _check_shape(first, 0, path)
    checksum = hashlib.sha256(data)
    contents = TraceContents(header=first)
    for number, (record, data) in enumerate(records, start=1):
        kind = record["type"]
        if kind in ("iter", "failure", "run_end"):
            _check_shape(record, number, path)
        if contents.end is not None:
            raise TraceError("records follow the run_end record", path=path)
        if kind == "iter" and contents.failure is None:
            contents.iters.append(record)
        elif kind == "failure" and contents.failure is None:
            contents.failure = record
        elif kind == "run_end":
            contents.end = record
        else:
            raise TraceError(f"unexpected {kind!r} record", path=path)
        checksum.update(data if kind != "run_end" else canonical_cbor(
            {k: v for k, v in record.items() if k != "checksum"}))
    if contents.end is None:
        raise TraceError("truncated: no run_end record", path=path)
    recorded = contents.end.get("checksum")
    if recorded is not None and recorded != checksum.digest():
        raise TraceError("checksum mismatch: a byte of the trace changed (a damaged trace)",
                         path=path)
    return contents


# --- replay -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayReport:
    records_checked: int
    total_samples_seen: int
    final_cursor: Cursor


def _render(value: Any) -> str:
    return hex_digest(value) if isinstance(value, bytes) else repr(value)


def _mismatch(path: Path, record: str, name: str, expected: Any, found: Any) -> ReplayMismatchError:
    held = "none" if found is None else _render(found)
    return ReplayMismatchError(
        f"record {record}, field {name}: the trace holds {held}, the replay computes "
        f"{_render(expected)}", path=path)


def _cursor_field(record: dict[str, Any], name: str, path: Path, where: str) -> Cursor:
    value = record.get(name)
    if not isinstance(value, dict) or set(value) != {"epoch", "global_index"}:
        raise TraceError(f"record {where}: {name} is not a cursor map", path=path)
    try:
        return Cursor(value["epoch"], value["global_index"])
    except NextBatchError as exc:
        raise TraceError(f"record {where}: {name}: {exc.message}", path=path) from None


def _recorded(header: dict[str, Any], key: str) -> Any:
    """A header value as the trace recorded it (None when missing), of any type:
    SamplingPlan.create checks each one and raises the coded error for a wrong one."""
    return header.get(key)


def replay_trace(path: str | os.PathLike[str], manifest: RunManifest) -> ReplayReport:
    """Recompute every record of the trace at ``path``; raise at the first difference."""
    path = Path(path)
    trace = read_trace(path)
    header = trace.header
    try:
        plan = SamplingPlan.create(manifest, _recorded(header, "dataset_key"),
                                   _recorded(header, "world_size"), _recorded(header, "rank"),
                                   _recorded(header, "stage"))
    except NextBatchError as exc:
        raise ReplayMismatchError(f"header does not fit the manifest: {exc.code}: {exc.message}",
                                  path=path) from None
    cursor = _cursor_field(header, "cursor_start", path, "header")
    expected_header = header_record(plan, cursor)
    for name, expected in expected_header.items():
        if header.get(name) != expected:
            raise _mismatch(path, "header", name, expected, header.get(name))
    samples = 0
    for t, record in enumerate(trace.iters):
        before = _cursor_field(record, "cursor_before", path, str(t))
        if before != cursor:
            raise _mismatch(path, str(t), "cursor_before", cursor.to_value(), before.to_value())
        try:
            result = plan.next_batch(before)
        except NextBatchError as exc:
            raise _mismatch(path, str(t), "status", f"failure {exc.code}", "iter") from None
        expected = iter_record(t, result.metadata, result.indices, before, result.cursor)
        for name, value in expected.items():
            if record.get(name) != value:
                raise _mismatch(path, str(t), name, value, record.get(name))
        extra = sorted(set(record) - set(expected))
        if extra:
            raise _mismatch(path, str(t), extra[0], "<absent>", record[extra[0]])
        cursor = result.cursor
        samples += result.metadata.num_indices
    if trace.failure is not None:
        try:
            plan.next_batch(cursor)
        except NextBatchError as exc:
            if trace.failure.get("failure_code") != exc.code:
                raise _mismatch(path, "failure", "failure_code", exc.code,
                                trace.failure.get("failure_code")) from None
        else:
            raise _mismatch(path, "failure", "failure_code", "<no failure>",
                            trace.failure.get("failure_code"))
    end = trace.end
    assert end is not None
    expected_end = {
        "type": "run_end", "status": "failed" if trace.failure else "success",
        "num_records": len(trace.iters), "final_cursor": cursor.to_value(),
        "final_epoch": cursor.epoch, "total_samples_seen": samples,
    }
    for name, value in expected_end.items():
        if end.get(name) != value:
            raise _mismatch(path, "run_end", name, value, end.get(name))
    return ReplayReport(len(trace.iters), samples, cursor)
