"""Evaluation passes, the test channel, labels and the Sampler's training-loop surface."""

from __future__ import annotations

import itertools
import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlkit.encoding import with_checksum
from dlkit.errors import InvalidArgumentError
from dlkit.sampler import BATCH_KEYS, Sampler, SamplerWarning
from dlkit.sampler.splits import SPLITS
from tests import naive_sampler as naive
from tests.sampler.test_sampler import SMALL, assert_same_batches

RATIOS = (0.8, 0.1, 0.1)


def quiet_sampler(db, rank, world_size, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplerWarning)
        return Sampler(db, rank, world_size, **{**SMALL, **kwargs})


def split_anchors(db, task, split):
    """Anchor rows of ``task``'s seeds in ``split``, by the reference's own split rule."""
    k = SPLITS.index(split)
    return [int(a) for a in task.anchor_row
            if naive.split_of(int(a), task.index, SMALL["split_seed"], RATIOS) == k]


@settings(max_examples=25)
@given(world_size=st.integers(1, 4), batch_size=st.integers(1, 9),
       split=st.sampled_from(SPLITS), prefetch=st.sampled_from([0, 2]))
def test_a_pass_covers_every_seed_once_in_equal_fixed_shape_batches(db, world_size, batch_size,
                                                                   split, prefetch):
    per_rank = []
    for rank in range(world_size):
        with quiet_sampler(db, rank, world_size, batch_size=batch_size, num_prefetch=prefetch,
                           num_threads=2) as s:
            batches = list(s.iter_eval(split))
            assert len(batches) == s.eval_steps(split)
            per_rank.append(batches)
    counts = {len(b) for b in per_rank}
    assert len(counts) == 1, f"ranks yield different numbers of batches: {counts}"
    seen: dict[int, list[int]] = {}
    for step in range(counts.pop()):
        global_anchors = []
        tasks = {int(per_rank[r][step]["task_idx"][0]) for r in range(world_size)}
        assert len(tasks) == 1, "ranks disagree on the task of an eval step"
        for r in range(world_size):
            batch = per_rank[r][step]
            assert tuple(batch) == BATCH_KEYS
            assert batch["labels"].shape == (batch_size,)
            assert batch["semantic_types"].shape == (batch_size, SMALL["sequence_length"])
            real = batch["sequence_mask"].astype(bool)
            # Real sequences first, padding after: a rank's slice is contiguous.
            assert real.tolist() == sorted(real.tolist(), reverse=True)
            global_anchors += batch["anchor_rows"][real].tolist()
        seen.setdefault(tasks.pop(), []).extend(global_anchors)
    for task in db.tasks:
        # Every seed exactly once, in ascending order (the eval order is the split's order).
        assert seen.get(task.index, []) == split_anchors(db, task, split)


def test_padding_repeats_a_real_sequence_and_is_masked(db):
    with quiet_sampler(db, 1, 3, batch_size=7) as s:
        last = list(s.iter_eval("val", task="task0"))[-1]
    real = last["sequence_mask"].astype(bool)
    assert not real.all(), "this configuration must leave the last val batch short"
    for key in ("semantic_types", "labels", "anchor_rows", "fk_adj", "col_perm"):
        padded = last[key][~real]
        # Each padded sequence repeats the task's first val seed, whole and valid.
        assert all(np.array_equal(p, padded[0]) for p in padded), key
    task = db.task("task0")
    assert last["anchor_rows"][~real][0] == split_anchors(db, task, "val")[0]


def test_eval_pass_is_independent_of_state_and_repeatable(db):
    with quiet_sampler(db, 0, 2, batch_size=3, num_prefetch=2) as s:
        first = list(s.iter_eval("test"))
        for _ in range(5):
            s.next_train_batch()
            s.next_val_batch()
        assert_same_batches(list(s.iter_eval("test")), first)
        # An abandoned pass leaves no thread behind and does not disturb the next one.
        partial = s.iter_eval("test")
        next(partial)
        partial.close()
        assert_same_batches(list(s.iter_eval("test")), first)


