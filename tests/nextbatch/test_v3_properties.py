"""Hypothesis properties of NextBatch_v3, the same contract v2 is held to.

Bijection per epoch (at 2^k - 1, 2^k, 2^k + 1 and arbitrary N, below and above the block size,
with and without drop_last), world-size independence, resume continuity through checkpoints,
chunked streaming, and the fast path equal to the plain-Python reference step by step.
"""

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from dlkit.nextbatch import Cursor, SamplingPlan, load_checkpoint, save_checkpoint
from tests import naive_feistel as naive
from tests.nextbatch.helpers import concat, epoch_stream, manifest_of
from tests.nextbatch.v3_helpers import v3_dict

POWER_SIZES = st.integers(1, 14).flatmap(
    lambda k: st.sampled_from([2**k - 1, 2**k, 2**k + 1]).filter(lambda n: n >= 1))


@st.composite
def configs(draw, max_n=3000):
    n = draw(st.one_of(POWER_SIZES.filter(lambda n: n <= max_n), st.integers(1, max_n)))
    # v3 ignores the block size; drawing it either side of N checks that it stays ignored.
    block_size = draw(st.one_of(st.integers(1, 64), st.integers(n, n + 100),
                                st.sampled_from([1_048_576, 2**32])))
    world_size = draw(st.sampled_from([1, 2, 3, 4, 8]))
    gbs = world_size * draw(st.integers(1, 24))
    drop_last = draw(st.booleans()) and gbs <= n
    seed = draw(st.integers(0, 2**64 - 1))
    return v3_dict(n, gbs, block_size, drop_last, seed), world_size


def full_epoch(m, stage="train", epoch=0):
    plan = SamplingPlan.create(m, "ds", 1, 0, stage)
    return concat(list(plan.iter_chunks(Cursor(epoch, 0)))).tolist()


@given(configs(max_n=20_000), st.integers(0, 3))
def test_train_epoch_is_a_bijection(config, epoch):
    doc, _ = config
    indices = full_epoch(manifest_of(doc), epoch=epoch)
    n, gbs = doc["datasets"]["ds"]["cardinality"], doc["global_batch_size"]
    limit = (n // gbs) * gbs if doc["data"]["drop_last"] else n
    assert len(indices) == limit
    assert len(set(indices)) == limit and all(0 <= i < n for i in indices)
    if not doc["data"]["drop_last"]:
        assert sorted(indices) == list(range(n))


@given(configs(max_n=400), st.integers(0, 2))
def test_fast_path_equals_reference(config, epoch):
    doc, world_size = config
    m = manifest_of(doc)
    for rank in range(world_size):
        plan = SamplingPlan.create(m, "ds", world_size, rank, "train")
        steps, cursor = epoch_stream(plan, Cursor(epoch, 0))
        ref_cursor = (epoch, 0)
        for got in steps:
            expected, ref_cursor = naive.next_batch(doc, "ds", world_size, rank, "train",
                                                    ref_cursor)
            assert got == expected
        assert (cursor.epoch, cursor.global_index) == ref_cursor == (epoch + 1, 0)


@given(configs())
def test_rank_slices_concatenate_to_the_single_rank_sequence(config):
    doc, world_size = config
    m = manifest_of(doc)
    single = epoch_stream(SamplingPlan.create(m, "ds", 1, 0, "train"), Cursor())[0]
    per_rank = [epoch_stream(SamplingPlan.create(m, "ds", world_size, r, "train"), Cursor())[0]
                for r in range(world_size)]
    assert all(len(steps) == len(single) for steps in per_rank)
    for step, whole in enumerate(single):
        assert sum((per_rank[r][step] for r in range(world_size)), []) == whole


@given(configs(), st.data())
def test_resume_from_a_checkpoint_on_another_world_size_continues_identically(config, data):
    doc, world_size = config
    m = manifest_of(doc)
    plan_one = SamplingPlan.create(m, "ds", 1, 0, "train")
    total_steps = plan_one.steps_per_epoch + 3  # into the next epoch
    whole = concat(list(plan_one.iter_chunks(Cursor(), total_steps))).tolist()
    split_step = data.draw(st.integers(0, plan_one.steps_per_epoch - 1))
    first_part, cursor = epoch_stream(plan_one, Cursor(), split_step)
    # The cursor goes through a checkpoint file, as a restarted job would see it.
    with tempfile.TemporaryDirectory() as tmp:
        save_checkpoint(Path(tmp) / "c.ckpt", {"ds": cursor})
        cursor = load_checkpoint(Path(tmp) / "c.ckpt")["ds"]
    remaining = total_steps - split_step
    rank_steps = [epoch_stream(SamplingPlan.create(m, "ds", world_size, r, "train"), cursor,
                               remaining)[0] for r in range(world_size)]
    continued = [i for step in range(remaining) for r in range(world_size)
                 for i in rank_steps[r][step]]
    assert sum(first_part, []) + continued == whole


@given(configs(), st.data())
def test_chunked_streaming_equals_step_by_step_calls(config, data):
    doc, world_size = config
    plan = SamplingPlan.create(manifest_of(doc), "ds", world_size,
                               data.draw(st.integers(0, world_size - 1)), "train")
    step = data.draw(st.integers(0, plan.steps_per_epoch - 1))
    start = Cursor(0, step * doc["global_batch_size"])
    steps = data.draw(st.integers(1, 3 * plan.steps_per_epoch))
    chunks = list(plan.iter_chunks(start, steps, max_chunk_indices=data.draw(st.integers(1, 64))))
    by_call, cursor = epoch_stream(plan, start, steps)
    assert [s.tolist() for c in chunks for s in c.split()] == by_call
    assert chunks[-1].cursor_after == cursor


@given(configs(max_n=300))
def test_epochs_differ_and_each_is_complete(config):
    doc, _ = config
    m = manifest_of(doc)
    a, b = full_epoch(m, epoch=0), full_epoch(m, epoch=1)
    assert len(set(a)) == len(a) == len(b) == len(set(b))
    n = doc["datasets"]["ds"]["cardinality"]
    if n >= 8 and not doc["data"]["drop_last"]:
        assert sorted(a) == sorted(b) == list(range(n))
        assert a != b  # 8! permutations: equal epochs would mean the seed was ignored


def test_large_n_is_world_size_independent_without_materialising_the_epoch():
    """N = 10^12 (64-bit path): rank slices of a step equal the single-rank step."""
    doc = v3_dict(10**12, 4096, seed=99)
    m = manifest_of(doc)
    cursor = Cursor(2, 10**12 - 3 * 4096 - 100)
    whole = SamplingPlan.create(m, "ds", 1, 0, "train").next_batch(cursor).indices.tolist()
    parts = sum((SamplingPlan.create(m, "ds", 8, r, "train").next_batch(cursor).indices.tolist()
                 for r in range(8)), [])
    assert parts == whole
    epoch = naive.Epoch(doc, "ds", 2)
    first = cursor.global_index
    assert whole[:64] == [epoch.index(p) for p in range(first, first + 64)]
    assert len(set(whole)) == len(whole) and max(whole) < 10**12
    assert np.ptp(np.array(whole, dtype=np.float64)) > 10**11  # one batch spans the dataset
