"""Hash splits and the run manifest built from them."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.errors import InvalidArgumentError
from dlkit.sampler.splits import (
    SplitRatios,
    build_run_manifest,
    compute_splits,
    dataset_key,
    split_codes,
)
from tests import naive_feistel, naive_nextbatch
from tests import naive_sampler as naive


def task(n: int, index: int = 0, step: int = 1):
    return SimpleNamespace(name=f"t{index}", index=index,
                           anchor_row=np.arange(0, n * step, step, dtype=np.int64))


@pytest.mark.parametrize("ratios", [(0.8, 0.1, 0.1), (0.6, 0.3, 0.1), (0.34, 0.33, 0.33)])
def test_split_proportions_within_one_percent_on_100k_seeds(ratios):
    splits = compute_splits([task(100_000, index=3, step=7)], split_seed=123,
                            ratios=SplitRatios(*ratios))[0]
    counts = np.asarray([p.shape[0] for p in splits.positions]) / 100_000
    assert np.all(np.abs(counts - ratios) < 0.01), counts


@given(n=st.integers(0, 300), index=st.integers(0, 50), split_seed=st.integers(0, 2**64 - 1))
def test_splits_partition_the_seeds_in_ascending_order(n, index, split_seed):
    ratios = SplitRatios(0.7, 0.2, 0.1)
    t = task(n, index, step=3)
    splits = compute_splits([t], split_seed, ratios)[0]
    everything = np.sort(np.concatenate(splits.positions))
    assert np.array_equal(everything, np.arange(n))
    for k, positions in enumerate(splits.positions):
        assert np.all(np.diff(positions) > 0)
        # held for the whole run: 4 bytes a seed, and never changed
        assert positions.dtype == np.int32 and not positions.flags.writeable
        for p in positions[:20]:
            assert naive.split_of(int(t.anchor_row[p]), index, split_seed,
                                  (0.7, 0.2, 0.1)) == k


def test_split_depends_on_the_split_seed_and_task_only():
    anchors = np.arange(5000, dtype=np.int64)
    ratios = SplitRatios()
    a = split_codes(anchors, 0, 1, ratios)
    assert np.array_equal(a, split_codes(anchors, 0, 1, ratios))
    assert not np.array_equal(a, split_codes(anchors, 0, 2, ratios))  # another split seed
    assert not np.array_equal(a, split_codes(anchors, 1, 1, ratios))  # another task


def test_manifest_datasets_and_version():
    tasks = [task(50, 0), task(80, 1)]
    ratios = SplitRatios(0.5, 0.25, 0.25)
    splits = compute_splits(tasks, 9, ratios)
    manifest = build_run_manifest("db", b"\x01" * 32, splits, seed=4, global_batch_size=8,
                                  split_seed=9, ratios=ratios)
    assert manifest.data.drop_last
    for t, s in zip(tasks, splits):
        for split, positions in zip(("train", "val", "test"), s.positions):
            entry = manifest.datasets[dataset_key("db", t.name, split)]
            assert entry.cardinality == positions.shape[0]
            assert entry.hash == b"\x01" * 32
            assert "split_seed=9" in entry.version and "500/750/1000" in entry.version
    other = build_run_manifest("db", b"\x01" * 32, compute_splits(tasks, 10, ratios), seed=4,
                               global_batch_size=8, split_seed=10, ratios=ratios)
    assert other.manifest_hash != manifest.manifest_hash


def test_manifest_train_order_is_v3_unless_v2_is_asked_for():
    tasks = [task(50, 0)]
    ratios = SplitRatios()
    splits = compute_splits(tasks, 0, ratios)

    def make(**mode):
        return build_run_manifest("db", b"\x01" * 32, splits, seed=4, global_batch_size=8,
                                  split_seed=0, ratios=ratios, **mode)

    default, v3, v2 = make(), make(sampling_mode="v3"), make(sampling_mode="v2")
    assert default == v3 and v3.data.sampling_mode == naive_feistel.V3_MODE
    assert json.loads(v3.to_json())["data"]["sampling_mode"] == naive_feistel.V3_MODE
    # A v2 manifest is exactly what it was before the key existed (same hash as the v2
    # reference computes), and the full mode names are accepted too.
    assert v2.data.sampling_mode == naive_feistel.V2_MODE
    assert "sampling_mode" not in json.loads(v2.to_json())["data"]
    assert v2.manifest_hash == naive_nextbatch.manifest_hash(json.loads(v2.to_json()))
    assert v2.manifest_hash != v3.manifest_hash
    assert make(sampling_mode=naive_feistel.V3_MODE) == v3
    with pytest.raises(InvalidArgumentError, match="sampling mode must be v3"):
        make(sampling_mode="v1")


@pytest.mark.parametrize("value,match", [
    ((0.5, 0.5), "3 values"), ((0.5, 0.6, -0.1), "non-negative"), ((0.5, 0.2, 0.2), "sum to 1"),
    ("a,b,c", "look like"), ((float("nan"), 0.5, 0.5), "non-negative"),
])
def test_bad_ratios_are_named(value, match):
    with pytest.raises(InvalidArgumentError, match=match):
        SplitRatios.parse(value)


def test_ratio_cuts_use_python_round():
    assert SplitRatios(0.8, 0.1, 0.1).cuts == (800, 900)
    assert SplitRatios(0.8125, 0.0, 0.1875).cuts == (round(812.5), round(812.5))
    assert SplitRatios.parse("0.7,0.2,0.1") == SplitRatios(0.7, 0.2, 0.1)
