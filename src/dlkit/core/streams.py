"""Philox streams of the relational sampler: split hash, per-sequence draws, train task picks.

Every random choice of the relational sampler is a pure function of explicit inputs (pinned in
``docs/batch_format.md``), so a sequence is the same whatever the thread count, prefetch depth,
rank or world size:

- split hash: ``R0`` of Philox(counter ``(lo32 anchor, hi32 anchor, task, 0)``, key
  ``(lo32 split_seed, hi32 split_seed)``), ``bucket = R0 mod 1000``;
- sequence key: ``(R0, R1)`` of Philox(counter ``(lo32 epoch, hi32 epoch, task, SEQUENCE_TAG)``,
  key ``(lo32 seed, hi32 seed)``); block ``j`` of the sequence of anchor ``a`` is
  Philox(counter ``(lo32 j, hi32 j, lo32 a, hi32 a)``, key = sequence key), and draw ``i`` is
  ``R0 | R1 << 32`` of block ``i // 2`` for even ``i``, ``R2 | R3 << 32`` for odd ``i``;
- context example key: ``(R0, R1)`` of Philox(counter ``(lo32 epoch, hi32 epoch, task,
  EXAMPLE_TAG)``, key ``(lo32 seed, hi32 seed)``), its blocks and draws like a sequence's
  (``dlkit.core.examples``);
- train task pick of step ``k``: ``R0 | R1 << 32`` of Philox(counter
  ``(lo32 k, hi32 k, 0, TASK_TAG)``, key ``(lo32 seed, hi32 seed)``).
"""

from __future__ import annotations

import numpy as np

from dlkit.core.jit import kernel
from dlkit.core.philox import MASK32, SHIFT32, philox4x32_10

SEQUENCE_TAG = np.uint64(0x53455131)  # "SEQ1"
TASK_TAG = np.uint64(0x5441534B)  # "TASK"
EXAMPLE_TAG = np.uint64(0x43545831)  # "CTX1"
SPLIT_BUCKETS = np.uint64(1000)
UINT64_MAX = np.uint64(0xFFFFFFFFFFFFFFFF)


@kernel
def split_buckets(anchor_rows, task_idx, split_seed):
    """``bucket[i] = R0 mod 1000`` of the split hash of ``anchor_rows[i]`` (uint16)."""
    seed = np.uint64(split_seed)
    k0 = seed & MASK32
    k1 = seed >> SHIFT32
    task = np.uint64(task_idx)
    out = np.empty(anchor_rows.shape[0], dtype=np.uint16)
    for i in range(anchor_rows.shape[0]):
        anchor = np.uint64(anchor_rows[i])
        r0, _, _, _ = philox4x32_10(anchor & MASK32, anchor >> SHIFT32, task, np.uint64(0), k0, k1)
        out[i] = np.uint16(r0 % SPLIT_BUCKETS)
    return out


@kernel
def split_positions(codes, train, val, test):
    """The positions of each split code (``codes`` in 0..2), ascending, in one pass:
    ``train``, ``val`` and ``test`` receive ``np.flatnonzero(codes == k)`` for k = 0, 1, 2
    (the caller sizes them by the counts of the codes)."""
    a = 0
    b = 0
    c = 0
    for i in range(codes.shape[0]):
        k = codes[i]
        if k == 0:
            train[a] = i
            a += 1
        elif k == 1:
            val[b] = i
            b += 1
        else:
            test[c] = i
            c += 1


@kernel
def assign_splits(buckets, train_cut, val_cut):
    """Split codes (0 train, 1 val, 2 test): train below ``train_cut``, val below ``val_cut``."""
    out = np.empty(buckets.shape[0], dtype=np.int8)
    for i in range(buckets.shape[0]):
        b = np.int64(buckets[i])
        if b < train_cut:
            out[i] = 0
        elif b < val_cut:
            out[i] = 1
        else:
            out[i] = 2
    return out


@kernel
def tagged_key(seed, epoch, task_idx, tag):
    """``(R0, R1)`` of Philox(counter ``(lo32 epoch, hi32 epoch, task, tag)``, key
    ``(lo32 seed, hi32 seed)``): the key of one kind of stream of (seed, epoch, task)."""
    seed = np.uint64(seed)
    epoch = np.uint64(epoch)
    r0, r1, _, _ = philox4x32_10(epoch & MASK32, epoch >> SHIFT32, np.uint64(task_idx),
                                 tag, seed & MASK32, seed >> SHIFT32)
    return r0, r1


