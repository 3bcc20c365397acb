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
