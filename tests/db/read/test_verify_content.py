"""``dlkit verify`` catches corrupt content even when ``manifest.json`` was re-hashed to match.

Every test corrupts a copy of the example database, rewrites ``manifest.json`` over the
corrupt files (so every size and SHA-256 holds) and expects one failure naming the file and
the check. The content kernels are tested against plain-Python references first.
"""

from __future__ import annotations

import copy
import json
import struct
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.core import integrity
from dlkit.core import keys as kk
from dlkit.core.jit import interpreted
from dlkit.db import check_database, open_database
from dlkit.db import format as fmt
from dlkit.db.failures import Checks, Stop
from dlkit.db.manifest import database_hash, hash_files, list_files, render_manifest
from dlkit.db.metadata_records import DatabaseMetadata
from dlkit.db.read import reader
from dlkit.db.read.checks import check_metadata_rules
from dlkit.errors import DatabaseError

# --- the kernels against plain Python -------------------------------------------------------


def _pack(strings: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in strings], out=offsets[1:])
    data = np.frombuffer(b"".join(strings), dtype=np.uint8)
    return data, offsets


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _naive_first_bad_utf8(strings: list[bytes]) -> int:
    return next((i for i, s in enumerate(strings) if not _utf8(s)), -1)


# bytes at the edges of every UTF-8 range: ASCII, continuation, lead bytes, never-valid
EDGES = [0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0,
         0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF]


def _assert_each_string_like_python(strings: list[bytes]) -> None:
    data, offsets = _pack(strings)
    for i, s in enumerate(strings):
        ok = integrity.first_bad_utf8(data, offsets[i:i + 2]) == -1
        assert ok == _utf8(s), s


def test_utf8_every_one_and_two_byte_string():
    _assert_each_string_like_python([bytes([a]) for a in range(256)])
    _assert_each_string_like_python([bytes([a, b]) for a in range(256) for b in range(256)])


def test_utf8_edges_of_three_and_four_byte_sequences():
    tails = (b"", b"\x80", b"\xbf", b"A")
    _assert_each_string_like_python([bytes([a, b, c]) + tail for a in range(0xE0, 0x100)
                                     for b in EDGES for c in EDGES for tail in tails])


@given(st.lists(st.one_of(st.binary(max_size=8),
                          st.text(max_size=4).map(lambda t: t.encode("utf-8"))), max_size=12),
       st.data())
def test_utf8_strings_match_python(strings, data):
    # split the valid concatenation anywhere: whole-buffer validity is not enough
    if strings and data.draw(st.booleans()):
        joined = b"".join(strings)
        cuts = sorted(data.draw(st.lists(st.integers(0, len(joined)), max_size=4)))
        bounds = [0, *cuts, len(joined)]
        strings = [joined[a:b] for a, b in zip(bounds, bounds[1:])]
    buf, offsets = _pack(strings)
    assert integrity.first_bad_utf8(buf, offsets) == _naive_first_bad_utf8(strings)


