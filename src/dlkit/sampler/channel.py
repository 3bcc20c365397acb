"""One bounded batch channel (train, val or test): a schedule, the prefetch engine, the
consumer's state.

Producer threads of ``dlkit.prefetch.MultiIteratorPrefetcher`` build steps ``w, w+T, ...``
(worker ``w`` of ``T``) and the consumer takes them in strict round-robin order, so the batch
of step ``k`` is the same whatever the thread count or prefetch depth. The consumer-side state
(a ``ChannelState``: the next step and every stream's cursor after the last *consumed* batch)
is what ``state()`` reports: prefetched but unconsumed batches are rebuilt after a restore.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence

from dlkit.errors import SamplerShutdown
from dlkit.prefetch import IteratorConfig, MultiIteratorPrefetcher, PrefetchConfig
from dlkit.sampler.batch import BatchBuilder, BuiltBatch
from dlkit.sampler.schedule import Job, Schedule
from dlkit.sampler.state import ChannelState


class BatchChannel:
    """Batches of one schedule, prefetched by ``num_threads`` producers ``num_prefetch`` deep,
    built by ``builders[stream.database]`` (one builder per database of the sampler).

    ``num_prefetch == 0`` builds each batch in the consumer's thread when it is asked for.
    """

    def __init__(self, name: str, builders: Sequence[BatchBuilder],
                 make_schedule: Callable[[ChannelState], Schedule],
                 initial: ChannelState, num_prefetch: int, num_threads: int):
        self.name = name
        self.builders = tuple(builders)
        self.make_schedule = make_schedule
        self.num_prefetch = num_prefetch
        self.num_threads = num_threads
        self._state = initial
        self._schedule: Schedule | None = None  # made on first use: it may raise
        self._origin = initial  # the state the next schedule starts from
        self._prefetcher: MultiIteratorPrefetcher | None = None
        self._closed = False

    def _job(self, step: int) -> Job:
        schedule = self._schedule
        if schedule is None:
            schedule = self._schedule = self.make_schedule(self._origin)
        return schedule.job(step)

    def produce(self, step: int) -> tuple[Job, BuiltBatch]:
        """Build step ``step`` (runs in a producer thread; kernels release the GIL)."""
        job = self._job(step)
        return job, build_job(self.builders, job)

    def next_built(self) -> BuiltBatch:
        if self._closed:
            raise SamplerShutdown(f"the sampler was shut down: no more {self.name} batches")
        step = self._state.step
        if self.num_prefetch == 0:
            try:
                job, built = self.produce(step)
            except BaseException:
                self._restart_from(self.state())
                raise
        else:
            if self._prefetcher is None:
                per_worker = max(1, math.ceil(self.num_prefetch / self.num_threads))
                self._prefetcher = MultiIteratorPrefetcher(
                    IteratorConfig(produce=_weak_produce(self), start=step),
                    PrefetchConfig(num_workers=self.num_threads, buffer_size=per_worker),
                    name=f"dlkit-{self.name}")
            try:
                job, built = next(self._prefetcher)
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
        self._state = self._state.after(job)
        return built

    def state(self) -> ChannelState:
        """Where the channel stands after the last consumed batch."""
        return self._state

    def restore(self, state: ChannelState) -> None:
        """Continue after the batch whose state this is (prefetched batches are dropped)."""
        self.make_schedule(state)  # validates before anything changes
        self._restart_from(state)

    def _restart_from(self, state: ChannelState) -> None:
        self._stop()
        self._schedule = None
        self._origin = self._state = state

    def _stop(self) -> None:
        prefetcher, self._prefetcher = self._prefetcher, None
        if prefetcher is not None:
            prefetcher.close()

    def close(self) -> None:
        self._closed = True
        self._stop()


def _weak_produce(channel: BatchChannel) -> Callable[[int], tuple[Job, BuiltBatch]]:
    """``channel.produce`` for the producer threads, without keeping the channel alive: a
    Sampler dropped without ``shutdown()`` is then collected, and its prefetch engine with
    it (the engine closes itself when collected). A strong reference from the threads kept
    every dropped Sampler, its threads, maps and copies, for the life of the process."""
    ref = weakref.ref(channel)

    def produce(step: int) -> tuple[Job, BuiltBatch]:
        live = ref()
        if live is None:
            raise SamplerShutdown("the sampler was dropped: no more batches")
        return live.produce(step)

    return produce


def build_job(builders: Sequence[BatchBuilder], job: Job) -> BuiltBatch:
    """The batch of ``job``: its stream's micro-batch at its cursor, built at its epoch by the
    builder of the stream's database."""
    stream = job.stream
    return builders[stream.database].build(stream.task, stream.seed_indices(job.cursor),
                                           job.cursor.epoch)
