"""The profile's test vectors (fixtures/spec/nextbatch_v2_vectors.json, copied from the spec)."""

import json
from pathlib import Path

from dlkit.nextbatch import Cursor, SamplingPlan, parse_manifest, tokens
from tests import naive_nextbatch as naive

VECTORS = json.loads((Path(__file__).parents[2] / "fixtures/spec/nextbatch_v2_vectors.json").read_text())
MANIFEST = parse_manifest(json.dumps(VECTORS["manifest"]))


def train_positions(epoch, positions):
    plan = SamplingPlan.create(MANIFEST, "toy", 1, 0, "train")
    import numpy as np

    starts = np.array(positions, dtype=np.uint64)
    return plan.resolve(epoch, starts, np.ones(len(positions), dtype=np.uint64)).tolist()


def test_tokens_and_hashes():
    token = tokens.kernel_replay_token(0)
    assert token.hex() == VECTORS["kernel_replay_token"]
    assert MANIFEST.manifest_hash.hex() == VECTORS["manifest_hash"]
    for epoch, expected in VECTORS["epoch_seed"].items():
        seed = tokens.epoch_seed(token, MANIFEST.manifest_hash, "toy", int(epoch))
        assert seed.hex() == expected
    replay = tokens.data_replay_token(token, "toy", 0, 0, 2, 1)
    assert replay.hex() == VECTORS["data_replay_t_epoch0_pos0_ws2_rank1"]


def test_block_order_and_indices():
    _, _, order = SamplingPlan.create(MANIFEST, "toy", 1, 0, "train").order.epoch_state(0)
    assert order.tolist() == VECTORS["block_order_epoch0"]
    assert train_positions(0, range(24)) == VECTORS["train_epoch0_first_24"]
    assert train_positions(1, range(24)) == VECTORS["train_epoch1_first_24"]
    assert train_positions(0, range(960, 1000)) == VECTORS["train_epoch0_tail_positions_960_to_999"]


def test_next_batch_calls_reproduce_vectors_and_metadata():
    plan = SamplingPlan.create(MANIFEST, "toy", 2, 1, "train")
    result = plan.next_batch(Cursor())
    assert result.indices.tolist() == VECTORS["train_epoch0_first_24"][4:8]
    assert result.cursor == Cursor(0, 8)
    meta = result.metadata
    assert meta.data_replay_t.hex() == VECTORS["data_replay_t_epoch0_pos0_ws2_rank1"]
    assert meta.sampling_mode == "SHUFFLE_WITHOUT_REPLACEMENT_BLOCK_AFFINE_V1"
    assert meta.subsampling_mode == "SHUFFLE_WITHOUT_REPLACEMENT"
    assert meta.effective_q == 8 / 1000
    expected_hash = naive.h(["SHUFFLE_WITHOUT_REPLACEMENT_BLOCK_AFFINE_V1", 64, False,
                             "epoch_seed_rule_v2", "intra_block_affine_coprime_v1",
                             "rank_contiguous_shard_v1"])
    assert meta.sampler_config_hash == expected_hash


def test_reference_implementation_agrees_with_vectors():
    manifest = VECTORS["manifest"]
    assert naive.manifest_hash(manifest).hex() == VECTORS["manifest_hash"]
    ep = naive.Epoch(manifest, "toy", 0)
    assert [ep.index(p) for p in range(24)] == VECTORS["train_epoch0_first_24"]