@pytest.mark.parametrize("slot_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("collide", [False, True])
@given(st.lists(st.binary(max_size=10) | st.sampled_from([b"", b"a", b"ab", b"abcdefghijk"]),
                max_size=40))
def test_first_duplicate_string_matches_python(slot_dtype, collide, strings):
    data, offsets = _pack(strings)
    n = len(strings)
    hashes = np.empty(n, dtype=np.int64)
    kk.hash_strings(data, offsets, hashes)
    if collide:
        hashes[:] = -7  # one probe run: only the bytes tell the strings apart
    slots = np.full(kk.table_size(n), -1, dtype=slot_dtype)
    i, j = integrity.first_duplicate_string(data, offsets, hashes, slots)
    expect = next(((i2, strings.index(s)) for i2, s in enumerate(strings)
                   if s in strings[:i2]), (-1, -1))
    assert (int(i), int(j)) == expect


def test_first_duplicate_string_forced_collisions():
    strings = [b"x", b"y", b"", b"yy", b"y"]
    data, offsets = _pack(strings)
    hashes = np.full(len(strings), -3, dtype=np.int64)  # all collide
    slots = np.full(16, -1, dtype=np.int64)
    assert tuple(int(v) for v in integrity.first_duplicate_string(data, offsets, hashes,
                                                                  slots)) == (4, 1)


@pytest.mark.parametrize("dtype,bits,mask", [(np.float16, np.uint16, integrity.F16_EXPONENT),
                                             (np.float64, np.uint64, integrity.F64_EXPONENT)])
@given(st.data())
def test_first_all_bits_finds_the_first_non_finite(dtype, bits, mask, data):
    info = np.finfo(dtype)
    pool = [0.0, -0.0, 1.0, -2.5, float(info.max), float(-info.max), float(info.tiny),
            float(info.smallest_subnormal), np.nan, np.inf, -np.inf]
    values = np.array(data.draw(st.lists(st.sampled_from(pool), max_size=30)), dtype=dtype)
    values = np.concatenate([values, -values])  # NaNs with either sign bit
    expect = int(np.flatnonzero(~np.isfinite(values))[0]) if (~np.isfinite(values)).any() else -1
    assert integrity.first_all_bits(values.view(bits), mask) == expect


def _naive_parent_misorder(offsets, ids, first, last, key_lo, key_hi):
    counts = [0] * len(key_lo)
    for v in range(first, last):
        k = 0
        for p in ids[offsets[v]:offsets[v + 1]]:
            while k < len(key_lo) and not key_lo[k] <= p < key_hi[k]:
                k += 1
            if k == len(key_lo):
                return v, counts
            counts[k] += 1
            k += 1
    return -1, counts


@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
@given(st.data())
def test_first_parent_misorder_matches_python(id_dtype, data):
    sizes = data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=3))
    table_offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    rows = int(table_offsets[-1])
    fk_tables = np.array(data.draw(st.lists(st.integers(0, len(sizes) - 1), max_size=3)),
                         dtype=np.intp)
    lists = data.draw(st.lists(st.lists(st.integers(0, max(rows - 1, 0)), max_size=4),
                               min_size=rows, max_size=rows)) if rows else []
    offsets = np.zeros(rows + 1, dtype=id_dtype)
    np.cumsum([len(x) for x in lists], out=offsets[1:])
    ids = np.array([p for x in lists for p in x], dtype=id_dtype)
    first = data.draw(st.integers(0, rows))
    last = data.draw(st.integers(first, rows))
    key_lo, key_hi = table_offsets[fk_tables], table_offsets[fk_tables + 1]
    counts = np.zeros(len(fk_tables), dtype=np.int64)
    got = integrity.first_parent_misorder(offsets, ids, first, last, key_lo, key_hi, counts)
    expect, expect_counts = _naive_parent_misorder(offsets.tolist(), ids.tolist(), first, last,
                                                   key_lo.tolist(), key_hi.tolist())
    assert got == expect
    if expect == -1:
        assert counts.tolist() == expect_counts


# --- corrupt, re-hash, verify --------------------------------------------------------------


def rehash(db: Path) -> None:
    """Rewrite manifest.json over the files as they are: every hash check passes."""
    file_map = hash_files(db, list_files(db))
    (db / "manifest.json").write_bytes(render_manifest(file_map, database_hash(file_map)))


def meta_of(db: Path) -> dict:
    return json.loads((db / "metadata.json").read_text())


def write_meta(db: Path, meta: dict, ascii_only: bool = False) -> None:
    text = json.dumps(meta, indent=2, ensure_ascii=ascii_only) + "\n"
    (db / "metadata.json").write_bytes(text.encode("utf-8"))
    rehash(db)


def patch(db: Path, rel: str, dtype, index, value) -> None:
    """Set element ``index`` of the raw array ``rel`` (re-hashes the manifest)."""
    arr = np.fromfile(db / rel, dtype=dtype)
    arr[index] = value
    arr.tofile(db / rel)
    rehash(db)


