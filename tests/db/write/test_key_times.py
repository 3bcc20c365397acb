"""A time column that is also part of a key (Lahman's ``Teams`` keyed by (yearID, teamID) and
timed by yearID): the key part matches as an integer, the row time comes from it, and it is a
timestamp feature of its table; checked against plain-Python references."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from dlkit.db import open_database, preprocess, verify_database
from dlkit.errors import SchemaError
from dlkit.sampler import Sampler
from tests.db.conftest import write_db
from tests.db.write.test_int_times import EPOCH, season_time

SCHEMA = """name = "lahman-like"
[tables.People]
primary_key = "playerID"
[tables.Teams]
primary_key = ["yearID", "teamID"]
time_column = "yearID"
time_unit = "year"
time_position = "end"
[tables.Batting]
primary_key = ["playerID", "yearID", "stint"]
time_column = "yearID"
time_unit = "year"
time_position = "end"
[tables.Batting.foreign_keys]
playerID = "People"
team = { columns = ["yearID", "teamID"], table = "Teams" }
[tables.Games]
time_column = "at"
foreign_keys = { playerID = "People" }
[tasks.win]
table = "Games"
target = "won"
"""

TEAMS = ["BOS", "NYA", "CHN"]
YEARS = list(range(2000, 2006))


def _write(root: Path) -> dict:
    rng = np.random.default_rng(11)
    players = [f"p{i:02d}" for i in range(8)]
    team_keys = [(y, t) for y in YEARS for t in TEAMS]
    teams = {"yearID": pa.array([k[0] for k in team_keys], pa.int16()),
             "teamID": [k[1] for k in team_keys], "W": rng.integers(50, 110, len(team_keys))}
    batting_keys = sorted({(str(rng.choice(players)), int(rng.choice(YEARS)),
                            int(rng.integers(1, 3))) for _ in range(120)})
    batting_team = [str(rng.choice(TEAMS + ["XXX"])) for _ in batting_keys]
    batting = {"playerID": [k[0] for k in batting_keys],
               "yearID": pa.array([k[1] for k in batting_keys], pa.int64()),
               "stint": [k[2] for k in batting_keys], "teamID": batting_team,
               "H": rng.integers(0, 200, len(batting_keys))}
    start = int(dt.datetime(2001, 1, 1, tzinfo=dt.UTC).timestamp())
    end = int(dt.datetime(2007, 1, 1, tzinfo=dt.UTC).timestamp())
    at = rng.integers(start, end, 40) * 10**6
    games = {"playerID": [str(rng.choice(players)) for _ in range(40)],
             "at": pa.array(at, pa.timestamp("us")), "won": rng.integers(0, 2, 40).astype(bool)}
    write_db(root, {"People": pa.table({"playerID": players}), "Teams": pa.table(teams),
                    "Batting": pa.table(batting), "Games": pa.table(games)}, SCHEMA)
    return {"players": players, "team_keys": team_keys, "batting_keys": batting_keys,
            "batting_team": batting_team}


@pytest.fixture(scope="module")
def lahman(tmp_path_factory):
    root = tmp_path_factory.mktemp("keytime")
    data = _write(root / "in")
    report = preprocess(root / "in", root / "db", fsync=False, batch_rows=16)
    return root / "db", data, report


def test_keys_times_and_features(lahman):
    db_path, data, report = lahman
    assert verify_database(db_path).ok
    with open_database(db_path) as db:
        people, teams, batting, _ = db.tables
        assert [teams.key(r) for r in range(teams.num_rows)] == data["team_keys"]
        assert [batting.key(r) for r in range(batting.num_rows)] == data["batting_keys"]
        times = np.asarray(db.graph.row_times)
        for table, years in ((teams, [k[0] for k in data["team_keys"]]),
                             (batting, [k[1] for k in data["batting_keys"]])):
            want = [season_time(y, "end") for y in years]
            got = times[table.row_offset:table.row_offset + table.num_rows]
            assert got.tolist() == want
            column = table.column("yearID")  # the key part is a timestamp feature too
            assert column.stype_name == "timestamp"
            assert np.asarray(column.values).tolist() == want
        assert [c.name for c in teams.columns] == ["yearID", "W"]
        assert [c.name for c in batting.columns] == ["yearID", "H"]
        # edges: plain-Python reference of (playerID) and (yearID, teamID) matches
        team_row = {k: teams.row_offset + r for r, k in enumerate(data["team_keys"])}
        player_row = {p: people.row_offset + r for r, p in enumerate(data["players"])}
        dangling = 0
        for r, (player, year, _) in enumerate(data["batting_keys"]):
            want = [player_row[player]]
            team = team_row.get((year, data["batting_team"][r]))
            if team is None:
                dangling += 1
            else:
                want.append(team)
            assert db.graph.parents(batting.row_offset + r).tolist() == want
    assert report.dangling["Batting.team"] == dangling
    assert dangling > 0


def test_no_season_is_seen_before_it_ends(lahman):
    """A season's Teams and Batting rows are in no sequence observed before the season ends."""
    db_path, data, _ = lahman
    with Sampler(db_path, 0, 1, batch_size=8, num_prefetch=0, sequence_length=512,
                 max_rows=64, bfs_child_width=32) as s:
        view = s.builder.task("win")
        built = s.builder.build(view, np.arange(view.num_seeds), epoch=0)
    with open_database(db_path) as db:
        spans = {t.name: (t.row_offset, t.row_offset + t.num_rows) for t in db.tables}
    years = {"Teams": [k[0] for k in data["team_keys"]],
             "Batting": [k[1] for k in data["batting_keys"]]}
    seen = 0
    for b in range(view.num_seeds):
        obs_year = (EPOCH + dt.timedelta(microseconds=int(view.obs_time[b]))).year
        rows = built.visited_rows[b, :built.visited_counts[b]]
        for name, (lo, hi) in spans.items():
            if name not in years:
                continue
            for row in rows[(rows >= lo) & (rows < hi)]:
                assert years[name][row - lo] < obs_year
                seen += 1
    assert seen > 0


