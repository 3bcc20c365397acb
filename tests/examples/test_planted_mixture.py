"""fixtures/make_planted_mixture.py: each variant is a pure function of (family, variant,
seed); the variants of a family differ in names, extra columns and sizes; each one's labels
are exactly its family's rule, recomputed here from its Parquet files and the foreign keys
of its dlkit.toml with names and units written out below (not read from the generator); and
the family preprocesses into databases that form a valid mixture."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.examples.conftest import _mixture_module
from tests.examples.test_planted_db import _corr, _rate_spread, _table

gen = _mixture_module()

# variant -> (anchor table, event table, amount column, threshold in the variant's units)
CHURN = {"shop": ("users", "orders", "amount", 42.0),
         "store": ("customers", "purchases", "spend", 42.0),
         "bank": ("accounts", "transactions", "amount_cents", 4200.0),
         "club": ("members", "bookings", "fee", 42.0)}
# variant -> (fact table, middle table, top table, middle value, top value, unit)
GRAND = {"retail": ("sales", "stores", "regions", "size", "price_index", 1.0),
         "travel": ("bookings", "agencies", "countries", "rating", "cost_index", 100.0),
         "farm": ("harvests", "farms", "provinces", "soil_score", "rainfall_index", 10.0)}


@pytest.fixture(scope="module")
def family(tmp_path_factory) -> dict[str, Path]:
    """Every variant of both families, seed 5, full size (the statistics need the rows)."""
    root = tmp_path_factory.mktemp("mixture")
    written = gen.make_mixture(root, seed=5)
    return {p.variant: p.out_dir for p in written}


def _schema(path: Path) -> dict:
    return tomllib.loads((path / "dlkit.toml").read_text())


def _child_of(schema: dict, parent: str) -> tuple[str, str]:
    """The one table with a foreign key to ``parent``: (table, its foreign-key column)."""
    found = [(name, column) for name, table in schema["tables"].items()
             for column, target in table.get("foreign_keys", {}).items() if target == parent]
    assert len(found) == 1, found
    return found[0]


def _parent_of(schema: dict, table: str, parent: str) -> str:
    """The foreign-key column of ``table`` that points to ``parent``."""
    (column,) = [c for c, t in schema["tables"][table]["foreign_keys"].items() if t == parent]
    return column


# ---------------------------------------------------------------------------------------------


def test_every_variant_is_written_under_its_family_and_name(family):
    assert sorted(family) == sorted([f"churn-{v}" for v in CHURN] + [f"grand-{v}" for v in GRAND])
    for name, path in family.items():
        assert path.name == name
        assert _schema(path)["name"] == f"planted-{name}"


@pytest.mark.parametrize("fam, variant", [("churn", "bank"), ("grand", "travel")])
def test_a_variant_is_a_pure_function_of_family_variant_and_seed(tmp_path, fam, variant):
    alone = gen.make_member(tmp_path / "alone", fam, variant, seed=3, scale=0.1).out_dir
    among = gen.make_mixture(tmp_path / "all", (fam,), seed=3, scale=0.1)
    (with_others,) = [p.out_dir for p in among if p.variant == f"{fam}-{variant}"]
    other_seed = gen.make_member(tmp_path / "other", fam, variant, seed=4, scale=0.1).out_dir
    names = sorted(p.name for p in alone.iterdir())
    assert names == sorted(p.name for p in with_others.iterdir())
    for name in names:
        if name.endswith(".parquet"):
            assert pq.read_table(alone / name).equals(pq.read_table(with_others / name)), name
        else:
            assert (alone / name).read_text() == (with_others / name).read_text(), name
    differs = [n for n in names if n.endswith(".parquet")
               and not pq.read_table(alone / n).equals(pq.read_table(other_seed / n))]
    assert differs, "another seed gave the same tables"


def test_variants_differ_in_names_extra_columns_and_sizes(family):
    for fam, expected in (("churn", CHURN), ("grand", GRAND)):
        tables, columns, rows = [], [], []
        for variant in expected:
            path = family[f"{fam}-{variant}"]
            schema = _schema(path)
            tables.append(frozenset(schema["tables"]))
            columns.append(frozenset(c for t in schema["tables"]
                                     for c in pq.read_schema(path / f"{t}.parquet").names))
            task = next(iter(schema["tasks"].values()))
            rows.append(pq.read_metadata(path / f"{task['table']}.parquet").num_rows)
        # no two variants of a family share their table names, columns or anchor counts,
        # and their tasks are named apart
        assert len(set(tables)) == len(tables), fam
        assert len(set(columns)) == len(columns), fam
        assert len(set(rows)) == len(rows), (fam, rows)
        tasks = [next(iter(_schema(family[f"{fam}-{v}"])["tasks"])) for v in expected]
        assert len(set(tasks)) == len(tasks), tasks


@pytest.mark.parametrize("variant", CHURN)
def test_churn_label_is_the_mean_amount_before_observation_below_threshold(family, variant):
    anchors_name, events_name, amount, threshold = CHURN[variant]
    path = family[f"churn-{variant}"]
    schema = _schema(path)
    (task,) = schema["tasks"].values()
    assert task["table"] == anchors_name
    events_table, fk = _child_of(schema, anchors_name)
    assert events_table == events_name
    key = schema["tables"][anchors_name]["primary_key"]
    observed = schema["tables"][anchors_name]["time_column"]
    event_time = schema["tables"][events_name]["time_column"]
    anchors, events = _table(path, anchors_name), _table(path, events_name)
    row = {k: i for i, k in enumerate(anchors[key])}
    owner = np.array([row[k] for k in events[fk]])
    before = events[event_time] <= anchors[observed][owner]
    n = np.bincount(owner[before], minlength=len(row))
    assert n.min() >= 1
    mean = np.bincount(owner[before], weights=events[amount][before], minlength=len(row)) / n
    label = anchors[task["target"]].astype(bool)
    np.testing.assert_array_equal(label, mean < threshold)
    assert 0.3 < label.mean() < 0.7
    # the anchor's own columns say nothing about the label
    for column, values in anchors.items():
        if column in (key, task["target"]):
            continue
        if values.dtype == object:
            assert _rate_spread(values, label) < 0.08, column
        else:
            assert abs(_corr(values, label)) < 0.08, column
    # the amounts are in the variant's unit: their median sits near the threshold
    assert 0.5 * threshold < np.median(events[amount]) < 1.5 * threshold


@pytest.mark.parametrize("variant", GRAND)
def test_grand_target_is_the_grandparent_and_parent_values(family, variant):
    facts_name, middle_name, top_name, middle_value, top_value, unit = GRAND[variant]
    path = family[f"grand-{variant}"]
    schema = _schema(path)
    (task,) = schema["tasks"].values()
    assert task["table"] == facts_name
    facts, middle, top = (_table(path, t) for t in (facts_name, middle_name, top_name))
    to_middle = _parent_of(schema, facts_name, middle_name)
    to_top = _parent_of(schema, middle_name, top_name)
    middle_row = {k: i for i, k in enumerate(middle[schema["tables"][middle_name]["primary_key"]])}
    top_row = {k: i for i, k in enumerate(top[schema["tables"][top_name]["primary_key"]])}
    m = np.array([middle_row[k] for k in facts[to_middle]])
    t = np.array([top_row[k] for k in middle[to_top]])[m]
    rule = unit * (50 + 10 * (2 * top[top_value][t] + middle[middle_value][m]))
    residual = facts[task["target"]] - rule
    assert np.abs(residual).max() <= 3.0 * unit + 1e-3  # the noise, rounded to 1e-3
    assert np.abs(residual).max() > 2.5 * unit          # and it is there
    assert _corr(rule, facts[task["target"]]) > 0.99
    for column, values in facts.items():
        if column not in (task["target"], to_middle) and values.dtype != object:
            assert abs(_corr(values, facts[task["target"]])) < 0.08, column


def test_the_family_preprocesses_into_a_valid_mixture_with_one_held_out(tmp_path):
    from dlkit.db.write.collection import preprocess_many
    from dlkit.sampler.mixture import check_mixture, load_mixture

    sources = tmp_path / "sources"
    gen.make_mixture(sources, seed=1, scale=0.05)
    report = preprocess_many(sources, tmp_path / "dbs", fsync=False)
    assert [r.outcome.name for r in report.results] == ["BUILT"] * 7, report
    lines = ["[mixture]", 'weights = "seeds"']
    for name in sorted(p.name for p in sources.iterdir()):
        lines += ["[[component]]", f'database = "dbs/{name}"',
                  f'tasks = {list(_schema(sources / name)["tasks"])!r}'.replace("'", '"')]
        if name == "churn-club":
            lines.append("train = false")
    (tmp_path / "dlkit-mixture.toml").write_text("\n".join(lines) + "\n")
    check = check_mixture(load_mixture(tmp_path / "dlkit-mixture.toml"))
    assert len(check.components) == 7 and len(check.training) == 6
    held = [c for c in check.components if not c.train]
    assert [c.task for c in held] == ["lapse"] and held[0].weight == 0


def test_the_command_line_writes_the_variants_asked_for_and_refuses_unknown_ones(tmp_path,
                                                                                 capsys):
    assert gen.main([str(tmp_path / "a"), "--family", "grand", "--variant", "farm",
                     "--variant", "travel", "--scale", "0.05"]) == 0
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["grand-farm", "grand-travel"]
    assert gen.main([str(tmp_path / "b"), "--family", "grand", "--variant", "shop"]) == 2
    assert "no variant 'shop' in the families grand" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
    # a typo beside a good name is refused too, before anything is written
    assert gen.main([str(tmp_path / "b"), "--family", "grand", "--variant", "farm",
                     "--variant", "trvel"]) == 2
    assert "no variant 'trvel' in the families grand" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
    with pytest.raises(ValueError, match="family churn has no variant 'farm'"):
        gen.make_member(tmp_path / "c", "churn", "farm")
