"""Tasks exact about time, end to end: task tables, time and given splits, label lags,
boundaries and static tables, from Parquet through preprocess to batches."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dlkit.db import open_database, preprocess
from dlkit.db.read.reader import check_database
from dlkit.db.schema.durations import parse_duration
from dlkit.db.schema.render import render_schema
from dlkit.db.schema.spec import parse_schema
from dlkit.errors import DatabaseError, SchemaError
from dlkit.sampler import Sampler, SamplerWarning
from dlkit.sampler.run_manifest import write_run_manifest
from tests.db.conftest import EXAMPLE
from tests.db.read.test_verify_content import rehash

HOUR = 3_600_000_000
DAY = 24 * HOUR
T0 = 1_700_000_000_000_000  # microseconds


def micros(values):
    return pa.array(np.asarray(values, dtype=np.int64), pa.timestamp("us"))


def write_shop(root: Path, seed: int = 0, num_users: int = 40, num_events: int = 400) -> dict:
    """users, their events, and churn task rows in three split files (all times in us)."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    signup = T0 + rng.integers(0, 10 * DAY, num_users)
    pq.write_table(pa.table({"user_id": np.arange(num_users), "signup": micros(signup),
                             "age": rng.integers(18, 80, num_users)}), root / "users.parquet")
    event_user = rng.integers(0, num_users, num_events)
    event_time = signup[event_user] + rng.integers(0, 60 * DAY, num_events)
    pq.write_table(pa.table({"event_id": np.arange(num_events), "user_id": event_user,
                             "at": micros(event_time),
                             "amount": rng.normal(50, 10, num_events),
                             "refunded": rng.random(num_events) < 0.3}),
                   root / "events.parquet")
    parts = {}
    (root / "churn").mkdir(exist_ok=True)
    for k, split in enumerate(("train", "val", "test")):
        n = (30, 12, 9)[k]
        times = T0 + (20 + 15 * k) * DAY + rng.integers(0, 15 * DAY, n)
        users = rng.integers(0, num_users, n)
        churn = rng.random(n) < 0.4
        pq.write_table(pa.table({"user_id": users, "timestamp": micros(times),
                                 "churn": churn}), root / "churn" / f"{split}.parquet")
        parts[split] = (users, times, churn)
    return parts


SCHEMA = """
name = "shop"
[tables.users]
primary_key = "user_id"
time_column = "signup"
[tables.events]
primary_key = "event_id"
time_column = "at"
foreign_keys = { user_id = "users" }

[tasks.churn]
entity_table = "users"
entity_column = "user_id"
time_column = "timestamp"
target = "churn"
split = "given"
label_lag = "7d"
path = { train = "churn/train.parquet", val = "churn/val.parquet", test = "churn/test.parquet" }

[tasks.refund]
table = "events"
target = "refunded"
split = "time"
val_from = 2023-12-05
test_from = "2023-12-20T00:00:00"
label_lag = "2d"
boundary = "strict"
"""


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    root = tmp_path_factory.mktemp("shop")
    parts = write_shop(root / "in")
    (root / "in" / "dlkit.toml").write_text(SCHEMA)
    preprocess(root / "in", root / "db", fsync=False)
    return root, parts


def test_schema_round_trips_through_its_rendering():
    schema = parse_schema(SCHEMA)
    assert parse_schema(render_schema(schema)) == schema
    churn, refund = schema.tasks
    assert (churn.table, churn.entity_table, churn.split, churn.label_lag_us) == (
        "churn", "users", "given", 7 * DAY)
    assert schema.table("churn").foreign_keys == (("user_id", "users"),)
    assert (refund.split, refund.strict, refund.label_lag_us) == ("time", True, 2 * DAY)
    assert refund.val_from_us == 1_701_734_400_000_000  # 2023-12-05T00:00Z
    assert refund.test_from_us == 1_703_030_400_000_000  # 2023-12-20T00:00Z


@pytest.mark.parametrize("text,us", [("0", 0), ("6h", 6 * HOUR), ("1d12h", 36 * HOUR),
                                     ("90s", 90_000_000), ("250ms", 250_000), ("3 w", 21 * DAY),
                                     ("15us", 15)])
def test_durations(text, us):
    assert parse_duration(text, "lag", "x") == us


@pytest.mark.parametrize("bad", ["6", "h", "-1h", "1.5h", "6h x", "", 6, "1y"])
def test_bad_durations_are_named(bad):
    with pytest.raises(SchemaError, match="label_lag must be a duration"):
        parse_duration(bad, "label_lag", "x")


def test_a_duration_too_long_says_so():
    parse_duration("53375995d", "label_lag", "x")  # 2^62 us is about 53,375,995.6 days
    with pytest.raises(SchemaError, match=r"label_lag '53375996d' is too long: at most "
                                          r"53,375,995d"):
        parse_duration("53375996d", "label_lag", "x")


