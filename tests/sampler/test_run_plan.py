"""One plan behind the Sampler, ``dlkit batches`` and ``dlkit manifest``; one Job type."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from dlkit.errors import InvalidArgumentError
from dlkit.sampler import Sampler, SplitRatios
from dlkit.sampler.batch import BatchBuilder, BatchConfig
from dlkit.sampler.batch_files import BatchRequest, iter_batches
from dlkit.sampler.run_manifest import make_run_manifest
from dlkit.sampler.run_plan import RunConfig, RunPlan, initial_state
from dlkit.sampler.schedule import Job
from dlkit.sampler.split import Split
from dlkit.sampler.world import World
from tests import naive_sampler as naive
from tests.sampler.test_sampler import SMALL, assert_same_batches

SHAPE = dict(sequence_length=SMALL["sequence_length"], max_rows=SMALL["max_rows"],
             bfs_child_width=SMALL["bfs_child_width"])


@pytest.mark.filterwarnings("ignore::dlkit.sampler.SamplerWarning")
def test_the_sampler_and_dlkit_manifest_write_one_manifest(db):
    with Sampler(db, 1, 2, batch_size=3, num_prefetch=0, **SMALL) as s:
        mine = s.manifest
    alone = make_run_manifest(db, seed=SMALL["seed"], global_batch_size=6,
                              split_seed=SMALL["split_seed"])
    assert mine.to_json() == alone.to_json()
    for t, task in enumerate(db.tasks):  # the cardinalities are the reference's split sizes
        codes = [naive.split_of(int(a), t, SMALL["split_seed"], (0.8, 0.1, 0.1))
                 for a in task.anchor_row]
        for k, split in enumerate(("train", "val", "test")):
            assert alone.datasets[f"fake/{task.name}/{split}"].cardinality == codes.count(k)


@pytest.mark.parametrize("policy", ["uniform", "recent", "quota"])
def test_dlkit_batches_gives_the_samplers_batches_of_one_task(db, policy):
    request = BatchRequest(task="task1", split="train", steps=6, seed=SMALL["seed"],
                           split_seed=SMALL["split_seed"], batch_size=4, **SHAPE,
                           bfs_child_policy=policy)
    written = [built.arrays for _, built in iter_batches(db, request)]
    with Sampler(db, 0, 1, batch_size=4, num_prefetch=0, task_weights=[0.0, 1.0, 0.0],
                 **SMALL, bfs_child_policy=policy) as s:
        assert_same_batches(written, [s.next_train_batch() for _ in range(6)])


def test_train_and_val_schedules_hand_out_one_job_type(db):
    plan = RunPlan(db, RunConfig(seed=3, batch_size=5))
    views = BatchBuilder(db, BatchConfig(**SHAPE), 3).tasks
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every dataset of this database gives rank 0 seeds
        train, val = plan.streams(Split.TRAIN, views), plan.streams(Split.VAL, views)
    trains = plan.train_schedule(train, [1.0] * len(train), initial_state(Split.TRAIN, train))
    vals = plan.eval_schedule(val, initial_state(Split.VAL, val))
    train_jobs = [trains.job(step) for step in range(8)]
    val_jobs = [vals.job(step) for step in range(30)]
    assert all(type(job) is Job for job in train_jobs + val_jobs)
    assert all(job.current_after is None for job in train_jobs)
    # Val walks the streams in order: the current stream changes exactly when one's epoch ends.
    keys = [s.key for s in val]
    for job in val_jobs:
        ended = job.cursor_after.epoch != job.cursor.epoch
        following = keys[(keys.index(job.stream.key) + ended) % len(keys)]
        assert job.current_after == following


@pytest.mark.parametrize("change,message", [
    (dict(rank=2, world_size=2), "rank 2 is not in [0, world_size 2)"),
    (dict(world_size=0), "world_size must be an integer >= 1, got 0"),
    (dict(batch_size=True), "batch_size must be an integer >= 1, got True"),
    (dict(seed=-1), "seed must be an integer in [0, 2^64-1], got -1"),
    (dict(split_seed=2**64), "split_seed must be an integer in [0, 2^64-1]"),
    (dict(split_ratios=(0.8, 0.1, 0.1)), "split_ratios must be SplitRatios"),
    (dict(sampling_mode="v3"), "sampling_mode must be a TrainOrder"),
])
def test_a_plan_config_validates_itself(change, message):
    args = dict(seed=0, batch_size=2, split_ratios=SplitRatios())
    args.update(change)
    with pytest.raises(InvalidArgumentError) as caught:
        ranks = {key: args.pop(key) for key in ("rank", "world_size") if key in args}
        RunConfig(**args, world=World(**ranks))  # the world checks its ranks
    assert message in str(caught.value)


@pytest.mark.parametrize("change,message", [
    (dict(local_world_size=3, world_size=2), "local_world_size 3 is not in [1, world_size 2]"),
    (dict(local_rank=2, local_world_size=2, world_size=4),
     "local_rank 2 is not in [0, local_world_size 2)"),
    (dict(rank=-1), "rank must be an integer >= 0, got -1"),
    (dict(local_world_size=0), "local_world_size 0 is not in [1, world_size 1]"),
])
def test_a_world_validates_itself(change, message):
    with pytest.raises(InvalidArgumentError) as caught:
        World(**change)
    assert message in str(caught.value)


def test_a_world_reads_what_it_is_not_given_from_the_torchrun_environment(monkeypatch):
    for variable, value in (("RANK", "3"), ("WORLD_SIZE", "8"), ("LOCAL_RANK", "1"),
                            ("LOCAL_WORLD_SIZE", "4")):
        monkeypatch.setenv(variable, value)
    assert World.from_env() == World(3, 8, 1, 4)
    assert World.from_env(rank=5, local_rank=np.int64(2)) == World(5, 8, 2, 4)
    assert type(World.from_env(local_rank=np.int64(2)).local_rank) is int
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(InvalidArgumentError, match=r"\$RANK must be an integer, got 'x'"):
        World.from_env()


def test_dlkit_batches_validates_its_request_when_it_is_made():
    with pytest.raises(InvalidArgumentError, match="steps must be a positive integer, got 0"):
        BatchRequest(task="t", split="train", steps=0)
    with pytest.raises(InvalidArgumentError, match="split ratios must sum to 1"):
        BatchRequest(task="t", split="train", steps=1, split_ratios="0.5,0.2,0.2")
    with pytest.raises(InvalidArgumentError, match="bfs_child_width must be an integer in"):
        BatchRequest(task="t", split="val", steps=1, bfs_child_width=-1)


def test_the_sampler_config_stores_numpy_integers_as_ints(db):
    with Sampler(db, np.int64(0), np.int64(1), batch_size=np.int32(4), num_prefetch=np.uint8(0),
                 num_threads=np.int64(2), **dict(SMALL, seed=np.uint64(11))) as s:
        values = [s.config.rank, s.config.world_size, s.config.batch_size,
                  s.config.num_prefetch, s.config.num_threads, s.config.seed]
        assert [type(v) for v in values] == [int] * 6 and values == [0, 1, 4, 0, 2, 11]
        assert "np." not in repr(s)
