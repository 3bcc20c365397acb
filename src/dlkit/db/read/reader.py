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

The objects returned live in :mod:`dlkit.db.read.mapped`, the failure bookkeeping in
:mod:`dlkit.db.failures`; both are re-exported here. ``metadata.json`` is parsed once, into the
records of :mod:`dlkit.db.metadata_records`, which validate it as they are built.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from dlkit.core import csr, integrity
from dlkit.core import keys as kk
from dlkit.core.jit import cheaper_interpreted, interpreted
from dlkit.core.stats import column_stats, welford_state, welford_update
from dlkit.db import format as fmt
from dlkit.db.failures import Checks, Failure, Stop
from dlkit.db.keys import check_unique_ints, decode_key
from dlkit.db.manifest import list_files
from dlkit.db.metadata_records import DatabaseMetadata, TableMetadata, TaskMetadata
from dlkit.db.read.aggregates import check_aggregates, open_aggregates
from dlkit.db.read.checks import check_metadata_rules, load_json
from dlkit.db.read.file_checks import (
    FilesChecked,
    Listing,
    begin_checks,
    check_files,
    check_hashes,
    require_directory,
    start_hashing,
)
from dlkit.db.read.graph_checks import GraphChecks
from dlkit.db.read.mapped import ColumnData, Database, FileMaps, Graph, TableData, TaskData
from dlkit.errors import DataError

THREADED_CHECK_EDGES = csr.THREADED_MIN_EDGES  # fewer: both directions on this thread

__all__ = ["CheckReport", "ColumnData", "Database", "Failure", "Graph", "TableData", "TaskData",
           "check_database", "inspect_database", "open_database"]


def _open(root: Path, checks: Checks, full: bool, verify_hashes: bool) -> Database | None:
    """Every check in turn: the manifest, the hashes (all files at once), the structure."""
    root = Path(root)
    require_directory(root, checks)
    listing = check_files(root, checks, full, list_files(root))
    if verify_hashes:
        check_hashes(root, checks, listing, start_hashing(root, listing))
    with interpreted(_small(listing)):
        return _open_checked(root, checks, full, listing)


def _open_checked(root: Path, checks: Checks, full: bool, listing: Listing) -> Database | None:
    """The structure checks (the manifest's own already done) and the database's objects."""
    file_map = listing.file_map
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
    release = _Release(maps, full)
    graph_checks = None
    try:
        graph, graph_checks = _open_graph(meta, maps, checks, full)
    except Stop:
        ok, graph = False, None
    graph_maps = release.take()
    try:
        tables = []
        for t in meta.tables:
            try:
                tables.append(_open_table(t, meta, maps, checks, full, graph))
            except Stop:
                ok = False
            release.drop()
        try:
            texts = _open_texts(meta, maps, checks, full)
        except Stop:
            ok, texts = False, None
        release.drop()
    finally:
        if graph_checks is not None:
            graph_checks.join()
    release.drop(graph_maps)
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
    aggregates = None
    try:
        aggregates = open_aggregates(meta, maps, checks)
    except Stop:
        ok = False
    if full and ok and aggregates is not None and graph is not None:
        check_aggregates(aggregates, meta, graph, tables, checks)
    tasks = []
    if ok:
        by_name = {t.name: t for t in tables}
        for task in meta.tasks:
            try:
                tasks.append(_open_task(task, by_name[task.table], maps, checks, full, graph))
            except Stop:
                ok = False
            release.drop()
    if not ok or len(checks.failures) > failures_before and checks.collect:
        maps.close()
        return None
    assert graph is not None, "ok: the graph opened"
    assert texts is not None, "ok: the texts opened"
    return Database(root, meta, file_map, listing.recorded, maps, tuple(tables), graph, tuple(tasks),
                    embeddings, texts, aggregates=aggregates)


def _first_bad_ids(offsets: np.ndarray, ids: np.ndarray, num_edges: int,
                   num_rows: int) -> tuple[int, int]:
    """The first bad offset and the first bad id of one CSR direction (-1 for none)."""
    return (int(csr.check_offsets(offsets, num_edges)), int(csr.check_ids(ids, 0, num_rows)))


