"""`dlkit schema infer` on composite keys, self-references, isolated tables and hostile input.

The expected keys are those the data is generated from (a small baseball-like database:
Teams keyed by (yearID, teamID), Batting by (playerID, yearID, stint) referring to Teams
and People), checked against the draft and against a database built from it.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dlkit.db import open_database, verify_database
from dlkit.db.schema.spec import key_columns
from dlkit.db.time_units import TimePosition, TimeUnit
from dlkit.db.write import infer
from dlkit.db.write.infer import infer_schema
from dlkit.db.write.writer import preprocess
from dlkit.errors import DataError
from tests.db.write.test_int_times import season_time

YEARS = list(range(1990, 2000))
TEAMS = ["BOS", "NYA", "CHN", "LAN", "SFN", "ATL"]


def write_baseball(root: Path) -> dict[str, list[tuple]]:
    """Teams(yearID, teamID) <- Batting(yearID, teamID); People(playerID) <- Batting; a
    table linked to nothing. Returns each table's key tuples."""
    root.mkdir(parents=True)
    rng = np.random.default_rng(7)
    teams = [(y, t) for y in YEARS for t in TEAMS]
    pq.write_table(pa.table({"yearID": [y for y, _ in teams], "lgID": ["AL"] * len(teams),
                             "teamID": [t for _, t in teams],
                             "W": rng.integers(50, 100, len(teams))}), root / "Teams.parquet")
    players = [f"p{i:04d}01" for i in range(200)]
    pq.write_table(pa.table({"playerID": players, "birthYear": rng.integers(1950, 1980, 200),
                             # a copy of the key in most rows: no self-reference
                             "altID": [p if i % 10 else players[0] for i, p in
                                       enumerate(players)]}), root / "People.parquet")
    batting = []
    for p in players:
        for y in rng.choice(YEARS, 3, replace=False):
            batting.append((p, int(y), 1, TEAMS[int(rng.integers(6))]))
            if rng.random() < 0.3:
                batting.append((p, int(y), 2, TEAMS[int(rng.integers(6))]))
    pq.write_table(pa.table({"playerID": [b[0] for b in batting],
                             "yearID": [b[1] for b in batting],
                             "stint": [b[2] for b in batting],
                             "teamID": [b[3] for b in batting],
                             "H": rng.integers(0, 200, len(batting))}), root / "Batting.parquet")
    pq.write_table(pa.table({"x": rng.random(30)}), root / "Weather.parquet")
    return {"Teams": teams, "Batting": [b[:3] for b in batting]}


def test_composite_keys_are_drafted_and_build(tmp_path):
    keys = write_baseball(tmp_path / "in")
    schema, text = infer_schema(tmp_path / "in")
    doc = tomllib.loads(text)["tables"]
    assert doc["Teams"]["primary_key"] == ["yearID", "teamID"]
    assert doc["Batting"]["primary_key"] == ["playerID", "yearID", "stint"]
    assert doc["Batting"]["foreign_keys"] == {
        "playerID": "People", "team": {"columns": ["yearID", "teamID"], "table": "Teams"}}
    assert "foreign_keys" not in doc["People"]  # altID is its own row's key: no self-loop
    assert "# not drafted: altID -> People.playerID: 90% of rows hold their own key" in text
    lines = text.splitlines()
    weather = lines.index("[tables.Weather]")
    assert lines[weather + 1].startswith("# isolated: no foreign key")
    assert "referred to by Batting" in next(line for line in lines
                                            if line.startswith('primary_key = ["yearID"'))
    (tmp_path / "in" / "dlkit.toml").write_text(text)
    report = preprocess(tmp_path / "in", tmp_path / "db", fsync=False)
    assert report.dangling == {"Batting.playerID": 0, "Batting.team": 0}
    with open_database(tmp_path / "db") as db:
        by_name = {t.name: t for t in db.tables}
        for table, expected in keys.items():
            td = by_name[table]
            assert [td.key(r) for r in range(td.num_rows)] == expected
        batting, teams = by_name["Batting"], by_name["Teams"]
        team_row = {k: teams.row_offset + r for r, k in enumerate(keys["Teams"])}
        raw = pq.read_table(tmp_path / "in" / "Batting.parquet")
        want = [team_row[(y, t)] for y, t in zip(raw["yearID"].to_pylist(),
                                                   raw["teamID"].to_pylist())]
        got = [int(db.graph.parents(batting.row_offset + r)[1])
               for r in range(batting.num_rows)]
        assert got == want
    assert schema.table("Batting").composite_fks == {"team": ("yearID", "teamID")}


