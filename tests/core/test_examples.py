"""The choice of context examples against the plain-Python reference."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from dlkit.core.examples import EXAMPLES_RANDOM, EXAMPLES_RECENT, choose_examples
from dlkit.core.records import Examples
from dlkit.core.streams import example_key
from tests import naive_sampler as naive

# A few distinct times (ties are common), and seeds without a time.
TIMES = st.sampled_from([naive.NO_TIME, 10, 11, 12, 20, 30])


@given(times=st.lists(TIMES, min_size=1, max_size=30), count=st.integers(0, 8),
       policy=st.sampled_from([EXAMPLES_RECENT, EXAMPLES_RANDOM]), seed=st.integers(0, 2**64 - 1),
       epoch=st.integers(0, 3), task_idx=st.integers(0, 3), strict=st.booleans(),
       data=st.data())
def test_choice_matches_reference(times, count, policy, seed, epoch, task_idx, strict, data):
    n = len(times)
    anchors = np.cumsum(data.draw(st.lists(st.integers(1, 3), min_size=n, max_size=n)))
    obs = np.asarray(times, dtype=np.int64)
    task = SimpleNamespace(obs_time=obs, anchor_row=anchors.astype(np.int64), index=task_idx)
    me = data.draw(st.integers(0, n - 1))
    own = int(obs[me])
    cutoff = naive.INT64_MAX if own == naive.NO_TIME else own - int(strict)
    want = naive.context_examples(task, me, cutoff, count, policy, seed=seed, epoch=epoch)

    order = np.argsort(obs, kind="stable")
    ranks = np.empty(n, dtype=np.int64)
    ranks[order] = np.arange(n)
    examples = Examples(count, policy, task.anchor_row[order], obs[order], 0, task.anchor_row,
                        ranks, np.asarray([me]))
    k0, k1 = example_key(np.uint64(seed), np.uint64(epoch), task_idx)
    out = np.empty(count, dtype=np.int64)
    picks = np.empty(count, dtype=np.uint64)
    k = choose_examples(examples, ranks[me], cutoff, k0, k1, int(anchors[me]), out, picks)
    assert [int(order[p]) for p in out[:k]] == want
    # never the seed itself, never a seed observed after the cutoff
    assert me not in want
    assert all(obs[i] == naive.NO_TIME or obs[i] <= cutoff for i in want)


def test_recent_takes_the_latest_others_and_ties_by_anchor_row():
    obs = np.asarray([5, 7, 7, 7, 9, naive.NO_TIME], dtype=np.int64)
    task = SimpleNamespace(obs_time=obs, anchor_row=np.arange(6, dtype=np.int64) * 2, index=0)
    # seed 2 observed at 7: seeds 3 and 1 share its time (3 has the later anchor row)
    assert naive.context_examples(task, 2, 7, 3, EXAMPLES_RECENT, seed=0, epoch=0) == [3, 1, 0]
    # strict: only times <= 6 (and the timeless seed)
    assert naive.context_examples(task, 2, 6, 3, EXAMPLES_RECENT, seed=0, epoch=0) == [0, 5]