class _Release:
    """With the full checks (verify): after each part of the database, drop the pages of the
    files it mapped from this process (the page cache keeps them; a later check that reads
    one maps it again), so the resident set holds about one part at a time, not the whole
    database."""

    def __init__(self, maps: FileMaps, full: bool):
        self.maps, self.full, self.done = maps, full, 0

    def take(self) -> list[mmap.mmap]:
        """The files mapped since the last call (or :meth:`drop`)."""
        new = self.maps.mmaps[self.done:]
        self.done = len(self.maps.mmaps)
        return new

    def drop(self, mms: list[mmap.mmap] | None = None) -> None:
        """Drop the pages of ``mms`` (default: the files mapped since the last call)."""
        for mm in self.take() if mms is None else mms:
            if self.full:
                mm.madvise(mmap.MADV_DONTNEED)


def _open_graph(meta: DatabaseMetadata, maps: FileMaps, checks: Checks,
                full: bool) -> tuple[Graph, GraphChecks | None]:
    """The graph after its cheap checks, and its full checks (``full``) started."""
    G = fmt.GRAPH_FILE
    V, E, T = meta.num_rows, meta.num_edges, meta.num_tables
    mm = maps.raw(G)
    size = 0 if mm is None else len(mm)
    if size < fmt.GRAPH_HEADER_SIZE:
        checks.fail(G, "graph.size", f"{size} bytes: shorter than the {fmt.GRAPH_HEADER_SIZE}-byte "
                    "header", fatal=True)
    assert mm is not None, "a missing graph file failed its size check"
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
    # Each direction's checks on a thread of their own (nogil kernels): on a database larger
    # than memory they read the graph from disk, a few GB. A small graph's are checked in
    # less time than a thread takes to start.
    sides = csr.side_by_side(partial(_first_bad_ids, a["parent_offsets"], a["parent_ids"], E, V),
                             partial(_first_bad_ids, a["child_offsets"], a["child_ids"], E, V),
                             threaded=E >= THREADED_CHECK_EDGES)
    for (off_name, ids_name), (bad_offset, bad_id) in zip(
            (("parent_offsets", "parent_ids"), ("child_offsets", "child_ids")), sides):
        if bad_offset >= 0:
            checks.fail(G, f"graph.{off_name}", f"offsets not monotone from 0 to {E} (at row "
                        f"{bad_offset})")
            bad = True
        if bad_id >= 0:
            checks.fail(G, f"graph.{ids_name}", f"id {int(a[ids_name][bad_id])} at edge {bad_id} "
                        f"is not a row id in [0, {V})")
            bad = True
    i = csr.check_ids(a["row_table"], 0, T)
    if i >= 0:
        checks.fail(G, "graph.row_table", f"table index {int(a['row_table'][i])} at row {i} is not "
                    f"in [0, {T})")
        bad = True
    if bad:
        raise Stop()
    graph = Graph(**a)
    if not full:
        return graph, None
    return graph, GraphChecks(meta, graph, np.frombuffer(mm, dtype=np.uint8), layout, checks)


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
            _check_keys(key_values, key_offsets, fmt.key_values_file(name), checks,
                        t.primary_key_part_types)
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
            categories=c.categories, arrow_type=str(c.arrow_type),
            known_after_us=int(c.known_after_us))
        if full:
            _full_column_checks(col, n, vrel, brel, checks)
        columns.append(col)
    table = TableData(
        name=name, index=t.index, num_rows=n, row_offset=t.row_offset,
        primary_key=t.primary_key, primary_key_type=t.primary_key_type,
        primary_key_part_types=t.primary_key_part_types, time_column=t.time_column,
        foreign_keys=tuple((fk.column, fk.parent_table) for fk in t.foreign_keys),
        columns=tuple(columns), key_values=key_values, key_offsets=key_offsets,
        time_unit=t.time_unit, time_position=t.time_position)
    if full and graph is not None:
        _check_row_times(table, graph, checks)
    return table


def _check_keys(values: np.ndarray, offsets: np.ndarray | None, rel: str,
                checks: Checks, part_types: tuple[str, ...] = ()) -> None:
    """Primary keys are unique; string keys valid UTF-8 each; composite keys each the
    encoding of a tuple of their part types (``part_types``)."""
    if offsets is not None and part_types:
        for i in range(offsets.shape[0] - 1):
            raw = bytes(values[offsets[i]:offsets[i + 1]])
            try:
                decode_key(raw, part_types)
            except ValueError as exc:
                checks.fail(rel, "key.composite", f"key of row {i} is not a composite key of "
                            f"types {list(part_types)}: {exc}")
                break
        _check_strings(values, offsets, rel, "key", "key of row", checks, utf8=False)
        return
    if offsets is not None:
        _check_strings(values, offsets, rel, "key", "key of row", checks)
        return
    try:  # the build's own check
        check_unique_ints(values, "primary keys")
    except DataError as exc:
        checks.fail(rel, "key.unique", exc.message)