def failures(db: Path) -> set[tuple[str, str]]:
    """The checks that fail, each found alike by the kernels interpreted (as a process that
    has not loaded numba checks a database this small) and compiled."""
    assert sum(p.stat().st_size for p in db.rglob("*")) < reader.INTERPRET_BELOW_BYTES
    with interpreted():
        found = check_database(db)
    with mock.patch.object(reader, "INTERPRET_BELOW_BYTES", 0):
        assert check_database(db) == found
    assert not any(f.check.startswith(("file.sha256", "file.size", "manifest."))
                   for f in found), found  # the re-hash made every hash check pass
    return {(f.file, f.check) for f in found}


def table_meta(meta: dict, name: str) -> dict:
    return next(t for t in meta["tables"] if t["name"] == name)


def column_index(meta: dict, table: str, column: str) -> int:
    return next(c["index"] for c in table_meta(meta, table)["columns"] if c["name"] == column)


def valid_rows(db: Path, table: str, index: int, n: int) -> np.ndarray:
    bitmap = np.fromfile(db / fmt.column_valid_file(table, index), dtype=np.uint8)
    return np.flatnonzero(np.unpackbits(bitmap, count=n, bitorder="little"))


def graph_layout(db: Path) -> dict:
    raw = (db / "graph.bin").read_bytes()
    _, _, _, rows, edges, _, id_bytes, offset_bytes = fmt.GRAPH_HEADER.unpack_from(raw, 0)
    return fmt.graph_layout(rows, edges, fmt.INT_DTYPES[id_bytes], fmt.INT_DTYPES[offset_bytes])[0]


def graph_array(db: Path, section: str) -> np.ndarray:
    off, dtype, count = graph_layout(db)[section]
    return np.frombuffer((db / "graph.bin").read_bytes(), dtype=dtype, count=count,
                         offset=off).copy()


def write_graph_array(db: Path, section: str, values: np.ndarray) -> None:
    off, dtype, count = graph_layout(db)[section]
    raw = bytearray((db / "graph.bin").read_bytes())
    raw[off:off + count * dtype.itemsize] = values.astype(dtype).tobytes()
    (db / "graph.bin").write_bytes(bytes(raw))
    rehash(db)


def test_the_copy_verifies(db):
    assert check_database(db) == []


# 1. primary keys


@pytest.mark.parametrize("sparse", [False, True])
def test_duplicate_integer_key(db, sparse):
    rel = fmt.key_values_file("products")
    keys = np.fromfile(db / rel, dtype="<i8")
    if sparse:  # a range too wide for a bitmap: the hash-table path
        keys[0] = 2**62
        keys[7] = 2**62
    else:
        keys[7] = keys[3]
    keys.tofile(db / rel)
    rehash(db)
    assert (rel, "key.unique") in failures(db)
    open_database(db).close()  # the cheap open does not look at content


def test_distinct_sparse_integer_keys_pass(db):
    """Distinct keys over a wide range (the hash-table path) are no failure (the graph holds
    row ids, not key values, so new key values break nothing else)."""
    rel = fmt.key_values_file("products")
    keys = np.fromfile(db / rel, dtype="<i8")
    keys[1:] += 2**61
    keys.tofile(db / rel)
    rehash(db)
    assert failures(db) == set()


def _string_keys(db: Path, table: str) -> tuple[bytearray, np.ndarray]:
    return (bytearray((db / fmt.key_values_file(table)).read_bytes()),
            np.fromfile(db / fmt.key_offsets_file(table), dtype="<i8"))


def test_duplicate_string_key(db):
    data, offsets = _string_keys(db, "users")
    a, b, c = (int(x) for x in offsets[:3])
    assert b - a == c - b  # u0001, u0002: same length
    data[b:c] = data[a:b]
    (db / fmt.key_values_file("users")).write_bytes(bytes(data))
    rehash(db)
    assert (fmt.key_values_file("users"), "key.unique") in failures(db)


