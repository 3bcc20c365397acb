"""As-of aggregate cells against a plain-Python reference computed from the source tables.

Random schemas: a parent table ``users`` and two child tables (``events`` with a numeric and
a boolean column, both with nulls and null times, and ``visits``, with two foreign keys into
``users``), times drawn from a few seconds so that ties at the observation time are common,
random label lags and boundaries, and a random ``known_after`` lag of the boolean column (a
table after the one whose rows hold the aggregate cells, so a lag found by position instead
of by name lands on the wrong cell). Every aggregate cell of every sequence is recomputed from
the Parquet rows: the children of the cell's row, visible and known at the sequence's
observation time, counted, summed in (time, row) order, or their latest time taken, then
encoded as docs/batch_format.md says.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlkit.db import open_database, preprocess
from dlkit.sampler.batch import BatchBuilder, BatchConfig
from tests.db.conftest import write_db

SECOND = 1_000_000
DAY = 86_400 * SECOND
NO_TIME = None


def _times(draw, n: int, nulls: bool) -> list[int | None]:
    return [None if nulls and draw(st.integers(0, 9)) == 0 else draw(st.integers(0, 6))
            for _ in range(n)]


@st.composite
def schemas(draw):
    n_users = draw(st.integers(1, 5))
    n_events = draw(st.integers(0, 25))
    n_visits = draw(st.integers(0, 10))
    users = {"uid": list(range(n_users)), "t": _times(draw, n_users, False),
             "a": [float(draw(st.integers(-3, 3))) for _ in range(n_users)]}
    events = {
        "eid": list(range(n_events)),
        "uid": [draw(st.integers(0, n_users)) if draw(st.integers(0, 8)) else None
                for _ in range(n_events)],  # n_users dangles (dropped), None: no edge
        "t": _times(draw, n_events, True),
        "x": [None if draw(st.integers(0, 4)) == 0 else draw(st.floats(-100, 100, width=32))
              for _ in range(n_events)],
        "flag": [None if draw(st.integers(0, 4)) == 0 else draw(st.booleans())
                 for _ in range(n_events)],
    }
    visits = {"vid": list(range(n_visits)),
              "uid": [draw(st.integers(0, n_users - 1)) for _ in range(n_visits)],
              "t": _times(draw, n_visits, False)}
    if draw(st.booleans()):  # a second key into users: often the same user (two edges)
        visits["host"] = [draw(st.sampled_from([None, 0, n_users - 1]))
                          for _ in range(n_visits)]
    lag = draw(st.sampled_from([0, 0, 1, 2, 5]))
    strict = draw(st.booleans())
    counts = draw(st.booleans())
    recency = draw(st.booleans())
    width = draw(st.integers(0, 3))
    flag_lag = draw(st.sampled_from([0, 0, 2, 5]))
    return users, events, visits, lag, strict, counts, recency, width, flag_lag


def _table(columns: dict, times: str = "t") -> pa.Table:
    arrays = {}
    for name, values in columns.items():
        if name == times:
            arrays[name] = pa.array([None if v is None else v * SECOND for v in values],
                                    pa.timestamp("us", tz="UTC"))
        elif name == "flag":
            arrays[name] = pa.array(values, pa.bool_())
        elif name == "x" or name == "a":
            arrays[name] = pa.array(values, pa.float64())
        else:
            arrays[name] = pa.array(values, pa.int64())
    return pa.table(arrays)


def _toml(lag: int, strict: bool, counts: bool, flag_lag: int = 0, recency: bool = False,
          two_keys: bool = False) -> str:
    known_after = f'\nknown_after = {{ flag = "{flag_lag}s" }}' if flag_lag else ""
    host = ', host = "users"' if two_keys else ""
    boundary = '\nboundary = "strict"' if strict else ""
    label_lag = f'\nlabel_lag = "{lag}s"' if lag else ""
    return f"""
