"""Working arrays: small-page maps, and faulting their pages in ahead of use."""

from __future__ import annotations

import mmap
import os

import numpy as np
import pytest

from dlkit.db.write import scratch


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
    assert scratch.is_spilled(spilled.zeros(np.int64, 100_000))
    assert not scratch.is_spilled(spilled.zeros(np.int64, 10))  # under a page: never spilled


def test_the_budget_counts_live_arrays_and_spills_beyond_it(tmp_path):
    seen = []
    arrays = scratch.Arrays(tmp_path / "s", budget=3 << 20, on_spill=seen.append)
    first = arrays.empty(np.int64, (2 << 20) // 8)
    second = arrays.empty(np.int64, (2 << 20) // 8)  # 4 MiB > 3 MiB: spilled
    assert not scratch.is_spilled(first) and scratch.is_spilled(second)
    assert (arrays.used, arrays.spilled, seen) == (2 << 20, 2 << 20, [2 << 20])
    second[:] = np.arange(second.size)  # a spilled array reads back what was written
    assert int(second[12345]) == 12345 and not scratch.populate(second)
    assert os.listdir(tmp_path / "s") == []  # unlinked at once: a crash leaves nothing
    view = first[10:]
    del first
    assert arrays.used == 2 << 20  # a view keeps the memory: still counted
    del view
    assert arrays.used == 0  # freed: its bytes are the budget's again
    third = arrays.empty(np.int64, (2 << 20) // 8)
    assert not scratch.is_spilled(third) and arrays.peak == 2 << 20


def test_a_spill_the_disk_has_no_room_for_is_an_output_error(tmp_path, monkeypatch):
    from dlkit.errors import OutputError

    def full_disk(fd, offset, length):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full_disk)
    arrays = scratch.Arrays(tmp_path / "s", budget=0)
    with pytest.raises(OutputError, match="No space left on device"):
        arrays.empty(np.int64, 1 << 20)
    assert os.listdir(tmp_path / "s") == []  # nothing left behind
