"""``metadata.json`` as records (dlkit.db.metadata_records): the records of a built database
give back its ``metadata.json`` byte for byte, the reader opens the same records, and
``from_json`` refuses what the checks refuse, with their messages.

The bytes a build writes are pinned independently by the example database's hash
(tests/db/test_task_rules.py); here every kind of database a build makes (random tables with
integer, string or no keys, with and without times, text, categorical, boolean and numeric
columns, null and dangling foreign keys, task tables, given and time splits, label lags,
strict boundaries, static tasks, categorical targets; the bundled example; the RelBench
fixture) round-trips, and its keys come in the order docs/database_format.md lists them.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlkit.db import check_database, open_database, preprocess
from dlkit.db import format as fmt
from dlkit.db.failures import Checks, Stop
from dlkit.db.metadata_records import DatabaseMetadata, metadata_bytes
from dlkit.db.write.relbench import relbench_schema
from dlkit.errors import DatabaseError

from .conftest import write_db
from .read.test_verify_content import meta_of
from .write.test_relbench import ENTITY_TASKS, FAKE

# The key order of docs/database_format.md ("metadata.json"), written out here.
TOP_ORDER = ["format", "format_version", "database_id", "num_tables", "num_rows", "num_edges",
             "num_columns", "num_texts", "num_categories", "num_tasks", "table_offsets",
             "no_time", "stypes", "tables", "tasks", "embeddings", "options"]
TABLE_ORDER = ["name", "index", "num_rows", "row_offset", "primary_key", "primary_key_type",
               "time_column", "time_unit", "time_position", "num_null_times", "foreign_keys",
               "columns"]
OPTIONAL_TABLE_KEYS = ["time_unit", "time_position"]  # each only when set
FOREIGN_KEY_ORDER = ["column", "parent_table", "num_edges", "num_null", "num_dangling"]
COLUMN_ORDER = ["name", "index", "column_id", "stype", "stype_name", "arrow_type", "inferred",
                "num_valid"]
STATS_ORDER = ["mean", "std"]
CATEGORY_ORDER = ["num_categories", "cat_emb_start", "cat_emb_count", "categories"]
TASK_ORDER = ["name", "index", "table", "target_column", "target_stype", "target_stype_name",
              "target_column_id", "num_seeds"]
RULE_ORDER = ["label_lag_us", "boundary", "static", "split"]  # each only when not the default
EMBEDDINGS_ORDER = ["embedder", "config", "text_dim", "column_dim", "categorical_dim"]

T0 = 1_700_000_000_000_000  # microseconds
HOUR = 3_600_000_000


def assert_documented_order(doc: dict) -> None:
    assert list(doc) == TOP_ORDER
    assert list(doc["embeddings"]) == EMBEDDINGS_ORDER and list(doc["options"]) == ["on_dangling"]
    for table in doc["tables"]:
        assert list(table) == [k for k in TABLE_ORDER
                               if k not in OPTIONAL_TABLE_KEYS or k in table]
        for fk in table["foreign_keys"]:
            assert list(fk) == FOREIGN_KEY_ORDER
        for col in table["columns"]:
            extra = (STATS_ORDER if col["stype"] in (fmt.NUMERIC, fmt.TIMESTAMP)
                     else CATEGORY_ORDER if col["stype"] == fmt.CATEGORICAL else [])
            lag = ["known_after_us"] if "known_after_us" in col else []  # only when set
            assert list(col) == COLUMN_ORDER + extra + lag
    for task in doc["tasks"]:
        rules = list(task)[len(TASK_ORDER):]
        assert list(task)[:len(TASK_ORDER)] == TASK_ORDER
        assert rules == [k for k in RULE_ORDER if k in rules]


def assert_round_trip(root: Path) -> DatabaseMetadata:
    """The records of ``root``'s metadata.json give back its bytes; the reader opens them."""
    raw = (root / fmt.METADATA_FILE).read_bytes()
    doc = json.loads(raw)
    # the documented serialization, restated here: UTF-8 (not \u escapes), indent 2, newline
    assert raw == (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    meta = DatabaseMetadata.from_json(doc)
    assert metadata_bytes(meta) == raw
    assert meta.to_json() == doc
    assert_documented_order(meta.to_json())
    with open_database(root) as db:
        assert db.metadata == meta
        assert db.metadata.to_json() == doc
        assert db.num_rows == doc["num_rows"] and db.num_edges == doc["num_edges"]
        assert db.table_offsets.tolist() == doc["table_offsets"]
        assert [t.rules for t in db.tasks] == [t.rules for t in meta.tasks]
    return meta


# --- fixed databases ------------------------------------------------------------------------


def test_the_example_round_trips(example_db):
    meta = assert_round_trip(example_db)
    assert meta.expected_files() | {fmt.MANIFEST_FILE} == {
        str(p.relative_to(example_db)) for p in example_db.rglob("*") if p.is_file()}


def test_the_relbench_fixture_round_trips(tmp_path):
    schema, _text = relbench_schema(FAKE, tasks=ENTITY_TASKS)
    preprocess(FAKE, tmp_path / "db", schema=schema, fsync=False)
    meta = assert_round_trip(tmp_path / "db")
    assert all(t.rules.split == "given" for t in meta.tasks)


# --- random databases -----------------------------------------------------------------------


def _iso(us: int) -> str:
    return dt.datetime.fromtimestamp(us / 1e6, tz=dt.UTC).isoformat()


@st.composite
def databases(draw):
    """``(parquet tables, dlkit.toml)`` of 1-3 tables and up to 4 tasks, the features varied."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    num_tables = draw(st.integers(1, 3))
    sizes = [draw(st.integers(1, 40)) for _ in range(num_tables)]
    key_kinds = [draw(st.sampled_from(["int", "str", None])) for _ in range(num_tables)]
    timed = [draw(st.booleans()) for _ in range(num_tables)]
    keyed_values = {t: rng.permutation(n * 3)[:n] for t, n in enumerate(sizes)}  # sparse
    for t, kind in enumerate(key_kinds):
        if kind == "str":
            keyed_values[t] = np.array([f"k{i}é" for i in keyed_values[t]])
    parquet, lines = {}, [f'name = "{draw(st.sampled_from(["db", "däten"]))}"']
    targets = []  # (table, column) a task may predict
    for t, n in enumerate(sizes):
        name = f"t{t}"
        cols, types = {}, {}
        if key_kinds[t]:
            cols["key"] = pa.array(keyed_values[t].tolist())
        unit = draw(st.sampled_from([None, None, "year", "s"])) if timed[t] else None
        if timed[t]:
            mask = rng.random(n) < 0.1
            if unit == "year":  # integer times: the optional table keys
                cols["when"] = pa.array(rng.integers(1990, 2030, n), pa.int64(), mask=mask)
            elif unit == "s":
                cols["when"] = pa.array((T0 + rng.integers(0, 100, n) * HOUR) // 10**6,
                                        pa.int64(), mask=mask)
            else:
                cols["when"] = pa.array(T0 + rng.integers(0, 100, n) * HOUR, pa.timestamp("us"),
                                        mask=mask)
            targets.append((t, "when"))
        for column in draw(st.sets(st.sampled_from(
                ["num", "flag", "kind", "code", "yes", "note", "city"]))):
            mask = rng.random(n) < 0.2
            if column == "num":
                cols[column] = pa.array(rng.normal(size=n), mask=mask)
            elif column == "flag":
                cols[column] = pa.array(rng.random(n) < 0.5, mask=mask)
            elif column == "kind":  # string categories, some beyond ASCII
                cols[column] = pa.array(rng.choice(["a", "ü", "日本", "z"], n).tolist(),
                                        pa.string(), mask=mask)
                types[column] = "categorical"
            elif column == "code":  # integer categories
                cols[column] = pa.array(rng.integers(-3, 4, n), mask=mask)
                types[column] = "categorical"
            elif column == "yes":  # boolean categories
                cols[column] = pa.array(rng.random(n) < 0.5, mask=mask)
                types[column] = "categorical"
            elif column == "note":  # free text
                cols[column] = pa.array([f"note {i} ✓" for i in rng.integers(0, 1000, n)],
                                        pa.string(), mask=mask)
                types[column] = "text"
            else:  # repeating strings: inferred (not given) as categorical
                cols[column] = pa.array(rng.choice(["oslo", "lima"], n).tolist(), pa.string(),
                                        mask=mask)
            if column not in ("note", "city"):  # no text target (a few cities are text)
                targets.append((t, column))
        lines.append(f"[tables.{name}]")
        if key_kinds[t]:
            lines.append('primary_key = "key"')
        if timed[t]:
            lines.append('time_column = "when"')
            if unit is not None:
                lines.append(f'time_unit = "{unit}"')
            if unit == "year" and draw(st.booleans()):
                lines.append('time_position = "end"')
            features = sorted(c for c in cols if c not in ("key", "when"))
            if features and draw(st.booleans()):  # a column known later: its optional key
                lines.append(f'known_after = {{ {draw(st.sampled_from(features))} = '
                             f'"{draw(st.integers(0, 48))}h" }}')
        parents = [p for p in range(num_tables) if key_kinds[p] and p != t]
        fks = {}
        for k in range(draw(st.integers(0, min(2, len(parents))))):
            p = parents[k]
            refs = rng.integers(0, sizes[p] + 3, n)  # beyond the parent's rows: dangling
            values = [keyed_values[p][r].item() if r < sizes[p] else
                      (-1 if key_kinds[p] == "int" else "zz") for r in refs]
            cols[f"fk{k}"] = pa.array([None if rng.random() < 0.1 else v for v in values],
                                      pa.int64() if key_kinds[p] == "int" else pa.string())
            fks[f"fk{k}"] = f"t{p}"
        if fks:
            lines.append("foreign_keys = { " + ", ".join(f'{c} = "{p}"' for c, p in fks.items())
                         + " }")
        if types:
            lines.append("types = { " + ", ".join(f'{c} = "{s}"' for c, s in types.items())
                         + " }")
        if not cols:
            cols["num"] = pa.array(rng.normal(size=n))
        parquet[name] = pa.table(cols)
    for i, (t, column) in enumerate(draw(st.lists(st.sampled_from(targets), max_size=3,
                                                         unique=True)) if targets else []):
        lines += [f"[tasks.task{i}]", f'table = "t{t}"', f'target = "{column}"']
        if timed[t]:
            if draw(st.booleans()):
                lines.append(f'label_lag = "{draw(st.integers(1, 48))}h"')
            if draw(st.booleans()):
                lines.append('boundary = "strict"')
            if draw(st.booleans()):
                val_from = T0 + draw(st.integers(0, 100)) * HOUR
                lines += ['split = "time"', f'val_from = "{_iso(val_from)}"',
                          f'test_from = "{_iso(val_from + draw(st.integers(0, 50)) * HOUR)}"']
        elif draw(st.booleans()):
            lines.append("static = true")
    parents = [p for p in range(num_tables) if key_kinds[p]]
    if parents and draw(st.booleans()):  # a task table: its rows given as train, val, test
        p = parents[0]
        parts = {}
        for split in ("train", "val", "test"):
            m = draw(st.integers(0, 6))
            parts[split] = pa.table({
                "entity": pa.array(keyed_values[p][rng.integers(0, sizes[p], m)].tolist(),
                                   pa.int64() if key_kinds[p] == "int" else pa.string()),
                "at": pa.array(T0 + rng.integers(0, 100, m) * HOUR, pa.timestamp("us")),
                "label": pa.array(rng.random(m) < 0.5)})
            parquet[f"given/{split}"] = parts[split]
        lines += ["[tasks.given_task]", f'entity_table = "t{p}"', 'entity_column = "entity"',
                  'time_column = "at"', 'target = "label"', 'split = "given"',
                  ('path = { train = "given/train.parquet", val = "given/val.parquet", '
                   'test = "given/test.parquet" }')]
    return parquet, "\n".join(lines) + "\n"


@settings(max_examples=60, deadline=None)
@given(databases())
def test_random_databases_round_trip_byte_for_byte(database):
    parquet, toml = database
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "in" / "given").mkdir(parents=True)
        write_db(root / "in", parquet, toml)
        preprocess(root / "in", root / "db", fsync=False)
        meta = assert_round_trip(root / "db")
        assert check_database(root / "db") == []
        assert meta.num_categories == sum(len(c.categories or ()) for t in meta.tables
                                          for c in t.columns)


# --- from_json validates ---------------------------------------------------------------------


@pytest.mark.parametrize("edit,check,message", [
    (lambda m: m.update(format_version=2), "metadata.schema",
     "format_version 2; this dlkit reads version 3"),
    (lambda m: m.update(num_rows=m["num_rows"] + 1), "metadata.consistency",
     "num_rows disagrees with the tables"),
    (lambda m: m["tables"][0].pop("columns"), "metadata.schema", "tables[0]: missing 'columns'"),
    (lambda m: m["tasks"][0].update(label_lag_us=0), "metadata.schema",
     "label_lag_us must be an integer"),
    (lambda m: m["tasks"][0].update(split={"kind": "random"}), "metadata.schema",
     "split must be {kind: time|given, ...}"),
])
def test_from_json_refuses_what_the_checks_refuse(example_db, edit, check, message):
    doc = meta_of(example_db)
    edit(doc)
    with pytest.raises(DatabaseError, match=f"{check}: .*{re.escape(message)}"):
        DatabaseMetadata.from_json(doc)
    checks = Checks(collect=True, root=Path("db"))
    with pytest.raises(Stop):
        DatabaseMetadata.from_json(doc, checks)
    [failure] = checks.failures
    assert (failure.file, failure.check) == (fmt.METADATA_FILE, check)
    assert message in failure.message


def test_the_keys_only_verify_checks_are_carried_as_found(example_db):
    """Opening checks what it sizes arrays from; ``dlkit verify`` the rest: a record of a
    file with a bad ``arrow_type`` is made, and to_json gives the value back."""
    doc = meta_of(example_db)
    doc["tables"][0]["columns"][0]["arrow_type"] = 7
    meta = DatabaseMetadata.from_json(copy.deepcopy(doc))
    assert meta.tables[0].columns[0].arrow_type == 7
    assert meta.to_json() == doc
