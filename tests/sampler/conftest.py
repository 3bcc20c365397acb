"""The in-memory database most sampler tests draw from (one per test module)."""

from __future__ import annotations

import pytest

from tests.db.conftest import example_db  # noqa: F401 - the built example, once per session
from tests.sampler.fakedb import random_database


@pytest.fixture(scope="module")
def db():
    db = random_database(7, num_tables=4, max_rows=160, num_tasks=3)
    assert all(t.num_seeds >= 60 for t in db.tasks)
    return db
