"""NextBatch_v3 plumbing: the manifest key, hashes and tokens, metadata, validation, vectors."""

import json
from pathlib import Path

import numpy as np
import pytest

from dlkit.core.feistel import FEISTEL_MAX_N
from dlkit.errors import ContractViolationError, ManifestError, NextBatchError
from dlkit.nextbatch import Cursor, DataConfig, SamplingPlan, next_batch, parse_manifest, tokens
from tests import naive_feistel as naive
from tests import naive_nextbatch as naive_v2
from tests.nextbatch.helpers import manifest_dict, manifest_of
from tests.nextbatch.v3_helpers import v3_dict

VECTORS = json.loads(
    (Path(__file__).parents[2] / "fixtures/spec/nextbatch_v3_vectors.json").read_text())


# --- data.sampling_mode and manifest_hash ------------------------------------------------


def test_v2_manifest_hash_is_unchanged_whether_the_mode_is_absent_or_spelled_out():
    doc = manifest_dict(1000, 8, 64, seed=3)
    explicit = json.loads(json.dumps(doc))
    explicit["data"]["sampling_mode"] = naive.V2_MODE
    absent, spelled = manifest_of(doc), manifest_of(explicit)
    # The v2 reference predates the key: its M has no sampling_mode at all.
    assert absent.manifest_hash == spelled.manifest_hash == naive_v2.manifest_hash(doc)
    assert "sampling_mode" not in absent.to_cbor_value()["data"]
    assert "sampling_mode" not in json.loads(spelled.to_json())["data"]
    assert absent.data.sampling_mode == tokens.SAMPLING_MODE_TRAIN


def test_v3_mode_is_written_into_m():
    doc = v3_dict(1000, 8, 64, seed=3)
    m = manifest_of(doc)
    assert m.to_cbor_value()["data"]["sampling_mode"] == tokens.SAMPLING_MODE_TRAIN_V3
    assert m.manifest_hash == naive.manifest_hash(doc)
    assert m.manifest_hash != manifest_of(manifest_dict(1000, 8, 64, seed=3)).manifest_hash
    assert parse_manifest(m.to_json()) == m  # golden files round-trip manifests through JSON


@pytest.mark.parametrize("value, fragment", [
    ("SHUFFLE_V9", "data.sampling_mode must be one of"),
    (3, "got 3"),
    (None, "got null"),
    ("SEQUENTIAL_V1", "must be one of"),  # eval's order is not a train mode
])
def test_bad_sampling_mode_is_a_readable_manifest_error(value, fragment):
    doc = manifest_dict(10, 2, 4)
    doc["data"]["sampling_mode"] = value
    with pytest.raises(ManifestError, match=fragment):
        parse_manifest(json.dumps(doc))
    with pytest.raises(ManifestError, match="sampling_mode"):
        DataConfig(sampling_mode=value)


# --- worked vectors (docs/nextbatch_v3.md §5), computed by the reference -------------------


@pytest.mark.parametrize("case", VECTORS["cases"],
                         ids=lambda c: str(c["manifest"]["datasets"]["toy/train"]["cardinality"]))
def test_worked_vectors(case):
    doc, key, epoch = case["manifest"], case["dataset_key"], case["epoch"]
    seed = naive.epoch_seed(doc, key, epoch)  # the reference still agrees with its fixture
    assert seed.hex() == case["epoch_seed"] and naive.round_keys(seed) == case["round_keys"]
    m = parse_manifest(json.dumps(doc))
    assert m.manifest_hash.hex() == case["manifest_hash"]
    plan = SamplingPlan.create(m, key, 1, 0, "train")
    assert plan.epoch_seed(epoch).hex() == case["epoch_seed"]
    positions = [p for p, _ in case["positions"]]
    got = plan.resolve(epoch, np.array(positions, np.uint64), np.ones(len(positions), np.uint64))
    assert [[p, i] for p, i in zip(positions, got.tolist())] == case["positions"]
    meta = plan.metadata(Cursor(epoch, 0))
    assert meta.data_replay_t.hex() == case["data_replay_t"]
    assert meta.sampler_config_hash.hex() == case["sampler_config_hash_train"]


# --- metadata, tokens, validation -----------------------------------------------------------


