"""The prefetch engine: producer threads, bounded ready queues, buffer pools, exact resume.

Typical use -- N producer threads building batches ``step = 0, 1, 2, ...``; worker ``w``
builds steps ``w, w+N, ...``; the consumer receives them in step order::

    from dlkit.prefetch import IteratorConfig, MultiIteratorPrefetcher, PrefetchConfig

    base = IteratorConfig(produce=build_batch, start=0, stop=None)   # build_batch(step) -> item
    config = PrefetchConfig(num_workers=2, buffer_size=2)            # strict, interleaved
    with MultiIteratorPrefetcher(base, config) as prefetcher:
        for batch in prefetcher:
            train(batch)
            checkpoint = prefetcher.state().to_dict()                # after the consumed item

    # later: exactly the same stream from the item after the checkpoint
    state = PrefetchState.from_dict(checkpoint)
    prefetcher = MultiIteratorPrefetcher(base, config, state=state)

For a strict interleaved prefetcher, ``IteratorConfig(produce, start=s)`` yields the same
stream as a checkpoint taken after step ``s - 1`` (but the two states are not interchangeable:
a state is only valid for the configuration it was taken from).

With ``IteratorConfig(..., buffers=BufferSpec({...}))`` the engine pre-allocates the batch
buffers, calls ``produce(step, out)`` with a free one, and yields :class:`Lease` objects: use
``with lease:`` or ``lease.release()`` to recycle the buffer.

``produce`` runs in the producer threads; threads run in parallel only while ``produce`` is
inside code that releases the GIL (Numba ``nogil`` kernels such as ``dlkit.core.gather``).
"""

from dlkit.prefetch.config import (
    IteratorConfig,
    Policy,
    PrefetchConfig,
    ShardConfig,
    ShardMode,
    strict_order,
)
from dlkit.prefetch.pool import BufferPool, BufferSpec, Lease
from dlkit.prefetch.prefetcher import MultiIteratorPrefetcher
from dlkit.prefetch.state import IteratorState, PrefetchState

__all__ = [
    "BufferPool", "BufferSpec", "IteratorConfig", "IteratorState", "Lease",
    "MultiIteratorPrefetcher", "Policy", "PrefetchConfig", "PrefetchState", "ShardConfig",
    "ShardMode", "strict_order",
]
