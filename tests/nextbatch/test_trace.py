"""Traces (P8): deterministic bytes, replay, and the first mismatch reported precisely."""

import hashlib

import cbor2
import numpy as np
import pytest

from dlkit.errors import ReplayMismatchError, TraceError
from dlkit.nextbatch import Cursor, SamplingPlan
from dlkit.nextbatch.export import OutputFormat, export_steps
from dlkit.nextbatch.trace import TraceWriter, read_trace, replay_trace
from tests import naive_nextbatch as naive
from tests.nextbatch.helpers import manifest_dict, manifest_of

DOC = manifest_dict(100, 8, 16, seed=11)
MANIFEST = manifest_of(DOC)


def write_trace(path, ws=2, rank=1, stage="train", start=Cursor(0, 16), steps=20):
    import io

    plan = SamplingPlan.create(MANIFEST, "ds", ws, rank, stage)
    with TraceWriter(path, plan, start) as trace:
        export_steps(plan, start, steps, OutputFormat.BIN, io.BytesIO(), trace=trace)
    return path


def test_records_carry_profile_fields_checked_against_reference(tmp_path):
    trace = read_trace(write_trace(tmp_path / "t.cbor"))
    assert trace.header["stage"] == "train" and trace.header["world_size"] == 2
    assert len(trace.iters) == 20 and trace.end["status"] == "success"
    cursor = (0, 16)
    for t, record in enumerate(trace.iters):
        assert record["t"] == t
        expected, after = naive.next_batch(DOC, "ds", 2, 1, "train", cursor)
        assert record["cursor_before"] == {"epoch": cursor[0], "global_index": cursor[1]}
        assert record["cursor_after"] == {"epoch": after[0], "global_index": after[1]}
        assert record["indices_sha256"] == hashlib.sha256(np.array(expected, "<u8").tobytes()).digest()
        assert record["data_replay_t"] == naive.data_replay_t(DOC, "ds", cursor[0], cursor[1], 2, 1)
        assert record["effective_q"] == 8 / 100
        cursor = after
    assert trace.end["total_samples_seen"] == sum(r["num_indices"] for r in trace.iters)


def test_same_run_same_bytes_and_replay_passes(tmp_path):
    a = write_trace(tmp_path / "a.cbor").read_bytes()
    b = write_trace(tmp_path / "b.cbor").read_bytes()
    assert a == b
    report = replay_trace(tmp_path / "a.cbor", MANIFEST)
    assert report.records_checked == 20


def _checksum(records):
    """docs/nextbatch_v2.md: SHA-256 of every record's canonical CBOR, run_end's without its
    checksum."""
    *before, end = records
    unsummed = {k: v for k, v in end.items() if k != "checksum"}
    return hashlib.sha256(b"".join(cbor2.dumps(r, canonical=True)
                                   for r in (*before, unsummed))).digest()


def rewrite(path, transform):
    records = list(cbor2.loads_sequence(path.read_bytes())) if hasattr(cbor2, "loads_sequence") else None
    if records is None:
        import io

        stream, records = io.BytesIO(path.read_bytes()), []
        decoder = cbor2.CBORDecoder(stream)
        while stream.tell() < len(stream.getvalue()):
            records.append(decoder.decode())
    transform(records)
    if records[-1].get("type") == "run_end" and "checksum" in records[-1]:
        # a trace written that way: its checksum fits (another run, not a damaged file)
        records[-1]["checksum"] = _checksum(records)
    path.write_bytes(b"".join(cbor2.dumps(r, canonical=True) for r in records))


@pytest.mark.parametrize("field, value", [
    ("indices_sha256", b"\x00" * 32), ("data_replay_t", b"\x01" * 32), ("epoch_seed_hash", b"\x02" * 32),
    ("sampler_config_hash", b"\x03" * 32), ("num_indices", 3), ("blocks_materialized", 9),
])
def test_a_tampered_field_is_reported_with_record_and_field(tmp_path, field, value):
    path = write_trace(tmp_path / "t.cbor")
    rewrite(path, lambda records: records[6].__setitem__(field, value))
    with pytest.raises(ReplayMismatchError) as info:
        replay_trace(path, MANIFEST)
    assert f"record 5, field {field}" in str(info.value)


