"""The sampler's database Protocol: the tests' in-memory database satisfies it (the reader's
``Database`` does too: tests/sampler/test_real_database.py), and something else does not."""

from __future__ import annotations

import dataclasses

import pytest

from dlkit.errors import DatabaseError
from dlkit.sampler import SamplerDatabase
from dlkit.sampler.database import (
    SamplerColumn,
    SamplerGraph,
    SamplerTable,
    SamplerTask,
    open_db,
)
from tests.sampler.fakedb import FakeDatabase, random_database


def assert_is_a_sampler_database(db):
    """Every member the sampler reads, at every level."""
    assert isinstance(db, SamplerDatabase)
    assert isinstance(db.graph, SamplerGraph)
    assert db.tables and all(isinstance(table, SamplerTable) for table in db.tables)
    columns = [column for table in db.tables for column in table.columns]
    assert columns and all(isinstance(column, SamplerColumn) for column in columns)
    assert db.tasks and all(isinstance(task, SamplerTask) for task in db.tasks)


def test_the_fake_database_satisfies_the_protocol():
    assert_is_a_sampler_database(random_database(3, num_tasks=2))


@pytest.mark.parametrize("missing", ["graph", "tasks", "database_hash", "metadata"])
def test_a_database_without_a_member_the_sampler_reads_is_not_one(missing):
    fields = {f.name: getattr(random_database(3), f.name)
              for f in dataclasses.fields(FakeDatabase) if f.name != missing}
    lacking = dataclasses.make_dataclass("Lacking", list(fields))(**fields)
    assert not isinstance(lacking, SamplerDatabase)


def test_open_db_passes_an_open_database_through_and_opens_a_path(tmp_path):
    db = random_database(3)
    assert open_db(db) == (db, False)
    with pytest.raises(DatabaseError, match="no such directory"):
        open_db(tmp_path / "nothing here")  # a path is opened (and this one is missing)
