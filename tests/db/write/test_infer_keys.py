"""Value-based key inference of `dlkit schema infer` (dlkit.db.write.infer).

The expected keys are those the generators (tests/db/write/infer_data.py) build the data from, not
anything the inference printed; dangling counts are recomputed with pyarrow.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from dlkit.db import open_database
from dlkit.db.write import infer, infer_probe
from dlkit.db.write.infer import fk_name_score, infer_schema, pk_name_score
from dlkit.db.write.writer import preprocess

from .infer_data import (
    FLIGHTS_FOREIGN,
    FLIGHTS_PRIMARY,
    INT_FOREIGN,
    INT_PRIMARY,
    write_flights,
    write_integer_ids,
)


def _keys(text: str) -> tuple[dict[str, str], dict[tuple[str, str], str]]:
    doc = tomllib.loads(text)
    primary = {t: spec["primary_key"] for t, spec in doc["tables"].items()
               if "primary_key" in spec}
    foreign = {(t, c): parent for t, spec in doc["tables"].items()
               for c, parent in spec.get("foreign_keys", {}).items()}
    return primary, foreign


def _line(text: str, table: str, column: str) -> str:
    """The active line of ``column`` in ``table``'s sections of the draft."""
    section = None
    for line in text.splitlines():
        if line.startswith("[tables."):
            section = line.strip("[]").split(".")[1]
        elif section == table and line.split("=")[0].strip() in (column, "primary_key") \
                and (column in line.split("#")[0]):
            return line
    raise AssertionError(f"no line for {table}.{column}")


@pytest.fixture(scope="module")
def flights(tmp_path_factory) -> Path:
    return write_flights(tmp_path_factory.mktemp("flights") / "nyc", 20_000)


def test_string_codes_find_all_five_keys_and_six_foreign_keys(flights, tmp_path):
    _schema, text = infer_schema(flights)
    primary, foreign = _keys(text)
    assert primary == FLIGHTS_PRIMARY
    assert foreign == FLIGHTS_FOREIGN
    # tail numbers missing from planes and destinations missing from airports: active
    # entries, marked as guesses with the share that dangles
    for column in ("tailnum", "dest"):
        line = _line(text, "flights", column)
        assert not line.startswith("#") and "guess:" in line and "not found (dangling?)" in line
    for column in ("carrier", "origin"):
        assert "guess" not in _line(text, "flights", column)
    # unique names of airlines and airports are not keys: nobody refers to them
    assert "referred to by flights.carrier" in _line(text, "airlines", "carrier")
    # the draft is a working schema: preprocess builds it and finds the dangling references
    (flights / "dlkit.toml").write_text(text)
    try:
        report = preprocess(flights, tmp_path / "db", fsync=False)
    finally:
        (flights / "dlkit.toml").unlink()
    data = pq.read_table(flights / "flights.parquet")
    planes = pq.read_table(flights / "planes.parquet").column("tailnum")
    airports = pq.read_table(flights / "airports.parquet").column("faa")
    tail = pc.drop_null(data.column("tailnum"))
    assert report.dangling["flights.tailnum"] == len(tail) - pc.sum(
        pc.is_in(tail, value_set=planes)).as_py()
    assert report.dangling["flights.dest"] == len(data) - pc.sum(
        pc.is_in(data.column("dest"), value_set=airports)).as_py()
    assert report.dangling["flights.tailnum"] > 0.1 * len(data)  # the tolerance was needed
    with open_database(tmp_path / "db") as db:
        assert db.table("airports").primary_key == "faa"


def test_sampling_reads_only_would_be_keys_whole(tmp_path, monkeypatch):
    """With tables larger than READ_ROWS, only columns without a repeat in their sample
    are read whole, and the keys found are the same."""
    root = write_flights(tmp_path / "nyc", 30_000, row_group_size=2_000)
    monkeypatch.setattr(infer_probe, "READ_ROWS", 6_000)
    monkeypatch.setattr(infer_probe, "SAMPLE_ROWS", 700)
    whole_reads: list[tuple[str, str]] = []
    original = infer._Reader.whole

    def counting(self, column):
        if self.total > infer_probe.READ_ROWS:
            whole_reads.append((self.source.name, column))
        return original(self, column)

    monkeypatch.setattr(infer._Reader, "whole", counting)
    _schema, text = infer_schema(root)
    assert _keys(text) == (FLIGHTS_PRIMARY, FLIGHTS_FOREIGN)
    # flights (30k rows) and weather (~26k) are sampled; of their key-kind columns only
    # the keys themselves have no repeat among 700 sampled values
    assert sorted(whole_reads) == [("flights", "id"), ("weather", "obs_key")]


def test_a_repeat_outside_the_sample_is_caught_by_the_whole_read(tmp_path, monkeypatch):
    n = 50_000
    ids = np.arange(n)
    ids[-1] = 7  # one duplicate, in a row group the spread read skips
    pq.write_table(pa.table({"thing_id": ids, "size": np.arange(n) % 9}),
                   tmp_path / "things.parquet", row_group_size=5_000)
    pq.write_table(pa.table({"part_id": np.arange(300), "thing_id": np.arange(300) * 3}),
                   tmp_path / "parts.parquet")
    monkeypatch.setattr(infer_probe, "READ_ROWS", 10_000)
    _schema, text = infer_schema(tmp_path)
    primary, foreign = _keys(text)
    assert primary == {"parts": "part_id"}
    assert foreign == {}


