"""``[aggregates]``: the prefix-sum files a build writes, their manifest entries and verify."""

from __future__ import annotations

import json
import math
import re
import shutil
import statistics
from pathlib import Path

import numpy as np
import pytest

from dlkit.core.codes import NO_TIME
from dlkit.db import aggregates as agg
from dlkit.db import check_database, open_database, preprocess, verify_database
from dlkit.db.manifest import database_hash, hash_files, list_files, render_manifest
from dlkit.errors import DatabaseError, SchemaError
from tests.db.conftest import EXAMPLE

AGGREGATES = """
[aggregates]
counts = true
recency = true
columns = { orders = ["quantity"], reviews = ["rating", "helpful"] }
"""
# The same without recency: the database (and hash) of a build before that kind existed.
WITHOUT_RECENCY = AGGREGATES.replace("recency = true\n", "")
HASH_WITHOUT_RECENCY = "f71bac994049914fddf06d0ea7ac1fe25393d54ee06ac6152476393d156e8dd3"


def _source(tmp_path: Path, extra: str) -> Path:
    src = tmp_path / "src"
    shutil.copytree(EXAMPLE, src)
    toml = src / "dlkit.toml"
    toml.write_text(toml.read_text() + extra)
    return src


@pytest.fixture(scope="module")
def agg_db(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("aggregates")
    out = root / "db"
    preprocess(_source(root, AGGREGATES), out, fsync=False)
    return out


def _resign(db: Path) -> None:
    file_map = hash_files(db, list_files(db))
    (db / "manifest.json").write_bytes(render_manifest(file_map, database_hash(file_map)))


def test_files_are_in_the_manifest_and_verify_holds(agg_db: Path):
    manifest = json.loads((agg_db / "manifest.json").read_text())
    for rel in agg.FILES:
        assert rel in manifest["files"]
    report = verify_database(agg_db)
    assert report.ok, report


def test_prefix_counts_are_the_children_in_time_order(agg_db: Path):
    """The stored running counts, against the graph's child lists read in plain Python."""
    with open_database(agg_db) as db:
        data = db.aggregates
        g = db.graph
        for cell, seg in zip(data.cells, data.segments):
            if cell.kind != "count":
                continue
            parent, child = db.table(cell.parent_table), db.table(cell.child_table)
            stored = data.counts[seg.count_at:seg.count_at + seg.length]
            base = int(g.child_offsets[parent.row_offset])
            for p in range(parent.row_offset, parent.row_offset + parent.num_rows):
                run = 0
                for i in range(int(g.child_offsets[p]), int(g.child_offsets[p + 1])):
                    c = int(g.child_ids[i])
                    run += child.row_offset <= c < child.row_offset + child.num_rows
                    assert stored[i - base] == run


def test_a_flipped_byte_in_a_prefix_file_fails_verify(agg_db: Path, tmp_path: Path):
    for rel, check in ((agg.COUNTS_FILE, "aggregates.prefix"),
                       (agg.SUMS_FILE, "aggregates.prefix")):
        db = tmp_path / rel.replace("/", "_")
        shutil.copytree(agg_db, db)
        data = bytearray((db / rel).read_bytes())
        data[len(data) // 2] ^= 0x10
        (db / rel).write_bytes(bytes(data))
        assert not verify_database(db).ok  # the hash
        _resign(db)  # a manifest that agrees with the corrupt file: the recount catches it
        checks = {(f.file, f.check) for f in check_database(db)}
        assert (rel, check) in checks


def test_a_truncated_prefix_file_fails_on_open(agg_db: Path, tmp_path: Path):
    db = tmp_path / "db"
    shutil.copytree(agg_db, db)
    data = (db / agg.COUNTS_FILE).read_bytes()
    (db / agg.COUNTS_FILE).write_bytes(data[:-8])
    _resign(db)
    with pytest.raises(Exception, match="counts.bin"):
        open_database(db)


def test_changed_statistics_fail_verify(agg_db: Path, tmp_path: Path):
    db = tmp_path / "db"
    shutil.copytree(agg_db, db)
    meta = json.loads((db / "metadata.json").read_text())
    meta["aggregates"][0]["mean"] += 0.5
    (db / "metadata.json").write_text(json.dumps(meta, indent=2) + "\n")
    _resign(db)
    assert "aggregates.stats" in {f.check for f in check_database(db)}


def test_without_aggregates_nothing_changes(example_db: Path, tmp_path: Path):
    """An empty [aggregates] section asks for nothing: the same bytes as without one."""
    out = tmp_path / "db"
    preprocess(_source(tmp_path, "\n[aggregates]\ncounts = false\n"), out, fsync=False)
    assert (out / "manifest.json").read_bytes() == (example_db / "manifest.json").read_bytes()
    assert not (out / "aggregates").exists()
    assert "aggregates" not in json.loads((out / "metadata.json").read_text())


def test_a_spilled_build_writes_the_same_bytes(agg_db: Path, tmp_path: Path):
    """Budget 0: every working array, the prefix arrays too, is a scratch file."""
    out = tmp_path / "db"
    report = preprocess(_source(tmp_path, AGGREGATES), out, fsync=False, memory_budget=0)
    assert report.spilled_bytes > 0
    assert (out / "manifest.json").read_bytes() == (agg_db / "manifest.json").read_bytes()
    assert verify_database(out).ok


@pytest.mark.parametrize("extra, message", [
    ('\n[aggregates]\ncolumns = { orders = ["status"] }\n', "categorical"),
    ('\n[aggregates]\ncolumns = { orders = ["nope"] }\n', "not a column"),
])
def test_a_column_that_cannot_be_summed_is_a_schema_error(tmp_path: Path, extra, message):
    with pytest.raises(SchemaError, match=message):
        preprocess(_source(tmp_path, extra), tmp_path / "db", fsync=False)
    assert not (tmp_path / "db").exists()


def test_sums_are_sequential_float64_sums(agg_db: Path):
    with open_database(agg_db) as db:
        data = db.aggregates
        g = db.graph
        cell, seg = next((c, s) for c, s in zip(data.cells, data.segments)
                         if c.kind == "sum" and c.column == "quantity"
                         and c.parent_table == "users")
        parent, child = db.table("users"), db.table("orders")
        column = child.column("quantity")
        stored = data.sums[seg.sum_at:seg.sum_at + seg.length]
        base = int(g.child_offsets[parent.row_offset])
        for p in range(parent.row_offset, parent.row_offset + parent.num_rows):
            total = 0.0
            for i in range(int(g.child_offsets[p]), int(g.child_offsets[p + 1])):
                c = int(g.child_ids[i]) - child.row_offset
                if 0 <= c < child.num_rows and column.valid[c]:
                    total += float(column.values[c])
                assert stored[i - base] == np.float64(total)


def test_recency_cells_hold_each_position_s_latest_child_time(agg_db: Path):
    """Each recency array, against the graph's child lists read in plain Python: the time of
    the last child of the cell's table so far in the parent's list (NO_TIME before one); and
    each follows its pair's count."""
    with open_database(agg_db) as db:
        data = db.aggregates
        g = db.graph
        recencies = [j for j, c in enumerate(data.cells) if c.kind == "recency"]
        assert len(recencies) == 4  # (users, products) x (orders, reviews)
        # one embedding row per cell, a recency's too, and column ids after the columns'
        assert data.embeddings.shape == (len(data.cells), db.metadata.embeddings.column_dim)
        assert [c.column_id for c in data.cells] == list(
            range(db.metadata.num_columns, db.metadata.num_columns + len(data.cells)))
        for j in recencies:
            cell, seg = data.cells[j], data.segments[j]
            before = data.cells[j - 1]
            assert (before.kind, before.parent_table, before.child_table) == (
                "count", cell.parent_table, cell.child_table)
            assert cell.name == f"days since the last {cell.child_table} of {cell.parent_table}"
            assert cell.column is None and seg.sum_at == -1
            parent, child = db.table(cell.parent_table), db.table(cell.child_table)
            stored = data.counts[seg.count_at:seg.count_at + seg.length]
            base = int(g.child_offsets[parent.row_offset])
            timed = 0
            for p in range(parent.row_offset, parent.row_offset + parent.num_rows):
                latest = NO_TIME
                for i in range(int(g.child_offsets[p]), int(g.child_offsets[p + 1])):
                    if child.row_offset <= int(g.child_ids[i]) < child.row_offset + child.num_rows:
                        latest = max(latest, int(g.child_times[i]))
                    assert stored[i - base] == latest
                    timed += latest != NO_TIME
            assert timed > 0


def test_a_flipped_byte_in_a_recency_array_fails_verify(agg_db: Path, tmp_path: Path):
    """The prefix check recomputes recency arrays too: a changed latest time is caught even
    under a manifest re-signed to agree with it."""
    with open_database(agg_db) as db:
        j = next(j for j, c in enumerate(db.aggregates.cells) if c.kind == "recency")
        seg, name = db.aggregates.segments[j], db.aggregates.cells[j].name
    db = tmp_path / "db"
    shutil.copytree(agg_db, db)
    data = bytearray((db / agg.COUNTS_FILE).read_bytes())
    data[(seg.count_at + seg.length // 2) * 8 + 2] ^= 0x10  # a microsecond digit, not the sign
    (db / agg.COUNTS_FILE).write_bytes(bytes(data))
    _resign(db)
    failures = [f for f in check_database(db) if f.check == "aggregates.prefix"]
    assert [f.file for f in failures] == [agg.COUNTS_FILE]
    assert name in failures[0].message and "latest child time" in failures[0].message


def test_changed_recency_statistics_fail_verify(agg_db: Path, tmp_path: Path):
    db = tmp_path / "db"
    shutil.copytree(agg_db, db)
    meta = json.loads((db / "metadata.json").read_text())
    j = next(j for j, c in enumerate(meta["aggregates"]) if c["kind"] == "recency")
    meta["aggregates"][j]["std"] *= 1.5
    (db / "metadata.json").write_text(json.dumps(meta, indent=2) + "\n")
    _resign(db)
    failures = [f for f in check_database(db) if f.check == "aggregates.stats"]
    assert len(failures) == 1 and f"aggregate {j} " in failures[0].message


def test_recency_statistics_are_those_of_log_days_between_children(agg_db: Path):
    """mean / std: of log1p(days) from each child with a time to the previous one of the
    same table in its parent's list (plain Python, exact statistics)."""
    with open_database(agg_db) as db:
        g = db.graph
        for cell in db.metadata.aggregates:
            if cell.kind != "recency":
                continue
            parent, child = db.table(cell.parent_table), db.table(cell.child_table)
            gaps = []
            for p in range(parent.row_offset, parent.row_offset + parent.num_rows):
                times = [int(g.child_times[i])
                         for i in range(int(g.child_offsets[p]), int(g.child_offsets[p + 1]))
                         if child.row_offset <= int(g.child_ids[i])
                         < child.row_offset + child.num_rows and g.child_times[i] != NO_TIME]
                gaps += [math.log1p((b - a) / 86_400e6) for a, b in zip(times, times[1:])]
            assert len(gaps) > 1, cell.name
            assert cell.mean == pytest.approx(statistics.fmean(gaps), rel=1e-9)
            assert cell.std == pytest.approx(statistics.pstdev(gaps), rel=1e-9)


@pytest.mark.parametrize("change, message", [
    (lambda c: c.update(kind="recent"), "kind 'recent' is not one of"),
    (lambda c: c.update(column="quantity"), "a count or recency has column null"),
    (lambda c: c.update(name="days since the first orders of users"),
     "expected 'days since the last orders of users'"),
])
def test_a_tampered_recency_entry_is_one_readable_error(agg_db: Path, tmp_path: Path, change,
                                                        message):
    db = tmp_path / "db"
    shutil.copytree(agg_db, db)
    meta = json.loads((db / "metadata.json").read_text())
    cell = next(c for c in meta["aggregates"] if c["kind"] == "recency"
                and c["child_table"] == "orders" and c["parent_table"] == "users")
    change(cell)
    (db / "metadata.json").write_text(json.dumps(meta, indent=2) + "\n")
    _resign(db)
    failures = [f for f in check_database(db) if f.check == "metadata.schema"]
    assert len(failures) == 1 and "\n" not in failures[0].message
    assert re.search(message, failures[0].message), failures[0].message
    with pytest.raises(DatabaseError, match="metadata.json"):
        open_database(db)


def test_without_recency_the_database_is_the_one_built_before_it(tmp_path: Path):
    """counts and columns without recency: the hash a build had before the recency kind
    existed (pinned from that build), so existing databases keep their identity."""
    out = tmp_path / "db"
    preprocess(_source(tmp_path, WITHOUT_RECENCY), out, fsync=False)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["database_hash"] == HASH_WITHOUT_RECENCY
    kinds = {c["kind"] for c in json.loads((out / "metadata.json").read_text())["aggregates"]}
    assert kinds == {"count", "sum", "mean"}
