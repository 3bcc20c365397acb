"""Hostile RelBench inputs (issue 28): each is one SchemaError naming the file, or a clean
import, never a traceback nor a table silently left out."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dlkit.db.write.relbench import read_relbench, relbench_schema
from dlkit.errors import SchemaError

FAKE = Path(__file__).resolve().parents[3] / "fixtures" / "relbench_fake"
ENTITY_TASKS = ["user-ltv", "user-churn"]


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "rel"
    shutil.copytree(FAKE, root)
    shutil.rmtree(root / "tasks" / "user-item-purchase")
    return root


def _relabel(root: Path, task: str, column: str, make) -> None:
    for split in ("train", "val", "test"):
        path = root / "tasks" / task / f"{split}.parquet"
        table = pq.read_table(path)
        i = table.schema.get_field_index(column)
        table = table.set_column(i, column, make(table.num_rows))
        pq.write_table(table.replace_schema_metadata(table.schema.metadata), path)


@pytest.mark.parametrize("values, binary", [
    (lambda n: pa.array([2**64 - 1 - i for i in range(n)], pa.uint64()), False),
    (lambda n: pa.array([i % 2 for i in range(n)], pa.uint64()), True),
    (lambda n: pa.array([None] * n, pa.uint64()), True),
    (lambda n: pa.array([i % 2 == 0 for i in range(n)]), True),
    (lambda n: pa.array([-(i % 2) for i in range(n)], pa.int8()), False),
])
def test_integer_labels_of_any_width_are_classified_without_casting(tmp_path, values, binary):
    root = _copy(tmp_path)
    _relabel(root, "user-churn", "churn", values)
    task = next(t for t in read_relbench(root, tasks=["user-churn"]).tasks)
    # the plain definition: every non-null label is 0 or 1
    labels = [v for v in values(3).to_pylist() if v is not None]
    assert task.binary == binary == all(int(v) in (0, 1) for v in labels)


@pytest.mark.parametrize("key", [b"pkey_col", b"time_col", b"fkey_col_to_pkey_table"])
def test_deeply_nested_json_metadata_is_a_schema_error(tmp_path, key):
    root = _copy(tmp_path)
    path = root / "db" / "review.parquet"
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    meta[key] = ("[" * 200_000 + "]" * 200_000).encode()
    pq.write_table(table.replace_schema_metadata(meta), path)
    with pytest.raises(SchemaError, match=f"{key.decode()}' is nested too deeply") as info:
        read_relbench(root)
    assert str(path) in str(info.value)


def test_a_table_file_that_is_a_directory_is_named_not_left_out(tmp_path):
    root = _copy(tmp_path)
    path = root / "db" / "product.parquet"
    table = pq.read_table(path)
    path.unlink()
    path.mkdir()
    pq.write_table(table, path / "part-0.parquet")
    with pytest.raises(SchemaError, match="is a directory: a RelBench table is one Parquet"):
        read_relbench(root)


def test_a_symbolic_link_loop_among_tables_is_named(tmp_path):
    root = _copy(tmp_path)
    (root / "db" / "product.parquet").unlink()
    (root / "db" / "loop.parquet").symlink_to("product.parquet")
    (root / "db" / "product.parquet").symlink_to("loop.parquet")
    with pytest.raises(SchemaError, match="cannot open: Too many levels of symbolic links"):
        read_relbench(root)


def test_decimal_nan_and_list_inputs_import_or_are_refused_by_name(tmp_path):
    import decimal

    root = _copy(tmp_path)
    _relabel(root, "user-ltv", "ltv", lambda n: pa.array(
        [decimal.Decimal(f"{i}.25") for i in range(n)], pa.decimal128(30, 2)))
    _relabel(root, "user-churn", "churn", lambda n: pa.array([float("nan")] * n))
    path = root / "db" / "review.parquet"
    table = pq.read_table(path)
    table = table.append_column("tags", pa.array([["a", "b"]] * table.num_rows))
    pq.write_table(table.replace_schema_metadata(table.schema.metadata), path)
    _draft, text = relbench_schema(root, tasks=ENTITY_TASKS)
    assert "user-ltv" in text and "user-churn" in text
    _relabel(root, "user-ltv", "ltv", lambda n: pa.array([[1.0]] * n))
    with pytest.raises(SchemaError, match="label column 'ltv' has type list"):
        read_relbench(root)
