"""Fixtures of the reader's tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture
def db(example_db, tmp_path) -> Path:
    """A copy of the example database, to corrupt."""
    dst = tmp_path / "db"
    shutil.copytree(example_db, dst)
    return dst
