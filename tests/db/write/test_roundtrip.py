"""Round trip of every column type, keys, texts, categories, statistics and tasks."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import numpy as np
import pyarrow as pa
import pytest

from dlkit.db import NO_TIME, HashedNgramEmbedder, open_database, preprocess, verify_database
from dlkit.db import format as fmt

from ..conftest import EXAMPLE, write_db

UTC = dt.UTC
N = 23


def _mixed_table() -> pa.Table:
    rng = np.random.default_rng(11)
    ints = [int(x) if i % 5 else None for i, x in enumerate(rng.integers(-1000, 1000, N))]
    floats = [float(x) for x in rng.normal(0, 10, N)]
    floats[1], floats[2], floats[3] = float("nan"), float("inf"), None
    base = dt.datetime(2024, 2, 29, 12, 30, 15, 123456, tzinfo=UTC)
    stamps = [base + dt.timedelta(days=i, microseconds=7 * i) if i % 4 else None for i in range(N)]
    words = ["red", "green", "blue"]
    texts = [f"text number {i % 7}" if i % 6 else None for i in range(N)]
    return pa.table({
        "id": pa.array(range(100, 100 + N), pa.int64()),
        "i64": pa.array(ints, pa.int64()),
        "u8": pa.array([i % 200 for i in range(N)], pa.uint8()),
        "f64": pa.array(floats, pa.float64()),
        "f32": pa.array([1.5 * i for i in range(N)], pa.float32()),
        "dec": pa.array([decimal.Decimal(f"{i}.25") for i in range(N)], pa.decimal128(10, 2)),
        "flag": pa.array([None if i == 7 else i % 3 == 0 for i in range(N)], pa.bool_()),
        "flag_num": pa.array([i % 2 == 0 for i in range(N)], pa.bool_()),
        "bit": pa.array([i % 2 for i in range(N)], pa.int8()),
        "ts_us": pa.array(stamps, pa.timestamp("us", tz="UTC")),
        "ts_s": pa.array([dt.datetime(2020, 1, 1) + dt.timedelta(seconds=i) for i in range(N)],
                         pa.timestamp("s")),
        "ts_ms": pa.array([1_700_000_000_000 + i for i in range(N)], pa.timestamp("ms", tz="Europe/Paris")),
        "ts_ns": pa.array([1_700_000_000_000_000_123 + 1000 * i for i in range(N)], pa.timestamp("ns")),
        "day": pa.array([dt.date(1969, 12, 30) + dt.timedelta(days=i) for i in range(N)], pa.date32()),
        "day64": pa.array([dt.date(2000, 1, 1)] * N, pa.date64()),
        "color": pa.array([words[i % 3] if i % 8 else None for i in range(N)]),
        "color_dict": pa.array([words[(i * 2) % 3] for i in range(N)]).dictionary_encode(),
        "level": pa.array([(i * 7) % 4 for i in range(N)], pa.int32()),
        "note": pa.array(texts, pa.large_string()),
        "other_note": pa.array([f"text number {(i + 3) % 9}" for i in range(N)]),
    })


TOML = """
name = "mixed"
[tables.things]
primary_key = "id"
time_column = "ts_us"
[tables.things.types]
color = "categorical"
color_dict = "categorical"
level = "categorical"
note = "text"
other_note = "text"
bit = "boolean"
flag_num = "numeric"

