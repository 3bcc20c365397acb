"""Opening a database for sampling: memory-mapped, read-only, validated.

``open_database(path)`` reads ``metadata.json`` and ``manifest.json``, maps every binary file
read-only (``mmap`` + ``np.frombuffer``, so the pages are shared between processes) and runs
the *cheap* structural checks: every file's size agrees with the metadata and the manifest,
CSR offsets are monotone and end at the edge count, every id (neighbour, table, category,
text, seed row) lies in range. These are single passes over the index arrays (numba, no
allocation), so no kernel can read out of bounds on a corrupt database; a failure raises
:class:`DatabaseError` naming the file and the check. ``verify_hashes=True`` also checks every
SHA-256 of the manifest. :func:`check_database` (used by ``dlkit verify``) runs the *full*
checks as well and collects every failure instead of stopping at the first.

The objects returned live in :mod:`dlkit.db.mapped`, the failure bookkeeping and the metadata
validation in :mod:`dlkit.db.checks`; both are re-exported here.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np

from dlkit.core import csr, integrity
from dlkit.core import keys as kk
from dlkit.core.stats import column_stats, welford_state, welford_update
from dlkit.db import format as fmt
from dlkit.db.checks import (
    Checks,
    Failure,
    Stop,
    check_metadata_rules,
    load_json,
)
from dlkit.db.keys import check_unique_ints
from dlkit.db.manifest import database_hash, hash_files, list_files, parse_manifest
from dlkit.db.mapped import ColumnData, Database, FileMaps, Graph, TableData, TaskData
from dlkit.db.metadata_records import DatabaseMetadata, TableMetadata, TaskMetadata
from dlkit.errors import DataError, DatabaseError
from dlkit.files import read_regular

__all__ = ["ColumnData", "Database", "Failure", "Graph", "TableData", "TaskData",
           "check_database", "open_database"]


def _check_manifest(root: Path, checks: Checks, full: bool,
                    verify_hashes: bool) -> tuple[dict[str, dict], bytes]:
    """``(file map, recorded database hash)``; every file checked against the manifest."""
    try:
        raw_manifest = read_regular(root / fmt.MANIFEST_FILE)
    except FileNotFoundError:
        # the usual cause: a directory that is no database (yet), such as the Parquet input
        checks.fail(fmt.MANIFEST_FILE, "file.missing", "no such file: not a dlkit database? "
                    "(`dlkit preprocess` makes one)", fatal=True)
    except OSError as exc:
        checks.fail(fmt.MANIFEST_FILE, "file.missing", f"cannot read: {exc.strerror or exc}",
                    fatal=True)
    try:
        file_map, recorded = parse_manifest(raw_manifest, root / fmt.MANIFEST_FILE)
    except DatabaseError as exc:
        checks.fail(fmt.MANIFEST_FILE, "manifest.parse", exc.message, fatal=True)
    if database_hash(file_map) != recorded:
        checks.fail(fmt.MANIFEST_FILE, "manifest.database_hash", "the recorded database hash is "
                    "not SHA-256(CBOR_CANONICAL(file map))")
    present = set(list_files(root))
    for rel in sorted(set(file_map) - present):
        checks.fail(rel, "file.missing", "listed in manifest.json but absent")
    if full:
        for rel in sorted(present - set(file_map)):
            checks.fail(rel, "file.unexpected", "present but not listed in manifest.json")
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                if p.is_symlink():
                    checks.fail(str(p.relative_to(root)), "file.symlink", "symbolic links are "
                                "not allowed in a database")
    sized = []
    for rel in sorted(set(file_map) & present):
        try:
            info = (root / rel).stat()
        except OSError as exc:  # a dangling symlink
            checks.fail(rel, "file.type", f"cannot stat: {exc.strerror or exc}")
            continue
        if not stat.S_ISREG(info.st_mode):  # a FIFO would block the hash, a device never end
            checks.fail(rel, "file.type", "not a regular file")
            continue
        size = info.st_size
        if size != file_map[rel]["size"]:
            checks.fail(rel, "file.size", f"{size} bytes, manifest says {file_map[rel]['size']}")
        else:
            sized.append(rel)
    if verify_hashes:
        try:
            actual = hash_files(root, sized)
        except OSError as exc:  # unreadable (permissions), or replaced since it was listed
            where = os.path.relpath(exc.filename, root) if exc.filename else fmt.MANIFEST_FILE
            checks.fail(where, "file.unreadable", f"cannot read: {exc.strerror or exc}",
                        fatal=True)
        for rel in sized:
            if actual[rel]["sha256"] != file_map[rel]["sha256"]:
                checks.fail(rel, "file.sha256", "content differs from manifest.json "
                            f"(sha256 {actual[rel]['sha256'].hex()[:16]}..., manifest "
                            f"{file_map[rel]['sha256'].hex()[:16]}...)")
    return file_map, recorded


def _open(root: Path, checks: Checks, full: bool, verify_hashes: bool) -> Database | None:
    root = Path(root)
    if not root.is_dir():
        checks.fail(".", "database.missing",
                    "not a directory" if root.exists() else "no such directory", fatal=True)
    file_map, recorded = _check_manifest(root, checks, full, verify_hashes)
    doc = load_json(root, fmt.METADATA_FILE, checks)
    meta = DatabaseMetadata.from_json(doc, checks)
    expected = meta.expected_files()
    for rel in sorted(expected - set(file_map)):
        checks.fail(rel, "file.unlisted", "required by metadata.json but not in manifest.json")
    if full:
        check_metadata_rules(doc, checks)
        for rel in sorted(set(file_map) - expected):
            checks.fail(rel, "file.unexpected", "listed in manifest.json but not a file of the "
                        "format (metadata.json implies no such file)")
    sizes = {rel: e["size"] for rel, e in file_map.items()}
    maps = FileMaps(root, checks, sizes)
    failures_before = len(checks.failures)
    ok = True
    try:
        graph = _open_graph(meta, maps, checks, full)
    except Stop:
        ok, graph = False, None
    tables = []
    for t in meta.tables:
        try:
            tables.append(_open_table(t, meta, maps, checks, full, graph))
        except Stop:
            ok = False
    try:
        texts = _open_texts(meta, maps, checks, full)
    except Stop:
        ok, texts = False, None
    embeddings = {}
    emb = meta.embeddings
    for key, rel, count, dim in (
            ("text", fmt.TEXT_EMBEDDINGS_FILE, meta.num_texts, emb.text_dim),
            ("column", fmt.COLUMN_EMBEDDINGS_FILE, meta.num_columns, emb.column_dim),
            ("categorical", fmt.CATEGORICAL_EMBEDDINGS_FILE, meta.num_categories,
             emb.categorical_dim)):
        try:
            embeddings[key] = maps.array(rel, "<f2", count * dim, (count, dim))
        except Stop:
            ok = False
            continue
        if full:
            i = integrity.first_all_bits(embeddings[key].reshape(-1).view(np.uint16),
                                         integrity.F16_EXPONENT)
            if i >= 0:
                checks.fail(rel, "embeddings.finite", f"row {i // dim}, column {i % dim} is "
                            f"{embeddings[key].flat[i]}: embeddings are finite")
    tasks = []
    if ok:
        by_name = {t.name: t for t in tables}
        for task in meta.tasks:
            try:
                tasks.append(_open_task(task, by_name[task.table], maps, checks, full, graph))
            except Stop:
                ok = False
    if not ok or len(checks.failures) > failures_before and checks.collect:
        maps.close()
        return None
    return Database(root, meta, file_map, recorded, maps, tuple(tables), graph, tuple(tasks),
                    embeddings, texts)


def _open_graph(meta: DatabaseMetadata, maps: FileMaps, checks: Checks, full: bool) -> Graph:
    G = fmt.GRAPH_FILE
    V, E, T = meta.num_rows, meta.num_edges, meta.num_tables
    mm = maps.raw(G)
    size = 0 if mm is None else len(mm)
    if size < fmt.GRAPH_HEADER_SIZE:
        checks.fail(G, "graph.size", f"{size} bytes: shorter than the {fmt.GRAPH_HEADER_SIZE}-byte "
                    "header", fatal=True)
    magic, version, hsize, rows, edges, tables, id_bytes, offset_bytes = \
        fmt.GRAPH_HEADER.unpack_from(mm, 0)
    if (magic, version, hsize, rows, edges, tables) != (fmt.GRAPH_MAGIC, fmt.FORMAT_VERSION,
                                                       fmt.GRAPH_HEADER_SIZE, V, E, T):
        checks.fail(G, "graph.header", f"header ({magic!r}, v{version}, {rows} rows, {edges} "
                    f"edges, {tables} tables) disagrees with metadata.json", fatal=True)
    widths = []  # (row id dtype, offset dtype)
    for what, nbytes, how_many, int32_fits in (
            ("row ids", id_bytes, f"number {V} rows", V <= fmt.MAX_INT32_ROWS),
            ("offsets", offset_bytes, f"count {E} edges", E <= fmt.MAX_INT32_EDGES)):
        dtype = fmt.INT_DTYPES.get(nbytes)
        if dtype is None or nbytes == 4 and not int32_fits:
            checks.fail(G, "graph.header", f"{what} of {nbytes} bytes cannot {how_many}",
                        fatal=True)
        widths.append(dtype)
    layout, expected = fmt.graph_layout(V, E, *widths)
    if size != expected:
        checks.fail(G, "graph.size", f"{size} bytes, metadata implies {expected} ({V} rows, "
                    f"{E} edges, {id_bytes}-byte row ids, {offset_bytes}-byte offsets)",
                    fatal=True)
    a = {}
    for name, (off, dtype, count) in layout.items():
        arr = np.frombuffer(mm, dtype=dtype, count=count, offset=off)
        arr.flags.writeable = False
        a[name] = arr
    bad = False
    for off_name, ids_name in (("parent_offsets", "parent_ids"), ("child_offsets", "child_ids")):
        i = csr.check_offsets(a[off_name], E)
        if i >= 0:
            checks.fail(G, f"graph.{off_name}", f"offsets not monotone from 0 to {E} (at row {i})")
            bad = True
        i = csr.check_ids(a[ids_name], 0, V)
        if i >= 0:
            checks.fail(G, f"graph.{ids_name}", f"id {int(a[ids_name][i])} at edge {i} is not a row "
                        f"id in [0, {V})")
            bad = True
    i = csr.check_ids(a["row_table"], 0, T)
    if i >= 0:
        checks.fail(G, "graph.row_table", f"table index {int(a['row_table'][i])} at row {i} is not "
                    f"in [0, {T})")
        bad = True
    if bad:
        raise Stop()
    graph = Graph(**a)
    if full:
        _check_graph_zeros(np.frombuffer(mm, dtype=np.uint8), layout, checks)
        _full_graph_checks(meta, graph, checks)
    return graph


# The header's last 16 bytes (offset 48) are zero.
GRAPH_RESERVED = slice(fmt.GRAPH_HEADER_SIZE - 16, fmt.GRAPH_HEADER_SIZE)


def _check_graph_zeros(raw: np.ndarray, layout: dict, checks: Checks) -> None:
    """The header's reserved bytes and the padding around the page-aligned sections are 0."""
    G = fmt.GRAPH_FILE
    if raw[GRAPH_RESERVED].any():
        checks.fail(G, "graph.header", f"reserved header bytes {GRAPH_RESERVED.start}.."
                    f"{GRAPH_RESERVED.stop - 1} are not zero")
    pos, gaps = fmt.GRAPH_HEADER_SIZE, []
    for name, (off, dtype, count) in layout.items():  # in file order
        gaps.append((pos, off, f"before {name}"))
        pos = off + count * dtype.itemsize
    gaps.append((pos, raw.size, "after the last section"))
    for a, b, what in gaps:
        if raw[a:b].any():
            at = a + int(np.flatnonzero(raw[a:b])[0])
            checks.fail(G, "graph.padding", f"padding {what} (bytes {a}..{b - 1}) is not zero "
                        f"(byte {at})")


