"""Fixtures the CLI tests share with the database tests."""

from tests.db.conftest import example_db  # noqa: F401 - the built example, once per session