def test_eval_arguments_are_checked(db):
    with quiet_sampler(db, 0, 1, batch_size=4) as s:
        with pytest.raises(InvalidArgumentError, match="split must be one of"):
            s.eval_steps("validation")
        with pytest.raises(InvalidArgumentError, match="no task 'nope'"):
            s.iter_eval("val", task="nope")  # at the call, not at the first batch
        assert s.eval_steps("val", task=0) == s.eval_steps("val", task="task0")


def test_test_channel_is_its_own_stream_and_resumes(db):
    with quiet_sampler(db, 0, 1, batch_size=4) as s:
        val = [s.next_val_batch() for _ in range(3)]
        test = [s.next_test_batch() for _ in range(3)]
        state = json.loads(json.dumps(s.state_dict()))
        after = [s.next_test_batch() for _ in range(4)]
    with quiet_sampler(db, 0, 1, batch_size=4) as s:
        # Pulling test first changes neither stream.
        assert_same_batches([s.next_test_batch() for _ in range(3)], test)
        assert_same_batches([s.next_val_batch() for _ in range(3)], val)
    with quiet_sampler(db, 0, 1, batch_size=4) as s:
        s.load_state_dict(state)
        assert_same_batches([s.next_test_batch() for _ in range(4)], after)
    test_anchors = set().union(*(b["anchor_rows"].tolist() for b in test))
    for batch in test:
        task = db.tasks[int(batch["task_idx"][0])]
        assert set(batch["anchor_rows"].tolist()) <= set(split_anchors(db, task, "test"))
    assert test_anchors


def test_a_state_without_a_test_channel_still_loads(db):
    with quiet_sampler(db, 0, 1, batch_size=4) as s:
        s.next_train_batch()
        state = s.state_dict()
        assert "test" not in state  # never pulled
        following = s.next_train_batch()
        first_test = s.next_test_batch()
        assert "test" in s.state_dict()
    with quiet_sampler(db, 0, 1, batch_size=4) as s:
        s.load_state_dict(state)
        assert_same_batches([s.next_train_batch()], [following])
        assert_same_batches([s.next_test_batch()], [first_test])


def test_iteration_steps_per_epoch_and_tasks(db):
    with quiet_sampler(db, 0, 2, batch_size=4, task_weights={"task1": 1}) as s:
        assert s.tasks == tuple(t.name for t in db.tasks)
        train = split_anchors(db, db.task("task1"), "train")
        assert s.steps_per_epoch == len(train) // 8
        by_iter = list(itertools.islice(s, 3))
    with quiet_sampler(db, 0, 2, batch_size=4, task_weights={"task1": 1}) as s:
        assert_same_batches(by_iter, [s.next_train_batch() for _ in range(3)])