def _full_graph_checks(meta: DatabaseMetadata, g: Graph, checks: Checks) -> None:
    G = fmt.GRAPH_FILE
    offsets = np.asarray(meta.table_offsets, dtype=np.int64)
    expected_table = np.repeat(np.arange(meta.num_tables, dtype=np.int32), np.diff(offsets))
    if not np.array_equal(g.row_table, expected_table):
        checks.fail(G, "graph.row_table", "row_table disagrees with table_offsets")
    i = csr.check_child_order(g.child_offsets, g.child_ids, g.child_times)
    if i >= 0:
        checks.fail(G, "graph.child_order", f"children not sorted by (time, id) at edge {i}")
    i = csr.check_child_times(g.child_ids, g.child_times, g.row_times)
    if i >= 0:
        checks.fail(G, "graph.child_times", f"child_times[{i}] is not the child's row time")
    if not csr.transpose_matches(g.parent_offsets, g.parent_ids, g.child_offsets, g.child_ids):
        checks.fail(G, "graph.transpose", "the child lists are not the transpose of the parent "
                    "lists")
    name_to_index = {t.name: t.index for t in meta.tables}
    for t in meta.tables:
        a, b = offsets[t.index], offsets[t.index + 1]
        lo, hi = g.parent_offsets[a], g.parent_offsets[b]
        fks = t.foreign_keys
        listed = sum(fk.num_edges for fk in fks)
        if hi - lo != listed:
            checks.fail(G, "graph.parent_ids", f"table {t.name!r} has {hi - lo} parent edges, "
                        f"metadata says {listed}")
            continue
        _check_parent_order(t, g, offsets, [name_to_index[fk.parent_table] for fk in fks],
                            checks)


