"""Input tables behind symbolic links that cannot be followed (issue 28): a loop or a link to
nothing is a SchemaError naming it, never "missing" nor a part silently left out."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dlkit.db.write.source import parquet_parts, resolve_table_path
from dlkit.errors import SchemaError

EXAMPLE = Path(__file__).resolve().parents[3] / "fixtures" / "example_db"


def test_a_table_file_in_a_link_loop_is_named(tmp_path):
    (tmp_path / "orders.parquet").symlink_to("again.parquet")
    (tmp_path / "again.parquet").symlink_to("orders.parquet")
    with pytest.raises(SchemaError, match="table 'orders': cannot open: Too many levels") as info:
        resolve_table_path(tmp_path, "orders", None)
    assert str(tmp_path / "orders.parquet") in str(info.value)
    with pytest.raises(SchemaError, match="cannot open: Too many levels"):
        resolve_table_path(tmp_path, "orders", "again.parquet")


def test_a_dangling_link_is_not_called_missing(tmp_path):
    (tmp_path / "orders.parquet").symlink_to("gone.parquet")
    with pytest.raises(SchemaError, match="table 'orders': a symbolic link to nothing"):
        resolve_table_path(tmp_path, "orders", None)
    with pytest.raises(SchemaError, match="missing: no file users.parquet"):
        resolve_table_path(tmp_path, "users", None)


def test_a_part_in_a_link_loop_is_named_not_left_out(tmp_path):
    parts = tmp_path / "products"
    shutil.copytree(EXAMPLE / "products", parts)
    assert [p.name for p in parquet_parts(parts)] == ["part-000.parquet", "part-001.parquet"]
    (parts / "part-002.parquet").symlink_to("part-003.parquet")
    (parts / "part-003.parquet").symlink_to("part-002.parquet")
    with pytest.raises(SchemaError, match="part-002.parquet: table part cannot be opened"):
        parquet_parts(parts)
