"""Context examples in whole batches: against the reference, no leak, off means unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlkit.core.examples import parent_examples
from dlkit.errors import CheckpointError, InvalidArgumentError
from dlkit.sampler import Sampler
from dlkit.sampler.batch import (
    BATCH_KEYS,
    BATCH_SCALAR_KEYS,
    BatchBuilder,
    BatchConfig,
    ContextExamplePolicy,
    ContextExamples,
)
from tests import naive_sampler as naive
from tests.sampler.fakedb import random_database
from tests.sampler.test_batch import (
    POLICIES,
    SEED_DB,
    assert_matches_reference,
    build,
    column_lags,
)

EXAMPLE_POLICIES = st.sampled_from(list(ContextExamplePolicy))


@settings(max_examples=60)
@given(db_seed=SEED_DB, S=st.integers(1, 64), R=st.integers(2, 24), width=st.integers(0, 4),
       seed=st.integers(0, 2**64 - 1), epoch=st.integers(0, 3), examples=st.integers(1, 5),
       example_policy=EXAMPLE_POLICIES, policy=POLICIES, data=st.data())
def test_batches_with_examples_match_reference(db_seed, S, R, width, seed, epoch, examples,
                                               example_policy, policy, data):
    examples = min(examples, R - 1)  # each example takes a row: at most R - 1 fit
    # Sparse keys leave walks short; a short time span makes time ties and lag ties common.
    db = random_database(db_seed, num_tables=data.draw(st.integers(1, 4)), num_tasks=2,
                         fk_prob=data.draw(st.sampled_from([0.3, 0.7])), time_rules=True,
                         time_span=data.draw(st.sampled_from([12, 10**9])))
    S = max([S] + [len(db.table(task.table).columns) for task in db.tasks])
    for k, task in enumerate(db.tasks):
        if task.num_seeds == 0:
            continue
        indices = data.draw(st.lists(st.integers(0, task.num_seeds - 1), max_size=5))
        _, _, built = build(db, S=S, R=R, width=width, seed=seed, epoch=epoch, task=k,
                            indices=indices, policy=policy, examples=examples,
                            example_policy=example_policy)
        assert_matches_reference(db, built, task, S=S, R=R, width=width, seed=seed,
                                 epoch=epoch, policy=policy, examples=examples,
                                 example_policy=example_policy)


@settings(max_examples=40)
@given(db_seed=SEED_DB, count=st.integers(1, 6), max_scan=st.integers(1, 6),
       span=st.sampled_from([12, 10**9]), data=st.data())
def test_parent_choice_matches_reference(db_seed, count, max_scan, span, data):
    """Siblings first (each parent's latest ``max_scan`` visible children that are seeds),
    then the latest others: the kernel against the reference, the scan cap included."""
    db = random_database(db_seed, num_tables=3, fk_prob=0.6, num_tasks=2, time_rules=True,
                         time_span=span)
    builder = BatchBuilder(db, BatchConfig(sequence_length=64), seed=0)
    resident = builder.resident
    for view, task in zip(builder.tasks, db.tasks):
        if task.num_seeds == 0:
            continue
        me = data.draw(st.integers(0, task.num_seeds - 1))
        obs = int(task.obs_time[me])
        cutoff = naive.INT64_MAX if obs == naive.NO_TIME else obs - int(task.rules.strict)
        examples = ContextExamples(count, ContextExamplePolicy.PARENT).kernel_examples(
            view, np.asarray([me]))
        out = np.empty(count, dtype=np.int64)
        k = parent_examples(resident.graph, resident.tables, examples,
                            int(view.anchor_row[me]) + view.row_offset,
                            int(examples.ranks[me]), cutoff, max_scan, out)
        order = np.argsort(task.obs_time, kind="stable")
        want = naive.context_examples(task, me, cutoff, count, naive.EXAMPLES_PARENT, seed=0,
                                      epoch=0, db=db, max_scan=max_scan)
        assert [int(order[p]) for p in out[:k]] == want




@pytest.mark.parametrize("example_policy", list(ContextExamplePolicy))
def test_examples_show_nothing_unknown_at_the_observation_time(example_policy):
    """Checked from the sequences' own rows and the database, without the reference: every
    row is visible at the sequence's cutoff and appears once; an example's seed row is a seed
    of the task observed no later; a lagged value shows only once known at the sequence's
    own observation time; the sequence's own target is the only target, hidden."""
    examples = labels_shown = labels_hidden = 0
    for db_seed in range(40):
        db = random_database(db_seed, num_tables=3, max_rows=40, fk_prob=0.4, num_tasks=2,
                             time_rules=True, time_span=(12, 10**9)[db_seed % 2])
        lags = column_lags(db)
        names = {c.column_id: (t.name, c.name) for t in db.tables for c in t.columns}
        for k, task in enumerate(db.tasks):
            if task.num_seeds == 0:
                continue
            _, view, built = build(db, S=96, R=32, width=2, seed=db_seed, epoch=1, task=k,
                                   examples=4, example_policy=example_policy)
            a = built.arrays
            offset = db.table(task.table).row_offset
            seed_rows = {int(r) + offset: int(t) for r, t in zip(task.anchor_row, task.obs_time)}
            target_id = next(c.column_id for c in db.table(task.table).columns
                             if c.name == task.target_column)
            assert a["is_target"].sum(axis=1).tolist() == [1] * task.num_seeds
            for b in range(task.num_seeds):
                obs = int(task.obs_time[b])
                strict = int(task.rules.strict)
                cutoff = naive.INT64_MAX if obs == naive.NO_TIME else obs - strict
                known_until = naive.INT64_MAX if obs == naive.NO_TIME else obs
                n = int(built.visited_counts[b])
                rows = built.visited_rows[b, :n].tolist()
                assert len(set(rows)) == n
                for i, row in enumerate(rows[1:], 1):
                    assert naive.visible(int(db.graph.row_times[row]), cutoff)
                    if built.visited_via[b, i] == naive.VIA_EXAMPLE:
                        examples += 1
                        assert row in seed_rows and naive.visible(seed_rows[row], cutoff)
                for p in np.flatnonzero(a["is_padding"][b] == 0):
                    i = int(a["seq_row_ids"][b, p])
                    row = rows[i]
                    assert a["is_context_example"][b, p] == (i >= _own_rows(built, b))
                    lag = lags.get(names[int(a["column_ids"][b, p])], 0)
                    t = int(db.graph.row_times[row])
                    if lag and not a["is_target"][b, p]:
                        known = t == naive.NO_TIME or t + lag <= known_until
                        assert a["is_hidden"][b, p] == (0 if known else 1)
                    if (built.visited_via[b, i] == naive.VIA_EXAMPLE
                            and a["column_ids"][b, p] == target_id):
                        assert not a["is_target"][b, p]
                        labels_hidden += int(a["is_hidden"][b, p])
                        labels_shown += 1 - int(a["is_hidden"][b, p])
    # examples occur, with their labels both shown and (lagged) hidden
    assert examples > 100 and labels_shown > 20 and labels_hidden > 20, (
        examples, labels_shown, labels_hidden)


def _own_rows(built, b):
    """How many rows of sequence ``b`` its own walk visited: those before the first example
    row (an example's first new row is its seed row unless that row was already there)."""
    a = built.arrays
    marked = np.flatnonzero(a["is_context_example"][b])
    return int(a["seq_row_ids"][b, marked[0]]) if marked.size else int(built.visited_counts[b])


@settings(max_examples=25)
@given(db_seed=SEED_DB, seed=st.integers(0, 2**64 - 1), examples=st.integers(1, 4),
       example_policy=EXAMPLE_POLICIES)
def test_examples_only_add_after_the_seeds_own_walk(db_seed, seed, examples, example_policy):
    """With examples on, a sequence's own rows and their cells are those of the batch with
    examples off; a sequence no example added a row to is unchanged entirely."""
    db = random_database(db_seed, num_tables=3, fk_prob=0.5, num_tasks=1)
    if not db.tasks or db.tasks[0].num_seeds == 0:
        return
    S = max(48, len(db.table(db.tasks[0].table).columns))
    _, _, off = build(db, S=S, R=16, width=2, seed=seed, epoch=0)
    _, _, on = build(db, S=S, R=16, width=2, seed=seed, epoch=0, examples=examples,
                     example_policy=example_policy)
    assert not off.arrays["is_context_example"].any()
    for b in range(off.visited_counts.shape[0]):
        n = int(off.visited_counts[b])
        assert on.visited_rows[b, :n].tolist() == off.visited_rows[b, :n].tolist()
        cells = int(off.cell_counts[b])
        if int(on.visited_counts[b]) == n:
            assert not on.arrays["is_context_example"][b].any()
            for key in BATCH_KEYS:
                if key not in ("text_batch_embeddings", "text_embed_ids", "labels",
                               "anchor_rows", "observation_times", "sequence_mask",
                               *BATCH_SCALAR_KEYS):
                    assert np.array_equal(on.arrays[key][b], off.arrays[key][b]), key
        for key in ("semantic_types", "column_ids", "seq_row_ids", "numeric_values",
                    "timestamp_values", "bool_values", "categorical_embed_ids", "is_null",
                    "is_target", "is_hidden"):
            assert np.array_equal(on.arrays[key][b, :cells], off.arrays[key][b, :cells]), key


def test_context_examples_are_validated_and_named():
    assert BatchConfig().context_examples == 0
    config = BatchConfig(context_examples=3, context_example_policy="Random")
    assert config.context_example_policy is ContextExamplePolicy.RANDOM
    assert config.examples.count == 3
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(InvalidArgumentError, match="context_examples must be an integer"):
            BatchConfig(context_examples=bad)
    for bad in ("latest", 0, None):
        with pytest.raises(InvalidArgumentError, match="recent, random, parent"):
            BatchConfig(context_example_policy=bad)
    assert BatchConfig(max_rows=4, context_examples=3).context_examples == 3
    with pytest.raises(InvalidArgumentError, match=r"below max_rows \(4\).*at most 3 other"):
        BatchConfig(max_rows=4, context_examples=4)


SMALL = dict(sequence_length=64, max_rows=16, bfs_child_width=2, split_seed=5, seed=11,
             batch_size=4)


@pytest.mark.parametrize("policy", ["recent", "random", "parent"])
def test_sampler_batches_are_the_same_for_any_thread_count(policy):
    db = random_database(7, num_tables=4, max_rows=160, fk_prob=0.4, num_tasks=2,
                         time_rules=True)
    config = dict(SMALL, context_examples=3, context_example_policy=policy)
    with Sampler(db, 0, 1, num_threads=1, num_prefetch=0, **config) as s:
        train = [s.next_train_batch() for _ in range(8)]
        val = [s.next_val_batch() for _ in range(4)]
    assert sum(int(b["is_context_example"].sum()) for b in train) > 0
    with Sampler(db, 0, 1, num_threads=2, num_prefetch=3, **config) as s:
        for want, got in zip(train + val, [s.next_train_batch() for _ in range(8)]
                             + [s.next_val_batch() for _ in range(4)]):
            assert tuple(want) == tuple(got) == BATCH_KEYS
            for key in BATCH_KEYS:
                assert np.array_equal(want[key], got[key]), key


def test_context_examples_are_fingerprinted_only_when_not_the_default():
    """A state records the examples (a resume under others is refused); the default state
    is the one of earlier versions; a resume under the same examples continues exactly."""
    db = random_database(7, num_tables=4, max_rows=160, fk_prob=0.4, num_tasks=2)
    with Sampler(db, 0, 1, num_prefetch=0, **SMALL) as s:
        plain = s.state_dict()
    assert "context_examples" not in plain["config"]
    assert "context_example_policy" not in plain["config"]
    config = dict(SMALL, context_examples=2, context_example_policy="random")
    with Sampler(db, 0, 1, num_prefetch=0, **config) as s:
        [s.next_train_batch() for _ in range(3)]
        state = s.state_dict()
        after = [s.next_train_batch() for _ in range(3)]
    assert state["config"]["context_examples"] == 2
    assert state["config"]["context_example_policy"] == "random"
    with Sampler(db, 0, 1, num_prefetch=0, **config) as s:
        s.load_state_dict(state)
        for want, got in zip(after, [s.next_train_batch() for _ in range(3)]):
            assert all(np.array_equal(want[k], got[k]) for k in BATCH_KEYS)
    with Sampler(db, 0, 1, num_prefetch=0, **dict(config, context_examples=3)) as s:
        with pytest.raises(CheckpointError, match="context_examples: state has 2"):
            s.load_state_dict(state)
    with Sampler(db, 0, 1, num_prefetch=0, **SMALL) as s:
        with pytest.raises(CheckpointError, match="context_examples"):
            s.load_state_dict(state)
    with Sampler(db, 0, 1, num_prefetch=0, **config) as s:
        with pytest.raises(CheckpointError, match="context_examples: state has 0"):
            s.load_state_dict(plain)
