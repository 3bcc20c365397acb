"""P7: each bad input raises its failure code, in the profile's order, before any index."""

import pytest

from dlkit.errors import NextBatchError
from dlkit.nextbatch import Cursor, SamplingPlan, next_batch
from tests.nextbatch.helpers import manifest_dict, manifest_of


def code_of(manifest, key="ds", ws=1, rank=0, stage="train", cursor=Cursor(), actual=None):
    with pytest.raises(NextBatchError) as info:
        next_batch(manifest, key, ws, rank, stage, cursor, actual_cardinality=actual)
    assert info.value.record["failure_code"] == info.value.code
    return info.value.code


def test_each_failure_code():
    m = manifest_of(manifest_dict(100, 8, 16))
    assert code_of(m, key="missing") == "INVALID_DATASET_KEY"
    assert code_of(m, stage="test") == "INVALID_STAGE_TYPE"
    assert code_of(manifest_of(manifest_dict(100, 0, 16))) == "BATCH_SIZE_INCONSISTENT"
    assert code_of(m, ws=3) == "BATCH_SIZE_INCONSISTENT"
    assert code_of(m, ws=16) == "BATCH_SIZE_INCONSISTENT"  # 8 % 16 != 0
    assert code_of(m, ws=2, rank=2) == "BATCH_SIZE_INCONSISTENT"
    assert code_of(manifest_of(manifest_dict(100, 8, 0))) == "BATCH_SIZE_INCONSISTENT"
    assert code_of(manifest_of(manifest_dict(100, 8, 2**32 + 1))) == "BATCH_SIZE_INCONSISTENT"
    assert code_of(manifest_of(manifest_dict(4, 8, 16, drop_last=True))) == "BATCH_SIZE_INCONSISTENT"
    assert code_of(m, actual=99) == "CARDINALITY_MISMATCH"
    assert code_of(manifest_of(manifest_dict(0, 8, 16))) == "CARDINALITY_MISMATCH"
    assert code_of(m, cursor=Cursor(0, 100)) == "GLOBAL_POSITION_EXCEEDS_CARDINALITY"
    dl = manifest_of(manifest_dict(100, 8, 16, drop_last=True))
    assert code_of(dl, cursor=Cursor(0, 96)) == "GLOBAL_POSITION_EXCEEDS_CARDINALITY"
    near_max = manifest_of(manifest_dict(2**64 - 1, 8, 16))
    assert code_of(near_max, stage="eval", cursor=Cursor(0, 2**64 - 4)) == "CONTRACT_VIOLATION"
    assert code_of(m, ws=2**32) == "CONTRACT_VIOLATION"


def test_order_of_checks_follows_the_profile():
    # Unknown key wins over a bad stage; a bad stage over a bad batch size; batch size over
    # cardinality; cardinality over the cursor.
    zero_everything = manifest_of(manifest_dict(0, 0, 0))
    assert code_of(zero_everything, key="nope", stage="x") == "INVALID_DATASET_KEY"
    assert code_of(zero_everything, stage="x") == "INVALID_STAGE_TYPE"
    assert code_of(zero_everything, cursor=Cursor(0, 5)) == "BATCH_SIZE_INCONSISTENT"
    assert code_of(manifest_of(manifest_dict(0, 8, 16)), cursor=Cursor(0, 5)) == "CARDINALITY_MISMATCH"


def test_eval_partial_batch_and_infer_same_as_eval():
    m = manifest_of(manifest_dict(10, 8, 16))
    for stage in ("eval", "infer"):
        plan = SamplingPlan.create(m, "ds", 2, 1, stage)
        last = plan.next_batch(Cursor(0, 8))
        assert last.indices.tolist() == []  # rank 1's slice 12..15 lies wholly past N
        assert last.cursor == Cursor(1, 0)
        first_rank = SamplingPlan.create(m, "ds", 2, 0, stage).next_batch(Cursor(0, 8))
        assert first_rank.indices.tolist() == [8, 9]
        assert last.metadata.sampling_mode == "SEQUENTIAL_V1"
        assert last.metadata.subsampling_mode == "NONE" and not last.metadata.is_shuffled
