"""Working arrays: small-page maps, and faulting their pages in ahead of use."""

from __future__ import annotations

import mmap
import os

import numpy as np

from dlkit.db import scratch


def _resident_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * mmap.PAGESIZE


def test_populate_faults_in_every_page_and_keeps_the_contents():
    size = (64 << 20) + 3 * 4096 + 8  # many chunks of the advice, the last one partial
    array = scratch.empty_small_pages(np.int64, size // 8)
    array[:1000] = np.arange(1000)  # written by another thread first: kept
    before = _resident_bytes()
    assert scratch.populate(array)
    assert _resident_bytes() - before >= 0.9 * (size - 8000)
    assert array[:1000].tolist() == list(range(1000)) and not array[1000:].any()


def test_populate_without_the_advice_does_nothing(monkeypatch):
    monkeypatch.setattr(scratch, "_MADV_POPULATE_WRITE", 10_000)  # an older kernel refuses it
    array = scratch.empty_small_pages(np.int64, (16 << 20) // 8)
    before = _resident_bytes()
    assert not scratch.populate(array)
    assert _resident_bytes() - before < (4 << 20)


def test_populate_leaves_file_maps_and_small_arrays_alone(tmp_path):
    mapped = np.lib.format.open_memmap(tmp_path / "a.npy", mode="w+", dtype=np.int64,
                                       shape=(1 << 16,))
    assert not scratch.populate(mapped)
    assert not scratch.populate(np.zeros(3))
    assert not mapped.any()


def test_arrays_zeros_are_zero_in_memory_and_in_scratch_files(tmp_path):
    in_memory = scratch.Arrays(tmp_path / "s", budget=1 << 30)
    spilled = scratch.Arrays(tmp_path / "t", budget=0)
    for arrays in (in_memory, spilled):
        for n in (3, 511, 100_000):  # under a page (numpy's allocator: reused memory) and over
            garbage = np.full(n, -1, dtype=np.int64)  # freed memory a small array may reuse
            del garbage
            z = arrays.zeros(np.int64, n)
            assert z.shape == (n,) and not z.any()
    assert isinstance(spilled.zeros(np.int64, 10), np.memmap)
