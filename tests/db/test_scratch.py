"""Working arrays: small-page maps, and faulting their pages in ahead of use."""

from __future__ import annotations

import mmap
import os

import numpy as np
import pytest

from dlkit.db import scratch


def _resident_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * mmap.PAGESIZE


@pytest.mark.parametrize("advice", ["populate", "fallback"])
def test_populate_faults_in_every_page(monkeypatch, advice):
    if advice == "fallback":  # a kernel without MADV_POPULATE_WRITE refuses the advice
        monkeypatch.setattr(scratch, "_MADV_POPULATE_WRITE", 10_000)
    size = 64 << 20
    array = scratch.empty_small_pages(np.int64, size // 8)
    before = _resident_bytes()
    scratch.populate(array)
    grown = _resident_bytes() - before
    assert grown >= 0.9 * size
    array[:] = 7  # still an ordinary writable array of the same memory
    assert int(array[::4096].sum()) == 7 * (size // 8 // 4096)


def test_populate_leaves_file_maps_and_small_arrays_alone(tmp_path):
    mapped = np.lib.format.open_memmap(tmp_path / "a.npy", mode="w+", dtype=np.int64,
                                       shape=(1 << 16,))
    scratch.populate(mapped)
    scratch.populate(np.zeros(3))
    assert not mapped.any()
