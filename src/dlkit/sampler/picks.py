"""How often each train stream was picked before a step: what locates a far train step.

Train step ``k`` serves the stream its own keyed draw picks (docs/batch_format.md §3), and a
stream's cursor at ``k`` is its cursor at the schedule's first step advanced once per pick
in between. With one stream every step picks it: the count is ``k - origin``, O(1). With
several, the picks are independent draws, so no formula gives how many fell to a stream:
they are counted (``dlkit.core.streams.count_task_picks``, about 20 ns a step, constant
memory), from the nearest step whose counts are known: the last step asked for, or one of the
*landmarks* kept every ``interval`` steps of what was counted (so going back costs at most
``interval`` draws). The landmarks are at most ``MAX_LANDMARKS``: when full, every other one
is dropped and the interval doubles, so the memory kept stays bounded whatever the step.
One call counts at most ``MAX_COUNTED_STEPS`` draws; a step further from every known one is
refused with an ``InvalidArgumentError`` (asking for nearer steps first reaches it).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dlkit.core.streams import count_task_picks, pick_tasks, task_draws
from dlkit.errors import InvalidArgumentError

MAX_COUNTED_STEPS = 1 << 30  # about 20 s of counting: beyond, one call would look hung
FIRST_INTERVAL = 1 << 16  # going back costs at most this many draws (about 1 ms) at first
MAX_LANDMARKS = 1 << 12  # rows of counts kept (4096 x 8 bytes per stream)


class PickCounts:
    """Picks per stream (``cumulative`` weights, in stream order) of the train steps from
    ``origin`` on, under ``seed``. Not thread-safe: its schedule holds the lock."""

    def __init__(self, seed: int, cumulative: np.ndarray, origin: int, *,
                 interval: int = FIRST_INTERVAL, max_landmarks: int = MAX_LANDMARKS,
                 max_counted: int = MAX_COUNTED_STEPS):
        self.seed = np.uint64(seed)
        self.cumulative = np.ascontiguousarray(cumulative, dtype=np.float64)
        self.origin = origin
        self.interval = interval
        self.max_landmarks = max_landmarks  # even: halving keeps the rows 0, 2, 4, ...
        self.max_counted = max_counted
        streams = self.cumulative.shape[0]
        # landmarks[r]: the picks of steps origin .. origin + r*interval - 1
        self._landmarks = [np.zeros(streams, dtype=np.int64)]
        self._last_step = origin  # the last step counted to, and its counts
        self._last = self._landmarks[0]

    @property
    def num_streams(self) -> int:
        return int(self.cumulative.shape[0])

    def pick(self, step: int) -> int:
        """The stream step ``step`` serves."""
        if self.num_streams == 1:
            return 0
        draws = task_draws(self.seed, np.uint64(step), 1)
        return int(pick_tasks(draws, self.cumulative)[0])

    def before(self, step: int) -> np.ndarray:
        """Picks per stream of the steps ``origin .. step - 1`` (int64, one per stream)."""
        if step < self.origin:
            raise InvalidArgumentError(f"train step {step} is before this schedule's first "
                                       f"step {self.origin}")
        if self.num_streams == 1:
            return np.array([step - self.origin], dtype=np.int64)
        row = min((step - self.origin) // self.interval, len(self._landmarks) - 1)
        known, counts = self.origin + row * self.interval, self._landmarks[row]
        if known <= self._last_step <= step:
            known, counts = self._last_step, self._last
        if step - known > self.max_counted:
            raise InvalidArgumentError(
                f"train step {step} is {step - known} steps past the nearest step found so "
                f"far ({known}): with {self.num_streams} weighted tasks each step's task is "
                f"its own draw, so finding a step counts the draws before it, at most "
                f"{self.max_counted} at once: ask for nearer steps first")
        counts = counts.copy()
        self._count(known, step, counts)
        self._last_step, self._last = step, counts
        return counts.copy()

    def walked(self, start: int, picks: np.ndarray) -> None:
        """Take the picks a walk drew for the steps from ``start`` on (``picks[i]`` is step
        ``start + i``'s stream): locating a step later counts from the last step walked, and
        the landmarks cover what was walked, as if it had been counted."""
        if self.num_streams == 1 or not len(picks) or start < self._last_step:
            return  # (a walk behind the last step counted: nothing nearer to keep)
        if start == self._last_step:  # the walk goes on (every step but a located one's)
            counts = self._last.copy()
        else:
            try:
                counts = self.before(start)  # the draws between (one after a located step)
            except InvalidArgumentError:
                return  # too far from every step counted to count now: a later locate will
        offset = start

        def add(first: int, stop: int, into: np.ndarray) -> None:
            into += np.bincount(picks[first - offset:stop - offset],
                                minlength=self.num_streams).astype(np.int64)

        stop = start + len(picks)
        self._count(start, stop, counts, add)
        self._last_step, self._last = stop, counts

    def _draws(self, start: int, stop: int, counts: np.ndarray) -> None:
        count_task_picks(self.seed, np.uint64(start), stop - start, self.cumulative, counts)

    def _count(self, start: int, stop: int, counts: np.ndarray,
               add: Callable[[int, int, np.ndarray], None] | None = None) -> None:
        """Add the picks of ``start .. stop - 1`` to ``counts`` (``add(start, stop,
        counts)``: drawing them by default), keeping a landmark at every interval boundary
        passed beyond the furthest one kept."""
        add = self._draws if add is None else add
        while start < stop:
            following = self.origin + len(self._landmarks) * self.interval
            if start < following - self.interval or stop < following:
                add(start, stop, counts)
                return
            add(start, following, counts)
            start = following
            if len(self._landmarks) == self.max_landmarks:
                # full: rows 0, 2, 4, ... are the landmarks of twice the interval, and the
                # boundary just reached is the next of those
                self._landmarks = self._landmarks[::2]
                self.interval *= 2
            self._landmarks.append(counts.copy())
