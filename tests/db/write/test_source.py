"""Reading Parquet tables: the read-ahead across tables (``dlkit.db.write.source.ReadAhead``)."""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dlkit.db.write import source as source_module
from dlkit.db.write.source import ReadAhead, ReadJob, TableSource


class FakeJob:
    """A read job of ``count`` one-column batches of ``rows`` int64 each; before producing
    batch ``i`` it records how many batches the consumer had taken by then."""

    def __init__(self, first: int, count: int, rows: int, taken: list[int],
                 fail_after: int | None = None):
        self.first, self.count, self.rows = first, count, rows
        self.taken = taken
        self.fail_after = fail_after
        self.produced_when: list[int] = []

    def batches(self, batch_rows: int):
        for i in range(self.count):
            if self.fail_after is not None and i == self.fail_after:
                raise OSError(f"disk on fire at batch {i}")
            self.produced_when.append(self.taken[0])
            values = np.arange(self.rows, dtype=np.int64) + (self.first + i) * self.rows
            yield pa.record_batch([pa.array(values)], names=["x"])


def _values(batches) -> list[int]:
    return [int(b.column(0)[0].as_py()) for b in batches]


def test_jobs_come_back_in_order_each_whole():
    taken = [0]
    jobs = [FakeJob(0, 3, 10, taken), FakeJob(3, 0, 10, taken), FakeJob(3, 5, 10, taken)]
    with ReadAhead(jobs, 10, budget=1 << 20) as ahead:
        got = [_values(ahead.batches(i)) for i in range(3)]
    assert got == [[0, 10, 20], [], [30, 40, 50, 60, 70]]


@pytest.mark.parametrize("min_batches", [1, 2, 3])
def test_reader_stays_within_min_batches_when_budget_is_spent(min_batches):
    taken = [0]
    jobs = [FakeJob(0, 6, 100, taken), FakeJob(6, 6, 100, taken)]
    with ReadAhead(jobs, 100, budget=0, min_batches=min_batches) as ahead:
        for i in range(2):
            for _batch in ahead.batches(i):
                taken[0] += 1
    produced_when = jobs[0].produced_when + jobs[1].produced_when
    # batch k is decoded only once at most min_batches are waiting (the consumer's count
    # may lag its take by one)
    lead = [k - seen for k, seen in enumerate(produced_when)]
    assert max(lead) <= min_batches + 1
    assert len(produced_when) == 12


def test_budget_lets_the_reader_run_ahead_across_tables():
    taken = [0]
    first, second = FakeJob(0, 2, 1000, taken), FakeJob(2, 8, 1000, taken)
    big = 8 * 1000 * 20  # room for every batch
    with ReadAhead([first, second], 1000, budget=big, min_batches=1) as ahead:
        # nothing taken yet: the reader decodes both tables to their ends
        with ahead._cond:
            while len(ahead._items) < 12:  # 10 batches and 2 end markers
                ahead._cond.wait()
        assert second.produced_when == [0] * 8
        assert _values(ahead.batches(0)) == [0, 1000]
        assert len(_values(ahead.batches(1))) == 8


def test_reader_error_reaches_the_consumer_after_the_batches_before_it():
    taken = [0]
    jobs = [FakeJob(0, 2, 10, taken), FakeJob(2, 5, 10, taken, fail_after=3)]
    with ReadAhead(jobs, 10, budget=1 << 20) as ahead:
        assert _values(ahead.batches(0)) == [0, 10]
        got = []
        with pytest.raises(OSError, match="disk on fire at batch 3"):
            for batch in ahead.batches(1):
                got.append(batch)
        assert _values(got) == [20, 30, 40]


def test_jobs_must_be_taken_in_order():
    taken = [0]
    with ReadAhead([FakeJob(0, 1, 10, taken), FakeJob(1, 1, 10, taken)], 10, budget=0) as ahead:
        with pytest.raises(ValueError, match="out of order"):
            next(ahead.batches(1))


def test_close_mid_table_stops_the_reader():
    taken = [0]
    job = FakeJob(0, 1000, 10, taken)
    ahead = ReadAhead([job], 10, budget=0, min_batches=2)
    first = next(ahead.batches(0))
    assert _values([first]) == [0]
    ahead.close()
    assert not ahead._thread.is_alive()
    assert len(job.produced_when) < 1000


