"""Huge-page copies: the policy, the copies themselves, and batches that do not change."""

from __future__ import annotations

import numpy as np
import pytest

from dlkit.errors import InvalidArgumentError
from dlkit.sampler import BATCH_KEYS, BatchBuilder, BatchConfig, Sampler, hugepages
from dlkit.sampler import catalog as catalog_module
from dlkit.sampler import graph as graph_module
from dlkit.sampler.catalog import build_catalog, row_values
from dlkit.sampler.graph import graph_of, has_records, huge_page_bytes, walked
from tests.sampler.fakedb import random_database

SMALL = dict(sequence_length=48, max_rows=12, bfs_child_width=3, split_seed=5, seed=11)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.float64])
@pytest.mark.parametrize("n", [0, 1, 1000, (3 << 20) // 8 + 5])
def test_copy_is_equal_and_read_only(dtype, n):
    array = (np.arange(n) * 7919 % 251).astype(dtype)
    copy = hugepages.huge_page_copy(array)
    assert copy.dtype == array.dtype and copy.shape == array.shape
    assert np.array_equal(copy, array)
    assert not copy.flags.writeable and copy.flags.c_contiguous
    assert not np.shares_memory(copy, array)


def test_policy(monkeypatch):
    assert hugepages.use_huge_pages(True, 8000) is True
    assert hugepages.use_huge_pages(False, 8000) is False
    with pytest.raises(InvalidArgumentError, match="huge_pages"):
        hugepages.use_huge_pages("yes", 8000)
    monkeypatch.setattr(hugepages, "huge_pages_available", lambda: False)
    assert hugepages.use_huge_pages(None, 8000) is False
    monkeypatch.setattr(hugepages, "huge_pages_available", lambda: True)
    monkeypatch.setattr(hugepages, "physical_memory", lambda: 4 * 8000)
    assert hugepages.use_huge_pages(None, 8000) is True  # exactly a quarter fits
    monkeypatch.setattr(hugepages, "physical_memory", lambda: 4 * 8000 - 4)
    assert hugepages.use_huge_pages(None, 8000) is False  # the copies would not fit
    monkeypatch.setattr(hugepages, "physical_memory", lambda: 4 * 8000 * 8)
    assert hugepages.use_huge_pages(None, 8000, local_copies=1) is True
    # Local ranks would each hold a private copy: they share the memory map instead.
    assert hugepages.use_huge_pages(None, 8000, local_copies=2) is False
    assert hugepages.use_huge_pages(True, 8000, local_copies=2) is True


def test_local_ranks_share_one_copy_or_the_memory_map(monkeypatch, tmp_path):
    monkeypatch.setenv("DLKIT_SHM_DIR", str(tmp_path))
    db = random_database(7, num_tables=4, max_rows=160, num_tasks=3)
    monkeypatch.setattr(hugepages, "huge_pages_available", lambda: True)
    monkeypatch.setattr(hugepages, "physical_memory", lambda: 1 << 40)
    kwargs = dict(batch_size=1, huge_pages=None, num_prefetch=0, sequence_length=48,
                  max_rows=12)
    for shared_thp, local_ranks, path in ((False, 1, "private"), (False, 2, "mmap"),
                                          (True, 1, "private"), (True, 2, "shared")):
        monkeypatch.setattr(hugepages, "shared_huge_pages_available", lambda: shared_thp)
        monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_ranks))
        with Sampler(db, 0, 64, **kwargs) as s:
            assert s.config.local_world_size == local_ranks
            assert s.builder.memory_path == path, (shared_thp, local_ranks)
            assert s.config.huge_pages is (path != "mmap")
        assert list(tmp_path.iterdir()) == []  # the last rank removed the segment


def test_batches_are_the_same_from_the_copies():
    db = random_database(7, num_tables=4, max_rows=160, num_tasks=3)
    mapped, copied = builders(db)
    assert (mapped.huge_pages, copied.huge_pages) == (False, True)
    mine, theirs = copied.resident, mapped.resident
    assert has_records(mine.graph) and not has_records(theirs.graph)
    for a in walked(mine.graph) + mine.catalog.column_arrays():
        assert not a.flags.writeable
    edges = mine.graph.parent_ids.shape[0]
    assert huge_page_bytes(mine.graph) == sum(a.nbytes for a in walked(mine.graph))
    assert mine.graph.parent_records.shape == (edges, 4)
    assert mine.row_values.words.size > 0 and theirs.row_values.words.size == 0
    assert_same_batches(mapped, copied)
    with pytest.raises(InvalidArgumentError, match="huge_pages"):
        BatchConfig(huge_pages=1)


