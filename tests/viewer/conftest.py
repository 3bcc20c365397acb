"""The viewer's tests use the bundled example database, built once per session."""

from tests.db.conftest import example_db  # noqa: F401 - the session fixture