name = "agg"
[tables.users]
primary_key = "uid"
time_column = "t"
[tables.events]
primary_key = "eid"
time_column = "t"
foreign_keys = {{ uid = "users" }}
types = {{ flag = "boolean" }}{known_after}
[tables.visits]
primary_key = "vid"
time_column = "t"
foreign_keys = {{ uid = "users"{host} }}
[tasks.ev]
table = "events"
target = "x"{label_lag}{boundary}
[tasks.us]
table = "users"
target = "a"
[aggregates]
counts = {str(counts).lower()}
recency = {str(recency).lower()}
columns = {{ events = ["x", "flag"] }}
"""


def _encode(kind: str, value: float, mean: float, std: float) -> np.float32:
    if kind in ("count", "recency"):  # a recency's value: days
        value = math.log1p(value)
    elif kind == "sum":
        value = math.copysign(math.log1p(abs(value)), value) if value else 0.0
    return np.float32((value - mean) / std)


def _reference(cell: dict, children: list[tuple[int | None, int, dict]], obs: int | None,
               strict: bool, lag: int, task_target: bool):
    """``(value, is_null, is_hidden)`` of one aggregate cell, from its row's children
    ``(time, global row, source row)``."""
    if task_target and obs is None:
        return 0.0, 0, 1
    cut = None if obs is None else obs - (1 if strict else 0)
    lag_us = max(lag, 1) if task_target else lag

    def visible(t):
        return t is None or cut is None or t <= cut

    def known(t):
        return t is None or obs is None or t + lag_us <= obs

    ordered = sorted(children, key=lambda c: (-(1 << 63) if c[0] is None else c[0], c[1]))
    if cell["kind"] == "count":
        n = sum(1 for t, _, _ in ordered if visible(t))
        return _encode("count", n, cell["mean"], cell["std"]), 0, 0
    if cell["kind"] == "recency":
        # the latest visible child with a time; none, or no observation time: a null cell
        times = [t for t, _, _ in children if t is not None and visible(t)]
        if cut is None or not times:
            return 0.0, 1, 0
        return _encode("recency", (cut - max(times)) / DAY, cell["mean"], cell["std"]), 0, 0
    total, n = 0.0, 0
    for t, _, row in ordered:
        value = row[cell["column"]]
        if visible(t) and known(t) and value is not None:
            total += float(value)
            n += 1
    if cell["kind"] == "sum":
        return _encode("sum", total, cell["mean"], cell["std"]), 0, 0
    if n == 0:
        return 0.0, 1, 0
    return _encode("mean", total / n, cell["mean"], cell["std"]), 0, 0


def _check_stats(meta: dict, users: dict, children_of: dict) -> None:
    """Counts' and sums' statistics: of log1p(total) / signed log of every user's total;
    recencies': of log1p(days) between each child with a time and the previous one of the
    same table in its user's list."""
    for cell in meta["aggregates"]:
        if cell["kind"] == "mean":
            continue
        if cell["kind"] == "recency":
            gaps = []
            for u in range(len(users["uid"])):
                times = sorted(t for t, _, _, table in children_of[u]
                               if table == cell["child_table"] and t is not None)
                gaps += [math.log1p((b - a) / DAY) for a, b in zip(times, times[1:])]
            # exact statistics (pstdev is 0.0 for equal values, as Welford's recurrence is)
            mean = statistics.fmean(gaps) if gaps else 0.0
            std = (statistics.pstdev(gaps) if gaps else 0.0) or 1.0
            assert cell["mean"] == pytest.approx(mean, rel=1e-9, abs=1e-12), cell["name"]
            assert cell["std"] == pytest.approx(std, rel=1e-9, abs=1e-12), cell["name"]
            continue
        totals = []
        for u in range(len(users["uid"])):
            kids = [row for _, _, row, table in children_of[u] if table == cell["child_table"]]
            if cell["kind"] == "count":
                totals.append(math.log1p(len(kids)))
            else:
                s = 0.0
                for row in sorted(kids, key=lambda r: r["_order"]):
                    if row[cell["column"]] is not None:
                        s += float(row[cell["column"]])
                totals.append(math.copysign(math.log1p(abs(s)), s) if s else 0.0)
        mean = float(np.mean(totals))
        std = float(np.std(totals)) or 1.0
        assert cell["mean"] == pytest.approx(mean, rel=1e-9, abs=1e-12)
        assert cell["std"] == pytest.approx(std, rel=1e-9, abs=1e-12)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(schemas())