def builders(db) -> tuple[BatchBuilder, BatchBuilder]:
    """(memory map, huge-page copies) builders of the same configuration."""
    config = dict(sequence_length=40, max_rows=10, bfs_child_width=2)
    return (BatchBuilder(db, BatchConfig(**config, huge_pages=False), seed=3),
            BatchBuilder(db, BatchConfig(**config, huge_pages=True), seed=3))


def assert_same_batches(mapped: BatchBuilder, copied: BatchBuilder) -> None:
    for view in mapped.tasks:
        idx = np.arange(min(view.num_seeds, 9))
        a = mapped.build(view, idx, 1).arrays
        b = copied.build(copied.task(view.name), idx, 1).arrays
        for key in BATCH_KEYS:
            assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key]), key


def test_graphs_too_large_for_records_copy_the_csr(monkeypatch):
    """Records pack per-row counts in 32 bits: past 2^31 edges the plain CSR is copied."""
    db = random_database(7, num_tables=4, max_rows=160, num_tasks=3)
    monkeypatch.setattr(graph_module, "MAX_RECORD_EDGES", 1)
    mapped, copied = builders(db)
    assert copied.huge_pages and not has_records(copied.resident.graph)
    assert len(walked(copied.resident.graph)) == 6
    assert_same_batches(mapped, copied)


@pytest.mark.parametrize("seed", [3, 8, 21])
def test_row_records_hold_every_cell(seed):
    """Each record word against the column it came from: value bits, validity bit, padding."""
    db = random_database(seed, num_tables=4, max_rows=50, null_prob=0.3)
    catalog = build_catalog(db, graph_of(db))
    class Poisoned:  # memory whose fresh words hold garbage: every word must be written
        fill = True

        def empty(self, n, dtype):
            return np.full(n, -5, dtype)

    rows = row_values(catalog, Poisoned())
    assert rows is not None and not rows.words.flags.writeable
    for t, table in enumerate(db.tables):
        width = int(rows.width[t])
        assert width & (width - 1) == 0 and width >= 1 + len(table.columns)
        assert int(rows.start[t]) % 8 == 0
        records = rows.words[rows.start[t]:rows.start[t] + table.num_rows * width]
        records = records.reshape(table.num_rows, width)
        for k, column in enumerate(table.columns):
            valid = np.asarray(column.valid, dtype=bool)
            assert np.array_equal((records[:, 0] >> k) & 1, valid.astype(np.int64))
            values = np.asarray(column.values)
            if values.dtype == np.float64:
                assert np.array_equal(records[:, 1 + k].view(np.float64), values)
            else:
                assert np.array_equal(records[:, 1 + k], values.astype(np.int64))
        assert not records[:, 1 + len(table.columns):].any()
        assert not (records[:, 0] >> len(table.columns)).any()


def test_tables_too_wide_for_row_records_copy_the_columns(monkeypatch):
    db = random_database(7, num_tables=4, max_rows=160, num_tasks=3)
    monkeypatch.setattr(catalog_module, "MAX_ROW_COLUMNS", 0)
    mapped, copied = builders(db)
    assert copied.huge_pages and copied.resident.row_values.words.size == 0
    assert all(not a.flags.writeable for a in copied.resident.catalog.column_arrays())
    assert_same_batches(mapped, copied)


def test_sampler_takes_the_setting():
    db = random_database(7, num_tables=4, max_rows=160, num_tasks=3)
    batches = {}
    for setting in (True, False):
        with Sampler(db, 0, 1, batch_size=4, num_prefetch=0, huge_pages=setting, **SMALL) as s:
            assert s.config.huge_pages is setting
            batches[setting] = [s.next_train_batch() for _ in range(3)]
    for x, y in zip(batches[True], batches[False]):
        assert all(np.array_equal(x[k], y[k]) for k in BATCH_KEYS)
