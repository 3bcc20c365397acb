"""benchmarks/real_data.py: its JSON report on a tiny planted database, and its GBDT features
against a plain-Python per-seed computation (random schemas with time ties, null times,
dangling keys, label lags and both boundaries; and the planted database's own seeds)."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.examples.launch import PYTHON, REPO, clean_env

SCRIPT = REPO / "benchmarks" / "real_data.py"
DAY_US = 86_400 * 10**6


def _module():
    name = "dlkit_benchmark_real_data"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


rd = _module()


# --- the plain-Python reference ----------------------------------------------------------------


def _micros(value: Any) -> int | None:
    if value is None:
        return None
    return int(value.timestamp() * 10**6) if hasattr(value, "timestamp") else int(value)


def _cell(value: Any, stype: str, categories: list[Any]) -> float:
    if value is None:
        return math.nan
    if stype == "categorical":
        return float(categories.index(value))
    if stype == "timestamp":
        return _micros(value) / DAY_US
    return float(value)


def naive_features(schema, task_table: str, target: str, anchor: int, obs: int | None,
                   strict: bool) -> dict[str, float]:
    """One seed's features, by scanning the rows as Python objects."""
    T = obs if obs is not None else 2**63 - 1
    cut = T - 1 if strict and obs is not None else T
    rows = {name: t.data.to_pylist() for name, t in schema.tables.items()}

    def time_of(table, row) -> int | None:
        return None if table.time_column is None else _micros(row[table.time_column])

    def categories(table, column) -> list[Any]:
        return sorted({r[column.name] for r in rows[table.name]} - {None})

    def hidden(table, column, t) -> bool:
        lag = schema.lags.get((table.name, column))
        return lag is not None and t is not None and t + lag > T

    out: dict[str, float] = {}

    def add_row(table, row, prefix, skip=None, visible=True):
        for column in table.columns:
            if column.name == skip or column.stype == "text":
                continue
            value = math.nan
            if row is not None and visible and not hidden(table, column.name,
                                                            time_of(table, row)):
                value = _cell(row[column.name], column.stype, categories(table, column))
            out[f"{prefix}{column.name}"] = value

    def add_children(parent_name, key, prefix):
        for child in schema.tables.values():
            for fk, p in child.foreign_keys:
                if p != parent_name:
                    continue
                kids = [(i, r) for i, r in enumerate(rows[child.name])
                        if key is not None and r[fk] == key]
                seen = [(i, r) for i, r in kids
                        if time_of(child, r) is None or time_of(child, r) <= cut]
                name = f"{prefix}{child.name}.{fk}"
                out[f"{name}:count"] = float(len(seen))
                times = [time_of(child, r) for _, r in seen if time_of(child, r) is not None]
                out[f"{name}:days_since_last"] = (
                    (T - max(times)) / DAY_US if times and obs is not None else math.nan)
                for column in child.columns:
                    if column.stype not in ("numeric", "boolean"):
                        continue
                    vals = [float(r[column.name]) for i, r in seen
                            if r[column.name] is not None
                            and not hidden(child, column.name, time_of(child, r))
                            and not (child.name == task_table and column.name == target
                                     and i == anchor)]
                    out[f"{name}.{column.name}:sum"] = float(sum(vals))
                    out[f"{name}.{column.name}:mean"] = (sum(vals) / len(vals) if vals
                                                         else math.nan)

    table = schema.tables[task_table]
    row = rows[task_table][anchor]
    add_row(table, row, "", skip=target)
    if table.primary_key is not None:
        add_children(task_table, row[table.primary_key], "self<-")
    for fk, parent_name in table.foreign_keys:
        parent = schema.tables[parent_name]
        match = [r for r in rows[parent_name]
                 if row[fk] is not None and r[parent.primary_key] == row[fk]]
        prow = match[0] if match else None
        visible = prow is not None and (time_of(parent, prow) is None
                                        or time_of(parent, prow) <= cut)
        add_row(parent, prow, f"{fk}->{parent_name}.", visible=visible)
        key = prow[parent.primary_key] if prow is not None else None
        add_children(parent_name, key, f"{fk}->{parent_name}<-")
    return out


def assert_same(features, index: int, expected: dict[str, float]) -> None:
    assert features.names == list(expected), "feature names or order differ"
    got = features.values[index]
    want = np.array(list(expected.values()), np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9, equal_nan=True)


# --- random schemas ------------------------------------------------------------------------------


