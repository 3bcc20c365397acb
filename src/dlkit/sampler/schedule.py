"""Which seeds each step of the train and val streams uses, as pure functions of the state.

A *stream* is one (task, split) NextBatch dataset seen from one rank. The train schedule
picks the task of step ``k`` by a weighted Philox draw of ``(seed, k)`` (the same on every
rank) and advances that task's cursor by one NextBatch call; with ``drop_last`` every train
step gives every rank a full micro-batch, its contiguous slice of the global batch. The val
schedule walks the val streams one eval epoch each, in task order, round and round; a step
whose slice is empty on this rank (the tail of an epoch) is skipped.

Schedules are advanced under a lock by whichever producer thread needs a later step first;
each step walked is handed out once. A train step far from the steps made is located instead
(``TrainSchedule``), without a job for each step it skips.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dlkit.core.streams import pick_tasks, task_draws
from dlkit.errors import CheckpointError
from dlkit.nextbatch import Cursor, RunManifest, SamplingPlan, Stage
from dlkit.nextbatch.mixture import MixtureOrder
from dlkit.sampler.picks import PickCounts
from dlkit.sampler.tasks import TaskView

WALK_AHEAD = 256  # steps this close past the furthest made are walked, the others located


class SamplerWarning(UserWarning):
    """A task is skipped because this rank has no seed of it."""


@dataclass(frozen=True)
class SplitStream:
    """One rank's view of a (task, split) dataset; ``database`` is the position of the task's
    database in the sampler's list (0 for a single database)."""

    key: str
    task: TaskView
    positions: np.ndarray
    plan: SamplingPlan
    database: int = 0

    def seed_indices(self, cursor: Cursor) -> np.ndarray:
        """Positions in the task's seed list of this rank's micro-batch at ``cursor``."""
        start, count = self.plan.slice_of(cursor)
        order = self.plan.resolve(cursor.epoch, np.asarray([start if count else 0], np.uint64),
                                  np.asarray([count], np.uint64))
        return self.positions[order.astype(np.int64)]  # int32 or int64: the builder widens


@dataclass(frozen=True)
class Job:
    """What step ``step`` builds: ``stream``'s micro-batch at ``cursor``. Val and test
    schedules walk their streams one after another: ``current_after`` is the key of the
    stream current after this step (None from the train schedule)."""

    step: int
    stream: SplitStream
    cursor: Cursor
    cursor_after: Cursor
    current_after: str | None = None


def open_streams(manifest: RunManifest, keys: Sequence[tuple[str, TaskView, np.ndarray]],
                 world_size: int, rank: int, stage: Stage, database: int = 0
                 ) -> list[SplitStream]:
    """Streams of the datasets that give this rank seeds; the others are skipped with a
    ``SamplerWarning`` saying why."""
    streams = []
    gbs = manifest.global_batch_size
    for key, task, positions in keys:
        n = int(positions.shape[0])
        reason = None
        if n == 0:
            reason = "has no seed"
        elif stage is Stage.TRAIN and n < gbs:
            reason = f"has {n} seeds, fewer than the global batch of {gbs}"
        else:
            plan = SamplingPlan.create(manifest, key, world_size, rank, stage,
                                       actual_cardinality=n)
            if plan.slice_of(Cursor(0, 0))[1] == 0:
                reason = f"has {n} seeds, none in the slice of rank {rank} of {world_size}"
        if reason is not None:
            warnings.warn(f"task {task.name!r} is skipped on rank {rank}: dataset {key!r} "
                          f"{reason}", SamplerWarning, stacklevel=5)
            continue
        streams.append(SplitStream(key, task, positions, plan, database))
    return streams


class TrainSchedule:
    """Train steps from ``step`` on, given every stream's cursor before that step.

    Steps just ahead of the furthest one made are walked, one job each (the producer
    threads ask for steps a little out of order: each is handed out once). Any other step
    is located: each stream's cursor at it is its cursor at ``step`` advanced by how often
    the stream was picked in between (``PickCounts``: O(1) with one stream, a count of the
    draws in between with several), so a far step makes no job for the steps it skips.
    """

    def __init__(self, streams: Sequence[SplitStream], weights: Sequence[float], seed: int,
                 step: int = 0, cursors: Mapping[str, Cursor] | None = None):
        self.streams = tuple(streams)
        self.weights = np.asarray(weights, dtype=np.float64)
        self.cumulative = np.cumsum(self.weights)
        self.seed = seed
        self._lock = threading.Lock()
        self._next_step = step
        self._cursors = {s.key: Cursor() for s in self.streams}
        if cursors is not None:
            if set(cursors) != set(self._cursors):
                raise CheckpointError(f"train state names datasets {sorted(cursors)}, the "
                                      f"sampler has {sorted(self._cursors)}")
            for stream in self.streams:
                stream.plan.check_cursor(cursors[stream.key])
            self._cursors.update(cursors)
        self._origin = [self._cursors[s.key] for s in self.streams]
        self._picks = PickCounts(seed, self.cumulative, step)
        self._pending: dict[int, Job] = {}

    def _advance(self, count: int) -> None:
        picks = pick_tasks(task_draws(np.uint64(self.seed), np.uint64(self._next_step), count),
                           self.cumulative)
        self._picks.walked(self._next_step, picks)
        for pick in picks.tolist():
            stream = self.streams[pick]
            cursor = self._cursors[stream.key]
            after = stream.plan.advance(cursor)
            self._pending[self._next_step] = Job(self._next_step, stream, cursor, after)
            self._cursors[stream.key] = after
            self._next_step += 1

    def _located(self, step: int) -> tuple[Job, list[Cursor]]:
        """The job of ``step`` and every stream's cursor after it, from the counts of the
        picks before it."""
        counts = self._picks.before(step).tolist()
        cursors = [stream.plan.advance_by(origin, calls) for stream, origin, calls
                   in zip(self.streams, self._origin, counts)]
        pick = self._picks.pick(step)
        stream, cursor = self.streams[pick], cursors[pick]
        job = Job(step, stream, cursor, stream.plan.advance(cursor))
        cursors[pick] = job.cursor_after
        return job, cursors

    @property
    def next_step(self) -> int:
        """The first step after the furthest one made."""
        return self._next_step

    def job(self, step: int) -> Job:
        """The job of ``step``: a walked step's job is handed out once, a step asked again
        (or far) is located."""
        with self._lock:
            if step in self._pending:
                return self._pending.pop(step)
            if self._next_step <= step < self._next_step + WALK_AHEAD:
                self._advance(step - self._next_step + 1)
                return self._pending.pop(step)
            job, cursors = self._located(step)
            if step >= self._next_step:  # the walk goes on from here
                self._next_step = step + 1
                self._cursors = {s.key: c for s, c in zip(self.streams, cursors)}
            return job

    def forget_before(self, step: int) -> None:
        """Drop the jobs of steps before ``step`` that were made but never handed out."""
        with self._lock:
            # a new dict: one emptied by deletions keeps its table at its largest size
            self._pending = {k: job for k, job in self._pending.items() if k >= step}