@pytest.mark.parametrize("bad", [b"\xff", b"\xc3", b"\xed\xa0\x80"])
def test_string_key_not_utf8(db, bad):
    data, offsets = _string_keys(db, "users")
    a = int(offsets[4])
    data[a:a + len(bad)] = bad  # same length: offsets unchanged
    (db / fmt.key_values_file("users")).write_bytes(bytes(data))
    rehash(db)
    assert (fmt.key_values_file("users"), "key.utf8") in failures(db)


# 2. non-finite values


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_numeric_cell(db, value):
    meta = meta_of(db)
    index = column_index(meta, "users", "age")
    row = int(valid_rows(db, "users", index, table_meta(meta, "users")["num_rows"])[5])
    patch(db, fmt.column_values_file("users", index), "<f8", row, value)
    assert (fmt.column_values_file("users", index), "column.finite") in failures(db)


@pytest.mark.parametrize("rel", [fmt.TEXT_EMBEDDINGS_FILE, fmt.COLUMN_EMBEDDINGS_FILE,
                                 fmt.CATEGORICAL_EMBEDDINGS_FILE])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_embedding(db, rel, value):
    size = (db / rel).stat().st_size // 2
    patch(db, rel, "<f2", size - 3, value)
    assert (rel, "embeddings.finite") in failures(db)


# 3. bytes graph.bin requires to be zero


def test_graph_header_reserved_bytes(db):
    raw = bytearray((db / "graph.bin").read_bytes())
    raw[fmt.GRAPH_HEADER_SIZE - 3] = 1
    (db / "graph.bin").write_bytes(bytes(raw))
    rehash(db)
    assert ("graph.bin", "graph.header") in failures(db)
    open_database(db).close()


def _gaps(db: Path) -> list[tuple[int, int]]:
    """Every stretch of padding in graph.bin: after the header, between and after sections."""
    pos, gaps = fmt.GRAPH_HEADER_SIZE, []
    for off, dtype, count in graph_layout(db).values():
        gaps.append((pos, off))
        pos = off + count * dtype.itemsize
    gaps.append((pos, (db / "graph.bin").stat().st_size))
    return [(a, b) for a, b in gaps if b > a]


@pytest.mark.parametrize("gap", range(8))
@pytest.mark.parametrize("where", ["first", "last"])
def test_graph_padding(db, gap, where):
    gaps = _gaps(db)
    assert len(gaps) == 8  # the example's sections all end off a page boundary
    a, b = gaps[gap]
    raw = bytearray((db / "graph.bin").read_bytes())
    raw[a if where == "first" else b - 1] = 0x80
    (db / "graph.bin").write_bytes(bytes(raw))
    rehash(db)
    assert ("graph.bin", "graph.padding") in failures(db)


# 4. files beyond the format's set, listed in the manifest


@pytest.mark.parametrize("rel", ["tables/users/extra.bin", "tables/users/9.values",
                                 "tasks/ghost/anchor_row.bin", "tables/ghost/0.values",
                                 "texts.extra"])
def test_listed_file_outside_the_format(db, rel):
    (db / rel).parent.mkdir(parents=True, exist_ok=True)
    (db / rel).write_bytes((db / "tasks/user_premium/anchor_row.bin").read_bytes())
    rehash(db)
    assert (rel, "file.unexpected") in failures(db)


# 5. row times against the time columns


def test_time_value_disagrees_with_row_times(db):
    meta = meta_of(db)
    index = column_index(meta, "orders", "ordered_at")
    patch(db, fmt.column_values_file("orders", index), "<i8", 17, 1_000_000)
    assert ("graph.bin", "graph.row_times") in failures(db)


def test_row_times_disagree_with_time_value(db):
    times = graph_array(db, "row_times")
    times[meta_of(db)["table_offsets"][2] + 5] += 1  # orders row 5
    write_graph_array(db, "row_times", times)
    assert ("graph.bin", "graph.row_times") in failures(db)