def random_schema(rng: np.random.Generator, lag: int | None):
    """users <- orders <- items, orders -> shops (no time): few distinct times (ties), null
    times, null and dangling keys, null values; the task is orders.score with ``lag``."""
    t0 = 1_700_000_000 * 10**6
    times = [t0 + int(k) * 3_600 * 10**6 for k in range(6)]

    def some_times(n: int, null_share: float) -> pa.Array:
        picks = [None if rng.random() < null_share else times[int(rng.integers(6))]
                 for _ in range(n)]
        return pa.array(picks, pa.timestamp("us", tz="UTC"))

    def some(values: list[Any], share: float = 0.15) -> list[Any]:
        return [None if rng.random() < share else v for v in values]

    n_users, n_shops, n_orders, n_items = 6, 3, 30, 50
    users = pa.table({"user_id": pa.array(range(n_users), pa.int64()),
                      "joined": some_times(n_users, 0.3),
                      "age": pa.array(some(list(rng.integers(18, 80, n_users))), pa.int64()),
                      "plan": pa.array(some([str(rng.choice(["a", "b", "c"]))
                                             for _ in range(n_users)]))})
    shops = pa.table({"shop_id": pa.array(["s0", "s1", "s2"]),
                      "rating": pa.array(rng.random(n_shops))})
    orders = pa.table({
        "order_id": pa.array(range(n_orders), pa.int64()),
        "at": some_times(n_orders, 0.1),
        "user_id": pa.array(some([int(rng.integers(n_users + 1)) for _ in range(n_orders)]),
                            pa.int64()),  # n_users: dangling
        "shop_id": pa.array(some([str(rng.choice(["s0", "s1", "s2", "sx"]))
                                  for _ in range(n_orders)])),
        "amount": pa.array(some(list(np.round(rng.random(n_orders) * 100, 3)))),
        "paid": pa.array(some([bool(b) for b in rng.integers(0, 2, n_orders)]), pa.bool_()),
        "score": pa.array(some(list(rng.normal(size=n_orders)), 0.2))})
    items = pa.table({
        "order_id": pa.array(some([int(rng.integers(n_orders)) for _ in range(n_items)]),
                             pa.int64()),
        "at": some_times(n_items, 0.1),
        "qty": pa.array(some([int(q) for q in rng.integers(1, 5, n_items)]), pa.int64())})
    C = rd.Column
    tables = {
        "users": rd.Table("users", "user_id", "joined", (),
                          (C("joined", "timestamp"), C("age", "numeric"),
                           C("plan", "categorical")), users),
        "shops": rd.Table("shops", "shop_id", None, (), (C("rating", "numeric"),), shops),
        "orders": rd.Table("orders", "order_id", "at",
                           (("user_id", "users"), ("shop_id", "shops")),
                           (C("at", "timestamp"), C("amount", "numeric"),
                            C("paid", "boolean"), C("score", "numeric")), orders),
        "items": rd.Table("items", None, "at", (("order_id", "orders"),),
                          (C("at", "timestamp"), C("qty", "numeric")), items),
    }
    lags = {} if lag is None else {("orders", "score"): lag}
    return rd.Schema(tables, lags), orders


@pytest.mark.parametrize("case", range(6))
def test_features_equal_a_per_seed_scan_on_random_schemas(case):
    rng = np.random.default_rng(case)
    lag = [None, 3_600 * 10**6, 1][case % 3]
    strict = case >= 3
    schema, orders = random_schema(rng, lag)
    seeds = [i for i, s in enumerate(orders["score"].to_pylist()) if s is not None]
    obs = [_micros(orders["at"][i].as_py()) for i in seeds]
    obs_arr = np.array([rd.NO_TIME if o is None else o for o in obs], np.int64)
    for aggregates in (False, True):
        features = rd.build_features(schema, "orders", "score", np.array(seeds), obs_arr,
                                     strict, aggregates)
        for k, (seed, o) in enumerate(zip(seeds, obs, strict=True)):
            expected = naive_features(schema, "orders", "score", seed, o, strict)
            if not aggregates:
                expected = {n: v for n, v in expected.items()
                            if "->" not in n and "<-" not in n}
            assert_same(features, k, expected)


def test_a_label_is_an_input_only_once_known():
    """The lagged target of another order of the same user enters the sums only when its time
    plus the lag is at or before the seed's time; the seed's own target never."""
    schema, orders = random_schema(np.random.default_rng(11), None)
    at = [_micros(v) for v in orders["at"].to_pylist()]
    seeds = [i for i, s in enumerate(orders["score"].to_pylist()) if s is not None
             and at[i] is not None]
    obs = np.array([at[i] for i in seeds], np.int64)
    plain = rd.build_features(schema, "orders", "score", np.array(seeds), obs, False, True)
    lagged = rd.build_features(rd.Schema(schema.tables, {("orders", "score"): 10**15}),
                               "orders", "score", np.array(seeds), obs, False, True)
    col = plain.names.index("user_id->users<-orders.user_id.score:sum")
    # with a lag longer than the data, only orders without a time (always known) count
    users, scores = orders["user_id"].to_pylist(), orders["score"].to_pylist()
    untimed = [sum(scores[j] for j in range(len(scores)) if at[j] is None and j != i
                   and scores[j] is not None and users[i] is not None and users[j] == users[i])
               for i in seeds]
    np.testing.assert_allclose(lagged.values[:, col], untimed, rtol=1e-12)
    assert not np.allclose(plain.values[:, col], untimed)  # known at once: timed orders count
    assert plain.names == lagged.names


