"""Epoch orders: one class per order, chosen once per plan, each against its naive reference."""

import numpy as np
import pytest

from dlkit.errors import ContractViolationError
from dlkit.nextbatch import SamplingPlan, tokens
from dlkit.nextbatch.orders import (
    MAX_FULL_BLOCKS,
    BlockAffineOrder,
    FeistelOrder,
    SequentialOrder,
    order_for,
)
from tests import naive_feistel, naive_nextbatch
from tests.nextbatch.helpers import manifest_dict, manifest_of

MODES = {"v2": (tokens.SAMPLING_MODE_TRAIN, BlockAffineOrder, naive_nextbatch,
                "UML_OS.Data.NextBatch_v2"),
         "v3": (tokens.SAMPLING_MODE_TRAIN_V3, FeistelOrder, naive_feistel,
                "UML_OS.Data.NextBatch_v3")}


def document(version: str, n: int = 300, block_size: int = 32) -> dict:
    d = manifest_dict(n, 20, block_size)
    if version == "v3":  # v2 is the default, absent from the manifest (and its hash)
        d["data"]["sampling_mode"] = MODES[version][0]
    return d


def whole_epoch(order, n: int, epoch: int) -> list[int]:
    out = np.empty(n, dtype=np.uint64)
    return order.resolve(epoch, np.zeros(1, np.uint64), np.array([n], np.uint64), out).tolist()


@pytest.mark.parametrize("version", ["v2", "v3"])
def test_the_train_stage_gets_the_manifests_order(version):
    mode, kind, _, operator = MODES[version]
    plan = SamplingPlan.create(manifest_of(document(version)), "ds", 1, 0, "train")
    assert type(plan.order) is kind
    assert plan.order.sampling_mode == plan.order.train_mode == plan.train_mode == mode
    assert plan.order.failure_operator == operator


@pytest.mark.parametrize("version", ["v2", "v3"])
@pytest.mark.parametrize("stage", ["eval", "infer"])
def test_eval_and_infer_read_in_place_with_the_versions_seeds(version, stage):
    mode, kind, naive, operator = MODES[version]
    d = document(version)
    plan = SamplingPlan.create(manifest_of(d), "ds", 1, 0, stage)
    assert isinstance(plan.order, SequentialOrder) and type(plan.order.version) is kind
    assert plan.order.sampling_mode == tokens.SAMPLING_MODE_SEQUENTIAL
    assert plan.order.train_mode == mode and plan.order.failure_operator == operator
    assert whole_epoch(plan.order, 300, 4) == list(range(300))
    assert plan.order.epoch_seed(4) == naive.epoch_seed(d, "ds", 4)
    assert plan.order.blocks_materialized(0, 300) == 0


@pytest.mark.parametrize("version", ["v2", "v3"])
@pytest.mark.parametrize("n, block_size", [(300, 32), (64, 64), (5, 8)])
def test_a_train_order_is_its_naive_reference(version, n, block_size):
    _, _, naive, _ = MODES[version]
    d = document(version, n, block_size)
    order = order_for(manifest_of(d), "ds", shuffled=True)
    for epoch in (0, 1):
        got = whole_epoch(order, n, epoch)
        assert got == naive.Epoch(d, "ds", epoch).all_indices()
        assert sorted(got) == list(range(n))
        assert order.epoch_seed(epoch) == naive.epoch_seed(d, "ds", epoch)
    assert whole_epoch(order, n, 0) != whole_epoch(order, n, 1) or n < 8


def test_blocks_materialized_counts_the_blocks_a_slice_touches():
    order = order_for(manifest_of(document("v2", 300, 32)), "ds", shuffled=True)
    assert [order.blocks_materialized(s, c) for s, c in ((0, 0), (0, 1), (0, 32), (31, 2),
                                                          (10, 64), (288, 12))] == [0, 1, 1, 2, 3, 1]
    feistel = order_for(manifest_of(document("v3", 300, 32)), "ds", shuffled=True)
    assert feistel.blocks_materialized(10, 64) == 0


def test_the_block_order_limit_applies_only_where_blocks_are_permuted():
    n = (MAX_FULL_BLOCKS + 1) * 2  # one block more than fits, at block size 2
    d = manifest_dict(n, 2, 2)
    with pytest.raises(ContractViolationError, match=f"{MAX_FULL_BLOCKS + 1} full blocks of 2"):
        SamplingPlan.create(manifest_of(d), "ds", 1, 0, "train")
    plan = SamplingPlan.create(manifest_of(d), "ds", 1, 0, "eval")  # nothing materialised
    assert plan.order.version.num_full_blocks == 0 and plan.order.limit_error() is None
