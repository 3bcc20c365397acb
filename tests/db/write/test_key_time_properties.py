"""Random schemas mixing composite keys, integer year time columns that are key parts, and
``known_after`` lags: edges, row times, visible rows and hidden cells of sampled sequences,
each against a plain-Python reference (``datetime`` for the times, dicts for the keys)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlkit.db import open_database, preprocess, verify_database
from dlkit.sampler import Sampler
from tests.db.conftest import write_db
from tests.db.write.test_int_times import DAY, season_time

YEARS = [2000, 2001, 2002, 2003]
CODES = ["a", "b", "c"]
LAGS = {"0": 0, "100d": 100 * DAY, "400d": 400 * DAY}


@st.composite
def databases(draw):
    """Teams-like P keyed by (yr, code) and timed by yr; C keyed by (cid, yr), timed by yr, a
    year of it referring to P by (yr, code) (null or dangling parts included)."""
    parent_keys = draw(st.lists(st.tuples(st.sampled_from(YEARS), st.sampled_from(CODES)),
                                min_size=1, max_size=8, unique=True))
    n = draw(st.integers(1, 14))
    child_keys = draw(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(YEARS)),
                               min_size=n, max_size=n, unique=True))
    codes = draw(st.lists(st.sampled_from(CODES + ["zz", None]), min_size=n, max_size=n))
    labels = draw(st.lists(st.one_of(st.none(), st.floats(-5, 5)), min_size=n, max_size=n))
    return {
        "parent_keys": parent_keys, "child_keys": child_keys, "codes": codes,
        "labels": labels,
        "positions": (draw(st.sampled_from(["start", "end"])),
                      draw(st.sampled_from(["start", "end"]))),
        "lags": (draw(st.sampled_from(sorted(LAGS))), draw(st.sampled_from(sorted(LAGS)))),
    }


def _materialise(root: Path, d: dict) -> None:
    (p_pos, c_pos), (p_lag, c_lag) = d["positions"], d["lags"]
    toml = f"""
[tables.P]
primary_key = ["yr", "code"]
time_column = "yr"
time_unit = "year"
time_position = "{p_pos}"
known_after = {{ v = "{p_lag}" }}
[tables.C]
primary_key = ["cid", "yr"]
time_column = "yr"
time_unit = "year"
time_position = "{c_pos}"
known_after = {{ w = "{c_lag}" }}
[tables.C.foreign_keys]
team = {{ columns = ["yr", "code"], table = "P" }}
[tasks.t]
table = "C"
target = "label"
"""
    pk, ck = d["parent_keys"], d["child_keys"]
    write_db(root, {
        "P": pa.table({"yr": pa.array([k[0] for k in pk], pa.int32()),
                       "code": [k[1] for k in pk],
                       "v": pa.array(np.arange(len(pk), dtype=np.float64))}),
        "C": pa.table({"cid": [k[0] for k in ck], "yr": pa.array([k[1] for k in ck], pa.int64()),
                       "code": pa.array(d["codes"], pa.string()),
                       "w": pa.array(np.arange(len(ck), dtype=np.float64)),
                       "label": pa.array(d["labels"], pa.float64())}),
    }, toml)


# a random database may give a split no seed: the Sampler says so and skips it, as it should
@pytest.mark.filterwarnings("ignore:task .* is skipped")
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(databases())
def test_key_times_edges_and_visibility_match_the_reference(d):
    (p_pos, c_pos), (p_lag, c_lag) = d["positions"], d["lags"]
    pk, ck = d["parent_keys"], d["child_keys"]
    # the reference: row times by datetime, edges by a dict of tuples
    p_times = [season_time(y, p_pos) for y, _ in pk]
    c_times = [season_time(y, c_pos) for _, y in ck]
    times = p_times + c_times
    lag = [LAGS[p_lag]] * len(pk) + [LAGS[c_lag]] * len(ck)
    row_of = {k: r for r, k in enumerate(pk)}
    parents = [[] for _ in pk] + [
        [] if code is None or (y, code) not in row_of else [row_of[(y, code)]]
        for (_, y), code in zip(ck, d["codes"], strict=True)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _materialise(root / "in", d)
        preprocess(root / "in", root / "db", fsync=False, batch_rows=4)
        assert verify_database(root / "db").ok
        with open_database(root / "db") as db:
            assert db.tables[1].row_offset == len(pk)
            assert np.asarray(db.graph.row_times).tolist() == times
            assert [db.graph.parents(v).tolist() for v in range(len(times))] == parents
            assert [db.tables[0].key(r) for r in range(len(pk))] == pk
            assert [db.tables[1].key(r) for r in range(len(ck))] == ck
            lagged = {db.tables[0].column("v").column_id, db.tables[1].column("w").column_id}
        seeds = [r for r, label in enumerate(d["labels"]) if label is not None]
        if not seeds:
            return
        with Sampler(root / "db", 0, 1, batch_size=1, num_prefetch=0, sequence_length=256,
                     max_rows=32, bfs_child_width=16) as s:
            view = s.builder.task("t")
            built = s.builder.build(view, np.arange(view.num_seeds), epoch=0)
    a = built.arrays
    for b in range(view.num_seeds):
        obs = int(view.obs_time[b])
        assert obs == c_times[seeds[b]]  # a seed is observed at its own row's time
        rows = built.visited_rows[b, :built.visited_counts[b]]
        assert int(rows[0]) == len(pk) + seeds[b]
        assert all(times[int(r)] <= obs for r in rows)  # nothing from after obs is visible
        checked = 0
        for p in np.flatnonzero(a["is_padding"][b] == 0):
            if int(a["column_ids"][b, p]) not in lagged:
                assert a["is_hidden"][b, p] == 0
                continue
            row = int(built.visited_rows[b, a["seq_row_ids"][b, p]])
            assert a["is_hidden"][b, p] == (times[row] + lag[row] > obs)
            checked += 1
        assert checked > 0  # at least the seed's own w cell