def test_wrong_manifest_broken_chain_and_truncation(tmp_path):
    path = write_trace(tmp_path / "t.cbor")
    with pytest.raises(ReplayMismatchError, match="field manifest_hash"):
        replay_trace(path, manifest_of(manifest_dict(100, 8, 16, seed=12)))
    rewrite(path, lambda records: records.pop(4))
    with pytest.raises(ReplayMismatchError, match="record 3, field cursor_before"):
        replay_trace(path, MANIFEST)
    good = write_trace(tmp_path / "u.cbor").read_bytes()
    (tmp_path / "cut.cbor").write_bytes(good[: len(good) // 2])
    with pytest.raises(TraceError):
        replay_trace(tmp_path / "cut.cbor", MANIFEST)
    (tmp_path / "noend.cbor").write_bytes(good[: good.rindex(cbor2.dumps("type"))])
    with pytest.raises(TraceError):
        read_trace(tmp_path / "noend.cbor")


@pytest.mark.parametrize("record,problem", [
    (cbor2.dumps({"type": "iter", 70: "x"}), "map key 70 is not text"),
    (cbor2.dumps({"type": "iter", "rank": -1}), "integer -1 is outside uint64"),
    (b"\xd8\x1c\xa2\x64type\x64iter\x61x\xd8\x1d\x00", "recursion"),  # refers to itself
])
def test_records_that_cbor_decodes_but_no_trace_holds_are_trace_errors(tmp_path, record,
                                                                        problem):
    path = tmp_path / "bad.cbor"
    path.write_bytes(record)
    with pytest.raises(TraceError, match=problem) as info:
        read_trace(path)
    assert str(path) in str(info.value) and "record 0" in str(info.value)


def test_failure_mid_run_is_recorded_and_replayable(tmp_path):
    near_max = manifest_of(manifest_dict(2**64 - 1, 8, 16))
    plan = SamplingPlan.create(near_max, "ds", 1, 0, "eval")
    path = tmp_path / "f.cbor"
    with pytest.raises(Exception) as info:
        with TraceWriter(path, plan, Cursor(0, 2**64 - 20)) as trace:
            cursor = Cursor(0, 2**64 - 20)
            for _ in range(5):
                result = plan.next_batch(cursor)
                trace.record(result.indices, cursor, result.cursor)
                cursor = result.cursor
    assert info.value.code == "CONTRACT_VIOLATION"
    contents = read_trace(path)
    assert contents.failure["failure_code"] == "CONTRACT_VIOLATION"
    assert len(contents.iters) == 2 and contents.end["status"] == "failed"
    assert replay_trace(path, near_max).records_checked == 2


def _flipped(good: bytes, offset: int, path):
    damaged = bytearray(good)
    damaged[offset] ^= 0x01
    path.write_bytes(bytes(damaged))
    return path


@pytest.mark.parametrize("name", [b"dataset_key", b"cursor_start", b"indices_sha256",
                                  b"total_samples_seen"])
def test_a_flipped_byte_in_a_field_name_is_a_damaged_trace_not_a_mismatch(tmp_path, name):
    """A trace is checked whole before it replays: a field name one byte off is
    TRACE_INVALID (as the user's trace flipped at byte 100, 'dataset_key' of the header),
    never a replay that runs with the field missing."""
    good = write_trace(tmp_path / "t.cbor", steps=2).read_bytes()
    offset = good.index(name) + 3
    with pytest.raises(TraceError, match="damaged trace") as info:
        replay_trace(_flipped(good, offset, tmp_path / "bad.cbor"), MANIFEST)
    assert info.value.code == "TRACE_INVALID"


def test_every_flipped_byte_is_a_damaged_trace(tmp_path):
    """run_end's checksum covers every byte before it: any one flipped byte, in a name, a
    value, a digest or the checksum itself, is TRACE_INVALID, never a replay mismatch."""
    good = write_trace(tmp_path / "t.cbor", steps=2).read_bytes()
    for offset in range(len(good)):
        with pytest.raises(TraceError) as info:
            replay_trace(_flipped(good, offset, tmp_path / "bad.cbor"), MANIFEST)
        assert info.value.code == "TRACE_INVALID", offset


def test_the_checksum_covers_every_record_and_run_end_itself(tmp_path):
    path = write_trace(tmp_path / "t.cbor", steps=3)
    records = []
    rewrite(path, records.extend)
    assert records[-1]["type"] == "run_end" and len(records) == 5
    assert records[-1]["checksum"] == _checksum(records)


def test_a_trace_without_a_checksum_is_still_read(tmp_path):
    """dlkit 0.2 wrote no checksum: such a trace replays, its shape checked."""
    path = write_trace(tmp_path / "t.cbor")
    rewrite(path, lambda records: records[-1].pop("checksum"))
    assert replay_trace(path, MANIFEST).records_checked == 20
    data = path.read_bytes()
    end = data.rindex(cbor2.dumps("type")) - 1  # run_end: a map whose first key is "type"
    record = cbor2.loads(data[end:])
    path.write_bytes(data[:end] + cbor2.dumps({**record, "checksum": b"short"}, canonical=True))
    with pytest.raises(TraceError, match="field 'checksum' holds"):
        replay_trace(path, MANIFEST)
