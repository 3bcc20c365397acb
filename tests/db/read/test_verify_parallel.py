"""``dlkit verify`` hashes on a thread pool while the structure checks run: it reports exactly
what the sequential order (manifest, hashes, structure) reports, failure for failure and in
that order; the edge screen names graph corruptions as the exact checks do."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from dlkit.db import check_database, verify_database
from dlkit.db import format as fmt
from dlkit.db.failures import Checks, Stop
from dlkit.db.manifest import HashJob
from dlkit.db.read import file_checks, graph_checks, reader
from tests.db.read.test_verify_content import graph_array, patch, write_graph_array


class InlineGraphChecks:
    """The graph's full checks run in place, before the tables' (as verify ran them before
    they had a thread of their own)."""

    def __init__(self, meta, graph, raw, layout, checks):
        graph_checks.check_graph_zeros(raw, layout, checks)
        graph_checks.full_graph_checks(meta, graph, checks)

    def join(self) -> None:
        pass


def sequential_failures(root: Path) -> list:
    """The failures of the checks run one after the other: every file's hash is known before
    the first structure check starts, and the graph's checks end before the tables' start
    (what verify did before it ran them side by side)."""
    checks = Checks(collect=True, root=root)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reader, "GraphChecks", InlineGraphChecks)
        try:
            got = reader._open(root, checks, full=True, verify_hashes=True)
            if got is not None:
                got.close()
        except Stop:
            pass
    return checks.failures


def _flip(path: Path, pos: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= 0xFF
    path.write_bytes(bytes(data))


CORRUPTIONS = {
    "truncated graph": lambda db: (db / "graph.bin").write_bytes(
        (db / "graph.bin").read_bytes()[:-7]),
    "truncated column": lambda db: (db / "tables/users/0.values").write_bytes(b""),
    "flipped byte in the graph": lambda db: _flip(db / "graph.bin", 4096 + 9),
    "flipped byte in a column": lambda db: _flip(db / "tables/orders/1.values", 3),
    "flipped byte in metadata": lambda db: _flip(db / "metadata.json", 40),
    "extra file": lambda db: (db / "tables" / "stray.bin").write_bytes(b"x"),
    "missing file": lambda db: (db / "texts.data").unlink(),
    "two files corrupt": lambda db: (_flip(db / "texts.offsets", 0),
                                     _flip(db / "text_embeddings.bin", 100)),
    "graph and table content, re-hashed": lambda db: _graph_and_table_content(db),
}


def _graph_and_table_content(db: Path) -> None:
    """Failures of the graph's full checks and of a table's, behind a re-hashed manifest."""
    times = graph_array(db, "child_times")
    times[-1] += 1
    write_graph_array(db, "child_times", times)
    raw = bytearray((db / "graph.bin").read_bytes())
    raw[fmt.GRAPH_HEADER_SIZE - 1] = 1  # a reserved header byte
    (db / "graph.bin").write_bytes(bytes(raw))
    keys = np.fromfile(db / fmt.key_values_file("products"), dtype="<i8")
    patch(db, fmt.key_values_file("products"), "<i8", 3, keys[2])  # a duplicate key


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_parallel_hashing_reports_what_the_sequential_order_reports(db, name):
    CORRUPTIONS[name](db)
    expected = sequential_failures(db)
    assert expected  # every corruption here is caught
    if name.startswith("graph and table"):
        assert [f.check for f in expected] == ["graph.header", "graph.child_times",
                                               "key.unique"]
    assert check_database(db) == expected
    assert verify_database(db).failures == expected


def test_the_failures_name_the_corrupt_file(db):
    _flip(db / "graph.bin", 4096 + 9)
    (db / "tables/users/0.values").write_bytes(b"")
    failures = check_database(db)
    found = {(f.file, f.check) for f in failures}
    assert ("graph.bin", "file.sha256") in found
    assert ("tables/users/0.values", "file.size") in found
    assert failures[0].check.startswith("file.")  # the manifest's failures come first


def test_an_unreadable_file_stops_every_later_check(db, monkeypatch):
    """As when the hashes ran first: the structure checks' failures are not reported."""
    _flip(db / "tables/orders/1.values", 3)
    real = file_checks.start_hashing

    def then_vanish(root, listing, progress=None):
        job = real(root, listing)
        job.result()  # every file read once; now one goes
        (db / "graph.bin").unlink()
        return real(root, listing, progress)

    monkeypatch.setattr(file_checks, "start_hashing", then_vanish)
    failures = check_database(db)
    assert [(f.file, f.check) for f in failures] == [("graph.bin", "file.unreadable")]


def test_hash_job_matches_hashlib_and_raises_the_first_unreadable_in_path_order(tmp_path):
    sizes = {}
    for name, n in (("a.bin", 5), ("b.bin", 3 << 20), ("c/d.bin", 0)):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(bytes(range(256)) * (n // 256) + b"x" * (n % 256))
        sizes[name] = n
    got = HashJob(tmp_path, sizes, threads=3).result()
    assert got == {rel: {"size": n, "sha256": hashlib.sha256((tmp_path / rel).read_bytes())
                         .digest()} for rel, n in sizes.items()}
    with pytest.raises(FileNotFoundError) as caught:
        HashJob(tmp_path, {**sizes, "z.bin": 1, "m.bin": 10**9}, threads=2).result()
    assert caught.value.filename == str(tmp_path / "m.bin")


# --- graph corruptions behind a re-hashed manifest: named as the exact checks name them ----


def _graph_failures(db: Path) -> list[tuple[str, str, str]]:
    return [(f.file, f.check, f.message) for f in check_database(db) if f.file == "graph.bin"]


def test_a_child_moved_to_another_list_is_a_transpose_failure(db):
    offsets = graph_array(db, "child_offsets")
    p = int(np.flatnonzero(np.diff(offsets) >= 2)[0])
    offsets[p + 1] -= 1  # p's last child becomes the next parent's first
    write_graph_array(db, "child_offsets", offsets)
    failures = _graph_failures(db)
    transpose = "the child lists are not the transpose of the parent lists"
    assert ("graph.bin", "graph.transpose", transpose) in failures
    assert not any(f[1] == "graph.child_times" for f in failures)  # times moved along


def test_a_wrong_child_time_is_named_at_its_edge(db):
    times = graph_array(db, "child_times")
    i = times.size - 1  # the last edge: the order of its list still holds
    times[i] += 1
    write_graph_array(db, "child_times", times)
    assert _graph_failures(db) == [
        ("graph.bin", "graph.child_times", f"child_times[{i}] is not the child's row time")]


def test_a_swapped_child_between_lists_is_a_transpose_failure(db):
    ids = graph_array(db, "child_ids")
    offsets = graph_array(db, "child_offsets")
    i, j = (int(x) for x in offsets[np.flatnonzero(np.diff(offsets) >= 1)[:2]])
    ids[i], ids[j] = ids[j], ids[i]
    write_graph_array(db, "child_ids", ids)
    checks = {f[1] for f in _graph_failures(db)}
    assert "graph.transpose" in checks
