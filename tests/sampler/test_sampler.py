"""The Sampler API: determinism across threads/prefetch/ranks, exact resume, §9 behaviour."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import numpy as np
import pytest

from dlkit.errors import CheckpointError, InvalidArgumentError, SamplerShutdown
from dlkit.sampler import BATCH_KEYS, BATCH_SCALAR_KEYS, Sampler, SamplerWarning
from tests import naive_feistel, naive_nextbatch
from tests import naive_sampler as naive
from tests.sampler.fakedb import random_database

SMALL = dict(sequence_length=48, max_rows=12, bfs_child_width=3, split_seed=5, seed=11)
POLICIES = pytest.mark.parametrize("policy", ["uniform", "recent", "quota"])


def take(sampler, split, count):
    pull = sampler.next_train_batch if split == "train" else sampler.next_val_batch
    return [pull() for _ in range(count)]


def assert_same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert tuple(x) == tuple(y) == BATCH_KEYS
        for key in BATCH_KEYS:
            assert x[key].dtype == y[key].dtype and np.array_equal(x[key], y[key]), key


def dlkit_threads():
    return [t for t in threading.enumerate() if t.name.startswith("dlkit-") and t.is_alive()]


@pytest.mark.parametrize("threads,prefetch", [(2, 1), (4, 3), (2, 7), (1, 2)])
def test_same_batches_for_any_thread_count_and_prefetch_depth(db, threads, prefetch):
    with Sampler(db, 0, 1, batch_size=4, num_threads=1, num_prefetch=0, **SMALL) as s:
        train, val = take(s, "train", 12), take(s, "val", 8)
    with Sampler(db, 0, 1, batch_size=4, num_threads=threads, num_prefetch=prefetch, **SMALL) as s:
        assert_same_batches(take(s, "train", 12), train)
        assert_same_batches(take(s, "val", 8), val)


@POLICIES
def test_state_dict_resume_gives_the_same_following_batches(db, policy):
    with Sampler(db, 0, 1, batch_size=4, num_threads=2, num_prefetch=3, **SMALL,
                 bfs_child_policy=policy) as s:
        take(s, "train", 7)
        take(s, "val", 5)
        state = json.loads(json.dumps(s.state_dict()))  # survives a JSON round trip
        train_after, val_after = take(s, "train", 9), take(s, "val", 6)
        # Rewinding the same sampler works too (prefetched batches are dropped).
        s.load_state_dict(state)
        assert_same_batches(take(s, "train", 9), train_after)
    with Sampler(db, 0, 1, batch_size=4, num_threads=1, num_prefetch=0, **SMALL,
                 bfs_child_policy=policy) as fresh:
        fresh.load_state_dict(state)
        assert_same_batches(take(fresh, "val", 6), val_after)
        assert_same_batches(take(fresh, "train", 9), train_after)


def test_resume_at_every_step(db):
    with Sampler(db, 0, 1, batch_size=4, num_prefetch=0, **SMALL) as s:
        states, batches = [], []
        for _ in range(10):
            states.append(s.state_dict())
            batches.append(s.next_train_batch())
    for k in (0, 3, 9):
        with Sampler(db, 0, 1, batch_size=4, num_prefetch=2, num_threads=2, **SMALL) as r:
            r.load_state_dict(states[k])
            assert_same_batches(take(r, "train", 10 - k), batches[k:])


def test_state_from_another_configuration_is_refused(db):
    with Sampler(db, 0, 1, batch_size=4, num_prefetch=0, **SMALL) as s:
        state = s.state_dict()
    other = dict(SMALL, seed=12)
    with Sampler(db, 0, 1, batch_size=4, num_prefetch=0, **other) as s:
        with pytest.raises(CheckpointError, match="manifest_hash"):
            s.load_state_dict(state)
        no_config = {k: v for k, v in state.items() if k != "config"}
        for broken in ({}, {**state, "train": {"step": -1, "cursors": {}}},
                       {**state, "format": "x"}, no_config, {**state, "config": [1]}):
            with pytest.raises(CheckpointError):
                s.load_state_dict(broken)


@pytest.mark.filterwarnings("ignore::dlkit.sampler.SamplerWarning")
@pytest.mark.parametrize("world_size,policy", [(2, "uniform"), (4, "uniform"), (2, "recent"),
                                               (4, "quota")])
def test_rank_slices_are_disjoint_and_make_the_world_size_1_batch(db, world_size, policy):
    B = 4
    config = dict(SMALL, bfs_child_policy=policy)
    with Sampler(db, 0, 1, batch_size=B * world_size, num_prefetch=0, **config) as whole:
        wholes = [whole.next_built_batch("train") for _ in range(5)]
    parts = []
    for rank in range(world_size):
        with Sampler(db, rank, world_size, batch_size=B, num_prefetch=2, **config) as s:
            parts.append([s.next_built_batch("train") for _ in range(5)])
    text = db.text_embeddings()
    for step, ref in enumerate(wholes):
        ranks = [p[step] for p in parts]
        anchors = [set(r.anchor_rows.tolist()) for r in ranks]
        assert sum(len(a) for a in anchors) == len(set().union(*anchors)) == B * world_size
        assert np.array_equal(np.concatenate([r.anchor_rows for r in ranks]), ref.anchor_rows)
        for key in BATCH_KEYS:
            if key in ("text_embed_ids", "text_batch_embeddings"):
                continue
            if key in BATCH_SCALAR_KEYS:
                assert all(np.array_equal(r.arrays[key], ref.arrays[key]) for r in ranks)
            else:
                joined = np.concatenate([r.arrays[key] for r in ranks])
                assert np.array_equal(joined, ref.arrays[key]), key
        # Text ids are batch-local: compare the global text each cell points at.
        def global_text(built):
            a = built.arrays
            ids = np.where((a["semantic_types"] == 4) & (a["is_null"] == 0)
                           & (a["is_target"] == 0) & (a["is_padding"] == 0),
                           built.text_ids[a["text_embed_ids"]] if built.text_ids.size else 0, -1)
            return ids
        joined = np.concatenate([global_text(r) for r in ranks])
        assert np.array_equal(joined, global_text(ref))
        for r in ranks:
            assert np.array_equal(r.arrays["text_batch_embeddings"], text[r.text_ids])


@pytest.mark.parametrize("mode,reference", [(None, naive_feistel), ("v3", naive_feistel),
                                            ("v2", naive_nextbatch)])
def test_train_seeds_follow_nextbatch_and_task_picks(db, mode, reference):
    """Train seeds are the rank's slice of the NextBatch order (v3 by default, v2 on request),
    checked against the plain-Python references of both."""
    weights = [1.0, 2.0, 0.5]
    extra = {} if mode is None else {"sampling_mode": mode}
    with Sampler(db, 1, 2, batch_size=3, num_prefetch=2, num_threads=2, task_weights=weights,
                 **extra, **SMALL) as s:
        assert s.manifest.data.sampling_mode == (naive_feistel.V2_MODE if mode == "v2"
                                                 else naive_feistel.V3_MODE)
        manifest = json.loads(s.manifest.to_json())
        cursors = {stream.key: (0, 0) for stream in s.train_streams}
        for step in range(15):
            built = s.next_built_batch("train")
            task = naive.task_pick(SMALL["seed"], step, weights)
            assert built.task == db.tasks[task].name
            key = f"fake/{built.task}/train"
            indices, after = reference.next_batch(manifest, key, 2, 1, "train", cursors[key])
            assert built.epoch == cursors[key][0]
            cursors[key] = after
            positions = [i for i, a in enumerate(db.tasks[task].anchor_row)
                         if naive.split_of(int(a), task, SMALL["split_seed"], (0.8, 0.1, 0.1)) == 0]
            assert built.seed_indices.tolist() == [positions[int(i)] for i in indices]


def test_v2_train_batches_are_arithmetic_progressions_and_v3_ones_are_not(db):
    """Why v3 is the default: below 2^20 seeds, v2 orders a whole split as one progression
    j = a*x + c mod N, so consecutive global positions are a fixed stride apart."""
    strides = {}
    for mode in ("v2", "v3"):
        with Sampler(db, 0, 1, batch_size=8, num_prefetch=0, sampling_mode=mode,
                     task_weights=[1.0, 0.0, 0.0], **SMALL) as s:
            stream = s.train_streams[0]
            n = stream.plan.cardinality
            order = stream.plan.resolve(0, np.asarray([0], np.uint64),
                                        np.asarray([n], np.uint64)).astype(np.int64)
            strides[mode] = set(((order[1:] - order[:-1]) % n).tolist())
            assert sorted(order.tolist()) == list(range(n))  # both are permutations
    assert len(strides["v2"]) == 1
    assert len(strides["v3"]) > 1


def test_sampling_mode_is_validated_and_fingerprinted(db):
    with pytest.raises(InvalidArgumentError, match="sampling mode must be v3"):
        Sampler(db, 0, 1, batch_size=2, sampling_mode="v4", **SMALL)
    with Sampler(db, 0, 1, batch_size=4, num_prefetch=0, sampling_mode="v2", **SMALL) as s:
        state = s.state_dict()
    with Sampler(db, 0, 1, batch_size=4, num_prefetch=0, **SMALL) as s:
        with pytest.raises(CheckpointError, match="manifest_hash"):
            s.load_state_dict(state)  # a v2 run does not resume as v3


def test_sampler_is_exported_by_dlkit_and_imported_on_first_use():
    code = ("import sys, dlkit; assert 'dlkit.sampler' not in sys.modules; "
            "from dlkit.sampler import Sampler; assert dlkit.Sampler is Sampler; "
            "assert 'Sampler' in dlkit.__all__")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.filterwarnings("ignore::dlkit.sampler.SamplerWarning")
def test_val_epoch_covers_every_val_seed_once_across_ranks(db):
    world_size, B = 3, 5
    seen: dict[str, list[int]] = {}
    for rank in range(world_size):
        with Sampler(db, rank, world_size, batch_size=B, num_prefetch=1, **SMALL) as s:
            per_task_epochs = {}
            while True:
                built = s.next_built_batch("val")
                if built.epoch > 0:
                    break
                assert 1 <= built.seed_indices.shape[0] <= B
                seen.setdefault(built.task, []).extend(built.seed_indices.tolist())
                per_task_epochs[built.task] = built.epoch
    for t, task in enumerate(db.tasks):
        want = [i for i, a in enumerate(task.anchor_row)
                if naive.split_of(int(a), t, SMALL["split_seed"], (0.8, 0.1, 0.1)) == 1]
        assert sorted(seen[task.name]) == want


def test_task_without_seeds_on_a_rank_is_skipped_with_a_warning():
    db = random_database(7, num_tables=4, max_rows=160, num_tasks=3)
    small = db.tasks[1]
    keep = slice(0, 6)  # 6 seeds: fewer train seeds than any global batch of 8
    for name in ("anchor_row", "obs_time", "target", "target_valid"):
        setattr(small, name, getattr(small, name)[keep])
    with pytest.warns(SamplerWarning) as record:
        s = Sampler(db, 1, 2, batch_size=4, num_prefetch=0, **SMALL)
    messages = sorted(str(w.message) for w in record)
    assert len(messages) == 2
    assert "task 'task1' is skipped on rank 1: dataset 'fake/task1/train'" in messages[0]
    assert "fewer than the global batch of 8" in messages[0]
    assert "dataset 'fake/task1/val'" in messages[1]
    assert "none in the slice of rank 1" in messages[1]
    with s:
        assert small.name not in {st.task.name for st in s.val_streams}
        assert small.name not in {st.task.name for st in s.train_streams}
        assert all(s.next_train_batch()["task_idx"][0] != 1 for _ in range(20))


def test_shutdown_joins_every_thread_and_then_raises(db):
    before = set(dlkit_threads())
    s = Sampler(db, 0, 1, batch_size=4, num_threads=4, num_prefetch=8, **SMALL)
    s.next_train_batch()
    s.next_val_batch()
    assert len(set(dlkit_threads()) - before) == 8  # 4 train + 4 val producers
    s.shutdown()
    assert set(dlkit_threads()) <= before
    with pytest.raises(SamplerShutdown):
        s.next_train_batch()
    with pytest.raises(SamplerShutdown):
        s.next_val_batch()
    s.shutdown()  # idempotent
    with Sampler(db, 0, 1, batch_size=4, num_threads=2, **SMALL) as s:
        s.next_train_batch()
    assert set(dlkit_threads()) <= before


def test_a_sampler_dropped_without_shutdown_is_collected_with_its_threads(db):
    """The producer threads hold no reference to the sampler: dropped unclosed, it is
    collected, and its engines stop their threads (they kept every dropped sampler, with
    its maps and copies, for the life of the process)."""
    import gc
    import weakref

    before = set(dlkit_threads())
    s = Sampler(db, 0, 1, batch_size=4, num_threads=2, num_prefetch=4, **SMALL)
    s.next_train_batch()
    s.next_val_batch()
    started = set(dlkit_threads()) - before
    assert len(started) == 4
    dropped = weakref.ref(s)
    del s
    gc.collect()
    assert dropped() is None
    for thread in started:
        thread.join(timeout=60)
        assert not thread.is_alive(), thread.name


def test_shutdown_frees_the_copies_without_waiting_for_the_garbage_collector(db):
    """The huge-page copies go when the sampler shuts down, not when a GC pass finds it."""
    import gc
    import weakref

    gc.disable()
    try:
        with Sampler(db, 0, 1, batch_size=4, huge_pages=True, **SMALL) as s:
            s.next_train_batch()
            copy = weakref.ref(s.builder.resident.graph.parent_records.base)
            assert copy() is not None
        assert copy() is None
        with pytest.raises(SamplerShutdown):
            s.builder.build(s.builder.tasks[0], np.arange(1), 0)
    finally:
        gc.enable()


def test_rank_and_world_size_default_to_the_torchrun_environment(db, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    with Sampler(db, batch_size=2, num_prefetch=0, **SMALL) as s:
        assert (s.config.rank, s.config.world_size) == (2, 3)
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(InvalidArgumentError, match="RANK"):
        Sampler(db, batch_size=2, **SMALL)


@pytest.mark.parametrize("kwargs,match", [
    (dict(rank=2, world_size=2), "rank 2"),
    (dict(batch_size=0), "batch_size"),
    (dict(sequence_length=70000), "sequence_length"),
    (dict(split_ratios=(0.5, 0.2, 0.2)), "sum to 1"),
    (dict(task_weights=[1.0]), "task_weights"),
    (dict(task_weights=[0, 0, 0]), "all zero"),
    (dict(num_threads=0), "num_threads"),
    (dict(seed=-1), "seed"),
    (dict(bfs_child_policy="latest"), "bfs_child_policy"),
])
def test_invalid_arguments_are_named(db, kwargs, match):
    args = dict(SMALL, rank=0, world_size=1, batch_size=2)
    args.update(kwargs)
    with pytest.raises(InvalidArgumentError, match=match):
        Sampler(db, **args)


def test_embeddings_and_metadata(db):
    with Sampler(db, 0, 1, batch_size=2, **SMALL) as s:
        assert s.column_embeddings().dtype == np.float16
        assert np.array_equal(s.categorical_embeddings(), db.categorical_embeddings())
        assert s.database_metadata() == db.metadata


@pytest.mark.parametrize("prefetch,threads", [(0, 1), (3, 2)])
def test_a_producer_error_reaches_the_consumer_and_the_stream_recovers(db, prefetch, threads):
    with Sampler(db, 0, 1, batch_size=4, num_prefetch=0, **SMALL) as s:
        baseline = take(s, "train", 6)
    with Sampler(db, 0, 1, batch_size=4, num_prefetch=prefetch, num_threads=threads,
                 **SMALL) as s:
        channel = s._channels["train"]  # noqa: SLF001 - inject a failure into one step's production
        produce = channel.produce
        failed = []

        def flaky(step):
            if step == 3 and not failed:
                failed.append(step)
                raise OSError("disk hiccup")
            return produce(step)

        channel.produce = flaky
        got = []
        with pytest.raises(OSError, match="disk hiccup"):
            while True:
                got.append(s.next_train_batch())
        assert len(got) == 3
        got += take(s, "train", 6 - len(got))
        assert_same_batches(got, baseline)


@pytest.mark.filterwarnings("ignore::dlkit.sampler.SamplerWarning")
@POLICIES
def test_resume_on_another_world_size_with_the_same_global_batch(db, policy):
    """Save on 1 rank x 8, resume on 2 ranks x 4: each rank continues with its slice."""
    with Sampler(db, 0, 1, batch_size=8, num_prefetch=0, **SMALL,
                 bfs_child_policy=policy) as s:
        take(s, "train", 5)
        take(s, "val", 3)
        state = s.state_dict()
        whole_train = [s.next_built_batch("train") for _ in range(4)]
    for rank in range(2):
        with Sampler(db, rank, 2, batch_size=4, num_prefetch=2, **SMALL,
                     bfs_child_policy=policy) as r:
            r.load_state_dict(state)
            for ref in whole_train:
                part = r.next_built_batch("train")
                assert np.array_equal(part.anchor_rows, ref.anchor_rows[rank * 4:(rank + 1) * 4])
                assert np.array_equal(part.arrays["fk_adj"],
                                      ref.arrays["fk_adj"][rank * 4:(rank + 1) * 4])
            r.next_val_batch()  # val resumes too (rank-local)


def test_child_policy_is_fingerprinted_only_when_not_the_default(db):
    """A state records the policy (so a resume under another policy is refused), and the
    default's state is that of earlier versions (no new key). The policies differ: the same
    steps give other batches."""
    states, batches = {}, {}
    for policy in ("uniform", "recent", "quota"):
        with Sampler(db, 0, 1, batch_size=8, num_prefetch=0, **SMALL,
                     bfs_child_policy=policy) as s:
            states[policy] = s.state_dict()
            batches[policy] = take(s, "train", 3)
    assert "bfs_child_policy" not in states["uniform"]["config"]
    assert states["quota"]["config"]["bfs_child_policy"] == "quota"
    for policy in ("recent", "quota"):
        assert any(not np.array_equal(a["fk_adj"], b["fk_adj"])
                   for a, b in zip(batches[policy], batches["uniform"])), policy
    with Sampler(db, 0, 1, batch_size=8, num_prefetch=0, **SMALL,
                 bfs_child_policy="recent") as s:
        with pytest.raises(CheckpointError, match="bfs_child_policy"):
            s.load_state_dict(states["quota"])
        with pytest.raises(CheckpointError, match="bfs_child_policy"):
            s.load_state_dict(states["uniform"])


def test_only_the_tasks_sampled_must_fit_in_the_sequence(example_db):
    """A task's seed row must fit in S only when that task is sampled: a task left out of
    training (weight 0) whose rows are wider than S is refused when asked for, not before."""
    from dlkit.db import open_database

    with open_database(example_db) as opened:
        cells = {t.name: len(opened.table(t.table).columns)
                 for t in opened.tasks}
    assert cells["review_rating"] <= 4 < cells["user_premium"]
    weights = {"review_rating": 1.0, "order_status": 1.0, "user_premium": 0.0}
    with Sampler(example_db, sequence_length=4, batch_size=4, task_weights=weights,
                 num_prefetch=0) as sampler:
        assert next(iter(sampler))["column_ids"].shape[1] == 4
        evaluated = {sampler.tasks[int(b["task_idx"][0])] for b in sampler.iter_eval("val")}
        assert evaluated == {"review_rating", "order_status"}
        with pytest.raises(InvalidArgumentError, match="shorter than the 5 cells of a row of "
                                                       "table 'users' \\(task 'user_premium'"):
            sampler.eval_steps("val", "user_premium")
    with pytest.raises(InvalidArgumentError, match="task 'user_premium'"):
        Sampler(example_db, sequence_length=4, batch_size=4)  # every task trained


def test_batches_that_cannot_fit_in_memory_are_refused_by_their_settings(example_db,
                                                                         monkeypatch):
    """fk_adj is B x R x R bytes: a max_rows that makes the batches held at once outgrow half
    the memory is refused when the sampler is made (and when one batch is built), naming the
    settings, instead of failing to allocate in a producer thread."""
    from dlkit.sampler import batch as batch_module

    B, R = 32, 4096
    assert batch_module.batch_bytes(B, 64, R) >= B * R * R  # fk_adj alone
    monkeypatch.setattr(batch_module, "physical_memory", lambda: 4 * B * R * R)
    with pytest.raises(InvalidArgumentError, match=r"3 batches of 32 sequences of 64 cells and "
                                                   r"4096 rows would take .* lower max_rows"):
        Sampler(example_db, batch_size=B, sequence_length=64, max_rows=R, num_prefetch=1,
                num_threads=1)
    with Sampler(example_db, batch_size=B, sequence_length=64, max_rows=R // 4,
                 num_prefetch=1, num_threads=1) as sampler:  # a sixteenth of that: it fits
        assert next(iter(sampler))["fk_adj"].shape == (B, R // 4, R // 4)
        monkeypatch.setattr(batch_module, "physical_memory", lambda: B * (R // 4) ** 2)
        with pytest.raises(InvalidArgumentError, match="a batch of 32 sequences"):
            sampler.builders[0].build(sampler.builders[0].tasks[0], np.arange(B), 0)
