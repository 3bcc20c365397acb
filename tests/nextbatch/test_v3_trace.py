"""Traces and replay of a v3 run: records carry v3's fields; a v2 manifest cannot replay them."""

import hashlib
import io

import numpy as np
import pytest

from dlkit.errors import ReplayMismatchError
from dlkit.nextbatch import Cursor, SamplingPlan
from dlkit.nextbatch.export import OutputFormat, export_steps
from dlkit.nextbatch.trace import TraceWriter, read_trace, replay_trace
from tests import naive_feistel as naive
from tests.nextbatch.helpers import manifest_dict, manifest_of
from tests.nextbatch.v3_helpers import v3_dict

DOC = v3_dict(100, 8, 16, seed=11)
MANIFEST = manifest_of(DOC)


def write_trace(path, ws=2, rank=1, start=Cursor(0, 16), steps=20):
    plan = SamplingPlan.create(MANIFEST, "ds", ws, rank, "train")
    with TraceWriter(path, plan, start) as trace:
        export_steps(plan, start, steps, OutputFormat.BIN, io.BytesIO(), trace=trace)
    return path


def test_records_carry_v3_fields_checked_against_reference(tmp_path):
    trace = read_trace(write_trace(tmp_path / "t.cbor"))
    cursor = (0, 16)
    for record in trace.iters:
        expected, after = naive.next_batch(DOC, "ds", 2, 1, "train", cursor)
        assert record["sampling_mode"] == naive.V3_MODE
        assert record["sampler_config_hash"] == naive.sampler_config_hash(naive.V3_MODE, 16, False)
        assert record["data_replay_t"] == naive.data_replay_t(DOC, "ds", cursor[0], cursor[1], 2, 1)
        digest = hashlib.sha256(np.array(expected, "<u8").tobytes()).digest()
        assert record["indices_sha256"] == digest
        assert record["cursor_after"] == {"epoch": after[0], "global_index": after[1]}
        cursor = after
    assert cursor[0] == 1  # the run crossed into epoch 1


def test_replay_accepts_the_v3_manifest_and_rejects_its_v2_twin(tmp_path):
    path = write_trace(tmp_path / "t.cbor")
    report = replay_trace(path, MANIFEST)
    assert report.records_checked == 20
    with pytest.raises(ReplayMismatchError):
        replay_trace(path, manifest_of(manifest_dict(100, 8, 16, seed=11)))