def _check_strings(data: np.ndarray, offsets: np.ndarray, rel: str, kind: str, what: str,
                   checks: Checks, utf8: bool = True) -> None:
    """Strings (offsets already checked) each valid UTF-8 on its own (unless not ``utf8``),
    and all distinct."""
    i = int(integrity.first_bad_utf8(data, offsets)) if utf8 else -1
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
        values, bitmap = np.zeros(0, np.int64), np.zeros(0, np.uint8)
        source = "the table has no time column"
    else:
        col = next((c for c in table.columns if c.name == table.time_column), None)
        if col is None or col.stype != fmt.TIMESTAMP:
            return  # a metadata failure already
        values, bitmap = col.values, col.valid_bitmap
        source = f"time column {table.time_column!r} (NO_TIME for a null)"
    i = integrity.first_time_mismatch(times, values, bitmap, fmt.NO_TIME)
    if i >= 0:
        checks.fail(fmt.GRAPH_FILE, "graph.row_times", f"row_times of row {i} of table "
                    f"{table.name!r} is {int(times[i])}, not as {source} says")


def _full_column_checks(col: ColumnData, n: int, vrel: str, brel: str, checks: Checks) -> None:
    if n % 8 and col.valid_bitmap.size and col.valid_bitmap[-1] >> (n % 8):
        checks.fail(brel, "column.bitmap_padding", "padding bits after the last row are not 0")
    num_valid, null_value = integrity.null_cells(col.values, col.valid_bitmap)
    if num_valid != col.num_valid:
        checks.fail(brel, "column.num_valid", f"{num_valid} valid rows, metadata says "
                    f"{col.num_valid}")
    if null_value >= 0:
        checks.fail(vrel, "column.null_values", "a null cell holds a value other than 0")
    if col.stype == fmt.NUMERIC:
        i = int(integrity.first_all_bits(col.values.view(np.uint64), integrity.F64_EXPONENT))
        if i >= 0:
            checks.fail(vrel, "column.finite", f"row {i} holds {col.values[i]} (NaN and "
                        "infinities are stored as nulls)")
            return
    if col.stype in (fmt.NUMERIC, fmt.TIMESTAMP):
        _check_stats(col, vrel, checks)


# Relative tolerance of a column's mean and std against a recount (the same Welford update
# in the same order, so any difference is rounding at most).
STATS_RTOL = 1e-9


# Rows per step of the statistics' recount: the validity bits unpacked a step at a time
# (a multiple of 8: whole bitmap bytes).
STATS_STEP_ROWS = 1 << 20


