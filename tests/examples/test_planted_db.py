"""fixtures/make_planted_db.py: deterministic output, and labels that are exactly the planted
rule over linked rows at or before the observation time (recomputed here with pyarrow and
numpy from the Parquet files alone), independent of the anchor row's own columns and of
later rows."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.examples.conftest import _planted_module

gen = _planted_module()
VARIANTS = ("churn", "grand", "majority", "mix")


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Every variant, seed 7, full size (the statistics below need the rows)."""
    root = tmp_path_factory.mktemp("planted")
    return {v: gen.make_planted(root / v, v, seed=7).out_dir for v in VARIANTS}


def _table(path: Path, name: str) -> dict[str, np.ndarray]:
    table = pq.read_table(path / f"{name}.parquet")
    out = {}
    for column in table.column_names:
        array = table.column(column).combine_chunks()
        if str(array.type).startswith("timestamp"):
            out[column] = array.cast("int64").to_numpy()
        else:
            out[column] = np.asarray(array.to_pylist(), dtype=object) \
                if str(array.type) == "string" else array.to_numpy(zero_copy_only=False)
    return out


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(np.asarray(a, np.float64), np.asarray(b, np.float64))[0, 1])


def _rate_spread(categories: np.ndarray, label: np.ndarray) -> float:
    """Largest difference between a category's mean label and the overall mean label."""
    label = np.asarray(label, np.float64)
    return max(abs(label[categories == c].mean() - label.mean()) for c in set(categories))


# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_same_seed_same_bytes_other_seed_other_data(tmp_path, variant):
    a = gen.make_planted(tmp_path / "a", variant, seed=3, scale=0.1).out_dir
    b = gen.make_planted(tmp_path / "b", variant, seed=3, scale=0.1).out_dir
    c = gen.make_planted(tmp_path / "c", variant, seed=4, scale=0.1).out_dir
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    assert "dlkit.toml" in names and "planted.json" in names
    for name in names:
        if name.endswith(".parquet"):
            assert pq.read_table(a / name).equals(pq.read_table(b / name)), name
        else:
            assert (a / name).read_text() == (b / name).read_text(), name
    differs = [n for n in names if n.endswith(".parquet")
               and not pq.read_table(a / n).equals(pq.read_table(c / n))]
    assert differs, "another seed gave the same tables"


def test_output_is_built_atomically_and_never_replaces_foreign_data(tmp_path):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("someone's data")
    with pytest.raises(Exception, match="refusing"):
        gen.make_planted(target, "churn", seed=0, scale=0.05, overwrite=True)
    assert (target / "notes.txt").read_text() == "someone's data"
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]  # no temporary left behind
    out = gen.make_planted(tmp_path / "fresh", "churn", seed=0, scale=0.05).out_dir
    with pytest.raises(Exception, match="already exists"):
        gen.make_planted(out, "churn", seed=0, scale=0.05)
    gen.make_planted(out, "grand", seed=0, scale=0.05, overwrite=True)  # an earlier output
    assert json.loads((out / "planted.json").read_text())["variant"] == "grand"
    (out / "results.csv").write_text("someone's results")  # put into an earlier output
    with pytest.raises(Exception, match="results.csv"):
        gen.make_planted(out, "churn", seed=0, scale=0.05, overwrite=True)
    assert (out / "results.csv").read_text() == "someone's results"
    assert json.loads((out / "planted.json").read_text())["variant"] == "grand"


def test_schema_names_the_task_of_the_marker(planted):
    for variant, path in planted.items():
        schema = tomllib.loads((path / "dlkit.toml").read_text())
        marker = json.loads((path / "planted.json").read_text())
        task = schema["tasks"][marker["task"]]
        assert (task["table"], task["target"]) == (marker["table"], marker["target"]), variant


