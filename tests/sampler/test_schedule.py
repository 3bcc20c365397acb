"""The train schedule: a located step is the step-by-step walk's step, in bounded memory.

The reference walks every step from the schedule's first, in plain Python: the task of step
``k`` by ``naive_sampler.task_pick`` (docs/batch_format.md §3), that task's cursor moved by
one NextBatch call as the profile states it.
"""

from __future__ import annotations

import functools
import tracemalloc
import warnings
from unittest import mock

import numpy as np
from hypothesis import assume, given
from hypothesis import strategies as st

from dlkit.nextbatch import Cursor, Stage
from dlkit.nextbatch.run_manifest import DataConfig, DatasetEntry, RunManifest
from dlkit.nextbatch.tokens import TrainOrder
from dlkit.sampler import schedule as schedule_module
from dlkit.sampler.picks import PickCounts
from dlkit.sampler.schedule import SamplerWarning, TrainSchedule, open_streams
from dlkit.sampler.tasks import TaskView
from tests import naive_sampler as naive


def task_view(index: int, n: int) -> TaskView:
    """A task of ``n`` seeds: the schedule reads none of its columns."""
    rows = np.arange(n, dtype=np.int64)
    return TaskView(f"t{index}", index, 0, rows, 0, rows, 0, 0, 0, 0, rows, 0.0, 1.0)


def train_streams(cardinalities, micro_batch, world_size, rank, seed, mode):
    gbs = micro_batch * world_size
    keys = [f"db/t{i}/train" for i in range(len(cardinalities))]
    manifest = RunManifest(seed=seed, global_batch_size=gbs, datasets={
        key: DatasetEntry(key, "1", n, bytes(32)) for key, n in zip(keys, cardinalities)},
        data=DataConfig(drop_last=True, sampling_mode=mode.value))
    datasets = [(key, task_view(i, n), np.arange(n, dtype=np.int64))
                for i, (key, n) in enumerate(zip(keys, cardinalities))]
    return open_streams(manifest, datasets, world_size, rank, Stage.TRAIN)


