"""Checkpoints (P8): exact bytes, round trips at every step, strict loading."""

import hashlib

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.errors import CheckpointError
from dlkit.nextbatch import Cursor, SamplingPlan, load_checkpoint, save_checkpoint
from dlkit.nextbatch.cursor import checkpoint_bytes
from tests.nextbatch.helpers import manifest_dict, manifest_of

CURSORS = st.dictionaries(st.text(max_size=6),
                          st.builds(Cursor, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)),
                          max_size=4)


@given(CURSORS)
def test_bytes_are_the_profile_encoding_and_round_trip(cursors):
    data = checkpoint_bytes(cursors)
    payload = {"data_cursors": {k: {"epoch": c.epoch, "global_index": c.global_index}
                                for k, c in cursors.items()}}
    checksum = hashlib.sha256(cbor2.dumps(payload, canonical=True)).digest()
    assert data == cbor2.dumps({**payload, "checksum": checksum}, canonical=True)
    from dlkit.nextbatch.cursor import parse_checkpoint

    assert parse_checkpoint(data) == cursors


def test_resume_from_a_checkpoint_at_every_step_continues_identically(tmp_path):
    m = manifest_of(manifest_dict(50, 6, 8))
    plan = SamplingPlan.create(m, "ds", 2, 1, "train")
    cursor, reference = Cursor(), []
    for _ in range(25):
        result = plan.next_batch(cursor)
        reference.append((result.indices.tolist(), result.cursor))
        cursor = result.cursor
    cursor = Cursor()
    for step in range(25):
        save_checkpoint(tmp_path / "c.ckpt", {"ds": cursor})
        restored = load_checkpoint(tmp_path / "c.ckpt")["ds"]
        result = plan.next_batch(restored)
        assert (result.indices.tolist(), result.cursor) == reference[step]
        cursor = result.cursor


@pytest.mark.parametrize("mutate, fragment", [
    (lambda b: b[:-3], "not a CBOR checkpoint"),
    (lambda b: b"", "empty file"),
    (lambda b: b + b"\x00", "not the canonical encoding"),
    (lambda b: b"PK\x03\x04 not cbor", "not"),
    (lambda b: cbor2.dumps({"cursors": {}}), "not a dlkit checkpoint"),
    (lambda b: cbor2.dumps({"data_cursors": {"ds": {"epoch": -1, "global_index": 0}}}), "uint64"),
    (lambda b: cbor2.dumps({"data_cursors": {"ds": {"epoch": 1.0, "global_index": 0}}}), "uint64"),
    (lambda b: cbor2.dumps({"data_cursors": {"ds": {"epoch": 0}}}), "exactly epoch and global_index"),
    (lambda b: cbor2.dumps({"data_cursors": {"ds": {"global_index": 0, "epoch": 0}}}),
     "not the canonical encoding"),
])
def test_corrupt_truncated_or_foreign_files_are_rejected(tmp_path, mutate, fragment):
    good = checkpoint_bytes({"ds": Cursor(3, 12)})
    path = tmp_path / "bad.ckpt"
    path.write_bytes(mutate(good))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert fragment in str(info.value) and str(path) in str(info.value)