def test_local_rank_and_local_world_size_from_the_environment(db, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with quiet_sampler(db, 3, 4, batch_size=2) as s:
        assert (s.local_rank, s.config.local_world_size) == (1, 2)
    with quiet_sampler(db, 3, 4, batch_size=2, local_world_size=4) as s:
        assert s.config.local_world_size == 4
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(InvalidArgumentError, match="local_rank 2 is not in"):
        quiet_sampler(db, 3, 4, batch_size=2)
    monkeypatch.setenv("LOCAL_RANK", "x")
    with pytest.raises(InvalidArgumentError, match=r"\$LOCAL_RANK must be an integer"):
        quiet_sampler(db, 3, 4, batch_size=2)


def test_label_info(db):
    with quiet_sampler(db, 0, 1, batch_size=2) as s:
        with pytest.raises(InvalidArgumentError, match="name one"):
            s.label_info()
        for task in db.tasks:
            info = s.label_info(task.name)
            column = next(c for c in db.table(task.table).columns
                          if c.name == task.target_column)
            assert (info.task, info.table, info.column, info.stype) == (
                task.name, task.table, task.target_column, task.target_stype)
            if column.stype in (0, 2):
                assert (info.mean, info.std) == (column.mean, column.std)
                labels = np.asarray([naive.label(db, task, i) for i in range(task.num_seeds)])
                assert np.allclose(info.to_units(labels), task.target, rtol=1e-6,
                                   atol=1e-6 * column.std)
            assert info.num_classes == (column.cat_emb_count if column.stype == 3 else 0)
            json.dumps(info.to_json())


def test_train_batch_of_a_step_is_the_channels_batch_of_that_step(db):
    with quiet_sampler(db, 1, 2, batch_size=3) as s:
        pulled = [s.next_train_batch() for _ in range(9)]
    with quiet_sampler(db, 1, 2, batch_size=3) as s:
        # any order: ascending, a jump, back to the start, repeated
        for step in (0, 1, 2, 5, 8, 3, 3, 0, 7, 4, 6):
            assert_same_batches([s.train_batch(step)], [pulled[step]])
        assert not s._lookup._pending or min(s._lookup._pending) > 6  # noqa: SLF001
        with pytest.raises(InvalidArgumentError, match=r"step must be an integer from 0 to 2\^63"):
            s.train_batch(-1)
        # the channel is untouched by random access
        assert_same_batches([s.next_train_batch() for _ in range(2)], pulled[:2])


def resumed_at(db, step, picks, **kwargs):
    """A sampler resumed at train step ``step`` after ``picks[i]`` calls of train stream
    ``i`` (the cursors of its state computed from the counts here, as the profile moves
    them: one global batch a call, a new epoch after the last full batch)."""
    s = quiet_sampler(db, 1, 2, num_prefetch=0, **kwargs)
    gbs = 2 * kwargs["batch_size"]
    cursors = {}
    for stream, calls in zip(s.train_streams, picks):
        steps_per_epoch = len(split_anchors(db, db.tasks[stream.task.index], "train")) // gbs
        epoch, call = divmod(calls, steps_per_epoch)
        cursors[stream.key] = {"epoch": epoch, "global_index": call * gbs}
    state = {k: v for k, v in s.state_dict().items() if k != "checksum"}
    s.load_state_dict(with_checksum({**state, "train": {"step": step, "cursors": cursors}}))
    return s


def test_a_far_train_step_of_weighted_tasks_is_the_batch_a_resumed_run_pulls(db):
    weights = [1.0, 2.5, 0.5]
    kwargs = dict(batch_size=3, task_weights=weights)
    with quiet_sampler(db, 1, 2, num_prefetch=0, **kwargs) as s:
        assert len(s.train_streams) == 3
        for step in (3000, 2999, 70_000, 123):  # far, one back, farther, far back
            tasks = [naive.task_pick(SMALL["seed"], k, weights) for k in range(step)]
            with resumed_at(db, step, [tasks.count(t) for t in range(3)], **kwargs) as r:
                assert_same_batches([s.train_batch(step)], [r.next_train_batch()])
        # too far to count at once: one line naming the step and the limit, nothing built
        with pytest.raises(InvalidArgumentError, match=r"train step 1000000000000 is .* at "
                                                       r"most 1073741824 at once"):
            s.train_batch(10**12)
        with pytest.raises(InvalidArgumentError, match=r"from 0 to 2\^63-1, got 922337203685"):
            s.train_batch(2**63)


def test_a_train_step_of_one_task_is_found_in_constant_time_however_far(db):
    kwargs = dict(batch_size=3, task_weights=[0.0, 1.0, 0.0])
    with quiet_sampler(db, 1, 2, num_prefetch=0, **kwargs) as s:
        for step in (10**12, 2**63 - 1, 5):
            with resumed_at(db, step, [step], **kwargs) as r:
                assert_same_batches([s.train_batch(step)], [r.next_train_batch()])