def test_metadata_of_a_v3_call_names_v3_everywhere():
    doc = v3_dict(100, 8, 16, seed=11)
    m = manifest_of(doc)
    train = SamplingPlan.create(m, "ds", 2, 1, "train").metadata(Cursor(0, 16))
    assert train.sampling_mode == "SHUFFLE_WITHOUT_REPLACEMENT_FEISTEL_V3"
    assert train.sampler_config_hash == naive.sampler_config_hash(train.sampling_mode, 16, False)
    assert train.data_replay_t == naive.data_replay_t(doc, "ds", 0, 16, 2, 1)
    assert train.epoch_seed_hash == tokens.epoch_seed_hash(naive.epoch_seed(doc, "ds", 0))
    assert train.blocks_materialized == 0 and train.is_shuffled
    evaluation = SamplingPlan.create(m, "ds", 2, 1, "eval").metadata(Cursor(0, 16))
    assert evaluation.sampling_mode == "SEQUENTIAL_V1"
    assert evaluation.sampler_config_hash == naive.sampler_config_hash("SEQUENTIAL_V1", 16, False)
    # Nothing of v3 collides with the v2 twin of the same run.
    twin = SamplingPlan.create(manifest_of(manifest_dict(100, 8, 16, seed=11)), "ds", 2, 1,
                               "train")
    v2 = twin.metadata(Cursor(0, 16))
    assert v2.sampling_mode == tokens.SAMPLING_MODE_TRAIN
    v2_doc = manifest_dict(100, 8, 16, seed=11)
    assert v2.data_replay_t == naive_v2.data_replay_t(v2_doc, "ds", 0, 16, 2, 1)
    for field in ("sampler_config_hash", "data_replay_t", "epoch_seed_hash"):
        assert getattr(v2, field) != getattr(train, field)


def test_eval_and_infer_stay_sequential():
    m = manifest_of(v3_dict(10, 4, seed=2))
    for stage in ("eval", "infer"):
        result = next_batch(m, "ds", 2, 1, stage, Cursor(0, 8))
        assert result.indices.tolist() == [] and result.cursor == Cursor(1, 0)
        assert next_batch(m, "ds", 2, 0, stage, Cursor(0, 8)).indices.tolist() == [8, 9]


def test_v3_failures_name_the_v3_operator():
    m = manifest_of(v3_dict(100, 8, 16))
    for kwargs in ({"dataset_key": "missing"}, {"stage": "test"}, {"world_size": 3},
                   {"cursor_in": Cursor(0, 100)}):
        args = {"manifest": m, "dataset_key": "ds", "world_size": 1, "rank": 0,
                "stage": "train", "cursor_in": Cursor(), **kwargs}
        with pytest.raises(NextBatchError) as info:
            next_batch(**args)
        assert info.value.record["failure_operator"] == "UML_OS.Data.NextBatch_v3"
    with pytest.raises(NextBatchError) as info:
        next_batch(manifest_of(manifest_dict(100, 8, 16)), "missing", 1, 0, "train", Cursor())
    assert info.value.record["failure_operator"] == "UML_OS.Data.NextBatch_v2"


def test_cardinality_whose_grid_overflows_uint64_is_a_contract_violation():
    at_limit = manifest_of(v3_dict(FEISTEL_MAX_N, 8))
    plan = SamplingPlan.create(at_limit, "ds", 1, 0, "train")
    last = plan.resolve(0, np.array([FEISTEL_MAX_N - 1], np.uint64), np.ones(1, np.uint64))
    reference = naive.Epoch(v3_dict(FEISTEL_MAX_N, 8), "ds", 0)
    assert int(last[0]) == reference.index(FEISTEL_MAX_N - 1)
    with pytest.raises(ContractViolationError, match="overflows uint64") as info:
        SamplingPlan.create(manifest_of(v3_dict(FEISTEL_MAX_N + 1, 8)), "ds", 1, 0, "train")
    assert info.value.record["failure_operator"] == "UML_OS.Data.NextBatch_v3"
    # The grid rule is v3's alone: a v2 manifest of the same size is not refused for it (v2's
    # train plan has its own block-order memory limit, so check the stage without blocks).
    SamplingPlan.create(manifest_of(manifest_dict(FEISTEL_MAX_N + 1, 8, 2**20)), "ds", 1, 0, "eval")


def test_block_size_does_not_change_the_order_beyond_the_manifest_hash():
    """v3 has no blocks: only M (and so the epoch seed) sees sampler_block_size."""
    for block_size in (1, 7, 1000, 2**32):
        doc = v3_dict(1000, 10, block_size, seed=4)
        plan = SamplingPlan.create(manifest_of(doc), "ds", 1, 0, "train")
        got = plan.resolve(0, np.array([0], np.uint64), np.array([1000], np.uint64)).tolist()
        assert got == naive.Epoch(doc, "ds", 0).all_indices()
