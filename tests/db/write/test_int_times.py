"""Integer time columns and columns known later than their row, built and sampled."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from dlkit.db import open_database, preprocess, verify_database
from dlkit.errors import DataError, SchemaError
from dlkit.sampler import Sampler
from tests.db.conftest import write_db

DAY = 86_400_000_000
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _us(moment: dt.datetime) -> int:
    d = moment - EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def season_time(year: int, position: str) -> int:
    """The row time of a season by ``datetime``: 1 January, or the year's last microsecond."""
    if position == "start":
        return _us(dt.datetime(year, 1, 1, tzinfo=dt.UTC))
    return _us(dt.datetime(year + 1, 1, 1, tzinfo=dt.UTC)) - 1


SCHEMA = """name = "ball"
[tables.people]
primary_key = "pid"
[tables.seasons]
time_column = "yearID"
time_unit = "year"
{position}
foreign_keys = {{ pid = "people" }}
known_after = {{ score = "30d" }}
[tables.games]
time_column = "at"
foreign_keys = {{ pid = "people" }}
[tasks.win]
table = "games"
target = "won"
"""


def write_ball(root: Path, position: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    num_people, num_seasons, num_games = 12, 240, 160
    seasons = {"pid": rng.integers(0, num_people, num_seasons),
               "yearID": rng.integers(2000, 2010, num_seasons).astype(np.int64),
               "hits": rng.normal(size=num_seasons), "score": rng.normal(size=num_seasons)}
    # Games at whole seconds of 2001-2010: never a year's last microsecond.
    start, end = _us(dt.datetime(2001, 1, 1, tzinfo=dt.UTC)), _us(dt.datetime(2011, 1, 1,
                                                                             tzinfo=dt.UTC))
    at = rng.integers(start // 10**6, end // 10**6, num_games) * 10**6
    games = {"pid": rng.integers(0, num_people, num_games), "at": at,
             "won": rng.integers(0, 2, num_games).astype(bool)}
    write_db(root, {
        "people": pa.table({"pid": np.arange(num_people)}),
        "seasons": pa.table(seasons),
        "games": pa.table({"pid": games["pid"], "at": pa.array(at, pa.timestamp("us")),
                           "won": games["won"]}),
    }, SCHEMA.format(position=f'time_position = "{position}"' if position != "start" else ""))
    return {"year": seasons["yearID"], "at": at}


@pytest.fixture(scope="module", params=["end", "start"])
def ball(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"ball-{request.param}")
    data = write_ball(root / "in", request.param)
    preprocess(root / "in", root / "db", fsync=False)
    return root / "db", data, request.param


def _visits(db_path: Path):
    """Every (obs_time, visited global row, cells) of the win task's sequences."""
    with Sampler(db_path, 0, 1, batch_size=16, num_prefetch=0, sequence_length=512,
                 max_rows=64, bfs_child_width=32) as s:
        view = s.builder.task("win")
        built = s.builder.build(view, np.arange(view.num_seeds), epoch=0)
        return view, built


def test_row_times_metadata_and_verify(ball):
    db_path, data, position = ball
    assert verify_database(db_path).ok
    meta = json.loads((db_path / "metadata.json").read_text())
    seasons = meta["tables"][1]
    assert seasons["time_unit"] == "year"
    assert seasons.get("time_position") == (None if position == "start" else "end")
    assert [c.get("known_after_us") for c in seasons["columns"]] == [None, None, 30 * DAY]
    assert "time_unit" not in meta["tables"][2]  # a timestamp column: no unit key
    with open_database(db_path) as db:
        table = db.table("seasons")
        times = np.asarray(db.graph.row_times)[table.row_offset:table.row_offset + 240]
        assert times.tolist() == [season_time(int(y), position) for y in data["year"]]
        # the time column is a timestamp feature holding the row times
        assert table.column("yearID").stype_name == "timestamp"
        assert np.asarray(table.column("yearID").values).tolist() == times.tolist()


def test_no_season_is_seen_before_its_time(ball):
    """At the period's end no sequence shows a season of the observation's own year (or
    later); at its start, sequences do show their own year's seasons (what "end" is for).
    Scores are shown only 30 days after the season's time, the seed-independent rule."""
    db_path, data, position = ball
    view, built = _visits(db_path)
    with open_database(db_path) as db:
        offset = db.table("seasons").row_offset
        times = np.asarray(db.graph.row_times)
        score_id = db.table("seasons").column("score").column_id
    same_year = hidden = shown = 0
    for b in range(view.num_seeds):
        obs = int(view.obs_time[b])
        obs_year = (EPOCH + dt.timedelta(microseconds=obs)).year
        rows = built.visited_rows[b, :built.visited_counts[b]]
        for row in rows[(rows >= offset) & (rows < offset + 240)]:
            year = int(data["year"][row - offset])
            assert year <= obs_year
            same_year += year == obs_year
            if position == "end":
                assert year < obs_year
        a = built.arrays
        for p in np.flatnonzero((a["column_ids"][b] == score_id) & (a["is_padding"][b] == 0)):
            row = built.visited_rows[b, a["seq_row_ids"][b, p]]
            known = times[row] + 30 * DAY <= obs
            assert a["is_hidden"][b, p] == (not known)
            hidden += not known
            shown += bool(known)
    assert shown > 0 and hidden > 0
    if position == "start":
        assert same_year > 0


def test_a_bad_value_names_table_column_row_and_value(tmp_path):
    good = pa.table({"day": pa.array([20230101, None, 20231231, 20240229, 19991231],
                                     pa.int64()), "x": [1.0] * 5})
    bad = pa.table({"day": pa.array([20230301, 20230315, 20230230], pa.int64()),
                    "x": [1.0] * 3})
    write_db(tmp_path / "in", {"days": [good, bad]},
             '[tables.days]\ntime_column = "day"\ntime_unit = "yyyymmdd"\n')
    with pytest.raises(DataError, match="table 'days', column 'day': row 7 holds 20230230, "
                                        "which is not a valid time in unit 'yyyymmdd'"):
        preprocess(tmp_path / "in", tmp_path / "db", fsync=False)


@pytest.mark.parametrize(("column", "unit", "message"), [
    (pa.array([1, 2], pa.int64()), None, "say what its integers count with time_unit = one of "
                                         "year, yyyymm, yyyymmdd, s, ms, us, ns"),
    (pa.array([1, 2], pa.timestamp("s")), "s", "time_unit = 's' is for integer time columns, "
                                               "and this one has type timestamp"),
    (pa.array([1.0, 2.0]), "s", "time_unit = 's' is for integer time columns"),
    (pa.array([1.0, 2.0]), None, "must be a timestamp, a date, or an integer with a time_unit"),
])
def test_time_column_types_and_units_must_agree(tmp_path, column, unit, message):
    toml = '[tables.t]\ntime_column = "ts"\n' + (f'time_unit = "{unit}"\n' if unit else "")
    write_db(tmp_path / "in", {"t": pa.table({"ts": column, "x": [1.0, 2.0]})}, toml)
    with pytest.raises(SchemaError, match=message):
        preprocess(tmp_path / "in", tmp_path / "db", fsync=False)


def test_epoch_seconds_build_like_timestamps(tmp_path):
    """An integer seconds column gives the row times a timestamp[s] column of the same
    values gives (and the same values stored), with a time split given in seconds."""
    secs = np.array([1_600_000_000, -86_400, 0, 1_700_000_123], dtype=np.int64)
    task = ('[tasks.a]\ntable = "t"\ntarget = "x"\nsplit = "time"\n'
            'val_from = {v}\ntest_from = {t}\n')
    write_db(tmp_path / "a", {"t": pa.table({"ts": secs, "x": [1.0, 2.0, 3.0, 4.0]})},
             '[tables.t]\ntime_column = "ts"\ntime_unit = "s"\n'
             + task.format(v=1_600_000_000, t=1_700_000_000))
    write_db(tmp_path / "b", {"t": pa.table({"ts": pa.array(secs, pa.timestamp("s")),
                                             "x": [1.0, 2.0, 3.0, 4.0]})},
             '[tables.t]\ntime_column = "ts"\n'
             + task.format(v="2020-09-13T12:26:40Z", t="2023-11-14T22:13:20Z"))
    preprocess(tmp_path / "a", tmp_path / "dba", fsync=False)
    preprocess(tmp_path / "b", tmp_path / "dbb", fsync=False)
    with open_database(tmp_path / "dba") as a, open_database(tmp_path / "dbb") as b:
        assert np.asarray(a.graph.row_times).tolist() == (secs * 10**6).tolist()
        assert np.asarray(a.graph.row_times).tolist() == np.asarray(b.graph.row_times).tolist()
        assert a.task("a").rules == b.task("a").rules


@pytest.mark.parametrize(("change", "message"), [
    (lambda m: m["tables"][1]["columns"][2].update(known_after_us=0), "known_after_us must be"),
    (lambda m: m["tables"][1]["columns"][2].update(known_after_us=1 << 63),
     "known_after_us must be"),
    (lambda m: m["tables"][1].update(time_unit="month"), "time_unit 'month' is not one of"),
    (lambda m: m["tables"][1].update(time_position="start"), "time_position 'start' must be"),
])
def test_bad_time_keys_in_metadata_are_refused(ball, tmp_path, change, message):
    import shutil

    from dlkit.db.read.reader import check_database
    from tests.db.read.test_verify_content import rehash

    db_path, _, _ = ball
    copy = tmp_path / "db"
    shutil.copytree(db_path, copy)
    meta = json.loads((copy / "metadata.json").read_text())
    change(meta)
    (copy / "metadata.json").write_text(json.dumps(meta, indent=2))
    rehash(copy)
    failures = check_database(copy, verify_hashes=False)
    assert any(message in f.message for f in failures), failures