def test_aggregate_cells_match_plain_python(tmp_path_factory, example):
    users, events, visits, lag, strict, counts, recency, width, flag_lag = example
    root = tmp_path_factory.mktemp("agg")
    src = write_db(root / "src", {"users": _table(users), "events": _table(events),
                                  "visits": _table(visits)},
                   _toml(lag, strict, counts, flag_lag, recency, "host" in visits))
    preprocess(src, root / "db", fsync=False)
    db = open_database(root / "db")
    meta = db.metadata.to_json()
    cells = meta["aggregates"]
    num_columns = meta["num_columns"]
    n_users = len(users["uid"])
    flag_id = int(db.table("events").column("flag").column_id)
    column_lag = {"x": lag * SECOND, "flag": flag_lag * SECOND}
    # children of each user: (time, global row, source row, table), one per edge (a visit
    # whose two keys name the same user is two children); global rows follow the table order
    # users, events, visits
    children_of: dict[int, list] = {u: [] for u in range(n_users)}
    for table, data, offset in (("events", events, n_users),
                                ("visits", visits, n_users + len(events["eid"]))):
        keys = [data[k] for k in ("uid", "host") if k in data]
        for i, u in [(i, key[i]) for key in keys for i in range(len(key))]:
            if u is not None and u < n_users:
                t = data["t"][i]
                row = {k: v[i] for k, v in data.items()}
                row["_order"] = (-(1 << 63) if t is None else t, offset + i)
                children_of[u].append((None if t is None else t * SECOND, offset + i, row,
                                       table))
    _check_stats(meta, users, children_of)
    # Context examples' rows get their aggregate cells by the same rule, as of the sequence's
    # own observation time.
    builders = [BatchBuilder(db, BatchConfig(sequence_length=64, max_rows=32,
                                             bfs_child_width=width, context_examples=examples),
                             seed=3) for examples in (0, 3)]
    seen = flags_checked = 0
    for builder, task in [(b, task) for b in builders for task in b.tasks]:
        if task.num_seeds == 0:
            continue
        built = builder.build(task, np.arange(task.num_seeds), epoch=0)
        arrays = built.arrays
        for b in range(task.num_seeds):
            obs = int(built.obs_times[b])
            obs_us = None if obs == np.iinfo(np.int64).min else obs
            task_strict = strict and task.name == "ev"
            for p in range(int(built.cell_counts[b])):
                cid = int(arrays["column_ids"][b, p])
                if cid == flag_id:  # an events row's own flag: hidden until known
                    row = int(built.visited_rows[b, int(arrays["seq_row_ids"][b, p])])
                    t = events["t"][row - n_users]
                    unknown = (t is not None and obs_us is not None
                               and t * SECOND + flag_lag * SECOND > obs_us)
                    assert arrays["is_hidden"][b, p] == unknown, ("flag", b, p)
                    flags_checked += 1
                if cid < num_columns:
                    continue
                cell = cells[cid - num_columns]
                row = int(built.visited_rows[b, int(arrays["seq_row_ids"][b, p])])
                assert row < n_users, "aggregate cells belong to users rows"
                kids = [(t, g, r) for t, g, r, table in children_of[row]
                        if table == cell["child_table"]]
                task_target = task.name == "ev" and cell["column"] == "x"
                value, null, hidden = _reference(cell, kids, obs_us, task_strict,
                                                 column_lag.get(cell["column"], 0),
                                                 task_target)
                assert arrays["semantic_types"][b, p] == 0
                assert arrays["is_null"][b, p] == null, (cell["name"], b, p)
                assert arrays["is_hidden"][b, p] == hidden, (cell["name"], b, p)
                assert arrays["numeric_values"][b, p] == np.float32(value), (
                    cell["name"], b, p, arrays["numeric_values"][b, p], value)
                seen += 1
    kinds = (["count"] if counts else []) + (["recency"] if recency else [])
    assert [c["kind"] for c in cells] == kinds + ["sum", "mean"] * 2 + kinds
    if recency:
        assert cells[len(kinds) - 1]["name"] == "days since the last events of users"
    if n_users:
        assert seen > 0  # every users seed has its own aggregate cells
    if next(t for t in builders[0].tasks if t.name == "ev").num_seeds:
        assert flags_checked > 0  # every events seed shows its own flag
    db.close()


