"""One bounded batch channel (train or val): a schedule, the prefetch engine, consumer state.

Producer threads of ``dlkit.prefetch.MultiIteratorPrefetcher`` build steps ``w, w+T, ...``
(worker ``w`` of ``T``) and the consumer takes them in strict round-robin order, so the batch
of step ``k`` is the same whatever the thread count or prefetch depth. The consumer-side state
(the next step and every stream's cursor after the last *consumed* batch) is what
``state()`` reports: prefetched but unconsumed batches are rebuilt after a restore.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from dlkit.errors import SamplerShutdown
from dlkit.nextbatch import Cursor
from dlkit.prefetch import IteratorConfig, MultiIteratorPrefetcher, PrefetchConfig
from dlkit.sampler.batch import BatchBuilder, BuiltBatch
from dlkit.sampler.schedule import Job, TrainSchedule, ValSchedule

Schedule = TrainSchedule | ValSchedule


class BatchChannel:
    """Batches of one schedule, prefetched by ``num_threads`` producers ``num_prefetch`` deep.

    ``num_prefetch == 0`` builds each batch in the consumer's thread when it is asked for.
    """

    def __init__(self, name: str, builder: BatchBuilder,
                 make_schedule: Callable[[dict[str, Any] | None], Schedule],
                 initial: dict[str, Any], num_prefetch: int, num_threads: int):
        self.name = name
        self.builder = builder
        self.make_schedule = make_schedule
        self.num_prefetch = num_prefetch
        self.num_threads = num_threads
        self._state = initial
        self._schedule: Schedule | None = None  # made on first use: it may raise
        self._origin: dict[str, Any] | None = None  # the state the next schedule starts from
        self._prefetcher: MultiIteratorPrefetcher | None = None
        self._closed = False

    def _job(self, step: int) -> tuple[Job, str | None]:
        schedule = self._schedule
        if schedule is None:
            schedule = self._schedule = self.make_schedule(self._origin)
        result = schedule.job(step)
        return result if isinstance(result, tuple) else (result, None)

    def produce(self, step: int) -> tuple[Job, str | None, BuiltBatch]:
        """Build step ``step`` (runs in a producer thread; kernels release the GIL)."""
        job, current = self._job(step)
        built = self.builder.build(job.stream.task, job.stream.seed_indices(job.cursor),
                                   job.cursor.epoch)
        return job, current, built

    def next_built(self) -> BuiltBatch:
        if self._closed:
            raise SamplerShutdown(f"the sampler was shut down: no more {self.name} batches")
        step = self._state["step"]
        if self.num_prefetch == 0:
            try:
                job, current, built = self.produce(step)
            except BaseException:
                self._restart_from(self.state())
                raise
        else:
            if self._prefetcher is None:
                per_worker = max(1, math.ceil(self.num_prefetch / self.num_threads))
                self._prefetcher = MultiIteratorPrefetcher(
                    IteratorConfig(produce=self.produce, start=step),
                    PrefetchConfig(num_workers=self.num_threads, buffer_size=per_worker),
                    name=f"dlkit-{self.name}")
            try:
                job, current, built = next(self._prefetcher)
            except BaseException:
                if self._closed:
                    raise SamplerShutdown(
                        f"the sampler was shut down: no more {self.name} batches") from None
                # A producer failed: drop what was prefetched; the next pull rebuilds this
                # step from the consumer's state (and fails again if the cause persists).
                self._restart_from(self.state())
                raise
        if job.step != step:  # the engine's strict order makes this unreachable
            raise RuntimeError(f"{self.name} channel expected step {step}, got {job.step}")
        cursors = dict(self._state["cursors"])
        cursors[job.stream.key] = job.cursor_after
        self._state = {**self._state, "step": step + 1, "cursors": cursors}
        if current is not None:
            self._state["current"] = current
        return built

    def state(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step": self._state["step"],
                               "cursors": {k: c.to_value() for k, c in
                                           sorted(self._state["cursors"].items())}}
        if "current" in self._state:
            out["current"] = self._state["current"]
        return out

    def restore(self, state: dict[str, Any]) -> None:
        """Continue after the batch whose state this is (prefetched batches are dropped)."""
        self.make_schedule(state)  # validates before anything changes
        self._restart_from(state)

    def _restart_from(self, state: dict[str, Any]) -> None:
        self._stop()
        self._schedule = None
        self._origin = state
        self._state = {"step": state["step"],
                       "cursors": {k: Cursor(**v) for k, v in state["cursors"].items()}}
        if "current" in state:
            self._state["current"] = state["current"]

    def _stop(self) -> None:
        prefetcher, self._prefetcher = self._prefetcher, None
        if prefetcher is not None:
            prefetcher.close()

    def close(self) -> None:
        self._closed = True
        self._stop()