@pytest.mark.parametrize("task,message", [
    ('table = "users"\ntarget = "age"\nsplit = "time"\nval_from = 2024-01-01',
     "needs val_from and test_from"),
    ('table = "users"\ntarget = "age"\nsplit = "time"\nval_from = 2024-02-01\n'
     'test_from = 2024-01-01', "test_from is before val_from"),
    ('table = "users"\ntarget = "age"\nsplit = "given"', "given split needs table"),
    ('table = "users"\ntarget = "age"\nsplit = "random"', "split must be one of"),
    ('table = "users"\ntarget = "age"\nboundary = "open"', "boundary must be"),
    ('table = "users"\ntarget = "age"\nstatic = true', "has a time column"),
    ('table = "users"\ntarget = "age"\nval_from = 2024-01-01', "applies to split"),
    ('table = "plain"\ntarget = "x"\nlabel_lag = "1h"', "label_lag needs a time column"),
    ('table = "plain"\ntarget = "x"\nsplit = "time"\nval_from = 2024-01-01\n'
     'test_from = 2024-02-01', "time split needs a time column"),
    ('entity_table = "users"\nentity_column = "user_id"\ntarget = "y"',
     "task table needs a time_column"),
    ('entity_table = "users"\nentity_column = "user_id"\ntime_column = "t"\ntable = "users"\n'
     'target = "y"', "drop 'table'"),
    ('kind = "link"\nentity_table = "users"\nentity_column = "user_id"\ntarget = "y"',
     'kind must be "table"'),
])
def test_bad_task_rules_are_schema_errors(task, message):
    text = ('[tables.users]\nprimary_key = "user_id"\ntime_column = "t"\n'
            '[tables.plain]\nprimary_key = "id"\n[tasks.t]\n' + task)
    with pytest.raises(SchemaError, match=message):
        parse_schema(text)


def test_given_split_task_table_end_to_end(shop):
    root, parts = shop
    with open_database(root / "db") as db:
        task = db.task("churn")
        assert task.rules.split == "given" and task.rules.split_rows == (30, 12, 9)
        assert task.rules.label_lag_us == 7 * DAY
        table = db.table("churn")
        assert table.num_rows == 51 and table.primary_key is None
    with Sampler(root / "db", 0, 1, batch_size=4, num_prefetch=0,
                 task_weights={"churn": 1}) as s:
        assert s.eval_steps("val", task="churn") == 3
        for split, (users, times, churn) in parts.items():
            first = {"train": 0, "val": 30, "test": 42}[split]
            anchors, labels, obs = [], [], []
            for batch in s.iter_eval(split, task="churn"):
                real = batch["sequence_mask"] == 1
                anchors += batch["anchor_rows"][real].tolist()
                labels += batch["labels"][real].tolist()
                obs += batch["observation_times"][real].tolist()
                # The anchor is the task row; its entity (the user) is its only parent.
                assert (batch["fk_adj"][real, 0, 1] == 1).all()
            # Every task row of the split's file, in file order, with its label and time.
            assert anchors == list(range(first, first + len(users)))
            assert labels == churn.astype(np.float32).tolist()
            assert obs == times.tolist()


def test_time_split_and_strict_boundary_end_to_end(shop):
    root, _ = shop
    events = pq.read_table(root / "in" / "events.parquet")
    at = events.column("at").cast(pa.int64()).to_numpy()
    val_from, test_from = 1_701_734_400_000_000, 1_703_030_400_000_000
    with Sampler(root / "db", 0, 1, batch_size=8, num_prefetch=0,
                 task_weights={"refund": 1}) as s:
        for split, rows in (("train", at < val_from),
                            ("val", (at >= val_from) & (at < test_from)),
                            ("test", at >= test_from)):
            got = [a for b in s.iter_eval(split, task="refund")
                   for a in b["anchor_rows"][b["sequence_mask"] == 1].tolist()]
            assert got == np.flatnonzero(rows).tolist(), split
        # strict: no row of the sequence is at the observation time, except the seed itself
        builder = s.builder
        view = builder.task("refund")
        built = builder.build(view, np.arange(view.num_seeds), epoch=0)
        times = np.asarray(open_database(root / "db").graph.row_times)
        for b in range(view.num_seeds):
            rows = built.visited_rows[b, 1:built.visited_counts[b]]
            assert (times[rows] < view.obs_time[b]).all()