def _check_parent_order(t: TableMetadata, g: Graph, offsets: np.ndarray, fk_tables: list[int],
                        checks: Checks) -> None:
    """Each row's parents in foreign-key order, each in its key's table; edges per key as in
    the metadata (per parent table when two keys point at the same table: the graph does not
    say which key gave such an edge)."""
    G = fmt.GRAPH_FILE
    a, b = int(offsets[t.index]), int(offsets[t.index + 1])
    keys = np.asarray(fk_tables, dtype=np.intp)
    counts = np.zeros(keys.size, dtype=np.int64)
    v = integrity.first_parent_misorder(g.parent_offsets, g.parent_ids, a, b, offsets[keys],
                                        offsets[keys + 1], counts)
    if v >= 0:
        tables = np.searchsorted(offsets, g.parents(v), side="right") - 1
        checks.fail(G, "graph.parent_order", f"row {v - a} of table {t.name!r} has parents "
                    f"in tables {tables.tolist()}, not one per foreign key in the order of its "
                    f"keys' tables {fk_tables}")
        return
    for table in sorted(set(fk_tables)):
        ks = [k for k, p in enumerate(fk_tables) if p == table]
        counted = int(sum(counts[k] for k in ks))
        recorded = sum(t.foreign_keys[k].num_edges for k in ks)
        if counted != recorded:
            keys = ", ".join(t.foreign_keys[k].column for k in ks)
            checks.fail(G, "graph.foreign_key_edges", f"table {t.name!r}, foreign key(s) "
                        f"{keys}: {counted} edges, metadata says {recorded}")


