"""Whole batches from the kernels against the plain-Python reference, key by key."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlkit.core.bfs import table_links_of
from dlkit.errors import InvalidArgumentError
from dlkit.sampler.batch import (
    BATCH_KEYS,
    BATCH_LAYOUT,
    BatchBuilder,
    BatchConfig,
    ChildPolicy,
    ContextExamplePolicy,
    batch_dtype,
)
from tests import naive_sampler as naive
from tests.sampler.fakedb import random_database

SEED_DB = st.integers(0, 2**32 - 1)
NAIVE_POLICY = {ChildPolicy.UNIFORM: naive.UNIFORM, ChildPolicy.RECENT: naive.RECENT,
                ChildPolicy.QUOTA: naive.QUOTA}


NAIVE_EXAMPLES = {ContextExamplePolicy.RECENT: naive.EXAMPLES_RECENT,
                  ContextExamplePolicy.RANDOM: naive.EXAMPLES_RANDOM,
                  ContextExamplePolicy.PARENT: naive.EXAMPLES_PARENT}
POLICIES = st.sampled_from(list(ChildPolicy))



def column_lags(db):
    """Each column's lag: its own known_after and the label lags of the tasks predicting it
    (the largest)."""
    lags = {(t.name, c.name): c.known_after_us for t in db.tables for c in t.columns
            if c.known_after_us}
    for task in db.tasks:
        if task.rules.label_lag_us:
            key = (task.table, task.target_column)
            lags[key] = max(lags.get(key, 0), task.rules.label_lag_us)
    return lags

def build(db, *, S, R, width, seed, epoch, task=0, indices=None, policy=ChildPolicy.UNIFORM,
          examples=0, example_policy=ContextExamplePolicy.RECENT):
    builder = BatchBuilder(db, BatchConfig(sequence_length=S, max_rows=R, bfs_child_width=width,
                                           bfs_child_policy=policy, context_examples=examples,
                                           context_example_policy=example_policy),
                           seed=seed)
    view = builder.tasks[task]
    idx = np.arange(view.num_seeds) if indices is None else np.asarray(indices)
    return builder, view, builder.build(view, idx, epoch)


def expected_shape(key, B, S, R, U, D):
    sizes = {"B": B, "S": S, "R": R, "U": U, "D": D}
    return tuple(sizes[p] if p in sizes else int(p) for p in BATCH_LAYOUT[key][1].split(","))


def assert_matches_reference(db, built, task, *, S, R, width, seed, epoch,
                             policy=ChildPolicy.UNIFORM, examples=0,
                             example_policy=ContextExamplePolicy.RECENT):
    a = built.arrays
    assert tuple(a) == BATCH_KEYS
    B = built.seed_indices.shape[0]
    U, D = a["text_batch_embeddings"].shape
    for key in BATCH_KEYS:
        assert a[key].dtype == batch_dtype(key, task.target_stype), key
        assert a[key].shape == expected_shape(key, B, S, R, U, D), key
    text = db.text_embeddings()
    for b, seed_index in enumerate(built.seed_indices):
        assert a["labels"][b] == naive.label(db, task, int(seed_index))
        assert a["anchor_rows"][b] == task.anchor_row[seed_index]
        assert a["observation_times"][b] == task.obs_time[seed_index]
        assert a["sequence_mask"][b] == 1
        visits, cells = naive.sequence(db, task, int(seed_index), seed=seed, epoch=epoch,
                                       width=width, S=S, R=R,
                                       policy=NAIVE_POLICY[ChildPolicy(policy)],
                                       examples=examples,
                                       example_policy=NAIVE_EXAMPLES[example_policy])
        n = len(cells)
        k = built.visited_counts[b]
        assert list(zip(built.visited_rows[b, :k].tolist(), built.visited_depth[b, :k].tolist(),
                        built.visited_source[b, :k].tolist(),
                        built.visited_via[b, :k].tolist())) == visits
        assert a["is_padding"][b].tolist() == [0] * n + [1] * (S - n)
        for p, cell in enumerate(cells):
            assert a["semantic_types"][b, p] == cell["stype"]
            assert a["column_ids"][b, p] == cell["column_id"]
            assert a["seq_row_ids"][b, p] == cell["row"]
            assert a["numeric_values"][b, p] == np.float32(cell["numeric"])
            assert np.allclose(a["timestamp_values"][b, p], cell["ts"], atol=2e-6, rtol=1e-6)
            assert a["bool_values"][b, p] == cell["bool"]
            assert a["categorical_embed_ids"][b, p] == cell["cat"]
            assert a["is_null"][b, p] == cell["null"]
            assert a["is_target"][b, p] == cell["target"]
            assert a["is_hidden"][b, p] == cell["hidden"]
            assert a["is_context_example"][b, p] == cell["context"]
            if cell["text"] is None:
                assert a["text_embed_ids"][b, p] == 0
            else:
                local = a["text_embed_ids"][b, p]
                assert built.text_ids[local] == cell["text"]
                assert np.array_equal(a["text_batch_embeddings"][local], text[cell["text"]])
        for key in ("semantic_types", "column_ids", "seq_row_ids", "numeric_values",
                    "timestamp_values", "bool_values", "categorical_embed_ids",
                    "text_embed_ids", "is_null", "is_target", "is_hidden",
                    "is_context_example"):
            assert not a[key][b, n:].any(), f"padding of {key} is not zero"
        pairs = naive.fk_adjacency(db, visits)
        assert {tuple(map(int, ij)) for ij in np.argwhere(a["fk_adj"][b])} == pairs
        col, out, inn = naive.permutations(db, visits, cells, S)
        assert a["col_perm"][b].tolist() == col
        assert a["out_perm"][b].tolist() == out
        assert a["in_perm"][b].tolist() == inn
    # Exactly one target per sequence, at the seed row, with its value hidden.
    assert a["is_target"].sum(axis=1).tolist() == [1] * B
    assert np.array_equal(np.unique(built.text_ids), built.text_ids)
    assert a["task_idx"][0] == task.index
    assert a["target_stype"][0] == task.target_stype


@settings(max_examples=40)
@given(db_seed=SEED_DB, S=st.integers(1, 48), R=st.integers(1, 20), width=st.integers(0, 5),
       seed=st.integers(0, 2**64 - 1), epoch=st.integers(0, 5), data=st.data(), policy=POLICIES)
def test_batches_match_reference(db_seed, S, R, width, seed, epoch, data, policy):
    db = random_database(db_seed, num_tables=data.draw(st.integers(1, 4)), num_tasks=1)
    if not db.tasks or db.tasks[0].num_seeds == 0:
        return
    n = db.tasks[0].num_seeds
    S = max(S, len(db.table(db.tasks[0].table).columns))
    indices = data.draw(st.lists(st.integers(0, n - 1), min_size=0, max_size=6))
    _, view, built = build(db, S=S, R=R, width=width, seed=seed, epoch=epoch, indices=indices,
                           policy=policy)
    assert_matches_reference(db, built, db.tasks[0], S=S, R=R, width=width, seed=seed,
                             epoch=epoch, policy=policy)


@settings(max_examples=40)
@given(db_seed=SEED_DB, S=st.integers(8, 64), R=st.integers(1, 20), width=st.integers(0, 5),
       seed=st.integers(0, 2**64 - 1), data=st.data())
def test_lags_and_boundaries_match_reference(db_seed, S, R, width, seed, data):
    # A short time span makes ties (row time + lag == observation time) common.
    db = random_database(db_seed, num_tables=data.draw(st.integers(1, 4)), num_tasks=2,
                         time_rules=True, time_span=data.draw(st.sampled_from([12, 10**9])))
    for k, task in enumerate(db.tasks):
        if task.num_seeds == 0:
            continue
        S_k = max(S, len(db.table(task.table).columns))
        indices = data.draw(st.lists(st.integers(0, task.num_seeds - 1), max_size=5))
        _, _, built = build(db, S=S_k, R=R, width=width, seed=seed, epoch=1, task=k,
                            indices=indices)
        assert_matches_reference(db, built, task, S=S_k, R=R, width=width, seed=seed, epoch=1)


def test_no_value_is_shown_before_it_is_known():
    """Whatever task a sequence was drawn for, a lagged column's value shows only once its
    row's time plus the lag has passed (checked from the sequences' own rows and times,
    without the reference); a hidden cell carries no value and no null flag."""
    shown = hidden = ties = seed_hidden = 0
    for db_seed in range(60):
        db = random_database(db_seed, num_tables=3, max_rows=50, num_tasks=3, time_rules=True,
                             time_span=(12, 10**9)[db_seed % 2])
        lags = column_lags(db)
        if not lags:
            continue
        names = {}
        for t in db.tables:
            for c in t.columns:
                names[c.column_id] = (t.name, c.name)
        for k, task in enumerate(db.tasks):
            if task.num_seeds == 0:
                continue
            _, _, built = build(db, S=64, R=24, width=6, seed=db_seed, epoch=0, task=k)
            a = built.arrays
            for b in range(task.num_seeds):
                obs = int(task.obs_time[b])
                known_until = np.iinfo(np.int64).max if obs == naive.NO_TIME else obs
                for p in np.flatnonzero(a["is_padding"][b] == 0):
                    lag = lags.get(names[int(a["column_ids"][b, p])], 0)
                    if not lag or a["is_target"][b, p]:
                        assert a["is_hidden"][b, p] == 0
                        continue
                    row = int(built.visited_rows[b, a["seq_row_ids"][b, p]])
                    row_time = int(db.graph.row_times[row])
                    known = row_time == naive.NO_TIME or row_time + lag <= known_until
                    assert a["is_hidden"][b, p] == (0 if known else 1)
                    ties += row_time != naive.NO_TIME and row_time + lag == known_until
                    seed_hidden += a["seq_row_ids"][b, p] == 0 and not known
                    if not known:
                        hidden += 1
                        assert a["is_null"][b, p] == 0
                        for key in ("numeric_values", "bool_values", "categorical_embed_ids",
                                    "text_embed_ids", "timestamp_values"):
                            assert not a[key][b, p].any(), key
                    else:
                        shown += 1
    # the boundary itself (known exactly at the observation time: shown) and the seed row's
    # own lagged cells (hidden like any row's) both occur
    assert hidden > 50 and shown > 50 and ties > 5 and seed_hidden > 5, (
        hidden, shown, ties, seed_hidden)


def test_sequence_length_must_hold_the_seed_row():
    db = random_database(3, num_tasks=1)
    cells = len(db.table(db.tasks[0].table).columns)
    BatchBuilder(db, BatchConfig(sequence_length=cells), seed=0)
    with pytest.raises(InvalidArgumentError, match="target could be cut off"):
        BatchBuilder(db, BatchConfig(sequence_length=cells - 1), seed=0)


def test_target_value_is_hidden():
    """The seed's target cell carries no value, whatever its type, and its text is not sent."""
    hidden = 0
    for db_seed in range(40):
        db = random_database(db_seed, num_tasks=2)
        for k, task in enumerate(db.tasks):
            if task.num_seeds == 0:
                continue
            _, view, built = build(db, S=64, R=16, width=4, seed=1, epoch=0, task=k)
            a = built.arrays
            b, p = np.nonzero(a["is_target"])
            assert b.tolist() == list(range(task.num_seeds))
            assert (a["seq_row_ids"][b, p] == 0).all()
            for key in ("numeric_values", "bool_values", "categorical_embed_ids",
                        "text_embed_ids", "is_null"):
                assert not a[key][b, p].any(), key
            assert not a["timestamp_values"][b, p].any()
            column = next(c for c in db.table(task.table).columns if c.name == task.target_column)
            assert (a["column_ids"][b, p] == column.column_id).all()
            if column.stype == 4:
                # The target's own text reaches the batch only if another cell holds it too.
                other = {int(built.text_ids[i]) for i in
                         a["text_embed_ids"][(~a["is_target"].astype(bool)) & (a["is_null"] == 0)
                                             & (a["semantic_types"] == 4)]}
                assert set(built.text_ids.tolist()) <= other
            hidden += len(b)
    assert hidden > 100