def test_a_self_reference_matching_few_rows_is_not_drafted(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    n = 400
    ids = [f"u{i:03d}" for i in range(n)]
    # the mentor of 70% of rows is another user (some mentor several); the rest name users
    # that do not exist
    parent = [ids[(i * 3 + 1) % 200] if i % 10 < 7 else f"x{i % 50}" for i in range(n)]
    pq.write_table(pa.table({"user_id": ids, "mentor": parent}), root / "users.parquet")
    pq.write_table(pa.table({"user_id": [ids[i % n] for i in range(900)]}),
                   root / "visits.parquet")
    _schema, text = infer_schema(root)
    doc = tomllib.loads(text)["tables"]
    assert "foreign_keys" not in doc["users"]
    assert "# not drafted: self-reference mentor -> users.user_id matches only 70%" in text


def test_wide_and_many_tables_try_few_pairs(tmp_path, monkeypatch):
    """A one-row table of 2,000 columns (each unique) and 300 small tables with the same
    columns: key candidates are tried only against columns their signatures allow."""
    calls = []
    real = infer._share_found
    monkeypatch.setattr(infer, "_share_found", lambda index, sample: calls.append(1) or
                        real(index, sample))
    wide = tmp_path / "wide"
    wide.mkdir()
    pq.write_table(pa.table({f"c{i}": pa.array([i % 7]) for i in range(1000)} |
                            {f"s{i}": pa.array(["x"]) for i in range(1000)}),
                   wide / "t.parquet")
    schema, _text = infer_schema(wide)
    assert len(calls) == 0 and schema.tables[0].primary_key is None
    many = tmp_path / "many"
    many.mkdir()
    for t in range(300):
        pq.write_table(pa.table({"id": [0, 1, 2], "name": ["a", "b", "c"]}),
                       many / f"t{t:03d}.parquet")
    calls.clear()
    schema, _text = infer_schema(many)
    assert len(calls) == 0
    assert all(not spec.foreign_keys for spec in schema.tables)


def test_a_corrupt_page_is_bad_input(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    path = root / "t.parquet"
    pq.write_table(pa.table({"id": list(range(2000)), "s": [f"v{i}" for i in range(2000)]}),
                   path, compression="snappy")
    data = bytearray(path.read_bytes())
    for i in range(100, 600):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match="table 't': cannot read its Parquet data"):
        infer_schema(root)


def test_names_that_are_not_utf8_are_one_error(tmp_path):
    from dlkit.errors import DlkitError

    bad_column = tmp_path / "column"
    bad_column.mkdir()
    path = bad_column / "t.parquet"
    pq.write_table(pa.table({"AAAAZ": [1, 2, 3], "id": [1, 2, 3]}), path, store_schema=False)
    path.write_bytes(path.read_bytes().replace(b"AAAAZ", b"A\xffA\xfeZ"))
    with pytest.raises(DlkitError, match="not UTF-8|can't decode"):
        infer_schema(bad_column)
    bad_file = tmp_path / "file"
    bad_file.mkdir()
    pq.write_table(pa.table({"id": [1, 2, 3]}), bad_file / "ok.parquet")
    pq.write_table(pa.table({"id": [1, 2, 3]}), bad_file / "tmp.parquet")
    os.rename(bytes(bad_file / "tmp.parquet"), bytes(bad_file) + b"/t\xff.parquet")
    with pytest.raises(DlkitError):
        infer_schema(bad_file)


def test_deeply_nested_key_metadata_is_one_error(tmp_path):
    from dlkit.errors import SchemaError

    root = tmp_path / "in"
    root.mkdir()
    deep = "[" * 100_000 + "]" * 100_000
    table = pa.table({"id": [1, 2, 3]}).replace_schema_metadata(
        {"fkey_col_to_pkey_table": deep, "pkey_col": deep, "time_col": deep})
    pq.write_table(table, root / "t.parquet")
    with pytest.raises(SchemaError, match="nested too deeply"):
        infer_schema(root)


def test_a_year_in_a_composite_key_is_drafted_as_the_time_column(tmp_path):
    """Teams (yearID, teamID) and Batting (playerID, yearID, stint): yearID is drafted as each
    table's year time column (no type line: a key column), and the draft builds with row
    times at each season's end and the key still matching as integers."""
    keys = write_baseball(tmp_path / "in")
    schema, text = infer_schema(tmp_path / "in")
    for name in ("Teams", "Batting"):
        spec = schema.table(name)
        assert (spec.time_column, spec.time_unit) == ("yearID", TimeUnit.YEAR)
        assert spec.time_position is TimePosition.END
        assert "yearID" not in spec.types
    assert 'time_column = "yearID"                   # int64 year values' in text
    (tmp_path / "in" / "dlkit.toml").write_text(text)
    preprocess(tmp_path / "in", tmp_path / "db", fsync=False)
    assert verify_database(tmp_path / "db").ok
    with open_database(tmp_path / "db") as db:
        teams = next(t for t in db.tables if t.name == "Teams")
        times = np.asarray(db.graph.row_times)[teams.row_offset:teams.row_offset +
                                               teams.num_rows]
        assert times.tolist() == [season_time(y, "end") for y, _ in keys["Teams"]]
        assert [teams.key(r) for r in range(teams.num_rows)] == keys["Teams"]


def test_a_reference_equal_to_the_primary_key_is_not_drafted(tmp_path):
    """Pitching keyed by (playerID, yearID, stint), every tuple also one of Batting's: the
    draft keeps the key, drafts no foreign key of the same columns (the schema refuses a
    primary key that is also a foreign key) and says why; the draft builds."""
    root = tmp_path / "in"
    root.mkdir()
    # 40 players, 2 seasons, 2 stints: only the three columns together are unique
    rows = [(f"p{i % 40:03d}", 2000 + (i // 40) % 2, 1 + i // 80) for i in range(160)]
    pitchers = [r for r in rows if int(r[0][1:]) % 2 == 0]
    for name, part in (("Batting", rows), ("Pitching", pitchers)):
        pq.write_table(pa.table({"playerID": [r[0] for r in part],
                                 "yearID": [r[1] for r in part],
                                 "stint": [r[2] for r in part],
                                 "G": list(range(len(part)))}), root / f"{name}.parquet")
    schema, text = infer_schema(root)
    for spec in schema.tables:
        assert key_columns(spec.primary_key) not in spec.composite_fks.values()
    assert "is this table's primary key and also matches" in text
    (root / "dlkit.toml").write_text(text)
    preprocess(root, tmp_path / "db", fsync=False)
    assert verify_database(tmp_path / "db").ok
