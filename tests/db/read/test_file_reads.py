"""Small files are read, large ones mapped: the same read-only arrays either way, and only a
mapped file holds a file descriptor (one, until the last array of it is dropped). Verify finds
the same failures whichever way the files came, and whether the graph's two CSR directions
are checked on one thread (a small graph) or two."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import numpy as np
import pytest

from dlkit.db import format as fmt
from dlkit.db import open_database
from dlkit.db.read import mapped, reader
from dlkit.db.read.reader import check_database

METADATA_FILES = ("manifest.json", "metadata.json")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def binary_files(db: Path) -> list[Path]:
    """The files the reader turns into arrays: every non-empty file but the two JSON ones."""
    return [p for p in db.rglob("*") if p.is_file() and p.name not in METADATA_FILES
            and p.stat().st_size > 0]


def every_array(db) -> dict[str, np.ndarray]:
    out = {f"graph.{name}": getattr(db.graph, name) for name in (
        "parent_offsets", "parent_ids", "child_offsets", "child_ids", "child_times",
        "row_table", "row_times")}
    for table in db.tables:
        out[f"{table.name}.keys"] = table.key_values
        for column in table.columns:
            out[f"{table.name}.{column.name}"] = column.values
            out[f"{table.name}.{column.name}.valid"] = column.valid_bitmap
    for task in db.tasks:
        for name in ("anchor_row", "obs_time", "target", "target_valid"):
            out[f"{task.name}.{name}"] = getattr(task, name)
    out["texts"] = db._text_data  # noqa: SLF001 - the text bytes, not exposed as one array
    for name in ("text", "column", "categorical"):
        out[f"{name}_embeddings"] = db._embeddings[name]  # noqa: SLF001
    return out


@pytest.fixture
def mapping_everything(monkeypatch):
    monkeypatch.setattr(mapped, "READ_BELOW_BYTES", 0)


def test_read_and_mapped_files_give_the_same_read_only_arrays(example_db, monkeypatch):
    files = binary_files(example_db)
    assert max(p.stat().st_size for p in files) < mapped.READ_BELOW_BYTES  # all read
    with open_database(example_db) as read:
        read_arrays = every_array(read)
        monkeypatch.setattr(mapped, "READ_BELOW_BYTES", 0)
        with open_database(example_db) as mapped_db:
            mapped_arrays = every_array(mapped_db)
            assert read_arrays.keys() == mapped_arrays.keys()
            for name, array in read_arrays.items():
                other = mapped_arrays[name]
                assert array.dtype == other.dtype and np.array_equal(array, other), name
                for a in (array, other):
                    assert not a.flags.writeable and a.flags.aligned, name
                    if a.size:
                        with pytest.raises(ValueError):
                            a.flags.writeable = True  # the buffer itself is read-only
        # the bytes of a file read whole, as the file holds them
        assert bytes(read_arrays["texts"]) == (example_db / fmt.TEXT_DATA_FILE).read_bytes()


def test_only_mapped_files_hold_descriptors(example_db, mapping_everything, monkeypatch):
    files = binary_files(example_db)
    before = open_fds()
    db = open_database(example_db)
    assert open_fds() - before == len(files)  # one per map
    del db
    gc.collect()
    assert open_fds() == before
    monkeypatch.setattr(mapped, "READ_BELOW_BYTES", 1 << 20)
    with open_database(example_db) as db:
        assert open_fds() == before
        assert db.num_rows > 0


def test_verify_finds_the_same_failures_in_read_or_mapped_files_on_one_or_two_threads(
        db, monkeypatch):
    graph = db / fmt.GRAPH_FILE
    data = bytearray(graph.read_bytes())
    rows, edges = fmt.GRAPH_HEADER.unpack_from(data, 0)[3:5]
    start, dtype, _ = fmt.graph_layout(rows, edges)[0]["parent_offsets"]
    at = start + dtype.itemsize  # row 1's first parent: -1
    data[at:at + dtype.itemsize] = np.array([-1], dtype).tobytes()
    graph.write_bytes(bytes(data))
    read = check_database(db, verify_hashes=True)
    assert {f.check for f in read} == {"file.sha256", "graph.parent_offsets"}
    monkeypatch.setattr(reader, "THREADED_CHECK_EDGES", 0)  # each CSR direction on a thread
    assert check_database(db, verify_hashes=True) == read
    monkeypatch.setattr(mapped, "READ_BELOW_BYTES", 0)
    assert check_database(db, verify_hashes=True) == read


# Opens ``count`` copies of a database with every file mapped, under the descriptor limits
# (soft, hard) given, in a process of its own (the limits are the process's).
_OPEN_UNDER_LIMITS = """
import resource, sys
from dlkit.db import open_database
from dlkit.db.read import mapped
from dlkit.errors import TooManyOpenFilesError
mapped.READ_BELOW_BYTES = 0
db, soft, hard, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
opened = []
try:
    for _ in range(count):
        opened.append(open_database(db))
except TooManyOpenFilesError as exc:
    print(exc.code, exc.path, exc.message, sep="\\n")
    sys.exit(7)
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def _open_under_limits(db: Path, soft: int, hard: int, count: int):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", _OPEN_UNDER_LIMITS, str(db), str(soft),
                           str(hard), str(count)], capture_output=True, text=True, timeout=120)


def test_a_map_that_finds_no_descriptor_raises_the_soft_limit_to_the_hard_one(example_db):
    files = len(binary_files(example_db))
    soft, hard = files + 24, 4 * files + 64  # one copy fits under soft, three need more
    run = _open_under_limits(example_db, soft, hard, 3)
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) == hard


def test_no_descriptor_left_is_one_error_naming_the_file(example_db):
    files = len(binary_files(example_db))
    limit = files + 24
    run = _open_under_limits(example_db, limit, limit, 3)
    assert run.returncode == 7, run.stderr
    code, path, message = run.stdout.splitlines()
    assert code == "TOO_MANY_OPEN_FILES"
    assert Path(path).is_relative_to(example_db) and Path(path).is_file()
    assert f"too many open files (this process may hold {limit})" in message