def test_integer_ids_are_told_apart_by_name(tmp_path):
    root = write_integer_ids(tmp_path / "shop")
    _schema, text = infer_schema(root)
    primary, foreign = _keys(text)
    assert primary == INT_PRIMARY
    assert foreign == INT_FOREIGN
    # events has no key: its unique strings are suggested in a comment, not made the key
    assert "payload" in text and "unique: the primary key?" in _line(text, "events", "payload")
    # a working schema as it is, self-reference (employees' managers) included: one edge per
    # non-null foreign key, none dangling
    (root / "dlkit.toml").write_text(text)
    report = preprocess(root, tmp_path / "db", fsync=False)
    non_null = sum(pq.read_metadata(root / f"{t}.parquet").num_rows
                   - pq.read_table(root / f"{t}.parquet", columns=[c]).column(0).null_count
                   for t, c in INT_FOREIGN)
    assert report.num_edges == non_null and not any(report.dangling.values())


def test_integer_tie_named_like_a_key_stays_a_marked_guess(tmp_path):
    pq.write_table(pa.table({"user_id": np.arange(50), "age": np.arange(50) % 7 + 20}),
                   tmp_path / "users.parquet")
    pq.write_table(pa.table({"item_id": np.arange(40), "price": np.arange(40) * 1.5}),
                   tmp_path / "items.parquet")
    pq.write_table(pa.table({"log_id": np.arange(200), "legacy_id": np.arange(200) % 30,
                             "count": np.arange(200) % 30}), tmp_path / "logs.parquet")
    _schema, text = infer_schema(tmp_path)
    primary, foreign = _keys(text)
    assert primary == {"users": "user_id", "items": "item_id", "logs": "log_id"}
    # legacy_id lies in both keys and names neither: an active guess naming the other;
    # count (not named like a key) is no foreign key at all
    assert foreign == {("logs", "legacy_id"): "items"}
    line = _line(text, "logs", "legacy_id")
    assert "guess:" in line and "named like a key" in line
    assert "as much in" in line and "users.user_id" in line


def test_dangling_share_beyond_the_tolerance_is_no_foreign_key(tmp_path):
    codes = [f"C{i:03d}" for i in range(100)]
    pq.write_table(pa.table({"code": codes, "label": [f"L{i}" for i in range(100)]}),
                   tmp_path / "regions.parquet")
    rng = np.random.default_rng(1)
    # 70% of values are codes, 30% are not: below FK_MIN_FOUND (75%)
    mostly = [codes[i] if rng.random() < 0.7 else f"X{i:03d}" for i in rng.integers(0, 100, 4000)]
    # 90% are codes: a foreign key, marked as a guess
    enough = [codes[i] if rng.random() < 0.9 else f"X{i:03d}" for i in rng.integers(0, 100, 4000)]
    pq.write_table(pa.table({"a": mostly, "b": enough}), tmp_path / "visits.parquet")
    _schema, text = infer_schema(tmp_path)
    primary, foreign = _keys(text)
    assert primary == {"regions": "code"}
    assert foreign == {("visits", "b"): "regions"}
    assert "guess:" in _line(text, "visits", "b")


@pytest.mark.parametrize("column,parent,key,score", [
    ("user_id", "users", "user_id", 2), ("userId", "users", "user_id", 2),
    ("driverId", "drivers", "driverId", 2), ("user", "users", "id", 2),
    ("carrier", "airlines", "carrier", 2), ("category_id", "categories", "id", 2),
    ("buyer_user_id", "users", "user_id", 1), ("origin_faa", "airports", "faa", 1),
    ("grid", "drivers", "driverId", 0), ("origin", "airports", "faa", 0),
    ("id", "users", "id", 0), ("grid_id", "drivers", "driverId", 0),
])
def test_foreign_key_names(column, parent, key, score):
    assert fk_name_score(column, parent, key) == score


@pytest.mark.parametrize("table,column,score", [
    ("users", "id", 3), ("users", "user_id", 3), ("drivers", "driverId", 3),
    ("airports", "airport_code", 2), ("flights", "flight_no", 2),
    ("events", "event_uuid", 2), ("events", "session_uuid", 1), ("planes", "tail_number", 1),
    ("planes", "tailnum", 0), ("drivers", "grid", 0), ("drivers", "number", 0),
])
def test_primary_key_names(table, column, score):
    assert pk_name_score(table, column) == score


def test_unique_prose_is_no_key_and_not_read_whole(tmp_path, monkeypatch):
    n = 20_000
    body = "x" * 300
    pq.write_table(pa.table({"note_id": np.arange(n), "body": [f"{i} {body}" for i in range(n)]}),
                   tmp_path / "notes.parquet", row_group_size=2_000)
    monkeypatch.setattr(infer_probe, "READ_ROWS", 5_000)
    whole_reads = []
    original = infer._Reader.whole
    monkeypatch.setattr(infer._Reader, "whole",
                        lambda self, column: whole_reads.append(column) or original(self, column))
    _schema, text = infer_schema(tmp_path)
    assert _keys(text) == ({"notes": "note_id"}, {})
    assert whole_reads == ["note_id"]
