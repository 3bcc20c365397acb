"""``verify`` catches a flipped byte or a truncation in any file; ``open_database`` never lets a
corrupt index reach a kernel out of bounds."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from dlkit.core import csr
from dlkit.db import check_database, open_database, verify_database
from dlkit.db.manifest import list_files
from dlkit.errors import DatabaseError


@pytest.fixture
def copy_db(example_db, tmp_path):
    def make():
        dst = tmp_path / f"db{len(list(tmp_path.iterdir()))}"
        shutil.copytree(example_db, dst)
        return dst
    return make


def _all_files(db):
    return list_files(db) + ["manifest.json"]


def _assert_safe_or_refused(db):
    """open_database either refuses or hands out arrays whose ids are all in range."""
    try:
        d = open_database(db)
    except DatabaseError:
        return
    with d:
        g = d.graph
        V = d.num_rows
        assert csr.check_offsets(g.parent_offsets, g.parent_ids.size) == -1
        assert csr.check_offsets(g.child_offsets, g.child_ids.size) == -1
        assert csr.check_ids(g.parent_ids, 0, V) == -1
        assert csr.check_ids(g.child_ids, 0, V) == -1
        for t in d.tables:
            for c in t.columns:
                assert c.values.shape[0] == t.num_rows
                if c.stype == 3:
                    assert c.values.min(initial=0) >= 0
                    assert c.values.max(initial=0) < max(c.cat_emb_count, 1)
                if c.stype == 4:
                    assert c.values.max(initial=0) < max(d.num_texts, 1)
        for task in d.tasks:
            assert csr.check_ids(task.anchor_row, 0, d.table(task.table).num_rows) == -1


def test_intact_database_verifies(example_db):
    report = verify_database(example_db)
    assert report.ok and report.failures == []
    manifest = json.loads((example_db / "manifest.json").read_text())
    assert report.database_hash == manifest["database_hash"]
    assert set(manifest["files"]) == set(list_files(example_db))


def test_verify_reports_the_hashing_progress_of_every_byte(example_db):
    """``progress(bytes, total)``: the amounts add up to the total, every listed file's
    bytes (what ``dlkit verify`` shows as its bar)."""
    import threading

    calls: list[tuple[int, int]] = []
    lock = threading.Lock()

    def progress(amount, total):  # called from the hashing threads
        with lock:
            calls.append((amount, total))

    assert verify_database(example_db, progress=progress).ok
    manifest = json.loads((example_db / "manifest.json").read_text())
    total = sum(entry["size"] for entry in manifest["files"].values())
    assert calls and {t for _, t in calls} == {total}
    assert sum(a for a, _ in calls) == total


def test_every_file_flipped_byte_is_caught(example_db, copy_db):
    files = _all_files(example_db)
    assert len(files) > 40
    db = copy_db()
    for rel in files:
        path = db / rel
        original = path.read_bytes()
        if not original:
            continue
        for pos in sorted({0, len(original) // 2, len(original) - 1}):
            for mask in (0x01, 0xFF):
                data = bytearray(original)
                data[pos] ^= mask
                path.write_bytes(bytes(data))
                failures = verify_database(db).failures
                assert failures, f"flip {mask:#x} at {rel}:{pos} not caught"
                if rel != "manifest.json":
                    assert any(f.file == rel for f in failures), (rel, failures)
                _assert_safe_or_refused(db)
        path.write_bytes(original)
    assert verify_database(db).ok


def test_every_file_truncation_is_caught(example_db, copy_db):
    db = copy_db()
    for rel in _all_files(example_db):
        path = db / rel
        original = path.read_bytes()
        for size in sorted({0, max(0, len(original) - 1), len(original) // 2}):
            if size == len(original):
                continue
            path.write_bytes(original[:size])
            failures = verify_database(db).failures
            assert failures, f"truncation of {rel} to {size} not caught"
            if rel != "manifest.json":
                assert any(f.file == rel for f in failures), (rel, failures)
            with pytest.raises(DatabaseError):
                open_database(db).close()
        path.write_bytes(original)
    assert verify_database(db).ok


def test_missing_and_extra_files(copy_db):
    db = copy_db()
    (db / "tables" / "users" / "0.valid").unlink()
    (db / "stray.bin").write_bytes(b"x")
    failures = check_database(db)
    checks = {(f.file, f.check) for f in failures}
    assert ("tables/users/0.valid", "file.missing") in checks
    assert ("stray.bin", "file.unexpected") in checks


@pytest.mark.parametrize("rel", ["texts.data", "metadata.json", "graph.bin"])
def test_a_listed_file_that_is_not_a_regular_file_is_named_not_read(copy_db, rel):
    """A FIFO would block the hash (no writer ever comes), a directory has no bytes."""
    db = copy_db()
    (db / rel).unlink()
    os.mkfifo(db / rel)
    report = verify_database(db)
    assert not report.ok and (rel, "file.type") in {(f.file, f.check) for f in report.failures}
    with pytest.raises(DatabaseError):
        open_database(db, verify_hashes=True).close()


def test_structure_checks_without_hashes(copy_db):
    """A consistent-looking corruption (manifest rewritten to match) is caught by structure."""
    from dlkit.db import format as fmt
    from dlkit.db.manifest import database_hash, hash_files, render_manifest

    db = copy_db()
    meta = json.loads((db / "metadata.json").read_text())
    layout_off = fmt.graph_layout(meta["num_rows"], meta["num_edges"])[0]["parent_offsets"][0]
    graph = bytearray((db / "graph.bin").read_bytes())
    # make parent_offsets[1] huge: offsets no longer monotone/in range
    graph[layout_off + 8:layout_off + 16] = np.int64(10**12).tobytes()
    (db / "graph.bin").write_bytes(bytes(graph))
    file_map = hash_files(db, list_files(db))
    (db / "manifest.json").write_bytes(render_manifest(file_map, database_hash(file_map)))
    failures = check_database(db)
    assert any(f.file == "graph.bin" and f.check == "graph.parent_offsets" for f in failures)
    with pytest.raises(DatabaseError, match="graph.parent_offsets"):
        open_database(db)
    assert meta["num_rows"] > 0


def test_child_order_corruption_caught_by_verify(copy_db):
    from dlkit.db import format as fmt
    from dlkit.db.manifest import database_hash, hash_files, render_manifest

    db = copy_db()
    meta = json.loads((db / "metadata.json").read_text())
    layout, _ = fmt.graph_layout(meta["num_rows"], meta["num_edges"])
    off, _, count = layout["child_ids"]
    graph = bytearray((db / "graph.bin").read_bytes())
    ids = np.frombuffer(bytes(graph[off:off + 8 * count]), dtype=np.int64).copy()
    ids[0], ids[1] = ids[1], ids[0]  # same multiset, wrong order in the first list
    graph[off:off + 8 * count] = ids.tobytes()
    (db / "graph.bin").write_bytes(bytes(graph))
    file_map = hash_files(db, list_files(db))
    (db / "manifest.json").write_bytes(render_manifest(file_map, database_hash(file_map)))
    checks = {f.check for f in check_database(db)}
    assert "graph.child_times" in checks or "graph.child_order" in checks
    open_database(db).close()  # cheap open: still in range, so it opens


def test_verify_hashes_on_open(copy_db):
    db = copy_db()
    path = db / "text_embeddings.bin"
    data = bytearray(path.read_bytes())
    data[10] ^= 1
    path.write_bytes(bytes(data))
    open_database(db).close()
    with pytest.raises(DatabaseError, match="text_embeddings.bin.*file.sha256"):
        open_database(db, verify_hashes=True)


def test_not_a_database(tmp_path):
    with pytest.raises(DatabaseError, match="no such directory"):
        verify_database(tmp_path / "nothing")
    with pytest.raises(DatabaseError):
        open_database(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatabaseError, match="holds no manifest.json"):
        verify_database(tmp_path / "empty")