def test_null_time_must_be_no_time(db):
    """A time made null (bitmap bit off, cell 0, counts updated) leaves row_times stale."""
    meta = meta_of(db)
    orders = table_meta(meta, "orders")
    index = column_index(meta, "orders", "ordered_at")
    bitmap = np.fromfile(db / fmt.column_valid_file("orders", index), dtype=np.uint8)
    bitmap[2] &= 0xFF ^ (1 << 3)  # row 19
    bitmap.tofile(db / fmt.column_valid_file("orders", index))
    values = np.fromfile(db / fmt.column_values_file("orders", index), dtype="<i8")
    values[19] = 0
    values.tofile(db / fmt.column_values_file("orders", index))
    orders["columns"][index]["num_valid"] -= 1
    orders["num_null_times"] += 1
    write_meta(db, meta)
    found = failures(db)
    assert ("graph.bin", "graph.row_times") in found
    assert ("metadata.json", "metadata.consistency") not in found  # the counts were updated


def test_table_without_time_column_has_no_time(db):
    meta = meta_of(db)
    assert table_meta(meta, "products")["time_column"] is None
    times = graph_array(db, "row_times")
    times[meta["table_offsets"][1] + 3] = 0  # products row 3: epoch instead of NO_TIME
    write_graph_array(db, "row_times", times)
    assert ("graph.bin", "graph.row_times") in failures(db)


# 6. parent lists


def _orders_row_with_both_parents(db: Path) -> tuple[int, int]:
    offsets = graph_array(db, "parent_offsets")
    first = meta_of(db)["table_offsets"][2]
    v = next(v for v in range(first, first + 300) if offsets[v + 1] - offsets[v] == 2)
    return v, int(offsets[v])


def test_parents_out_of_foreign_key_order(db):
    """Swapped parents: the same edges, so the transpose still matches."""
    v, e = _orders_row_with_both_parents(db)
    ids = graph_array(db, "parent_ids")
    ids[e], ids[e + 1] = ids[e + 1], ids[e]
    write_graph_array(db, "parent_ids", ids)
    found = failures(db)
    assert ("graph.bin", "graph.parent_order") in found
    assert ("graph.bin", "graph.transpose") not in found


def test_parent_in_the_wrong_table(db):
    v, e = _orders_row_with_both_parents(db)
    ids = graph_array(db, "parent_ids")
    ids[e] = ids[e + 1]  # the user parent becomes a second product parent
    write_graph_array(db, "parent_ids", ids)
    assert ("graph.bin", "graph.parent_order") in failures(db)


def test_edges_per_foreign_key(db):
    """Moved between the keys: the table's total and every key's row count still hold."""
    meta = meta_of(db)
    user, product = table_meta(meta, "orders")["foreign_keys"]
    assert (user["num_edges"], user["num_dangling"], product["num_null"]) == (298, 1, 0)
    user["num_edges"], user["num_dangling"] = 299, 0
    product["num_edges"], product["num_null"] = 299, 1
    write_meta(db, meta)
    found = failures(db)
    assert ("graph.bin", "graph.foreign_key_edges") in found
    assert ("graph.bin", "graph.parent_ids") not in found  # the table's total is right


# 7. texts


def _texts(db: Path) -> tuple[bytes, np.ndarray]:
    return (db / fmt.TEXT_DATA_FILE).read_bytes(), np.fromfile(db / fmt.TEXT_OFFSETS_FILE,
                                                               dtype="<i8")


def test_text_offsets_split_a_character(db):
    data, offsets = _texts(db)
    lead = next(p for p, b in enumerate(data) if b >= 0xC0)
    i = int(np.searchsorted(offsets, lead, side="right")) - 1  # the text holding it
    assert offsets[i] <= lead < offsets[i + 1] - 1
    data.decode("utf-8")  # the whole buffer stays valid: only the split is wrong
    patch(db, fmt.TEXT_OFFSETS_FILE, "<i8", i + 1, lead + 1)
    assert (fmt.TEXT_DATA_FILE, "texts.utf8") in failures(db)