def _open_table(t: TableMetadata, meta: DatabaseMetadata, maps: FileMaps, checks: Checks,
                full: bool, graph: Graph | None) -> TableData:
    name, n = t.name, t.num_rows
    key_values = key_offsets = None
    if t.primary_key is not None:
        if t.primary_key_type == "integer":
            key_values = maps.array(fmt.key_values_file(name), "<i8", n)
        else:
            rel = fmt.key_offsets_file(name)
            key_offsets = maps.array(rel, "<i8", n + 1)
            vrel = fmt.key_values_file(name)
            mm = maps.raw(vrel)
            nbytes = 0 if mm is None else len(mm)
            if csr.check_offsets(key_offsets, nbytes) >= 0:
                checks.fail(rel, "key.offsets", "string key offsets not monotone from 0 to the "
                            f"size of {vrel}", fatal=True)
            key_values = (np.zeros(0, np.uint8) if mm is None
                          else np.frombuffer(mm, dtype=np.uint8))
        if full:
            _check_keys(key_values, key_offsets, fmt.key_values_file(name), checks)
    columns = []
    for c in t.columns:
        stype = c.stype
        vrel = fmt.column_values_file(name, c.index)
        brel = fmt.column_valid_file(name, c.index)
        values = maps.array(vrel, fmt.VALUE_DTYPES[stype], n)
        bitmap = maps.array(brel, np.uint8, fmt.bitmap_bytes(n))
        limit = None
        if stype == fmt.CATEGORICAL:
            limit = c.cat_emb_count
        elif stype == fmt.TEXT:
            limit = meta.num_texts
        if limit is not None:
            # Null cells hold 0, so the whole array must lie in [0, max(limit, 1)).
            i = csr.check_ids(values, 0, max(limit, 1))
            if i >= 0:
                checks.fail(vrel, f"column.{fmt.STYPE_NAMES[stype]}_range",
                            f"id {int(values[i])} at row {i} is not in [0, {limit})")
        if stype == fmt.BOOLEAN and n and values.max() > 1:
            checks.fail(vrel, "column.boolean_range", "a boolean value other than 0 or 1")
        col = ColumnData(
            name=c.name, table=name, index=c.index, column_id=c.column_id, stype=stype,
            values=values, valid_bitmap=bitmap, num_valid=c.num_valid, mean=c.mean, std=c.std,
            cat_emb_start=c.cat_emb_start, cat_emb_count=c.cat_emb_count,
            categories=c.categories, arrow_type=str(c.arrow_type))
        if full:
            _full_column_checks(col, n, vrel, brel, checks)
        columns.append(col)
    table = TableData(
        name=name, index=t.index, num_rows=n, row_offset=t.row_offset,
        primary_key=t.primary_key, primary_key_type=t.primary_key_type,
        time_column=t.time_column,
        foreign_keys=tuple((fk.column, fk.parent_table) for fk in t.foreign_keys),
        columns=tuple(columns), key_values=key_values, key_offsets=key_offsets)
    if full and graph is not None:
        _check_row_times(table, graph, checks)
    return table