# --- the script end to end on a tiny planted database -------------------------------------------


def test_json_report_on_a_tiny_planted_database(planted_db, tmp_path):
    db, task = planted_db
    src = db.parent / "source"
    proc = subprocess.run(
        [str(PYTHON), str(SCRIPT), "--db", str(db), "--src", str(src), "--task", task,
         "--seeds", "2", "--rt-seeds", "1", "--steps", "2", "--json",
         "--work", str(tmp_path / "work"),
         "--rt-arg=--batch-size", "--rt-arg=8"],
        capture_output=True, text=True, env=clean_env(), timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["task"] == task and report["metric"] == "auc"
    assert set(report["arms"]) == {"rt_full", "rt_anchor_only", "gbdt_anchor",
                                   "gbdt_aggregates", "constant"}
    assert report["seeds"] == [0, 1] and report["rt_seeds"] == [0]
    for arm, entry in report["arms"].items():
        runs = 1 if arm.startswith("rt_") else 2
        assert len(entry["metric"]) == runs and len(entry["train_seconds"]) == runs, arm
        assert all(0.0 <= v <= 1.0 for v in entry["metric"]), arm
        assert entry["median"] == pytest.approx(float(np.median(entry["metric"])))
    assert report["arms"]["constant"]["metric"] == [0.5, 0.5]
    assert report["arms"]["rt_full"]["step_ms"][0] > 0
    for key in rd.RT_LOSSES:  # the example's own losses, one per run, beside its metric
        assert len(report["arms"]["rt_full"][key]) == 1 and report["arms"]["rt_full"][key][0] > 0
    split = report["split"]
    seeds = rd.task_seeds(db, task, 0)
    assert split == {"train": int((seeds.split == 0).sum()), "val": int((seeds.split == 1).sum()),
                     "test": int((seeds.split == 2).sum())}
    assert sum(split.values()) == len(pq.read_table(src / "users.parquet"))
    goal = report["goal"]
    assert goal["checked"] and goal["reference"] == "rt_full"
    assert goal["passed"] == (goal["rt"] >= goal["gbdt"] - 0.02)

    # the GBDT's features on the planted database's own seeds equal a per-seed scan
    schema = rd.load_schema(src, seeds.metadata, seeds.lags)
    features = rd.build_features(schema, seeds.table, seeds.target, seeds.anchor_rows,
                                 seeds.obs_times, seeds.strict, True)
    assert report["arms"]["gbdt_aggregates"]["features"][0] <= len(features.names)
    for k in (0, 7, len(seeds.anchor_rows) // 2, len(seeds.anchor_rows) - 1):
        obs = int(seeds.obs_times[k])
        expected = naive_features(schema, seeds.table, seeds.target, int(seeds.anchor_rows[k]),
                                  None if obs == rd.NO_TIME else obs, seeds.strict)
        assert_same(features, k, expected)
    # the order's count of the planted users is what the database's graph holds
    users_orders = features.names.index("self<-orders.user_id:count")
    assert features.values[:, users_orders].max() > 0


def test_without_aggregates_drops_only_that_section(tmp_path):
    import tomllib

    src = tmp_path / "src"
    src.mkdir()
    pq.write_table(pa.table({"id": [1, 2]}), src / "users.parquet")
    (src / "dlkit.toml").write_text(
        '[tables.users]\nprimary_key = "id"\n\n[aggregates]\ncounts = true\n'
        'columns = { users = [\n  "id",\n] }\n\n[tasks.t]\ntable = "users"\ntarget = "x"\n')
    out = rd.without_aggregates(src, tmp_path / "plain")
    config = tomllib.loads((out / "dlkit.toml").read_text())
    assert config == {"tables": {"users": {"primary_key": "id"}},
                      "tasks": {"t": {"table": "users", "target": "x"}}}
    assert (out / "users.parquet").read_bytes() == (src / "users.parquet").read_bytes()


def test_the_example_decays_over_the_run_unless_told_otherwise():
    def decay(extra: list[str]) -> list[str]:
        cmd = rd.example_command(Path("db"), "t", 0, 300, "full", extra, 0)
        return [cmd[i + 1] if "=" not in a else a.split("=")[1]
                for i, a in enumerate(cmd) if a.split("=")[0] == "--decay-steps"]

    assert decay([]) == ["300"]
    assert decay(["--decay-steps", "1000"]) == ["1000"]
    assert decay(["--decay-steps=50", "--loss", "l1"]) == ["50"]