def test_churn_label_is_mean_amount_of_orders_before_observation(planted):
    users, orders = _table(planted["churn"], "users"), _table(planted["churn"], "orders")
    row = {uid: i for i, uid in enumerate(users["user_id"])}
    owner = np.array([row[u] for u in orders["user_id"]])
    before = orders["ordered_at"] <= users["observed_at"][owner]
    n = np.bincount(owner[before], minlength=len(row))
    assert n.min() >= 1  # every user has history, so the mean exists
    mean = np.bincount(owner[before], weights=orders["amount"][before], minlength=len(row)) / n
    label = users["churned"].astype(bool)
    np.testing.assert_array_equal(label, mean < 42.0)
    assert 0.3 < label.mean() < 0.7
    # the anchor row's own columns and the history's size say nothing about the label
    assert abs(_corr(users["age"], label)) < 0.06
    assert abs(_corr(users["observed_at"], label)) < 0.06
    assert abs(_corr(n, label)) < 0.06
    assert _rate_spread(users["country"], label) < 0.06
    assert _rate_spread(users["plan"], label) < 0.06
    # orders after the observation time carry no signal: their mean amount is unrelated
    after = ~before
    m = np.bincount(owner[after], minlength=len(row))
    has = m > 0
    later = np.bincount(owner[after], weights=orders["amount"][after], minlength=len(row))
    assert abs(_corr(later[has] / m[has], label[has])) < 0.06
    # while the mean before it is the signal itself
    assert _corr(mean, label) < -0.6


def test_grand_revenue_is_parent_and_grandparent_values(planted):
    path = planted["grand"]
    regions, stores, sales = (_table(path, t) for t in ("regions", "stores", "sales"))
    region_row = {k: i for i, k in enumerate(regions["region_id"])}
    store_row = {k: i for i, k in enumerate(stores["store_id"])}
    s = np.array([store_row[k] for k in sales["store_id"]])
    r = np.array([region_row[k] for k in stores["region_id"]])[s]
    rule = 50 + 10 * (2 * regions["price_index"][r] + stores["size"][s])
    residual = sales["revenue"] - rule
    assert np.abs(residual).max() <= 3.0 + 1e-3  # the uniform noise, rounded to 1e-3
    assert _corr(rule, sales["revenue"]) > 0.99
    for column in ("basket_items", "sold_at", "promo"):
        assert abs(_corr(sales[column], sales["revenue"])) < 0.06, column


def test_majority_segment_is_majority_department_before_observation(planted):
    path = planted["majority"]
    customers, items, purchases = (_table(path, t) for t in ("customers", "items", "purchases"))
    departments = sorted(set(items["department"]))
    dept_of = dict(zip(items["item_id"], items["department"]))
    row = {k: i for i, k in enumerate(customers["customer_id"])}
    counts = np.zeros((len(row), len(departments)), np.int64)
    later = np.zeros((len(row), len(departments)), np.int64)
    for cid, iid, at in zip(purchases["customer_id"], purchases["item_id"],
                            purchases["bought_at"]):
        i = row[cid]
        target = counts if at <= customers["as_of"][i] else later
        target[i, departments.index(dept_of[iid])] += 1
    best = counts.max(axis=1, keepdims=True)
    first = np.argmax(counts == best, axis=1)  # ties: first department in sorted order
    expected = np.array([departments[k] for k in first], dtype=object)
    np.testing.assert_array_equal(customers["segment"], expected)
    label = np.array([departments.index(s) for s in customers["segment"]])
    assert np.bincount(label, minlength=4).min() > 0.15 * len(label)
    # later purchases' majority agrees with the label only by chance (1/4 plus ties)
    has = later.sum(axis=1) > 0
    agree = np.mean(np.argmax(later[has], axis=1) == label[has])
    assert agree < 0.35
    for column in ("tenure_years", "as_of"):
        for k in range(4):
            assert abs(_corr(customers[column], label == k)) < 0.06, (column, k)
    assert _rate_spread(customers["region"], label == 0) < 0.06


def test_mix_risk_is_share_of_severe_visits_before_cutoff(planted):
    path = planted["mix"]
    patients, visits = _table(path, "patients"), _table(path, "visits")
    row = {k: i for i, k in enumerate(patients["patient_id"])}
    owner = np.array([row[k] for k in visits["patient_id"]])
    before = visits["visited_at"] <= patients["cutoff_at"][owner]
    severe = np.isin(visits["diagnosis"].astype(str), ["cardiac", "renal"])
    n = np.bincount(owner[before], minlength=len(row))
    k = np.bincount(owner[before & severe], minlength=len(row))
    np.testing.assert_allclose(patients["risk"], np.round(10.0 * k / n, 3), atol=1e-9)
    risk = patients["risk"]
    assert abs(_corr(n, risk)) < 0.06
    assert abs(_corr(patients["cutoff_at"], risk)) < 0.06
    # the share of severe visits after the cutoff is unrelated to the risk
    after = ~before
    m = np.bincount(owner[after], minlength=len(row))
    has = m > 0
    share_after = np.bincount(owner[after & severe], minlength=len(row))[has] / m[has]
    assert abs(_corr(share_after, risk[has])) < 0.06
