"""RelBench's saved layout -> dlkit.toml -> database (dlkit.db.write.relbench, `dlkit import relbench`).

The fixture fixtures/relbench_fake was written by relbench 1.1.0's own code (FakeDataset and
the amazon tasks; fixtures/make_relbench_fake.py), so these tests need no relbench. Expected
keys are RelBench's definitions (relbench/datasets/fake.py, relbench/tasks/amazon.py), written
out here; expected values are read from the Parquet files with pyarrow.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from dlkit.db import open_database
from dlkit.db.schema.spec import parse_schema
from dlkit.db.write.infer import infer_schema
from dlkit.db.write.relbench import (
    RelbenchWarning,
    read_relbench,
    relbench_db_dir,
    relbench_schema,
)
from dlkit.db.write.writer import preprocess
from dlkit.errors import InvalidArgumentError, SchemaError

from ..conftest import REPO

FAKE = REPO / "fixtures" / "relbench_fake"
ENTITY_TASKS = ["item-churn", "user-churn", "user-ltv"]
DAY_US = 86_400 * 10**6
# relbench/tasks/amazon.py: timedelta = pd.Timedelta(days=365 // 4) for all four tasks
AMAZON_TIMEDELTA_US = (365 // 4) * DAY_US


def test_fixture_is_small_and_in_relbench_layout():
    files = sorted(p.relative_to(FAKE).as_posix() for p in FAKE.rglob("*") if p.is_file())
    assert files == ["db/customer.parquet", "db/product.parquet", "db/relations.parquet",
                     "db/review.parquet"] + [f"tasks/{t}/{s}.parquet"
                                             for t in sorted(ENTITY_TASKS + ["user-item-purchase"])
                                             for s in ("test", "train", "val")]
    assert sum((FAKE / f).stat().st_size for f in files) < 500_000
    assert relbench_db_dir(FAKE) == FAKE / "db"
    assert relbench_db_dir(FAKE / "db") == FAKE / "db"  # a bare db directory too
    assert relbench_db_dir(REPO / "fixtures" / "example_db") is None


def test_the_schema_is_relbenchs_own():
    _schema, text = relbench_schema(FAKE, tasks=ENTITY_TASKS)
    doc = tomllib.loads(text)
    tables = doc["tables"]
    assert list(tables) == ["customer", "product", "relations", "review"]
    assert tables["customer"]["primary_key"] == "customer_id"
    assert tables["product"]["primary_key"] == "product_id"
    assert "primary_key" not in tables["review"] and "primary_key" not in tables["relations"]
    assert tables["review"]["time_column"] == "review_time"
    for t in ("customer", "product", "relations"):
        assert "time_column" not in tables[t]
    for t in ("review", "relations"):
        assert tables[t]["foreign_keys"] == {"customer_id": "customer", "product_id": "product"}
        assert tables[t]["path"] == f"db/{t}.parquet"
    assert tables["product"]["exclude"] == ["category"]  # a list column: not supported
    assert tables["product"]["types"] == {"title": "text", "price": "numeric"}
    assert tables["customer"]["types"] == {"age": "numeric", "gender": "categorical"}
    tasks = doc["tasks"]
    assert list(tasks) == ENTITY_TASKS
    entity = {"item-churn": ("product", "product_id", "churn"),
              "user-churn": ("customer", "customer_id", "churn"),
              "user-ltv": ("customer", "customer_id", "ltv")}
    for name, (table, column, target) in entity.items():
        t = tasks[name]
        assert (t["entity_table"], t["entity_column"], t["target"]) == (table, column, target)
        assert t["time_column"] == "timestamp" and t["split"] == "given"
        # churn labels are 0/1 (binary classification in relbench/tasks/amazon.py)
        assert t.get("types") == ({"churn": "boolean"} if target == "churn" else None)
        assert t["path"] == {s: f"tasks/{name}/{s}.parquet" for s in ("train", "val", "test")}
    # the contract's keys, and the lag parses to RelBench's timedelta
    parsed = parse_schema(text)
    assert [t.label_lag_us for t in parsed.tasks] == [AMAZON_TIMEDELTA_US] * 3
    assert [t.split for t in parsed.tasks] == ["given"] * 3
    assert [t.entity_table for t in parsed.tasks] == ["product", "customer", "customer"]


def test_schema_infer_recognises_the_layout(dlkit):
    r = dlkit("schema", "infer", FAKE, "--task", "user-churn")
    assert r.returncode == 0, r.stderr
    assert r.stdout == relbench_schema(FAKE, tasks=["user-churn"])[1]
    assert infer_schema(FAKE, tasks=["user-churn"])[1] == r.stdout
    assert "[tasks.user-churn]" in r.stdout and "user-ltv" not in r.stdout


def test_link_prediction_tasks_are_left_out_or_refused_by_name(dlkit, tmp_path):
    with pytest.warns(RelbenchWarning, match="'user-item-purchase' left out: link prediction"):
        layout = read_relbench(FAKE)
    assert sorted(t.name for t in layout.tasks) == sorted(ENTITY_TASKS)
    with pytest.raises(SchemaError) as info:
        read_relbench(FAKE, tasks=["user-churn", "user-item-purchase"])
    message = str(info.value)
    assert "'user-item-purchase'" in message and "link prediction" in message
    assert "--task user-churn" in message
    r = dlkit("import", "relbench", FAKE, tmp_path / "db", "--task", "user-item-purchase")
    assert r.returncode == 5 and "SCHEMA_INVALID" in r.stderr
    assert "user-item-purchase" in r.stderr and "Traceback" not in r.stderr
    # named alone, the error lists every task that can be imported instead
    assert "choose the others with " + " ".join(
        f"--task {t}" for t in sorted(ENTITY_TASKS)) in " ".join(r.stderr.split())
    r = dlkit("import", "relbench", FAKE, tmp_path / "db", "--no-fsync", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "warning: task 'user-item-purchase' left out" in r.stderr
    with open_database(tmp_path / "db") as db:
        assert sorted(t.name for t in db.tasks) == sorted(ENTITY_TASKS)
    assert not Path("unused-out").exists()


def test_unknown_task_is_named():
    with pytest.raises(InvalidArgumentError, match=r"no task 'nope' in the dataset \(tasks: "
                       r"item-churn, user-churn, user-item-purchase, user-ltv\)$"):
        read_relbench(FAKE, tasks=["nope"])
    with pytest.raises(InvalidArgumentError, match=r"; did you mean 'user-churn'\?$"):
        read_relbench(FAKE, tasks=["user-chrun"])


def _table(path: Path) -> pa.Table:
    return pq.read_table(path)


def _splits(task: str) -> list[pa.Table]:
    return [_table(FAKE / "tasks" / task / f"{s}.parquet") for s in ("train", "val", "test")]


@pytest.fixture(scope="module")
def fake_db(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("relbench") / "db"
    schema, _text = relbench_schema(FAKE, tasks=ENTITY_TASKS)
    preprocess(FAKE, out, schema=schema, fsync=False)
    return out


def test_database_holds_relbenchs_rows_edges_and_tasks(fake_db):
    with open_database(fake_db) as db:
        names = [t.name for t in db.tables]
        assert names == ["customer", "product", "relations", "review", *ENTITY_TASKS]
        for t in ("customer", "product", "relations", "review"):
            assert db.table(t).num_rows == pq.read_metadata(FAKE / "db" / f"{t}.parquet").num_rows
        # RelBench made dangling references null: one edge per non-null key
        expected_edges = 0
        for t in ("relations", "review"):
            data = _table(FAKE / "db" / f"{t}.parquet")
            expected_edges += sum(len(data) - data.column(c).null_count
                                  for c in ("customer_id", "product_id"))
        for name in ENTITY_TASKS:
            rows = _splits(name)
            expected_edges += sum(len(r) for r in rows)  # each task row -> its entity
        assert db.num_edges == expected_edges
        meta = {t["name"]: t for t in db.metadata.to_json()["tasks"]}
        for name in ENTITY_TASKS:
            rows = _splits(name)
            whole = pa.concat_tables(rows)
            task = db.task(name)
            target = [c for c in whole.column_names if c not in ("timestamp", "customer_id",
                                                                  "product_id")][0]
            entity_column = "customer_id" if "customer_id" in whole.column_names else "product_id"
            entity_table = entity_column.removesuffix("_id")
            assert meta[name]["split"] == {"kind": "given", "rows": [len(r) for r in rows]}
            assert meta[name]["label_lag_us"] == AMAZON_TIMEDELTA_US
            assert task.table == name and task.target_column == target
            assert meta[name]["target_stype_name"] == ("boolean" if target == "churn"
                                                       else "numeric")
            # every task row is a seed (no null labels), in file order: train, val, test
            assert task.num_seeds == len(whole)
            np.testing.assert_array_equal(task.anchor_row, np.arange(len(whole)))
            np.testing.assert_array_equal(task.target,
                                          whole.column(target).to_numpy().astype(np.float64))
            micros = pc.cast(whole.column("timestamp"), pa.timestamp("us")).cast(pa.int64())
            np.testing.assert_array_equal(task.obs_time, micros.to_numpy())
            # the anchor's one parent is the entity named in the task row
            base = db.table(name).row_offset
            parent_table = db.table(entity_table)
            entities = whole.column(entity_column).to_pylist()
            for i in range(0, len(whole), 37):
                (parent,) = db.graph.parents(base + i)
                table, local = db.row_of(int(parent))
                assert table.name == entity_table
                assert parent_table.key(local) == entities[i]


def test_import_relbench_is_one_command(dlkit, tmp_path, fake_db):
    out = tmp_path / "db"
    toml = tmp_path / "rb.toml"
    r = dlkit("import", "relbench", FAKE, out, "--task", "item-churn", "--task", "user-churn",
              "--task", "user-ltv", "--schema-out", toml, "--json", "--no-fsync")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["num_tasks"] == 3 and report["num_tables"] == 7
    assert toml.read_text() == relbench_schema(FAKE, tasks=ENTITY_TASKS)[1]
    assert dlkit("verify", out).returncode == 0
    with open_database(out) as mine, open_database(fake_db) as library:
        assert mine.database_hash == library.database_hash  # same build as the library call
    again = dlkit("import", "relbench", FAKE, out, "--task", "user-ltv", "-q", "--no-fsync")
    assert again.returncode == 6 and "--overwrite" in again.stderr
    # the written schema builds the same database with plain preprocess
    r = dlkit("preprocess", FAKE, tmp_path / "db2", "--schema", toml, "-q", "--no-fsync")
    assert r.returncode == 0, r.stderr
    with open_database(out) as a, open_database(tmp_path / "db2") as b:
        assert a.database_hash == b.database_hash


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "rel-fake"
    shutil.copytree(FAKE, root)
    shutil.rmtree(root / "tasks" / "user-item-purchase")
    return root


def test_broken_layouts_are_named(tmp_path):
    root = _copy(tmp_path)
    (root / "tasks" / "user-ltv" / "test.parquet").unlink()
    with pytest.raises(SchemaError, match=r"task 'user-ltv': no test.parquet"):
        read_relbench(root)

    root = _copy(tmp_path / "b")
    pq.write_table(pa.table({"x": [1]}), root / "db" / "plain.parquet")
    with pytest.raises(SchemaError, match=r"has RelBench's key metadata .* but plain.parquet "
                                          r"has not"):
        read_relbench(root)

    root = _copy(tmp_path / "c")
    review = pq.read_table(root / "db" / "review.parquet")
    meta = dict(review.schema.metadata)
    meta[b"time_col"] = json.dumps("when").encode()
    pq.write_table(review.replace_schema_metadata(meta), root / "db" / "review.parquet")
    with pytest.raises(SchemaError, match=r"review.parquet: the metadata names column 'when'"):
        read_relbench(root)

    root = _copy(tmp_path / "d")
    train = pq.read_table(root / "tasks" / "user-ltv" / "train.parquet")
    pq.write_table(train.drop_columns(["ltv"]).replace_schema_metadata(train.schema.metadata),
                   root / "tasks" / "user-ltv" / "train.parquet")
    with pytest.raises(SchemaError, match=r"task 'user-ltv': val.parquet has other columns"):
        read_relbench(root)
    for split in ("val", "test"):  # test files saved without their labels
        path = root / "tasks" / "user-ltv" / f"{split}.parquet"
        data = pq.read_table(path)
        pq.write_table(data.drop_columns(["ltv"]).replace_schema_metadata(data.schema.metadata),
                       path)
    with pytest.raises(SchemaError, match=r"task 'user-ltv': expected one label column"):
        read_relbench(root)


def test_a_table_named_like_a_task_is_refused(tmp_path):
    root = _copy(tmp_path)
    shutil.copytree(root / "tasks" / "user-ltv", root / "tasks" / "Review")
    with pytest.raises(SchemaError, match=r"task 'Review' has the name of a table"):
        read_relbench(root, tasks=["Review"])