def test_real_tables_read_ahead_equal_a_direct_read(tmp_path):
    rng = np.random.default_rng(3)
    sources = []
    for t, rows in enumerate((1000, 0, 2500)):
        path = tmp_path / f"t{t}.parquet"
        table = pa.table({"a": pa.array(rng.integers(0, 9, rows)),
                          "s": pa.array([f"v{i % 7}" for i in range(rows)], pa.string())})
        pq.write_table(table, path, row_group_size=700)
        sources.append(TableSource.open(f"t{t}", path))
    jobs = [ReadJob(s, ("a", "s"), ("s",)) for s in sources] + [ReadJob(sources[0], ())]
    with ReadAhead(jobs, 300, budget=4096) as ahead:
        got = [list(ahead.batches(i)) for i in range(len(jobs))]
    for job, batches in zip(jobs, got):
        direct = list(job.batches(300))
        assert len(batches) == len(direct)
        for a, b in zip(batches, direct):
            assert a.equals(b)
    assert got[-1] == []
    assert pa.types.is_dictionary(got[0][0].schema.field("s").type)
    assert sum(b.num_rows for b in got[2]) == 2500


def test_iter_batches_uses_one_reader_thread_and_joins_it(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": pa.array(np.arange(5000))}), path, row_group_size=1000)
    source = TableSource.open("t", path)
    before = {t.name for t in threading.enumerate()}
    it = source.iter_batches(["a"], 700, prefetch=2)
    first = next(it)
    assert first.num_rows == 700
    it.close()  # abandoned early: the reader thread is stopped and joined
    assert {t.name for t in threading.enumerate()} - before == set()
    assert sum(b.num_rows for b in source.iter_batches(["a"], 700)) == 5000


def test_startup_budget_holds_until_the_consumer_is_ready():
    taken = [0]
    rows = 1000
    batch_bytes = rows * 8
    job = FakeJob(0, 40, rows, taken)
    ready = threading.Event()
    with ReadAhead([job], rows, budget=2 * batch_bytes, min_batches=1,
                   startup_budget=10 * batch_bytes, consumer_ready=ready) as ahead:
        # nothing taken, consumer not ready: the reader fills the startup budget, no more
        with ahead._cond:
            filled = ahead._cond.wait_for(lambda: len(ahead._items) >= 10, timeout=30)
            assert filled, f"the reader stopped at {len(ahead._items)} batches"
            assert len(ahead._items) == 10 and ahead._bytes == 10 * batch_bytes
        ready.set()
        got = []
        for batch in ahead.batches(0):
            got.append(batch)
            taken[0] += 1
    lead = [k - seen for k, seen in enumerate(job.produced_when)]
    # the first eleven decoded before the consumer took any (the eleventh then waits for
    # room); once ready, the reader only decodes a batch once the queue is back within the
    # budget: two batches, plus the one being taken
    assert lead[:11] == list(range(11))
    assert max(lead[11:]) <= 3
    assert _values(got) == [i * rows for i in range(40)]


def test_batches_are_decoded_into_the_jemalloc_pool_where_pyarrow_has_it(tmp_path):
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:  # pragma: no cover - builds without jemalloc use the default
        pool = pa.default_memory_pool()
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": pa.array(np.arange(200_000)),
                             "s": pa.array([f"v{i % 5}" for i in range(200_000)])}), path)
    source = TableSource.open("t", path)
    before = pool.bytes_allocated()
    held = list(source.iter_batches(["a", "s"], 50_000, dictionary=["s"]))
    # the int64 values alone are 1.6 MB, held in those batches
    assert pool.bytes_allocated() - before >= 200_000 * 8
    assert sum(b.num_rows for b in held) == 200_000
    assert pa.types.is_dictionary(held[0].schema.field("s").type)


def test_the_public_reader_gives_the_same_batches(tmp_path, monkeypatch):
    """Without pyarrow's pool-taking reader (a future pyarrow may move it), the public
    ``ParquetFile`` reads the same batches, dictionary columns included."""
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": pa.array(np.arange(120_000)),
                             "b": pa.array(np.arange(120_000) * 0.5),
                             "s": pa.array([f"v{i % 7}" for i in range(120_000)])}), path,
                   row_group_size=50_000)
    source = TableSource.open("t", path)
    wanted = list(source.iter_batches(["s", "a"], 30_000, dictionary=["s"]))
    monkeypatch.setattr(source_module, "_PoolParquetReader", None)
    public = list(source.iter_batches(["s", "a"], 30_000, dictionary=["s"]))
    assert [b.num_rows for b in public] == [b.num_rows for b in wanted]
    assert pa.Table.from_batches(public).equals(pa.Table.from_batches(wanted))
    assert pa.types.is_dictionary(public[0].schema.field("s").type)