def _check_stats(col: ColumnData, vrel: str, checks: Checks) -> None:
    """The metadata's mean and std are those of the column's non-null values (std 1.0 when
    it would be 0, and mean 0.0 when there are no values)."""
    state = welford_state()
    n = col.values.shape[0]
    for a in range(0, n, STATS_STEP_ROWS):  # the same updates in the same order as one call
        b = min(a + STATS_STEP_ROWS, n)
        valid = np.unpackbits(col.valid_bitmap[a // 8:(b + 7) // 8], count=b - a,
                              bitorder="little").view(bool)
        welford_update(col.values[a:b], valid, state)
    mean, std = column_stats(state)
    scale = abs(mean) + std
    # the metadata checks require both of a numeric or timestamp column
    assert col.mean is not None and col.std is not None
    if not (abs(float(col.mean) - mean) <= STATS_RTOL * scale
            and abs(float(col.std) - std) <= STATS_RTOL * std):
        checks.fail(vrel, "column.stats", f"metadata says mean {col.mean!r}, std {col.std!r}; "
                    f"the values give {mean!r}, {std!r}")


def _open_texts(meta: DatabaseMetadata, maps: FileMaps, checks: Checks,
                full: bool) -> tuple[np.ndarray, np.ndarray]:
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
        col = table.column(task.target_column)
        ascending, seeds, targets, target_valid, times = integrity.task_agreement(
            arrays["anchor_row"], col.valid_bitmap, table.num_rows, col.values, arrays["target"],
            arrays["target_valid"], arrays["obs_time"],
            np.zeros(0, np.int64) if graph is None else graph.row_times, table.row_offset)
        if not ascending:
            checks.fail(anchor_rel, "task.order", "anchor rows are not strictly ascending")
        if not seeds:
            checks.fail(anchor_rel, "task.seeds", "seeds are not the rows with a non-null target")
        elif not targets:
            checks.fail(fmt.task_file(name, "target"), "task.target", "targets differ from the "
                        "target column's values")
        if not target_valid:
            checks.fail(fmt.task_file(name, "target_valid"), "task.target_valid",
                        "target_valid is not 1 for every seed")
        if not times:
            checks.fail(fmt.task_file(name, "obs_time"), "task.obs_time", "observation times "
                        "differ from the anchor rows' times")
    target_valid = arrays["target_valid"].view(bool)
    return TaskData(name=name, index=task.index, table=task.table,
                    target_column=task.target_column, target_stype=task.target_stype,
                    anchor_row=arrays["anchor_row"], obs_time=arrays["obs_time"],
                    target=arrays["target"], target_valid=target_valid, rules=task.rules)


def open_database(path: str | os.PathLike[str], verify_hashes: bool = False) -> Database:
    """Open a database directory read-only (see the module doc). Raises :class:`DatabaseError`
    (``NOT_A_DATABASE`` for a path that is no database, as ``dlkit verify`` says)."""
    from dlkit.db.read.verify import require_database

    require_database(Path(path))
    checks = Checks(collect=False, root=Path(path))
    db = _open(Path(path), checks, full=False, verify_hashes=verify_hashes)
    assert db is not None
    return db


@dataclass(frozen=True)
class CheckReport:
    """What :func:`inspect_database` found: every failure, the database hash manifest.json
    records (``None`` when it could not be read) and every file present, manifest.json
    included (what ``dlkit verify`` counts)."""

    failures: list[Failure]
    database_hash: bytes | None
    files: list[str]


# A database this small is checked sooner by the kernels' Python than numba starts (its import
# and first compiled call, 0.35 s a process): benchmarks/bench_startup.py --crossover measured
# dlkit verify interpreted against compiled at 0.55 s / 0.81 s for 0.8 MiB, 0.80 / 0.74 for
# 1.5 MiB.
INTERPRET_BELOW_BYTES = 1 << 20


def _small(listing: Listing) -> bool:
    """Whether the checks of the database ``listing`` lists run sooner interpreted."""
    size = sum(entry["size"] for entry in listing.file_map.values())
    return cheaper_interpreted(size, INTERPRET_BELOW_BYTES)


def inspect_database(path: str | os.PathLike[str], verify_hashes: bool = True,
                     begun: FilesChecked | None = None) -> CheckReport:
    """Every check of a database, as :func:`check_database`, and what verify reports of it.

    The files are hashed on a thread pool (every core) while the structure checks run; the
    failures come in the order of a sequential run (the manifest's, the hashes', the
    structure's), and a file that cannot be read stops everything after the manifest's
    checks, as it would there. ``begun``: the files' checks already begun
    (:func:`begin_checks` of this path).
    """
    root = Path(path)
    begun = begun or begin_checks(root, verify_hashes)
    checks, listing, job = begun.checks, begun.listing, begun.hashing
    present = list(begun.present)
    if listing is not None:
        structure = Checks(collect=True, root=root)
        try:
            with interpreted(_small(listing)):
                db = _open_checked(root, structure, True, listing)
        except Stop:
            db = None
        except BaseException:
            if job is not None:
                job.cancel()
            raise
        if db is not None:
            db.close()
        try:
            if job is not None:
                check_hashes(root, checks, listing, job)
            checks.failures.extend(structure.failures)
        except Stop:
            pass
    if os.path.lexists(root / fmt.MANIFEST_FILE):
        present.append(fmt.MANIFEST_FILE)  # counted with the rest, as preprocess counts it
    return CheckReport(checks.failures, None if listing is None else listing.recorded, present)


def check_database(path: str | os.PathLike[str], verify_hashes: bool = True) -> list[Failure]:
    """Every failed check of a database (empty when it is intact): hashes and full structure."""
    return inspect_database(path, verify_hashes).failures
