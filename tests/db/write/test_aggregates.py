"""``[aggregates]``: the prefix-sum files a build writes, their manifest entries and verify."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from dlkit.db import aggregates as agg
from dlkit.db import check_database, open_database, preprocess, verify_database
from dlkit.db.manifest import database_hash, hash_files, list_files, render_manifest
from dlkit.errors import SchemaError
from tests.db.conftest import EXAMPLE

AGGREGATES = """
[aggregates]
counts = true
columns = { orders = ["quantity"], reviews = ["rating", "helpful"] }
"""


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