@kernel
def sequence_key(seed, epoch, task_idx):
    """The Philox key ``(k0, k1)`` of every sequence of (seed, epoch, task)."""
    return tagged_key(seed, epoch, task_idx, SEQUENCE_TAG)


@kernel
def example_key(seed, epoch, task_idx):
    """The Philox key ``(k0, k1)`` of the random choice of context examples of (seed, epoch,
    task): a stream of its own, so the choice takes no draw from a sequence's walk."""
    return tagged_key(seed, epoch, task_idx, EXAMPLE_TAG)


@kernel
def new_stream():
    """A sequence stream's state: ``[next draw number, the cached odd draw]``."""
    return np.zeros(2, dtype=np.uint64)


@kernel
def next_draw(k0, k1, anchor, state):
    """The next 64-bit draw of the sequence of ``anchor`` (each Philox block serves two)."""
    i = state[0]
    if i & np.uint64(1) == np.uint64(0):
        block = i >> np.uint64(1)
        a = np.uint64(anchor)
        r0, r1, r2, r3 = philox4x32_10(block & MASK32, block >> SHIFT32, a & MASK32,
                                       a >> SHIFT32, k0, k1)
        state[1] = r2 | (r3 << SHIFT32)
        x = r0 | (r1 << SHIFT32)
    else:
        x = state[1]
    state[0] = i + np.uint64(1)
    return x


@kernel
def uniform_below(k0, k1, anchor, state, n):
    """An unbiased integer in ``[0, n)`` (``1 <= n < 2^63``) from the stream ``state``.

    Takes draws ``x`` until ``x < 2^64 - (2^64 mod n)`` (rejection keeps it exactly uniform),
    then returns ``x mod n``.
    """
    n = np.uint64(n)
    while True:
        x = next_draw(k0, k1, anchor, state)
        # 2^64 mod n is below n, so every x up to 2^64 - 1 - n is accepted: the exact bound
        # (two more divisions) is only needed for the top n values.
        if x <= UINT64_MAX - n:
            return np.int64(x % n)
        remainder = (UINT64_MAX % n + np.uint64(1)) % n  # 2^64 mod n
        if remainder == np.uint64(0) or x <= UINT64_MAX - remainder:
            return np.int64(x % n)


@kernel
def task_draw(k0, k1, step):
    """The task-pick value of train step ``step`` under the key ``(k0, k1)`` of the seed."""
    step = np.uint64(step)
    r0, r1, _, _ = philox4x32_10(step & MASK32, step >> SHIFT32, np.uint64(0), TASK_TAG, k0, k1)
    return r0 | (r1 << SHIFT32)


@kernel
def task_draws(seed, first_step, count):
    """The task-pick value of train steps ``first_step .. first_step+count-1`` (uint64)."""
    seed = np.uint64(seed)
    k0 = seed & MASK32
    k1 = seed >> SHIFT32
    out = np.empty(count, dtype=np.uint64)
    for i in range(count):
        out[i] = task_draw(k0, k1, np.uint64(first_step) + np.uint64(i))
    return out


@kernel
def pick_of(draw, cumulative_weights):
    """The task one draw picks (see ``pick_tasks``)."""
    last = cumulative_weights.shape[0] - 1
    u = np.float64(draw >> np.uint64(11)) * (1.0 / 9007199254740992.0)
    x = u * cumulative_weights[last]
    t = 0
    while t < last and not x < cumulative_weights[t]:
        t += 1
    return t


@kernel
def pick_tasks(draws, cumulative_weights):
    """Weighted choice per draw: the first task whose cumulative weight exceeds ``u * total``.

    ``u = (draw >> 11) / 2^53`` is in ``[0, 1)``; ``cumulative_weights`` is float64, ascending,
    with a positive last entry. Tasks of weight 0 are never chosen.
    """
    out = np.empty(draws.shape[0], dtype=np.int64)
    for i in range(draws.shape[0]):
        out[i] = pick_of(draws[i], cumulative_weights)
    return out


@kernel
def count_task_picks(seed, first_step, count, cumulative_weights, counts):
    """Add to ``counts[t]`` how many of train steps ``first_step .. first_step+count-1`` pick
    task ``t``: ``pick_tasks(task_draws(...))`` tallied, in constant memory (a step's task
    is its own draw, so counting is the only way to know how often a task came up)."""
    seed = np.uint64(seed)
    k0 = seed & MASK32
    k1 = seed >> SHIFT32
    for i in range(count):
        draw = task_draw(k0, k1, np.uint64(first_step) + np.uint64(i))
        counts[pick_of(draw, cumulative_weights)] += 1
