"""Resident databases: several open in one process, each with its own records."""

from __future__ import annotations

import numpy as np
import pytest

from dlkit.core.records import Walk
from dlkit.sampler import Sampler
from dlkit.sampler.batch import build_batch
from dlkit.sampler.resident import place, read_resident
from tests.sampler.fakedb import random_database

SMALL = dict(sequence_length=48, max_rows=12, bfs_child_width=3, split_seed=5, seed=11)


def _bytes(batch: dict[str, np.ndarray]) -> list[tuple[str, str, tuple[int, ...], bytes]]:
    return [(key, str(a.dtype), a.shape, a.tobytes()) for key, a in batch.items()]


def _pulls(sampler: Sampler) -> list:
    return ([_bytes(sampler.next_train_batch()) for _ in range(3)]
            + [_bytes(sampler.next_val_batch())])


@pytest.mark.parametrize("huge_pages", [False, True])
def test_two_databases_in_one_process_sample_as_each_alone(huge_pages):
    """Two different databases open side by side, their batches pulled in turn, give byte for
    byte the batches (and states) each gives alone."""
    dbs = [random_database(3, num_tables=3, max_rows=200, num_tasks=2),
           random_database(17, num_tables=4, max_rows=200, num_tasks=3)]
    kwargs = dict(batch_size=2, num_prefetch=0, huge_pages=huge_pages, **SMALL)
    alone = []
    for db in dbs:
        with Sampler(db, 0, 1, **kwargs) as s:
            alone.append((_pulls(s), s.state_dict()))
    assert alone[0][0] != alone[1][0]  # different databases: different batches
    with Sampler(dbs[0], 0, 1, **kwargs) as a, Sampler(dbs[1], 0, 1, **kwargs) as b:
        assert a.builder.resident is not b.builder.resident
        together: list[list] = [[], []]
        for _ in range(3):  # interleaved pulls
            together[0].append(_bytes(a.next_train_batch()))
            together[1].append(_bytes(b.next_train_batch()))
        together[0].append(_bytes(a.next_val_batch()))
        together[1].append(_bytes(b.next_val_batch()))
        assert (together[0], a.state_dict()) == alone[0]
        assert (together[1], b.state_dict()) == alone[1]


def test_batches_are_functions_of_the_resident_database_and_the_job():
    """build_batch over two residents at once, each placed its own way, equals each alone."""
    dbs = [random_database(5, num_tables=3, max_rows=50), random_database(8, num_tables=3,
                                                                        max_rows=70)]
    mapped = [read_resident(db) for db in dbs]
    copied = [place(read_resident(db), True) for db in dbs]
    assert [r.memory_path for r in mapped + copied] == ["mmap"] * 2 + ["private"] * 2
    walk = Walk(child_width=3, max_cells=48, max_rows=12)
    for k in range(2):
        for task in mapped[k].tasks:
            idx = np.arange(task.num_seeds)
            one = build_batch(mapped[k], walk, 4, task, idx, 2).arrays
            other = build_batch(copied[k], walk, 4, copied[k].task(task.name), idx,
                                2).arrays
            third = build_batch(mapped[1 - k], walk, 4, mapped[1 - k].tasks[0],
                                np.arange(mapped[1 - k].tasks[0].num_seeds), 2).arrays
            assert _bytes(one) == _bytes(other)
            assert _bytes(third) != _bytes(one)