def reference_walk(seed, weights, streams, origin, cursors, last):
    """(stream key, cursor before, cursor after) of every step ``origin .. last``."""
    limits = [(s.plan.cardinality // s.plan.global_batch_size) * s.plan.global_batch_size
              for s in streams]
    at = [(c.epoch, c.global_index) for c in cursors]
    jobs = {}
    for step in range(origin, last + 1):
        t = naive.task_pick(seed, step, weights)
        epoch, g = at[t]
        g += min(streams[t].plan.global_batch_size, limits[t] - g)
        after = (epoch + 1, 0) if g >= limits[t] else (epoch, g)
        jobs[step] = (streams[t].key, Cursor(*at[t]), Cursor(*after))
        at[t] = after
    return jobs


@st.composite
def schedules(draw):
    """A random train configuration, a first step and every stream's cursor before it."""
    world_size = draw(st.sampled_from([1, 2, 3, 4]))
    micro_batch = draw(st.integers(1, 4))
    gbs = world_size * micro_batch
    cardinalities = draw(st.lists(st.integers(gbs, 6 * gbs + 5), min_size=1, max_size=4))
    weights = draw(st.lists(st.floats(0.01, 100.0), min_size=len(cardinalities),
                            max_size=len(cardinalities)))
    seed = draw(st.integers(0, 2**64 - 1))
    streams = train_streams(cardinalities, micro_batch, world_size,
                            draw(st.integers(0, world_size - 1)), seed,
                            draw(st.sampled_from(TrainOrder)))
    origin = draw(st.one_of(st.just(0), st.integers(0, 2**62)))
    # a restored state's cursors: any epoch, any position below the epoch's limit
    cursors = [Cursor(draw(st.integers(0, 2**40)), draw(st.integers(0, s.plan.epoch_limit - 1)))
               for s in streams]
    return seed, weights, streams, origin, cursors


def located_jobs(config, offsets, interval, walk_ahead, forget):
    seed, weights, streams, origin, cursors = config
    counts = functools.partial(PickCounts, interval=interval, max_landmarks=4)
    with mock.patch.object(schedule_module, "PickCounts", counts), \
            mock.patch.object(schedule_module, "WALK_AHEAD", walk_ahead):
        schedule = TrainSchedule(streams, weights, seed, origin,
                                 {s.key: c for s, c in zip(streams, cursors)})
        out = []
        for offset in offsets:
            job = schedule.job(origin + offset)
            if forget:  # as Sampler.train_batch asks
                schedule.forget_before(origin + offset)
            out.append((job.step, (job.stream.key, job.cursor, job.cursor_after)))
    return out


@given(config=schedules(), offsets=st.lists(st.integers(0, 600), min_size=1, max_size=25),
       interval=st.sampled_from([1, 5, 64]), walk_ahead=st.sampled_from([0, 1, 8, 256]))
def test_any_steps_in_any_order_are_the_walks_steps(config, offsets, interval, walk_ahead):
    seed, weights, streams, origin, cursors = config
    want = reference_walk(seed, weights, streams, origin, cursors, origin + max(offsets))
    for step, job in located_jobs(config, offsets, interval, walk_ahead, forget=True):
        assert job == want[step]


@given(config=schedules(), count=st.integers(1, 300), shuffle=st.randoms(use_true_random=False),
       skew=st.integers(1, 12), walk_ahead=st.sampled_from([0, 2, 256]))
def test_each_step_once_a_little_out_of_order_is_the_walk(config, count, shuffle, skew,
                                                          walk_ahead):
    """As producer threads ask: every step once, each window of ``skew`` steps shuffled."""
    seed, weights, streams, origin, cursors = config
    offsets = list(range(count))
    for start in range(0, count, skew):
        window = offsets[start:start + skew]
        shuffle.shuffle(window)
        offsets[start:start + skew] = window
    want = reference_walk(seed, weights, streams, origin, cursors, origin + count - 1)
    for step, job in located_jobs(config, offsets, 7, walk_ahead, forget=False):
        assert job == want[step]


def test_a_far_step_holds_no_job_of_the_steps_it_skips():
    streams = train_streams([40, 50, 60], 2, 2, 1, 5, TrainOrder.V3)
    schedule = TrainSchedule(streams, [1.0, 2.0, 0.5], 5)
    schedule.job(0)
    tracemalloc.start()
    try:
        job = schedule.job(200_000)
        schedule.forget_before(200_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the walk made a job per skipped step: about 200 bytes each, 40 MB here
    assert peak < 256 * 1024
    assert not schedule._pending  # noqa: SLF001
    assert schedule.next_step == 200_001
    picks = [naive.task_pick(5, k, [1.0, 2.0, 0.5]) for k in range(200_000)]
    t = naive.task_pick(5, 200_000, [1.0, 2.0, 0.5])
    assert job.stream is streams[t]
    assert job.cursor == streams[t].plan.cursor_at(picks.count(t))


def test_steps_located_near_walked_ones_count_only_the_draws_between():
    """The walk's picks are counted as it goes: a step located just past or behind the
    steps walked draws no more than the steps between it and them (counting from the
    schedule's first step refused it, here past 2,000 draws, and cost 32 ms after 2M steps
    walked)."""
    weights = [1.0, 2.0, 0.5]
    streams = train_streams([40, 50, 60], 2, 1, 0, 9, TrainOrder.V3)
    counts = functools.partial(PickCounts, interval=64, max_landmarks=4, max_counted=2_000)
    with mock.patch.object(schedule_module, "PickCounts", counts):
        schedule = TrainSchedule(streams, weights, 9)
        for step in range(5_000):  # every step walked, as a training run asks
            schedule.job(step)
        want = reference_walk(9, weights, streams, 0, [Cursor()] * 3, 5_400)
        for step in (5_300, 5_400, 5_000, 4_000, 3_100):  # located: past, then behind
            job = schedule.job(step)
            assert (job.stream.key, job.cursor, job.cursor_after) == want[step]


def test_forgotten_jobs_leave_no_table_behind():
    streams = train_streams([40, 50], 2, 1, 0, 5, TrainOrder.V3)
    schedule = TrainSchedule(streams, [1.0, 1.0], 5)
    schedule.job(200)  # walked: the steps before it are made and wait
    assert sorted(schedule._pending) == list(range(200))  # noqa: SLF001
    schedule.forget_before(200)
    assert schedule._pending == {}  # noqa: SLF001
    # a dict emptied by deletions keeps its largest table: forgetting makes a new one
    assert schedule._pending.__sizeof__() == {}.__sizeof__()  # noqa: SLF001


def val_stream(cardinality, micro_batch, world_size, rank, seed):
    manifest = RunManifest(seed=seed, global_batch_size=micro_batch * world_size, datasets={
        "db/t0/val": DatasetEntry("db/t0/val", "1", cardinality, bytes(32))})
    return open_streams(manifest, [("db/t0/val", task_view(0, cardinality),
                                    np.arange(cardinality, dtype=np.int64))],
                        world_size, rank, Stage.EVAL)


@given(cardinality=st.integers(1, 40), micro_batch=st.integers(1, 9),
       world_size=st.sampled_from([1, 1, 2, 3]), seed=st.integers(0, 2**64 - 1),
       walked_first=st.integers(0, 90), origin=st.integers(0, 2**40),
       offsets=st.lists(st.integers(0, 700), min_size=1, max_size=12))
def test_val_steps_of_one_stream_located_are_the_walks_steps(
        cardinality, micro_batch, world_size, seed, walked_first, origin, offsets):
    """One val stream: steps asked far, repeated or in any order are the steps walked one
    by one from the same state (on one rank located in O(1); on several, walked: a rank
    skips the calls whose slice of it is empty)."""
    from dlkit.sampler.schedule import ValSchedule

    rank = world_size - 1  # the rank most likely to have empty slices
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplerWarning)  # a rank without a seed: no stream
        streams = val_stream(cardinality, micro_batch, world_size, rank, seed)
    assume(streams)
    start = ValSchedule(streams)
    for step in range(walked_first):  # a state taken after some steps: any cursor
        start.job(step)
    cursor = start._cursors[streams[0].key]

    def schedule():
        return ValSchedule(streams, origin, streams[0].key, {streams[0].key: cursor})

    walk, asked = schedule(), schedule()
    last = origin + max(offsets)
    walked = {step: walk.job(step) for step in range(origin, last + 1)}
    located = world_size == 1
    # walked steps are handed out once; located ones may be asked again
    steps = [origin + k for k in (offsets if located else dict.fromkeys(offsets))]
    for step in steps:
        job = asked.job(step)
        assert (job.cursor, job.cursor_after, job.current_after) == (
            walked[step].cursor, walked[step].cursor_after, walked[step].current_after)
    if located:  # a far step makes no job for the steps it skips
        far = schedule()
        far.job(origin + 10**12)
        assert far._pending == {}