def test_texts_not_valid_utf8(db):
    data, offsets = _texts(db)
    raw = bytearray(data)
    raw[int(offsets[3])] = 0xFF
    (db / fmt.TEXT_DATA_FILE).write_bytes(bytes(raw))
    rehash(db)
    assert (fmt.TEXT_DATA_FILE, "texts.utf8") in failures(db)


def test_duplicate_texts(db):
    data, offsets = _texts(db)
    texts = [data[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
    texts[5] = texts[2]
    new_data, new_offsets = _pack(texts)
    (db / fmt.TEXT_DATA_FILE).write_bytes(new_data.tobytes())
    new_offsets.astype("<i8").tofile(db / fmt.TEXT_OFFSETS_FILE)
    rehash(db)
    assert (fmt.TEXT_DATA_FILE, "texts.unique") in failures(db)


# 8. metadata.json


def _col(meta, table, name):
    return next(c for c in table_meta(meta, table)["columns"] if c["name"] == name)


def _rename_task(db: Path, meta: dict) -> None:
    task = next(t for t in meta["tasks"] if t["name"] == "user_premium")
    task["name"] = "Review_Rating"  # review_rating exists: the names differ only in case
    (db / "tasks" / "user_premium").rename(db / "tasks" / "Review_Rating")


METADATA_CASES = {
    # categories
    "category repeated": ("metadata.schema", lambda db, m: _col(m, "users", "country")
                          ["categories"].__setitem__(1, "DE")),
    "categories unsorted": ("metadata.schema", lambda db, m: _col(m, "users", "country")
                            ["categories"].reverse()),
    "category not a string": ("metadata.schema", lambda db, m: _col(m, "users", "country")
                              ["categories"].__setitem__(0, 1)),
    "category a list": ("metadata.schema", lambda db, m: _col(m, "users", "country")
                        ["categories"].__setitem__(0, ["DE"])),
    "category not unicode": ("metadata.parse", lambda db, m: _col(m, "users", "country")
                             ["categories"].__setitem__(5, "US\ud800")),
    # names
    "time column missing": ("metadata.schema", lambda db, m: table_meta(m, "orders")
                            .__setitem__("time_column", "shipped_at")),
    "time column not a timestamp": ("metadata.schema", lambda db, m: table_meta(m, "orders")
                                    .__setitem__("time_column", "quantity")),
    "primary key a feature column": ("metadata.schema", lambda db, m: table_meta(m, "users")
                                     .__setitem__("primary_key", "age")),
    "primary key empty": ("metadata.schema", lambda db, m: table_meta(m, "users")
                          .__setitem__("primary_key", "")),
    "primary key a foreign key": ("metadata.schema", lambda db, m: table_meta(m, "orders")
                                  .__setitem__("primary_key", "user_id")),
    "column names repeat": ("metadata.schema", lambda db, m: _col(m, "users", "bio")
                            .__setitem__("name", "age")),
    "foreign key column is a feature": ("metadata.schema", lambda db, m: table_meta(
        m, "orders")["foreign_keys"][0].__setitem__("column", "quantity")),
    "task names differ in case": ("metadata.schema", _rename_task),
    # types and values
    "stype_name": ("metadata.schema", lambda db, m: _col(m, "users", "age")
                   .__setitem__("stype_name", "boolean")),
    "target_stype_name": ("metadata.schema", lambda db, m: m["tasks"][0]
                          .__setitem__("target_stype_name", "categorical")),
    "target_column_id": ("metadata.consistency", lambda db, m: m["tasks"][0]
                         .__setitem__("target_column_id", 0)),
    "table_offsets bool": ("metadata.consistency", lambda db, m: m["table_offsets"]
                           .__setitem__(0, False)),
    "std bool": ("metadata.schema", lambda db, m: _col(m, "users", "age")
                 .__setitem__("std", True)),
    "std string": ("metadata.schema", lambda db, m: _col(m, "users", "age")
                   .__setitem__("std", "17.6")),
    "mean beyond float64": ("metadata.schema", lambda db, m: _col(m, "users", "age")
                            .__setitem__("mean", 10**400)),
    "num_dangling string": ("metadata.schema", lambda db, m: table_meta(m, "orders")
                            ["foreign_keys"][0].__setitem__("num_dangling", "1")),
    "num_dangling float": ("metadata.schema", lambda db, m: table_meta(m, "orders")
                           ["foreign_keys"][0].__setitem__("num_dangling", 1.0)),
    "num_null bool": ("metadata.schema", lambda db, m: table_meta(m, "orders")
                      ["foreign_keys"][0].__setitem__("num_null", True)),
    "edges + nulls + dangling": ("metadata.consistency", lambda db, m: table_meta(m, "orders")
                                 ["foreign_keys"][0].__setitem__("num_null", 2)),
    "dangling under on_dangling=error": ("metadata.consistency", lambda db, m: m["options"]
                                         .__setitem__("on_dangling", "error")),
    "on_dangling unknown": ("metadata.schema", lambda db, m: m["options"]
                            .__setitem__("on_dangling", "ignore")),
    "options missing": ("metadata.schema", lambda db, m: m.pop("options")),
    "no_time zero": ("metadata.schema", lambda db, m: m.__setitem__("no_time", 0)),
    "no_time float": ("metadata.schema", lambda db, m: m.__setitem__("no_time",
                                                                     float(fmt.NO_TIME))),
    "stypes": ("metadata.schema", lambda db, m: m["stypes"].__setitem__("text", 5)),
    "stypes bool": ("metadata.schema", lambda db, m: m["stypes"].__setitem__("boolean", True)),
    "num_null_times": ("metadata.consistency", lambda db, m: table_meta(m, "users")
                       .__setitem__("num_null_times", 1)),
    "num_valid above num_rows": ("metadata.consistency", lambda db, m: _col(m, "users", "age")
                                 .__setitem__("num_valid", 61)),
    "inferred not a bool": ("metadata.schema", lambda db, m: _col(m, "users", "age")
                            .__setitem__("inferred", 1)),
    "embedder not a string": ("metadata.schema", lambda db, m: m["embeddings"]
                              .__setitem__("embedder", None)),
    # keys
    "unknown top key": ("metadata.schema", lambda db, m: m.__setitem__("extra", 1)),
    "unknown table key": ("metadata.schema", lambda db, m: table_meta(m, "users")
                          .__setitem__("comment", "x")),
    "unknown column key": ("metadata.schema", lambda db, m: _col(m, "users", "bio")
                           .__setitem__("mean", 0.0)),
    "unknown foreign key key": ("metadata.schema", lambda db, m: table_meta(m, "orders")
                                ["foreign_keys"][0].__setitem__("on_delete", "cascade")),
    "unknown task key": ("metadata.schema", lambda db, m: m["tasks"][0]
                         .__setitem__("weight", 1)),
    "unknown embeddings key": ("metadata.schema", lambda db, m: m["embeddings"]
                               .__setitem__("model", "x")),
    "missing column key": ("metadata.schema", lambda db, m: _col(m, "users", "age")
                           .pop("arrow_type")),
    "missing table key": ("metadata.schema", lambda db, m: table_meta(m, "users")
                          .pop("num_null_times")),
}


@pytest.mark.parametrize("case", sorted(METADATA_CASES))
def test_metadata_rules(db, case):
    check, edit = METADATA_CASES[case]
    meta = meta_of(db)
    before = copy.deepcopy(meta)
    edit(db, meta)
    assert json.dumps(meta) != json.dumps(before)  # (True == 1: compare the JSON)
    write_meta(db, meta, ascii_only=case == "category not unicode")
    assert ("metadata.json", check) in failures(db)


def _metadata_failures(meta: dict) -> list[tuple[str, str]]:
    checks = Checks(collect=True, root=Path("db"))
    try:
        DatabaseMetadata.from_json(meta, checks)
        check_metadata_rules(meta, checks)
    except Stop:
        pass
    return [(f.file, f.check) for f in checks.failures]


def test_num_categories_one_not_true(example_db):
    """With a single category, ``true`` would equal the count 1: it is still refused."""
    meta = json.loads((example_db / "metadata.json").read_text())
    col = _col(meta, "products", "category")
    dropped = col["cat_emb_count"] - 1
    col.update(num_categories=1, cat_emb_count=1, categories=col["categories"][:1])
    for later in (c for t in meta["tables"] for c in t["columns"]
                  if c["stype"] == fmt.CATEGORICAL and c["cat_emb_start"] > col["cat_emb_start"]):
        later["cat_emb_start"] -= dropped
    meta["num_categories"] -= dropped
    assert _metadata_failures(meta) == []
    col["num_categories"] = True
    assert _metadata_failures(meta) == [("metadata.json", "metadata.schema")]


def test_mean_beyond_float64_is_refused_on_open(db):
    meta = meta_of(db)
    _col(meta, "users", "age")["mean"] = 10**400
    write_meta(db, meta)
    with pytest.raises(DatabaseError, match="metadata.schema"):
        open_database(db)


@pytest.mark.parametrize("column,key,factor", [("age", "mean", 1.001), ("age", "std", 0.999),
                                               ("signup_time", "mean", 1 + 1e-6),
                                               ("signup_time", "std", 2.0)])
def test_statistics_agree_with_the_values(db, column, key, factor):
    meta = meta_of(db)
    col = _col(meta, "users", column)
    col[key] *= factor
    write_meta(db, meta)
    assert (fmt.column_values_file("users", col["index"]), "column.stats") in failures(db)


def test_statistics_of_a_column_without_values(db):
    """No values: mean 0.0 and std 1.0, whatever the (zero) cells."""
    meta = meta_of(db)
    col = _col(meta, "products", "price")
    n = table_meta(meta, "products")["num_rows"]
    (db / fmt.column_valid_file("products", col["index"])).write_bytes(bytes(fmt.bitmap_bytes(n)))
    (db / fmt.column_values_file("products", col["index"])).write_bytes(bytes(8 * n))
    col["num_valid"] = 0
    write_meta(db, meta)
    assert (fmt.column_values_file("products", col["index"]), "column.stats") in failures(db)
    col["mean"], col["std"] = 0.0, 1.0
    write_meta(db, meta)
    assert failures(db) == set()


def _paths(node, path=()):
    yield path
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*path, i))