class MixtureSchedule:
    """Train steps of a mixture of databases from ``step`` on (docs/mixture.md): step ``k``
    serves the component ``order`` names (train stream ``c`` is component ``c``) at that
    component's own step ``j``, whose cursor is ``j`` calls from the start (O(1): nothing
    before ``k`` is replayed, so the state is the step; the cursors a state carries are
    checked to name this mixture's datasets and to lie in range, and are not needed)."""

    def __init__(self, streams: Sequence[SplitStream], order: MixtureOrder, step: int = 0,
                 cursors: Mapping[str, Cursor] | None = None):
        self.streams = tuple(streams)
        self.order = order
        self._lock = threading.Lock()
        self._next_step = step
        if cursors is not None:
            keys = {s.key for s in self.streams}
            if set(cursors) != keys:
                raise CheckpointError(f"train state names datasets {sorted(cursors)}, the "
                                      f"sampler has {sorted(keys)}")
            for stream in self.streams:
                stream.plan.check_cursor(cursors[stream.key])

    @property
    def next_step(self) -> int:
        return self._next_step

    def job(self, step: int) -> Job:
        """The job of ``step`` (a pure function of it)."""
        component, own_step = self.order.resolve(step, 1)
        stream = self.streams[int(component[0])]
        cursor = stream.plan.cursor_at(int(own_step[0]))
        with self._lock:
            self._next_step = max(self._next_step, step + 1)
        return Job(step, stream, cursor, stream.plan.advance(cursor))

    def forget_before(self, step: int) -> None:
        """Nothing is kept between steps."""


class ValSchedule:
    """Val steps from ``step`` on: the stream keyed ``current`` at its cursor, then onwards.

    Val streams are rank-local (a rank skips datasets without seeds in its slice), so a state
    from another world size is taken leniently: cursors of datasets this rank does not walk
    are ignored, and datasets the state does not name start at epoch 0.
    """

    def __init__(self, streams: Sequence[SplitStream], step: int = 0, current: str | None = None,
                 cursors: Mapping[str, Cursor] | None = None):
        self.streams = tuple(streams)
        self._lock = threading.Lock()
        self._next_step = step
        keys = [s.key for s in self.streams]
        self._current = keys.index(current) if current in keys else 0
        self._cursors = {key: Cursor() for key in keys}
        for stream in self.streams:
            if cursors is not None and stream.key in cursors:
                stream.plan.check_cursor(cursors[stream.key])
                self._cursors[stream.key] = cursors[stream.key]
        self._pending: dict[int, Job] = {}
        # One stream seen whole by one rank: no slice is empty, every call is a step, so
        # step k is the stream's cursor at the first step advanced k - first calls (O(1)).
        # Otherwise which calls a rank skips depends on the walk, and steps are walked.
        self._origin: tuple[int, Cursor] | None = None
        if len(self.streams) == 1 and self.streams[0].plan.world_size == 1:
            self._origin = (step, self._cursors[self.streams[0].key])

    def _located(self, step: int) -> Job:
        assert self._origin is not None
        stream = self.streams[0]
        first, cursor = self._origin
        at = stream.plan.advance_by(cursor, step - first)
        return Job(step, stream, at, stream.plan.advance(at), stream.key)

    def _advance_one(self) -> None:
        while True:
            stream = self.streams[self._current]
            cursor = self._cursors[stream.key]
            after = stream.plan.advance(cursor)
            self._cursors[stream.key] = after
            if after.epoch != cursor.epoch:
                self._current = (self._current + 1) % len(self.streams)
            if stream.plan.slice_of(cursor)[1]:
                self._pending[self._next_step] = Job(self._next_step, stream, cursor, after,
                                                     self.streams[self._current].key)
                self._next_step += 1
                return

    def job(self, step: int) -> Job:
        """The job of ``step``: a walked step's job is handed out once; with one stream on
        one rank a far step (or one asked again) is located, without a job for each step
        it skips."""
        with self._lock:
            if step in self._pending:
                return self._pending.pop(step)
            if self._origin is not None and not (
                    self._next_step <= step < self._next_step + WALK_AHEAD):
                job = self._located(step)
                if step >= self._next_step:  # the walk goes on from here
                    self._next_step = step + 1
                    self._cursors[job.stream.key] = job.cursor_after
                return job
            while step >= self._next_step:
                self._advance_one()
            return self._pending.pop(step)


Schedule = TrainSchedule | MixtureSchedule | ValSchedule
