"""The prefetch kernels against naive Python references."""

from __future__ import annotations

import threading

import numba
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.core.gather import burn, checksum_rows, gather_rows, page_runs
from dlkit.core.jit import kernel_options

MASK = (1 << 64) - 1

# uint64 arithmetic wraps on purpose; only NUMBA_DISABLE_JIT=1 (numpy scalars) warns about it.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")


def naive_page_runs(rows, row_bytes, page):
    pages = sorted({p for r in rows for p in range(r * row_bytes // page,
                                                    (r * row_bytes + row_bytes - 1) // page + 1)})
    runs = []
    for p in pages:
        if runs and runs[-1][1] == p:
            runs[-1][1] = p + 1
        else:
            runs.append([p, p + 1])
    return [(a * page, (b - a) * page) for a, b in runs]


def naive_checksum(block, count):
    h = 0xCBF29CE484222325
    for row in block[:count]:
        h = ((h ^ int(row.astype(np.uint64).sum())) * 0x100000001B3) & MASK
    return h


def naive_burn(iterations, seed):
    x, acc = (seed | 1) & MASK, 0
    for _ in range(iterations):
        x ^= (x << 13) & MASK
        x ^= x >> 7
        x ^= (x << 17) & MASK
        acc = (acc + x) & MASK
    return acc


@given(st.integers(1, 50), st.integers(1, 40), st.data())
def test_gather_rows_matches_fancy_indexing(num_rows, width, data):
    src = np.random.default_rng(num_rows * 41 + width).integers(0, 256, (num_rows, width), dtype=np.uint8)
    src.setflags(write=False)  # like a read-only memory map
    rows = np.array(data.draw(st.lists(st.integers(0, num_rows - 1), max_size=30)), dtype=np.uint64)
    out = np.zeros((rows.shape[0] + 2, width), dtype=np.uint8)
    copied = gather_rows(src, rows, out)
    assert copied == rows.shape[0] * width
    np.testing.assert_array_equal(out[:rows.shape[0]], src[rows.astype(np.int64)])
    assert not out[rows.shape[0]:].any()


@given(st.lists(st.integers(0, 5000), max_size=40), st.integers(1, 9000),
       st.sampled_from([64, 4096]))
def test_page_runs_matches_naive_merge(rows, row_bytes, page):
    starts = np.empty(len(rows), dtype=np.int64)
    lengths = np.empty(len(rows), dtype=np.int64)
    count = page_runs(np.array(rows, dtype=np.uint64), row_bytes, page, starts, lengths)
    assert list(zip(starts[:count].tolist(), lengths[:count].tolist())) == \
        naive_page_runs(rows, row_bytes, page)


@given(st.integers(0, 6), st.integers(1, 20), st.integers(0, 2**32))
def test_checksum_rows_matches_naive(count, width, seed):
    block = np.random.default_rng(seed).integers(0, 256, (6, width), dtype=np.uint8)
    assert checksum_rows(block, count) == naive_checksum(block, count)


def test_checksum_depends_on_row_order():
    block = np.arange(12, dtype=np.uint8).reshape(3, 4)
    assert checksum_rows(block, 3) != checksum_rows(block[::-1].copy(), 3)


@given(st.integers(0, 300), st.integers(0, 2**64 - 1))
def test_burn_matches_naive(iterations, seed):
    assert burn(iterations, np.uint64(seed)) == naive_burn(iterations, seed)


def test_kernels_release_the_gil():
    assert kernel_options()["nogil"] is True
    for kernel in (gather_rows, page_runs, checksum_rows, burn):
        # With the JIT disabled a kernel is its plain Python function: no options to check.
        assert numba.config.DISABLE_JIT or kernel.dispatcher.targetoptions["nogil"] is True


def test_burn_runs_in_threads():
    results = [None] * 4

    def work(i):
        results[i] = burn(10_000, i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [naive_burn(10_000, i) for i in range(4)]