[tasks.predict_level]
table = "things"
target = "level"
[tasks.predict_f64]
table = "things"
target = "f64"
[tasks.predict_flag]
table = "things"
target = "flag"
[tasks.predict_day]
table = "things"
target = "day"
"""


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed")
    table = _mixed_table()
    write_db(root / "in", {"things": [table.slice(0, 9), table.slice(9)]}, TOML)
    report = preprocess(root / "in", root / "db", fsync=False, batch_rows=4)
    return table, root, report


def _expect(values, valid):
    return np.array(values), np.array(valid, dtype=bool)


def test_every_column_type_round_trips(mixed):
    table, root, _ = mixed
    with open_database(root / "db") as db:
        t = db.table("things")
        assert [c.name for c in t.columns] == [n for n in table.column_names if n != "id"]
        get = {c.name: c for c in t.columns}
        stypes = {c.name: c.stype_name for c in t.columns}
        assert stypes == {
            "i64": "numeric", "u8": "numeric", "f64": "numeric", "f32": "numeric",
            "dec": "numeric", "flag": "boolean", "flag_num": "numeric", "bit": "boolean",
            "ts_us": "timestamp", "ts_s": "timestamp", "ts_ms": "timestamp",
            "ts_ns": "timestamp", "day": "timestamp", "day64": "timestamp",
            "color": "categorical", "color_dict": "categorical", "level": "categorical",
            "note": "text", "other_note": "text"}
        for name in ("i64", "u8", "f64", "f32", "dec", "flag_num"):
            raw = table.column(name).to_pylist()
            ok = [v is not None and np.isfinite(float(v)) for v in raw]
            assert get[name].values.dtype == np.float64
            assert get[name].valid.tolist() == ok
            assert get[name].values.tolist() == [float(v) if o else 0.0 for v, o in zip(raw, ok)]
        raw = table.column("flag").to_pylist()
        assert get["flag"].values.tolist() == [int(bool(v)) for v in raw]
        assert get["flag"].valid.tolist() == [v is not None for v in raw]
        assert get["bit"].values.tolist() == [i % 2 for i in range(N)]
        # timestamps: microseconds since the epoch, UTC
        epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)
        raw = table.column("ts_us").to_pylist()
        assert get["ts_us"].values.tolist() == [
            (v - epoch) // dt.timedelta(microseconds=1) if v else 0 for v in raw]
        assert get["ts_s"].values[1] - get["ts_s"].values[0] == 1_000_000
        assert get["ts_s"].values[0] == 1577836800 * 10**6
        assert get["ts_ms"].values[0] == 1_700_000_000_000_000
        assert get["ts_ns"].values[0] == 1_700_000_000_000_000  # truncated to microseconds
        assert get["day"].values[0] == -2 * 86_400 * 10**6
        assert get["day64"].values[0] == 946684800 * 10**6
        # categories: sorted, ids in sorted order, nulls invalid
        color = get["color"]
        assert color.categories == ("blue", "green", "red")
        raw = table.column("color").to_pylist()
        assert [color.categories[v] if ok else None for v, ok in zip(color.values, color.valid)] == raw
        assert get["level"].categories == (0, 1, 2, 3)
        assert get["level"].values.tolist() == [(i * 7) % 4 for i in range(N)]
        cd = get["color_dict"]
        assert [cd.categories[v] for v in cd.values] == table.column("color_dict").to_pylist()
        # categorical embedding rows are contiguous, in column order
        assert color.cat_emb_start == 0 and color.cat_emb_count == 3
        assert cd.cat_emb_start == 3 and get["level"].cat_emb_start == 6
        # texts: identical strings share one id, across columns
        note, other = get["note"], get["other_note"]
        for col, name in ((note, "note"), (other, "other_note")):
            raw = table.column(name).to_pylist()
            assert [db.text(int(v)) if ok else None for v, ok in zip(col.values, col.valid)] == raw
        shared = {db.text(int(v)): int(v) for v in other.values}
        for v, ok in zip(note.values, note.valid):
            if ok and db.text(int(v)) in shared:
                assert shared[db.text(int(v))] == int(v)
        assert db.num_texts == len(set(table.column("note").drop_null().to_pylist())
                                   | set(table.column("other_note").to_pylist()))
        # text ids: first appearance in row-major order (row 0: note is null, other is "3")
        assert db.text(0) == "text number 3"
        assert db.text(1) == "text number 1"
        # primary keys
        assert [t.key(i) for i in range(3)] == [100, 101, 102]
        # the time column gives the row times; nulls -> NO_TIME
        times = db.graph.row_times
        ts = get["ts_us"]
        assert np.array_equal(times[ts.valid], ts.values[ts.valid])
        assert (times[~ts.valid] == NO_TIME).all()


def test_statistics_are_mean_and_population_std(mixed):
    table, root, _ = mixed
    with open_database(root / "db") as db:
        for c in db.table("things").columns:
            if c.stype in (fmt.NUMERIC, fmt.TIMESTAMP):
                raw = c.values[c.valid]
                present = raw.astype(np.float64)
                assert c.mean == pytest.approx(present.mean(), rel=1e-12, abs=1e-9)
                std = (raw - raw[0]).astype(np.float64).std()  # shifted: exact for timestamps
                assert c.std == (pytest.approx(std, rel=1e-9) if std > 0 else 1.0)
            else:
                assert c.mean is None and c.std is None


def test_tasks_seed_non_null_targets(mixed):
    table, root, _ = mixed
    with open_database(root / "db") as db:
        t = db.table("things")
        for task in db.tasks:
            col = t.column(task.target_column)
            rows = np.flatnonzero(col.valid)
            assert task.anchor_row.tolist() == rows.tolist()
            assert np.array_equal(task.target, col.values[rows].astype(np.float64))
            assert task.target_valid.all()
            assert np.array_equal(task.obs_time, db.graph.row_times[rows])
            assert task.target_stype == col.stype
        assert db.task("predict_level").num_seeds == N
        assert db.task("predict_flag").num_seeds == N - 1


def test_embeddings_match_the_embedder(mixed):
    _table, root, _ = mixed
    emb = HashedNgramEmbedder()
    with open_database(root / "db") as db:
        texts = [db.text(i) for i in range(db.num_texts)]
        assert np.array_equal(db.text_embeddings(), emb.embed(texts))
        cols = [f"{c.name} of things" for c in db.table("things").columns]
        assert np.array_equal(db.column_embeddings(), emb.embed(cols))
        cats = [f"{c.name} is {v}" for c in db.table("things").columns if c.categories
                for v in c.categories]
        assert np.array_equal(db.categorical_embeddings(), emb.embed(cats))
        assert db.text_embeddings().dtype == np.float16
        norms = np.linalg.norm(db.text_embeddings().astype(np.float32), axis=1)
        assert np.allclose(norms, 1.0, atol=1e-2)


def test_output_is_independent_of_batch_size_and_parts(mixed, tmp_path):
    table, root, report = mixed
    write_db(tmp_path / "in", {"things": table}, TOML)
    other = preprocess(tmp_path / "in", tmp_path / "db", fsync=False, batch_rows=1 << 16)
    assert other.database_hash == report.database_hash
    again = preprocess(tmp_path / "in", tmp_path / "db2", fsync=False, batch_rows=1)
    assert again.database_hash == report.database_hash
    # index arrays in memory-mapped scratch files instead of memory: same bytes
    mapped = preprocess(tmp_path / "in", tmp_path / "db3", fsync=False, memory_budget=0)
    assert mapped.database_hash == report.database_hash


def test_example_database_contents(example_db):
    meta = json.loads((example_db / "metadata.json").read_text())
    assert [t["name"] for t in meta["tables"]] == ["users", "products", "orders", "reviews"]
    with open_database(example_db) as db:
        orders = db.table("orders")
        assert orders.foreign_keys == (("user_id", "users"), ("product_id", "products"))
        fks = {f["column"]: f for f in meta["tables"][2]["foreign_keys"]}
        assert fks["user_id"]["num_dangling"] == 1 and fks["user_id"]["num_null"] == 1
        g = db.graph
        o41 = orders.row_offset + 41  # the dangling user: only its product edge remains
        assert len(g.parents(o41)) == 1
        assert db.row_of(int(g.parents(o41)[0]))[0].name == "products"
        assert db.table("users").key(0) == "u0001"
        assert db.table("products").key(0) == 100
        # every row's children are in time order, and child_times are their row times
        for v in range(db.num_rows):
            kids = g.children(v)
            times = g.row_times[kids]
            assert (np.diff(times) >= 0).all()
        assert db.database_id == "example-shop"
    assert verify_database(example_db).ok


def test_schema_default_input(tmp_path):
    # preprocess finds INPUT/dlkit.toml; database id defaults to the input directory's name
    src = tmp_path / "shopdata"
    write_db(src, {"a": pa.table({"k": [1, 2], "x": [0.5, 1.5]})}, '[tables.a]\nprimary_key = "k"\n')
    preprocess(src, tmp_path / "db", fsync=False)
    with open_database(tmp_path / "db") as db:
        assert db.database_id == "shopdata"
        assert db.tasks == ()
        assert db.graph.num_edges == 0
    assert verify_database(tmp_path / "db").ok


def test_example_fixture_is_small_and_regenerates_identically(tmp_path):
    import importlib.util

    import pyarrow.parquet as pq

    size = sum(p.stat().st_size for p in EXAMPLE.rglob("*") if p.is_file())
    assert size < 1_000_000
    spec = importlib.util.spec_from_file_location("make_example_db",
                                                  EXAMPLE.parent / "make_example_db.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(tmp_path)
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.parquet"))
    assert made == sorted(p.relative_to(EXAMPLE) for p in EXAMPLE.rglob("*.parquet"))
    for rel in made:
        assert pq.read_table(tmp_path / rel).equals(pq.read_table(EXAMPLE / rel)), rel


def test_unused_dictionary_entries_and_boolean_categories(tmp_path):
    """Categories and texts come from the values present, not from Arrow dictionaries."""
    dictionary = pa.array(["zebra", "apple", "mango", "unused"])
    cat = pa.DictionaryArray.from_arrays(pa.array([2, 1, None, 2], pa.int32()), dictionary)
    txt = pa.DictionaryArray.from_arrays(pa.array([0, 0, 1, None], pa.int32()), dictionary)
    table = pa.table({"k": [1, 2, 3, 4], "c": cat, "t": txt,
                      "b": pa.array([True, True, None, True])})
    write_db(tmp_path / "in", {"a": table},
             '[tables.a]\nprimary_key = "k"\ntypes = { c = "categorical", t = "text", '
             'b = "categorical" }\n')
    preprocess(tmp_path / "in", tmp_path / "db", fsync=False)
    with open_database(tmp_path / "db") as db:
        a = db.table("a")
        assert a.column("c").categories == ("apple", "mango")
        assert a.column("c").values.tolist() == [1, 0, 0, 1]
        assert a.column("b").categories == (True,)
        assert [db.text(i) for i in range(db.num_texts)] == ["zebra", "apple"]
    assert verify_database(tmp_path / "db").ok


def test_null_categorical_cells_hold_zero(tmp_path):
    """Nulls stay 0 after the categories are renumbered, whatever their first appearance."""
    table = pa.table({"k": [1, 2, 3, 4, 5], "c": ["zeta", None, "alpha", None, "zeta"]})
    write_db(tmp_path / "in", {"a": table},
             '[tables.a]\nprimary_key = "k"\ntypes = { c = "categorical" }\n'
             '[tasks.guess]\ntable = "a"\ntarget = "c"\n')
    preprocess(tmp_path / "in", tmp_path / "db", fsync=False)
    with open_database(tmp_path / "db") as db:
        c = db.table("a").column("c")
        assert c.categories == ("alpha", "zeta")
        assert c.values.tolist() == [1, 0, 0, 0, 1]
        assert c.valid.tolist() == [True, False, True, False, True]
        task = db.task("guess")
        assert task.anchor_row.tolist() == [0, 2, 4]
        assert task.target.tolist() == [1.0, 0.0, 1.0]
    assert verify_database(tmp_path / "db").ok


@pytest.mark.parametrize("encoding", ["plain", "arrow_dictionary"])
def test_parquet_encoding_does_not_change_the_database(tmp_path, encoding):
    """String columns are read dictionary-encoded; the bytes must not depend on how the
    Parquet file stores them."""
    words = [f"w{(i * 7) % 13}" if i % 5 else None for i in range(200)]
    table = pa.table({"k": list(range(200)), "c": words, "t": [f"text {i % 17}" for i in range(200)]})
    toml = ('name = "enc"\n[tables.a]\nprimary_key = "k"\n'
            'types = { c = "categorical", t = "text" }\n')
    write_db(tmp_path / "in", {"a": table}, toml)  # pyarrow's default: dictionary pages
    ref = preprocess(tmp_path / "in", tmp_path / "db", fsync=False, batch_rows=37)
    other = tmp_path / "other"
    other.mkdir()
    (other / "dlkit.toml").write_text(toml)
    if encoding == "plain":
        import pyarrow.parquet as pq

        pq.write_table(table, other / "a.parquet", use_dictionary=False)
    else:
        columns = {"k": table["k"], "c": table["c"].dictionary_encode(),
                   "t": table["t"].dictionary_encode()}
        write_db(other, {"a": pa.table(columns)}, toml)
    got = preprocess(other, tmp_path / "db2", fsync=False)
    if encoding == "plain":
        assert got.database_hash == ref.database_hash
        return
    # an Arrow dictionary type is recorded as the columns' arrow_type; nothing else differs
    files = [json.loads((tmp_path / db / "manifest.json").read_text())["files"]
             for db in ("db", "db2")]
    meta = [json.loads((tmp_path / db / "metadata.json").read_text()) for db in ("db", "db2")]
    for m in meta:
        for col in m["tables"][0]["columns"]:
            col.pop("arrow_type")
    assert meta[0] == meta[1]
    for f in files:
        f.pop("metadata.json")
    assert files[0] == files[1]
