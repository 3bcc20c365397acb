"""Hypothesis properties of NextBatch_v2: bijection, world-size independence, resume, eval.

Configurations are drawn to hit tails, N below the block size, block size 1, partial last
batches and drop_last.
"""

from hypothesis import given
from hypothesis import strategies as st

from dlkit.nextbatch import Cursor, SamplingPlan
from tests import naive_nextbatch as naive
from tests.nextbatch.helpers import concat, epoch_stream, manifest_dict, manifest_of


@st.composite
def configs(draw, max_n=1500):
    n = draw(st.integers(1, max_n))
    block_size = draw(st.one_of(st.integers(1, 64), st.integers(n, n + 100), st.integers(1, max_n)))
    world_size = draw(st.sampled_from([1, 2, 3, 4, 8]))
    gbs = world_size * draw(st.integers(1, 24))
    drop_last = draw(st.booleans()) and gbs <= n
    seed = draw(st.integers(0, 2**64 - 1))
    return manifest_dict(n, gbs, block_size, drop_last, seed), world_size


def full_epoch(m, stage="train", epoch=0):
    plan = SamplingPlan.create(m, "ds", 1, 0, stage)
    return concat(list(plan.iter_chunks(Cursor(epoch, 0)))).tolist()


@given(configs(), st.integers(0, 3))
def test_train_epoch_is_a_bijection(config, epoch):
    doc, _ = config
    m = manifest_of(doc)
    indices = full_epoch(m, epoch=epoch)
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
            expected, ref_cursor = naive.next_batch(doc, "ds", world_size, rank, "train", ref_cursor)
            assert got == expected
        assert (cursor.epoch, cursor.global_index) == ref_cursor == (epoch + 1, 0)


@given(configs())
def test_rank_slices_concatenate_to_the_single_rank_sequence(config):
    doc, world_size = config
    m = manifest_of(doc)
    for stage in ("train", "eval"):
        single = epoch_stream(SamplingPlan.create(m, "ds", 1, 0, stage), Cursor())[0]
        per_rank = [epoch_stream(SamplingPlan.create(m, "ds", world_size, r, stage), Cursor())[0]
                    for r in range(world_size)]
        assert all(len(steps) == len(single) for steps in per_rank)
        for step, whole in enumerate(single):
            assert sum((per_rank[r][step] for r in range(world_size)), []) == whole


@given(configs(), st.data())
def test_resume_from_any_cursor_at_any_world_size_continues_identically(config, data):
    doc, world_size = config
    m = manifest_of(doc)
    gbs = doc["global_batch_size"]
    plan_one = SamplingPlan.create(m, "ds", 1, 0, "train")
    whole = concat(list(plan_one.iter_chunks(Cursor(), plan_one.steps_per_epoch + 3)))
    split_step = data.draw(st.integers(0, plan_one.steps_per_epoch - 1))
    first_part = concat(list(plan_one.iter_chunks(Cursor(), split_step)))
    resumed_cursor = Cursor(0, split_step * gbs)
    if split_step:
        resumed_cursor = list(plan_one.iter_chunks(Cursor(), split_step))[-1].cursor_after
    # Continue on a different world size: interleave the ranks' micro-batches step by step.
    remaining_steps = plan_one.steps_per_epoch + 3 - split_step
    rank_steps = [epoch_stream(SamplingPlan.create(m, "ds", world_size, r, "train"),
                               resumed_cursor, remaining_steps)[0] for r in range(world_size)]
    continued = [i for step in range(remaining_steps) for r in range(world_size)
                 for i in rank_steps[r][step]]
    assert first_part.tolist() + continued == whole.tolist()


@given(configs(), st.data())
def test_chunked_streaming_equals_step_by_step_calls(config, data):
    doc, world_size = config
    m = manifest_of(doc)
    rank = data.draw(st.integers(0, world_size - 1))
    stage = data.draw(st.sampled_from(["train", "eval"]))
    plan = SamplingPlan.create(m, "ds", world_size, rank, stage)
    start = Cursor(0, data.draw(st.integers(0, plan.steps_per_epoch - 1)) * doc["global_batch_size"])
    steps = data.draw(st.integers(1, 3 * plan.steps_per_epoch))
    chunk_size = data.draw(st.integers(1, 64))
    chunks = list(plan.iter_chunks(start, steps, max_chunk_indices=chunk_size))
    by_call, cursor = epoch_stream(plan, start, steps)
    assert sum(c.num_steps for c in chunks) == steps
    assert [s.tolist() for c in chunks for s in c.split()] == by_call
    assert chunks[-1].cursor_after == cursor
    assert plan.count_indices(start, steps) == sum(len(s) for s in by_call)


@given(configs())
def test_eval_emits_every_index_once_in_order_with_a_partial_last_batch(config):
    doc, world_size = config
    m = manifest_of(doc)
    n, gbs = doc["datasets"]["ds"]["cardinality"], doc["global_batch_size"]
    assert full_epoch(m, "eval") == list(range(n))
    last_rank = SamplingPlan.create(m, "ds", world_size, world_size - 1, "eval")
    steps, cursor = epoch_stream(last_rank, Cursor())
    assert cursor == Cursor(1, 0)
    assert len(steps) == -(-n // gbs)
    assert all(i < n for step in steps for i in step)  # never wrapped


@given(configs(max_n=300))
def test_every_epoch_is_complete_without_repeats(config):
    doc, _ = config
    m = manifest_of(doc)
    a, b = full_epoch(m, epoch=0), full_epoch(m, epoch=1)
    assert len(set(a)) == len(a) == len(b) == len(set(b))
    if not doc["data"]["drop_last"]:
        assert sorted(a) == sorted(b) == list(range(doc["datasets"]["ds"]["cardinality"]))



def test_a_block_order_too_large_for_memory_is_a_clear_error():
    import pytest

    from dlkit.errors import ContractViolationError

    doc = manifest_dict(2**63 + 12345, 1024, 2**32)  # 2^31 full blocks: 16 GiB of block order
    with pytest.raises(ContractViolationError, match="sampler_block_size"):
        SamplingPlan.create(manifest_of(doc), "ds", 1, 0, "train")
    # Eval needs no block order, so the same dataset streams fine near 2^64.
    plan = SamplingPlan.create(manifest_of(doc), "ds", 1, 0, "eval")
    assert plan.next_batch(Cursor(0, 2**63)).indices[:2].tolist() == [2**63, 2**63 + 1]
