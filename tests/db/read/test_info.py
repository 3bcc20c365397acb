"""``database_info`` against the source tables, read independently with pyarrow: row counts,
time ranges, foreign-key edges, nulls, dangling keys and children per parent row."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from dlkit.db import open_database
from dlkit.db.read.info import Degrees, database_info
from tests.db.conftest import EXAMPLE

SOURCE = {"users": EXAMPLE / "users.parquet", "products": EXAMPLE / "products",
          "orders": EXAMPLE / "orders.parquet", "reviews": EXAMPLE / "reviews.parquet"}
TIMES = {"users": "signup_time", "orders": "ordered_at", "reviews": "created_at"}
KEYS = {"users": "user_id", "products": "product_id"}


def _table(name):
    return ds.dataset(SOURCE[name], format="parquet").to_table() if SOURCE[name].is_dir() \
        else pq.read_table(SOURCE[name])


@pytest.fixture(scope="module")
def info(example_db):
    with open_database(example_db) as db:
        return database_info(db, seeds_per_split={"review_rating": {"train": 1}})


def test_tables_match_the_source(info):
    by_name = {t.name: t for t in info.tables}
    assert list(by_name) == list(SOURCE)
    for name in SOURCE:
        source = _table(name)
        assert by_name[name].num_rows == source.num_rows
        if name in TIMES:
            us = pc.cast(source[TIMES[name]], pa.timestamp("us", tz="UTC"))
            times = pc.cast(us, pa.int64()).to_numpy(zero_copy_only=False)
            assert by_name[name].time_range.first_us == int(times.min())
            assert by_name[name].time_range.last_us == int(times.max())
            assert by_name[name].time_range.num_without_time == 0
        else:
            assert by_name[name].time_range.first_us is None
            assert by_name[name].time_range.num_without_time == source.num_rows
    assert info.num_rows == sum(t.num_rows for t in info.tables)


@pytest.mark.parametrize("child, column, parent", [
    ("orders", "user_id", "users"), ("orders", "product_id", "products"),
    ("reviews", "user_id", "users"), ("reviews", "product_id", "products")])
def test_foreign_key_degrees_match_a_plain_count(info, child, column, parent):
    fk = next(f for f in info.foreign_keys if (f.table, f.column) == (child, column))
    values = _table(child)[column].to_pylist()
    keys = _table(parent)[KEYS[parent]].to_pylist()
    known = set(keys)
    linked = [v for v in values if v is not None and v in known]
    assert fk.parent == parent
    assert fk.num_null == sum(v is None for v in values)
    assert fk.num_dangling == sum(v is not None and v not in known for v in values)
    assert fk.num_edges == len(linked)
    per_parent = Counter(linked)
    counts = np.array([per_parent.get(k, 0) for k in keys])
    assert fk.children_per_parent == Degrees(float(np.percentile(counts, 50)),
                                             float(np.percentile(counts, 99)),
                                             int(counts.max()), float(counts.mean()))
    assert fk.linked_share == pytest.approx(len(linked) / len(values))
    assert fk.shared_with == ()


def test_tasks_embeddings_and_identity(info, example_db):
    assert [t.name for t in info.tasks] == ["review_rating", "order_status", "user_premium"]
    rating = info.tasks[0]
    ratings = _table("reviews")["rating"]
    assert rating.num_seeds == len(ratings) - ratings.null_count
    assert (rating.target_type, rating.split_rule, rating.boundary) == ("numeric", "hash",
                                                                        "inclusive")
    assert rating.seeds_per_split == {"train": 1}
    assert info.tasks[1].seeds_per_split == {}
    manifest = (example_db / "manifest.json").read_text()
    assert info.database_hash in manifest
    assert info.size_bytes == sum(p.stat().st_size for p in example_db.rglob("*") if p.is_file())
    assert info.embeddings.embedder == "hashed-char-ngram"
    assert info.to_json()["foreign_keys"][0]["children_per_parent"]["max"] >= 1


def test_degrees_of_no_rows():
    assert Degrees.of(np.zeros(0, dtype=np.int64)) == Degrees(0.0, 0.0, 0, 0.0)


def test_lagged_columns_and_aggregate_cells_are_listed(tmp_path, dlkit):
    """Each table's known_after columns and the aggregate cells its rows hold, as the
    dlkit.toml declares them, in --json and in the text."""
    from dlkit.db import preprocess
    from tests.db.conftest import write_db

    users = pa.table({"uid": [0, 1], "t": pa.array([0, 0], pa.timestamp("s", tz="UTC"))})
    orders = pa.table({"oid": [0, 1, 2], "uid": [0, 1, 1], "amount": [1.0, 2.0, 3.0],
                       "t": pa.array([1, 2, 3], pa.timestamp("s", tz="UTC"))})
    src = write_db(tmp_path / "src", {"users": users, "orders": orders}, """
[tables.users]
primary_key = "uid"
time_column = "t"
[tables.orders]
primary_key = "oid"
time_column = "t"
foreign_keys = { uid = "users" }
known_after = { amount = "36h" }
[aggregates]
counts = true
recency = true
columns = { orders = ["amount"] }
""")
    preprocess(src, tmp_path / "db", fsync=False)
    with open_database(tmp_path / "db") as db:
        tables = {t.name: t for t in database_info(db).tables}
    assert tables["orders"].known_after_us == {"amount": 36 * 3600 * 10**6}
    assert tables["orders"].aggregate_cells == () and tables["users"].known_after_us == {}
    assert tables["users"].aggregate_cells == (
        "number of orders of users", "days since the last orders of users",
        "sum of amount of orders of users", "mean of amount of orders of users")
    text = dlkit("info", tmp_path / "db")
    assert text.returncode == 0, text.stderr
    assert "orders: known after their row's time: amount 36h" in text.stdout
    assert ("users: 4 aggregate cells per row: number of orders of users, days since the last "
            "orders of users,") in text.stdout
