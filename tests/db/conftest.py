"""Shared helpers for the database tests: tiny Parquet databases and the bundled example."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dlkit.db import preprocess

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "fixtures" / "example_db"


def write_db(root: Path, tables: dict[str, pa.Table | list[pa.Table]], toml: str) -> Path:
    """Write ``tables`` as Parquet (a list = a directory of parts) and ``dlkit.toml``."""
    root.mkdir(parents=True, exist_ok=True)
    for name, table in tables.items():
        if isinstance(table, list):
            (root / name).mkdir(exist_ok=True)
            for i, part in enumerate(table):
                pq.write_table(part, root / name / f"part-{i:03d}.parquet")
        else:
            pq.write_table(table, root / f"{name}.parquet")
    (root / "dlkit.toml").write_text(toml)
    return root


def leftovers(parent: Path) -> list[str]:
    """Hidden build/lock/old entries that preprocess may leave beside a target."""
    return sorted(p.name for p in parent.iterdir() if ".dlkit-" in p.name)


@pytest.fixture(scope="session")
def example_db(tmp_path_factory) -> Path:
    """The bundled example, preprocessed once per test session (read-only for tests)."""
    out = tmp_path_factory.mktemp("example") / "db"
    preprocess(EXAMPLE, out, fsync=False)
    return out


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server on a Unix socket, for the session (tests/db/postgres_server.py).
    Missing PostgreSQL fails the tests that use it: they are never skipped."""
    from tests.db.postgres_server import start_server

    try:
        server, stop = start_server()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield server
    finally:
        stop()


def example_without_reviews(root: Path) -> Path:
    """The example preprocessed into ``root / "db"`` with an empty reviews table (its schema
    kept): task review_rating has no seed in any split."""
    import shutil
    import warnings

    source = root / "source"
    shutil.copytree(EXAMPLE, source)
    reviews = pq.read_table(source / "reviews.parquet")
    pq.write_table(reviews.slice(0, 0), source / "reviews.parquet")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # preprocess's own (a dangling key of the example)
        preprocess(source, root / "db", fsync=False)
    return root / "db"