def _kind(value) -> str:
    return "bool" if isinstance(value, bool) else "number" if isinstance(
        value, (int, float)) else type(value).__name__


def test_metadata_checks_never_crash(example_db):
    """Any value anywhere in metadata.json gives failures, never another exception; a value of
    another JSON type than the format's is always a failure (outside the embedder's config)."""
    meta = json.loads((example_db / "metadata.json").read_text())
    values = [None, True, False, -1, 0, 10**400, -(10**400), 1.5, float("nan"), "", "x", [],
              {}, [1], {"a": 1}]
    nullable = {"primary_key", "time_column"}  # a string or null (null: check the content)
    for path in _paths(meta):
        if not path or path[:2] == ("embeddings", "config"):
            continue
        node = meta
        for k in path[:-1]:
            node = node[k]
        original = node[path[-1]]
        for value in values:
            broken = copy.deepcopy(meta)
            target = broken
            for k in path[:-1]:
                target = target[k]
            target[path[-1]] = value
            found = _metadata_failures(broken)  # raises nothing but Stop
            if _kind(value) != _kind(original) and not (path[-1] in nullable and value is None):
                assert found, (path, value)


def test_graph_header_layout_is_what_the_check_assumes():
    """The reserved bytes are the header's last 16 (``16x`` in the struct)."""
    assert fmt.GRAPH_HEADER.format.endswith("16x")
    assert struct.calcsize(fmt.GRAPH_HEADER.format[:-3]) == fmt.GRAPH_HEADER_SIZE - 16