def _first(mask: np.ndarray) -> int:
    """Index of the first True of ``mask``, or -1."""
    i = int(np.argmax(mask)) if mask.size else 0
    return i if mask.size and mask[i] else -1


def _check_keys(values: np.ndarray, offsets: np.ndarray | None, rel: str,
                checks: Checks) -> None:
    """Primary keys are unique; string keys valid UTF-8 each."""
    if offsets is not None:
        _check_strings(values, offsets, rel, "key", "key of row", checks)
        return
    if values.shape[0] < 2:
        return
    try:  # the build's own check
        check_unique_ints(values, "primary keys", (int(values.min()), int(values.max())))
    except DataError as exc:
        checks.fail(rel, "key.unique", exc.message)


def _check_strings(data: np.ndarray, offsets: np.ndarray, rel: str, kind: str, what: str,
                   checks: Checks) -> None:
    """Strings (offsets already checked) each valid UTF-8 on its own, and all distinct."""
    i = int(integrity.first_bad_utf8(data, offsets))
    if i >= 0:
        a, b = int(offsets[i]), int(offsets[i + 1])
        checks.fail(rel, f"{kind}.utf8", f"{what} {i} (bytes {a}..{b - 1}) is not valid UTF-8 "
                    "on its own")
    n = offsets.shape[0] - 1
    if n < 2:
        return
    hashes = np.empty(n, dtype=np.int64)
    kk.hash_strings(data, offsets, hashes)
    slots = np.full(kk.table_size(n), -1, dtype=fmt.graph_id_dtype(n))
    i, j = (int(x) for x in integrity.first_duplicate_string(data, offsets, hashes, slots))
    if i >= 0:
        shown = bytes(data[offsets[i]:offsets[i + 1]][:64])
        checks.fail(rel, f"{kind}.unique", f"{what} {j} and {i} are the same ({shown!r}); "
                    "they must be distinct")


def _check_row_times(table: TableData, graph: Graph, checks: Checks) -> None:
    """graph.bin's row times of the table: the time column's values, NO_TIME for a null, and
    NO_TIME throughout for a table without a time column."""
    times = graph.row_times[table.row_offset:table.row_offset + table.num_rows]
    if table.time_column is None:
        i = _first(times != fmt.NO_TIME)
        source = "the table has no time column"
    else:
        col = next((c for c in table.columns if c.name == table.time_column), None)
        if col is None or col.stype != fmt.TIMESTAMP:
            return  # a metadata failure already
        i = _first(times != np.where(col.valid, col.values, fmt.NO_TIME))
        source = f"time column {table.time_column!r} (NO_TIME for a null)"
    if i >= 0:
        checks.fail(fmt.GRAPH_FILE, "graph.row_times", f"row_times of row {i} of table "
                    f"{table.name!r} is {int(times[i])}, not as {source} says")


def _full_column_checks(col: ColumnData, n: int, vrel: str, brel: str, checks: Checks) -> None:
    if n % 8 and col.valid_bitmap.size and col.valid_bitmap[-1] >> (n % 8):
        checks.fail(brel, "column.bitmap_padding", "padding bits after the last row are not 0")
    valid = col.valid
    if int(valid.sum()) != col.num_valid:
        checks.fail(brel, "column.num_valid", f"{int(valid.sum())} valid rows, metadata says "
                    f"{col.num_valid}")
    if np.any(col.values[~valid] != 0):
        checks.fail(vrel, "column.null_values", "a null cell holds a value other than 0")
    if col.stype == fmt.NUMERIC:
        i = int(integrity.first_all_bits(col.values.view(np.uint64), integrity.F64_EXPONENT))
        if i >= 0:
            checks.fail(vrel, "column.finite", f"row {i} holds {col.values[i]} (NaN and "
                        "infinities are stored as nulls)")
            return
    if col.stype in (fmt.NUMERIC, fmt.TIMESTAMP):
        _check_stats(col, valid, vrel, checks)


