"""``graph.bin``'s layout (format 3) and the refusal of databases in another format version."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.db import format as fmt
from dlkit.db import open_database, verify_database
from dlkit.errors import DatabaseError

ORDER = ["parent_offsets", "parent_ids", "row_times", "row_table", "child_offsets", "child_ids",
         "child_times"]


@given(st.integers(0, 10**7), st.integers(0, 10**8), st.sampled_from([None, "<i4", "<i8"]),
       st.sampled_from([None, "<i4", "<i8"]))
def test_sections_are_page_aligned_in_build_order_without_overlap(rows, edges, ids, offsets):
    layout, size = fmt.graph_layout(rows, edges, ids, offsets)
    assert list(layout) == ORDER
    id_dtype = np.dtype(ids or "<i4")  # int32 while every id and offset fits
    assert layout["parent_ids"][1] == layout["child_ids"][1] == id_dtype
    offset_dtype = np.dtype(offsets or "<i4")
    assert layout["parent_offsets"][1] == layout["child_offsets"][1] == offset_dtype
    end = fmt.GRAPH_HEADER_SIZE
    for name in ORDER:
        offset, dtype, count = layout[name]
        assert offset % 4096 == 0 and offset >= end
        assert offset - end < 4096  # no more padding than alignment needs
        assert count == {"parent_offsets": rows + 1, "child_offsets": rows + 1,
                         "row_times": rows, "row_table": rows}.get(name, edges)
        end = offset + count * dtype.itemsize
    assert size % 4096 == 0 and 0 <= size - end < 4096


def test_built_graph_sections_match_the_layout(example_db):
    meta = json.loads((example_db / "metadata.json").read_text())
    layout, size = fmt.graph_layout(meta["num_rows"], meta["num_edges"])
    data = (example_db / fmt.GRAPH_FILE).read_bytes()
    assert len(data) == size
    header = fmt.GRAPH_HEADER.unpack_from(data, 0)
    assert header == (fmt.GRAPH_MAGIC, 3, 64, meta["num_rows"], meta["num_edges"],
                      meta["num_tables"], 4, 4)
    with open_database(example_db) as db:
        for name, (offset, dtype, count) in layout.items():
            stored = data[offset:offset + count * dtype.itemsize]
            assert stored == getattr(db.graph, name).astype(dtype).tobytes()
    # every byte outside the sections (header aside) is zero padding
    covered = bytearray(size)
    covered[:fmt.GRAPH_HEADER_SIZE] = b"\x01" * fmt.GRAPH_HEADER_SIZE
    for offset, dtype, count in layout.values():
        covered[offset:offset + count * dtype.itemsize] = b"\x01" * (count * dtype.itemsize)
    assert all(b == 0 for b, c in zip(data, covered) if not c)


@pytest.mark.parametrize("version", [1, 2, 4])
def test_other_format_versions_are_refused_with_a_way_out(example_db, tmp_path, version):
    db = tmp_path / "db"
    shutil.copytree(example_db, db)
    manifest = json.loads((db / fmt.MANIFEST_FILE).read_text())
    manifest["format_version"] = version
    (db / fmt.MANIFEST_FILE).write_text(json.dumps(manifest))
    report = verify_database(db)
    assert not report.ok
    message = str(report.failures[0])
    assert f"version {version}" in message and "dlkit preprocess" in message
    with pytest.raises(DatabaseError, match="build the database again"):
        open_database(db)


def test_width_rules_and_their_limits():
    assert fmt.graph_id_dtype(0) == fmt.graph_id_dtype(1 << 31) == np.dtype("<i4")
    assert fmt.graph_id_dtype((1 << 31) + 1) == np.dtype("<i8")
    assert np.iinfo(np.int32).max == (1 << 31) - 1  # the last row id of 2^31 rows fits
    assert fmt.graph_offset_dtype(0) == fmt.graph_offset_dtype((1 << 31) - 1) == np.dtype("<i4")
    assert fmt.graph_offset_dtype(1 << 31) == np.dtype("<i8")  # offset E must fit


@pytest.mark.parametrize(("at", "what"), [(40, "row ids"), (44, "offsets")])
@pytest.mark.parametrize("width", [0, 2, 16])
def test_a_header_with_another_width_is_refused(example_db, tmp_path, at, what, width):
    db = tmp_path / "db"
    shutil.copytree(example_db, db)
    graph = db / fmt.GRAPH_FILE
    data = bytearray(graph.read_bytes())
    data[at:at + 4] = width.to_bytes(4, "little")
    graph.write_bytes(bytes(data))
    report = verify_database(db)
    assert not report.ok
    assert any(f.check == "graph.header" and f"{what} of {width} bytes" in f.message
               for f in report.failures)


@pytest.mark.parametrize(("limit", "message"), [("MAX_INT32_ROWS", "row ids of 4 bytes cannot"),
                                                ("MAX_INT32_EDGES", "offsets of 4 bytes cannot")])
def test_int32_for_more_than_it_can_hold_is_refused(example_db, monkeypatch, limit, message):
    monkeypatch.setattr(fmt, limit, 10)  # as if the example had 2^31 rows or edges
    with pytest.raises(DatabaseError, match=message):
        open_database(example_db)