@pytest.mark.parametrize(("change", "message"), [
    ('time_unit = "year"\n', None),
    ("", "a key column can be the time column only as an integer with a time_unit"),
])
def test_a_key_time_column_needs_a_unit(tmp_path, change, message):
    toml = ('[tables.Teams]\nprimary_key = ["yearID", "teamID"]\ntime_column = "yearID"\n'
            + change)
    write_db(tmp_path / "in", {"Teams": pa.table({"yearID": [2000, 2001],
                                                  "teamID": ["A", "A"]})}, toml)
    if message is None:
        preprocess(tmp_path / "in", tmp_path / "db", fsync=False)
        assert verify_database(tmp_path / "db").ok
    else:
        with pytest.raises(SchemaError, match=message):
            preprocess(tmp_path / "in", tmp_path / "db", fsync=False)


def test_a_string_key_cannot_be_an_integer_time(tmp_path):
    toml = ('[tables.T]\nprimary_key = ["season", "id"]\ntime_column = "season"\n'
            'time_unit = "year"\n')
    write_db(tmp_path / "in", {"T": pa.table({"season": ["2000", "2001"], "id": [1, 1]})}, toml)
    with pytest.raises(SchemaError, match="time_unit = 'year' is for integer time columns"):
        preprocess(tmp_path / "in", tmp_path / "db", fsync=False)


def test_a_single_column_key_and_foreign_key_may_be_the_time_column(tmp_path):
    """Years keyed and timed by yr; Games referring to it by its own time column yr."""
    toml = """
[tables.Years]
primary_key = "yr"
time_column = "yr"
time_unit = "year"
[tables.Games]
time_column = "yr"
time_unit = "year"
time_position = "end"
foreign_keys = { yr = "Years" }
"""
    years = [2003, 2001, 2002]
    games = [2001, 2003, 2003, 1999, 2002]
    write_db(tmp_path / "in", {"Years": pa.table({"yr": years, "x": [1.0, 2.0, 3.0]}),
                               "Games": pa.table({"yr": games, "g": [1, 2, 3, 4, 5]})}, toml)
    report = preprocess(tmp_path / "in", tmp_path / "db", fsync=False)
    assert report.dangling == {"Games.yr": 1}  # 1999 is no year of Years
    assert verify_database(tmp_path / "db").ok
    with open_database(tmp_path / "db") as db:
        times = np.asarray(db.graph.row_times).tolist()
        assert times == ([season_time(y, "start") for y in years]
                         + [season_time(y, "end") for y in games])
        want = [[years.index(y)] if y in years else [] for y in games]
        assert [db.graph.parents(3 + r).tolist() for r in range(5)] == want
        assert [c.name for c in db.table("Years").columns] == ["yr", "x"]
        assert [c.name for c in db.table("Games").columns] == ["yr", "g"]
        assert [db.table("Years").key(r) for r in range(3)] == years


@pytest.mark.parametrize(("change", "message"), [
    # without its time_unit, the key part yearID is a key column that is also a feature
    (lambda m: m["tables"][1].pop("time_unit") and m["tables"][1].pop("time_position"),
     "a column of it is also a feature column"),
    # only the time column may be both: another key part as a feature is refused
    (lambda m: m["tables"][1]["columns"][1].update(name="teamID"),
     "a column of it is also a feature column"),
])
def test_verify_refuses_other_key_feature_overlaps(lahman, tmp_path, change, message):
    import json
    import shutil

    from dlkit.db.read.reader import check_database
    from tests.db.read.test_verify_content import rehash

    db_path, _, _ = lahman
    copy = tmp_path / "db"
    shutil.copytree(db_path, copy)
    meta = json.loads((copy / "metadata.json").read_text())
    assert meta["tables"][1]["name"] == "Teams"
    change(meta)
    (copy / "metadata.json").write_text(json.dumps(meta, indent=2))
    rehash(copy)
    failures = check_database(copy, verify_hashes=False)
    assert any(message in f.message for f in failures), failures