# Relative tolerance of a column's mean and std against a recount (the same Welford update
# in the same order, so any difference is rounding at most).
STATS_RTOL = 1e-9


def _check_stats(col: ColumnData, valid: np.ndarray, vrel: str, checks: Checks) -> None:
    """The metadata's mean and std are those of the column's non-null values (std 1.0 when
    it would be 0, and mean 0.0 when there are no values)."""
    state = welford_state()
    welford_update(col.values, valid, state)
    mean, std = column_stats(state)
    scale = abs(mean) + std
    if not (abs(float(col.mean) - mean) <= STATS_RTOL * scale
            and abs(float(col.std) - std) <= STATS_RTOL * std):
        checks.fail(vrel, "column.stats", f"metadata says mean {col.mean!r}, std {col.std!r}; "
                    f"the values give {mean!r}, {std!r}")


def _open_texts(meta: DatabaseMetadata, maps: FileMaps, checks: Checks, full: bool):
    offsets = maps.array(fmt.TEXT_OFFSETS_FILE, "<i8", meta.num_texts + 1)
    mm = maps.raw(fmt.TEXT_DATA_FILE)
    data = np.zeros(0, np.uint8) if mm is None else np.frombuffer(mm, dtype=np.uint8)
    if csr.check_offsets(offsets, data.size) >= 0:
        checks.fail(fmt.TEXT_OFFSETS_FILE, "texts.offsets", "offsets not monotone from 0 to the "
                    f"size of {fmt.TEXT_DATA_FILE}", fatal=True)
    if full:
        _check_strings(data, offsets, fmt.TEXT_DATA_FILE, "texts", "text", checks)
    return offsets, data


def _open_task(task: TaskMetadata, table: TableData, maps: FileMaps, checks: Checks, full: bool,
               graph: Graph | None) -> TaskData:
    name, n = task.name, task.num_seeds
    arrays = {stem: maps.array(fmt.task_file(name, stem), dtype, n) for stem, dtype in fmt.TASK_ARRAYS}
    anchor_rel = fmt.task_file(name, "anchor_row")
    i = csr.check_ids(arrays["anchor_row"], 0, table.num_rows)
    if i >= 0:
        checks.fail(anchor_rel, "task.anchor_row", f"row {int(arrays['anchor_row'][i])} at seed {i} "
                    f"is not in [0, {table.num_rows})", fatal=True)
    if full:
        a = arrays["anchor_row"]
        if n > 1 and not np.all(a[1:] > a[:-1]):
            checks.fail(anchor_rel, "task.order", "anchor rows are not strictly ascending")
        col = table.column(task.target_column)
        if not np.array_equal(a, np.flatnonzero(col.valid)):
            checks.fail(anchor_rel, "task.seeds", "seeds are not the rows with a non-null target")
        elif not np.array_equal(arrays["target"], col.values[a].astype(np.float64)):
            checks.fail(fmt.task_file(name, "target"), "task.target", "targets differ from the "
                        "target column's values")
        if not np.all(arrays["target_valid"] == 1):
            checks.fail(fmt.task_file(name, "target_valid"), "task.target_valid",
                        "target_valid is not 1 for every seed")
        if graph is not None and not np.array_equal(
                arrays["obs_time"], graph.row_times[table.row_offset + a]):
            checks.fail(fmt.task_file(name, "obs_time"), "task.obs_time", "observation times "
                        "differ from the anchor rows' times")
    target_valid = arrays["target_valid"].view(bool)
    return TaskData(name=name, index=task.index, table=task.table,
                    target_column=task.target_column, target_stype=task.target_stype,
                    anchor_row=arrays["anchor_row"], obs_time=arrays["obs_time"],
                    target=arrays["target"], target_valid=target_valid, rules=task.rules)


def open_database(path: str | os.PathLike[str], verify_hashes: bool = False) -> Database:
    """Open a database directory read-only (see the module doc). Raises :class:`DatabaseError`."""
    checks = Checks(collect=False, root=Path(path))
    db = _open(Path(path), checks, full=False, verify_hashes=verify_hashes)
    assert db is not None
    return db


def check_database(path: str | os.PathLike[str], verify_hashes: bool = True) -> list[Failure]:
    """Every failed check of a database (empty when it is intact): hashes and full structure."""
    checks = Checks(collect=True, root=Path(path))
    try:
        db = _open(Path(path), checks, full=True, verify_hashes=verify_hashes)
    except Stop:
        db = None
    if db is not None:
        db.close()
    return checks.failures