def test_the_resident_records_are_made_once_from_the_arrays_the_builder_reads():
    """The records build_sequences reads are made at start, placed in the huge-page copies
    (not the memory map), and every batch reuses them."""
    db = random_database(3, num_tables=3, max_rows=30)
    config = BatchConfig(sequence_length=64, max_rows=16, bfs_child_width=2, huge_pages=True)
    builder = BatchBuilder(db, config, seed=1)
    resident = builder.resident
    view = builder.tasks[0]
    builder.build(view, np.arange(view.num_seeds), 0)
    assert builder.resident is resident and resident.memory_path == "private"
    assert resident.graph.parent_records.shape[0] == resident.graph.parent_ids.shape[0] > 0
    assert not np.shares_memory(resident.graph.parent_offsets, db.graph.parent_offsets)
    assert resident.row_values.words.size > 0
    assert np.shares_memory(resident.row_values.floats, resident.row_values.words)
    assert builder.walk == (2, 64, 16, 0)  # width, S, R, uniform children
    links = table_links_of(resident.graph.parent_offsets, resident.graph.child_offsets,
                           resident.tables.offsets)
    assert resident.tables.links.tolist() == links.tolist()
    assert view.kernel_task == (view.index, view.target_col, int(view.rules.strict))


def test_child_policy_is_validated_and_named():
    """A policy by name or enum; anything else is one readable error naming the choices."""
    assert BatchConfig(bfs_child_policy="Recent").bfs_child_policy is ChildPolicy.RECENT
    assert BatchConfig().walk.child_policy == 0
    assert BatchConfig(bfs_child_policy=ChildPolicy.QUOTA).walk.child_policy == 2
    for bad in ("newest", 1, None):
        with pytest.raises(InvalidArgumentError, match="uniform, recent, quota"):
            BatchConfig(bfs_child_policy=bad)