def test_aggregate_cells_follow_their_row_and_take_their_column_ids(tmp_path: Path):
    users = {"uid": [0, 1], "t": [0, 0], "a": [1.0, 2.0]}
    events = {"eid": [0, 1, 2], "uid": [0, 0, 1], "t": [1, 2, 3], "x": [1.0, None, 4.0],
              "flag": [True, None, False]}
    visits = {"vid": [0], "uid": [1], "t": [1]}
    src = write_db(tmp_path / "src", {"users": _table(users), "events": _table(events),
                                      "visits": _table(visits)}, _toml(0, False, True))
    preprocess(src, tmp_path / "db", fsync=False)
    with open_database(tmp_path / "db") as db:
        builder = BatchBuilder(db, BatchConfig(sequence_length=64, max_rows=8), seed=0)
        task = builder.task("us")
        built = builder.build(task, np.arange(task.num_seeds), epoch=0)
        a = built.arrays
        # the seed row (a user): its column a, its time t, then the 6 aggregate cells
        num_columns = db.metadata.num_columns
        row0 = a["column_ids"][0][a["seq_row_ids"][0] == 0][:8]
        assert list(row0[2:]) == list(range(num_columns, num_columns + 6))
        # the seed observes at time 0: no child is visible yet; the mean is a null cell
        assert a["is_null"][0, 4] == 1 and a["numeric_values"][0, 4] == 0
        names = [c.name for c in db.metadata.aggregates]
        assert names[:3] == ["number of events of users", "sum of x of events of users",
                             "mean of x of events of users"]
        emb = np.asarray(db.aggregates.embeddings)
        assert emb.shape == (6, db.metadata.embeddings.column_dim)


def test_huge_page_copies_give_the_same_aggregate_cells(tmp_path: Path):
    """Row records (huge-page copies) and column arrays (memory map) fill the same batches:
    both leave the aggregate cells to the prefix sums."""
    users = {"uid": [0, 1, 2], "t": [5, 6, 6], "a": [1.0, None, 2.0]}
    events = {"eid": list(range(8)), "uid": [0, 0, 1, 2, 2, 2, None, 1],
              "t": [1, 2, 3, None, 6, 6, 1, 7], "x": [1.5, None, 4.0, 2.0, -3.0, 8.0, 1.0, 2.0],
              "flag": [True, None, False, True, True, None, False, True]}
    visits = {"vid": [0, 1], "uid": [1, 2], "t": [1, 6]}
    src = write_db(tmp_path / "src", {"users": _table(users), "events": _table(events),
                                      "visits": _table(visits)}, _toml(1, True, True))
    preprocess(src, tmp_path / "db", fsync=False)
    with open_database(tmp_path / "db") as db:
        batches = []
        for huge in (False, True):
            builder = BatchBuilder(db, BatchConfig(sequence_length=48, max_rows=8,
                                                   bfs_child_width=1, huge_pages=huge), seed=5)
            words = builder.resident.row_values.words
            assert words.size > 0 if huge else words.size == 0
            batches.append([builder.build(t, np.arange(t.num_seeds), epoch=1).arrays
                            for t in builder.tasks])
            builder.release()
        for plain, copied in zip(*batches):
            for key in plain:
                np.testing.assert_array_equal(plain[key], copied[key], err_msg=key)
        num_columns = db.metadata.num_columns
        assert any((b["column_ids"] >= num_columns).any() for b in batches[0])