def test_label_lags_hide_unknown_labels_in_every_sequence(shop):
    """A not-yet-known churn label is hidden in sequences of the refund task too, and a
    zero lag would have shown it: the count the note quotes."""
    root, _ = shop
    with open_database(root / "db") as db:
        times = np.asarray(db.graph.row_times)
        churn_table = db.table("churn")
        churn_column = churn_table.column("churn").column_id
        hidden = shown = 0
        with Sampler(db, 0, 1, batch_size=16, num_prefetch=0, sequence_length=256,
                     max_rows=64, bfs_child_width=32) as s:
            for task in ("churn", "refund"):
                view = s.builder.task(task)
                built = s.builder.build(view, np.arange(view.num_seeds), epoch=0)
                a = built.arrays
                cells = (a["column_ids"] == churn_column) & (a["is_target"] == 0) & \
                    (a["is_padding"] == 0)
                for b, p in zip(*np.nonzero(cells)):
                    row = built.visited_rows[b, a["seq_row_ids"][b, p]]
                    known = times[row] + 7 * DAY <= view.obs_time[b]
                    assert a["is_hidden"][b, p] == (not known)
                    hidden += not known
                    shown += bool(known)
    assert hidden > 0 and shown > 0


def test_a_table_without_time_warns_unless_static(tmp_path):
    write_shop(tmp_path / "in")
    text = ('name = "s"\n[tables.users]\nprimary_key = "user_id"\nexclude = ["signup"]\n'
            '[tasks.age]\ntable = "users"\ntarget = "age"\n')
    (tmp_path / "in" / "dlkit.toml").write_text(text)
    report = preprocess(tmp_path / "in", tmp_path / "db", fsync=False)
    assert any("task 'age'" in w and "no time column" in w for w in report.warnings)
    with pytest.warns(SamplerWarning, match="task 'age'.*no time column"):
        write_run_manifest(tmp_path / "db", tmp_path / "run.json", seed=1,
                           global_batch_size=4)
    (tmp_path / "in" / "dlkit.toml").write_text(text + "static = true\n")
    report = preprocess(tmp_path / "in", tmp_path / "db2", fsync=False)
    assert not any("no time column" in w for w in report.warnings)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SamplerWarning)
        write_run_manifest(tmp_path / "db2", tmp_path / "run2.json", seed=1,
                           global_batch_size=4)
    meta = json.loads((tmp_path / "db2" / "metadata.json").read_text())
    assert meta["tasks"][0]["static"] is True


def test_the_run_manifest_names_each_split_rule(shop, tmp_path):
    root, _ = shop
    summary = write_run_manifest(root / "db", tmp_path / "run.json", seed=3,
                                 global_batch_size=4)
    doc = json.loads((tmp_path / "run.json").read_text())
    versions = {key: e["version"] for key, e in doc["datasets"].items()}
    assert versions["shop/churn/val"] == "given-split-v1 rows=30/12/9"
    assert versions["shop/refund/test"] == ("time-split-v1 val_from=1701734400000000 "
                                            "test_from=1703030400000000")
    assert summary.datasets["shop/churn/test"] == 9


def test_bad_rules_in_metadata_are_refused_by_name(shop, tmp_path):
    root, _ = shop
    import shutil

    for change, message in ((lambda t: t.update(label_lag_us=0), "label_lag_us must be"),
                            (lambda t: t.update(boundary="open"), "boundary must be"),
                            (lambda t: t["split"].update(rows=[1, 2, 3]), "adding up to"),
                            (lambda t: t.update(split={"kind": "random"}), "split must be")):
        copy = tmp_path / "db"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(root / "db", copy)
        meta = json.loads((copy / "metadata.json").read_text())
        change(meta["tasks"][0])
        (copy / "metadata.json").write_text(json.dumps(meta, indent=2))
        rehash(copy)
        with pytest.raises(DatabaseError, match=message):
            open_database(copy)
        failures = check_database(copy, verify_hashes=False)
        assert any(message in failure.message for failure in failures), failures


def test_a_schema_without_the_rules_builds_the_same_database(tmp_path):
    """The bundled example (no lag, boundary, static or split key) hashes as it did before
    those keys existed: this digest was produced at commit af9f521, before them."""
    report = preprocess(EXAMPLE, tmp_path / "db", fsync=False)
    assert report.database_hash == ("e651bca299f45504885e7f5a91d63f62016b5114028b1cf15b30f7c8"
                                    "22c923b8")


def test_show_marks_values_not_known_yet(shop):
    from dlkit.sampler.inspect import HIDDEN, describe_sequence

    root, _ = shop
    marked = 0
    with open_database(root / "db") as db:
        for anchor in range(0, 51, 5):
            view = describe_sequence(db, "churn", anchor)
            for row in view.rows:
                for cell in row.cells:
                    assert (cell.value == HIDDEN) == cell.is_hidden
                    if cell.is_hidden:
                        assert (row.table, cell.column) in {("churn", "churn"),
                                                            ("events", "refunded")}
                        marked += 1
    assert marked > 0