def test_show_lists_the_aggregate_cells_with_their_as_of_values(tmp_path: Path):
    from dlkit.sampler.inspect import describe_sequence

    users = {"uid": [0, 1], "t": [0, 5], "a": [1.0, 2.0]}
    events = {"eid": [0, 1, 2, 3], "uid": [1, 1, 1, 0], "t": [1, 3, 6, 1],
              "x": [10.0, None, 7.0, 1.0], "flag": [True, False, True, None]}
    visits = {"vid": [0], "uid": [1], "t": [5]}
    src = write_db(tmp_path / "src", {"users": _table(users), "events": _table(events),
                                      "visits": _table(visits)},
                   _toml(0, False, True, recency=True))
    preprocess(src, tmp_path / "db", fsync=False)
    view = describe_sequence(tmp_path / "db", "us", anchor_row=1, sequence_length=64)
    seed = view.rows[0]
    cells = {c.column: c for c in seed.cells}
    # user 1 observed at 5: events at 1 and 3 are visible (x = 10 and null), the one at 6 not
    assert cells["number of events of users"].typed == 2
    # exactly: decoded to the 7 significant digits their float32 encoding carries
    assert cells["sum of x of events of users"].typed == 10.0
    assert cells["mean of x of events of users"].typed == 10.0
    assert cells["sum of flag of events of users"].typed == 1.0
    assert cells["mean of flag of events of users"].typed == 0.5
    assert cells["number of visits of users"].typed == 1  # at 5: at the observation time
    assert cells["number of visits of users"].value == "1"
    # the last visible event at 3, two seconds before; the visit at the observation time
    assert cells["days since the last events of users"].typed == pytest.approx(2 / 86_400,
                                                                               rel=1e-6)
    assert cells["days since the last visits of users"].typed == 0.0
    assert not seed.truncated
    user0 = describe_sequence(tmp_path / "db", "us", anchor_row=0, sequence_length=64)
    cells0 = {c.column: c for c in user0.rows[0].cells}
    # user 0 observed at 0: its event at 1 is not visible yet, so no last one
    assert cells0["days since the last events of users"].is_null
    assert cells0["days since the last events of users"].typed is None
    cut = describe_sequence(tmp_path / "db", "us", anchor_row=1, sequence_length=4)
    assert cut.rows[0].truncated  # 2 columns and 2 of the 8 aggregate cells


@pytest.mark.parametrize("kind,true,mean,std", [
    ("mean", 1000003.25, 1e6, 10.0),    # |mean| >> std: the z-score carries the cents
    ("mean", 0.6, 0.5, 0.3),
    ("sum", 120.0, 3.0, 1.5),           # signed log1p scale
    ("sum", -2.5, 0.0, 1.0),
    ("recency", 30.5, 1.2, 0.8),        # days, on the log1p scale
    ("recency", 0.0, 0.3, 2.0),
])
def test_shown_aggregates_keep_the_digits_the_encoding_carries(kind, true, mean, std):
    """show decodes an aggregate cell from its float32 z-score (docs/batch_format.md) and
    rounds it to the z-score's precision: the true value comes back, not float32's noise,
    and no digit the encoding holds is dropped."""
    from types import SimpleNamespace

    from dlkit.sampler.inspect import aggregate_value

    scaled = true if kind == "mean" else math.copysign(math.log1p(abs(true)), true)
    # (a recency's days are never negative: the same log1p)
    z = np.float32((scaled - mean) / std)
    cell = SimpleNamespace(kind=kind, mean=mean, std=std)
    assert aggregate_value(cell, float(z)) == true
