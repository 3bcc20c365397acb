"""``preprocess``: a relational Parquet database into a verified, memory-mappable directory.

Stages (each timed and reported; see ``docs/database_format.md`` for the output layout):

1. ``scan``: open every table's Parquet footers, check the schema against them, plan the
   columns (string columns without a type override are read once to infer categorical vs
   text). Nothing is written before this passes.
2. ``keys``: the primary keys (checked: no null, no duplicate) of the tables that a table at
   the same or an earlier position refers to, written to ``tables/<t>/key.*``; tables a
   foreign key refers to keep a key index (``dlkit.db.write.primary_keys``). The other tables' keys are
   read the same way during their own pass in stage 3.
3. ``tables``: one pass per table over all its other columns (``dlkit.db.write.table_pass``), in
   record batches decoded on Arrow's threads by one reader that runs on from table to table up
   to ``READ_AHEAD_BYTES`` ahead (``STARTUP_READ_AHEAD_BYTES`` while the kernels still load;
   ``dlkit.db.write.source.ReadAhead``): the time column gives the row times; foreign keys are
   resolved to global parent ids (null -> no edge; dangling -> counted, then dropped or an
   error) and appended to the child -> parents CSR at once; every feature column is converted
   and appended to its values file and validity bitmap, with streaming statistics (row-order
   Welford, independent of batch size), categories (numbered in sorted order at the end of the
   table) and global text ids (numbered in order of first appearance: tables in order, rows in
   order, a row's text cells in column order); new texts are embedded as they appear; task
   seeds are appended as their rows go by.
4. ``graph``: the parent -> children CSR, a bucketed counting sort (``dlkit.core.csr``), and
   ``graph.bin`` (``dlkit.db.write.graph_writer``).
5. ``embeddings``: column and category embeddings (text embedding time from stage 3 is
   counted here too).
6. ``manifest``: ``metadata.json``, then the file map and ``manifest.json``. Every file was
   hashed and written by background threads as it was produced (``dlkit.db.write.hashing``), so
   this stage only waits for the last chunks.
7. ``commit``: fsync (each file was already flushed in the background once complete), then
   the atomic rename into place (``dlkit.atomic``).

Memory: the working arrays are the large part, all linear in the input: row times and both
CSRs, about ``16 V + 18 E`` bytes at the peak of the graph stage (V rows, E edges; up to
``24 V + 26 E`` with the int64 ids and offsets of graphs beyond 2^31 rows or edges; the edge
arrays are sized for the most edges there could be, every foreign key non-null, and faulted
in by a helper thread while the first tables stream by), the primary keys of the table in
its pass (8 bytes per row for integer keys), the key indexes of the tables a foreign key
refers to (4 bytes per key value in the key range of integer keys, 8 beyond 2^31 rows; string
keys with their bytes and a 32-byte slot per two keys at least), the provisional ids of
categorical columns and targets (4 and 8 bytes per row), and the distinct texts seen so far
with their index. They come
from one :class:`dlkit.db.write.scratch.Arrays`: in memory while the live ones fit
``memory_budget``, spilled to memory-mapped scratch files in the build directory beyond it
(the page cache's pages, written to disk under memory pressure), the array written at random
(the in-degree counts) asked for first. Which arrays spill never changes the bytes written.
Beside them: a few record batches (up to ``STARTUP_READ_AHEAD_BYTES`` of them at the start, a
sixteenth of the budget at most), the writer's backlog and the loaded kernels.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa

from dlkit.atomic import AtomicDirectory, check_target
from dlkit.core import csr
from dlkit.core.stats import (
    first_uses,
    gather_seeds,
    map_entries,
    remap_ids,
    welford_state,
    welford_update,
)
from dlkit.db import format as fmt
from dlkit.db.aggregates import AggregateMetadata
from dlkit.db.keys import check_unique_ints
from dlkit.db.metadata_records import TaskMetadata
from dlkit.db.output import DATABASE
from dlkit.db.schema.spec import SCHEMA_FILE, Schema, load_schema
from dlkit.db.write.aggregates import check_columns as check_aggregate_columns
from dlkit.db.write.aggregates import write_aggregates
from dlkit.db.write.convert import dictionary_parts, to_micros, to_numeric, to_string_buffers
from dlkit.db.write.embed import Embedder, HashedNgramEmbedder, embed_texts, load_embedder
from dlkit.db.write.graph_writer import GraphWriter
from dlkit.db.write.hashing import Hasher
from dlkit.db.write.metadata import (
    database_metadata,
    num_schema_embeddings,
    write_manifest,
    write_schema_embeddings,
)
from dlkit.db.write.plan import TablePlan, infer_string_column, plan_tables, where
from dlkit.db.write.primary_keys import KeyIndex, read_primary_keys
from dlkit.db.write.report import (
    PreprocessReport,
    Progress,
    StageReport,
    TableReport,
    timed_stage,
)
from dlkit.db.write.scratch import Arrays, default_memory_budget
from dlkit.db.write.source import DEFAULT_BATCH_ROWS, ReadAhead
from dlkit.db.write.strings import StringColumn
from dlkit.db.write.table_pass import TablePassContext, read_job, stream_table
from dlkit.db.write.texts import TextIndex, TextStore
from dlkit.errors import InvalidArgumentError, SchemaError

__all__ = ["ON_DANGLING", "STAGES", "PreprocessReport", "Progress", "StageReport", "preprocess"]

ON_DANGLING = fmt.ON_DANGLING
# Decoded record batches held ahead of the tables pass (at least two are always allowed):
# a few batches of a wide table, more of a narrow one. Much more measured slower: batches
# decoded long before use are read back from memory instead of cache.
READ_AHEAD_BYTES = 32 << 20
# ... and while the kernels load (the pass cannot start before them): the core the loading
# leaves free decodes the batches the pass will want next (6% faster at 20 M edges).
STARTUP_READ_AHEAD_BYTES = 192 << 20
STAGES = ("scan", "keys", "tables", "graph", "embeddings", "manifest", "commit")


class _Builder:
    def __init__(self, input_dir: Path, schema: Schema, *, on_dangling: str, batch_rows: int,
                 embedder: Embedder, progress: Progress, memory_budget: int,
                 kernels_ready: threading.Event):
        self.input_dir = input_dir
        self.schema = schema
        self.on_dangling = on_dangling
        self.batch_rows = batch_rows
        self.embedder = embedder
        self.progress = progress
        self.memory_budget = memory_budget
        self.kernels_ready = kernels_ready
        self.stages = {name: StageReport(name) for name in STAGES}
        self.warnings: list[str] = []
        self.plans: list[TablePlan] = []
        self.indexes: dict[str, KeyIndex] = {}
        self.num_rows = 0
        self.num_edges = 0
        self.num_categories = 0
        self.task_meta: list[TaskMetadata] = []
        self.graph_writer: GraphWriter | None = None  # the tables pass's, until the build ends
        self.arrays: Arrays | None = None  # the working arrays, once the build runs
        self.aggregates: tuple[AggregateMetadata, ...] = ()  # [aggregates]' cells

    @contextmanager
    def _stage(self, name: str, total: int | None, unit: str = "rows") -> Iterator[StageReport]:
        arrays = self.arrays
        before = arrays.spilled if arrays is not None else 0
        try:
            with timed_stage(self.progress, self.stages[name], total, unit) as report:
                yield report
        finally:
            if arrays is not None:
                self.stages[name].spilled += arrays.spilled - before

    # -- 1: scan ----------------------------------------------------------------------------

    def scan(self) -> None:
        with self._stage("scan", len(self.schema.tables), "tables") as st:
            self.plans = plan_tables(self.input_dir, self.schema)
            self.progress.advance(len(self.plans))
            st.rows = sum(p.num_rows for p in self.plans)
            st.columns = sum(len(p.columns) for p in self.plans)
        pending = [(p, c) for p in self.plans for c in p.columns if c.stype < 0]
        if pending:
            with self._stage("scan", len(pending), "columns"):
                for plan, col in pending:
                    col.stype = fmt.STYPE_BY_NAME[
                        infer_string_column(plan.source, col.name, self.batch_rows)]
                    col.inferred = True
                    self.progress.advance(1)
        by_name = {p.name: p for p in self.plans}
        check_aggregate_columns(self.schema.aggregates, self.plans)
        for task in self.schema.tasks:
            col = next(c for c in by_name[task.table].columns if c.name == task.target)
            if col.stype not in fmt.TARGET_STYPES:
                raise SchemaError(f"task {task.name!r}: {where(task.table, task.target)} is "
                                  f"{fmt.STYPE_NAMES[col.stype]}; targets must be numeric, "
                                  "boolean, timestamp or categorical")
        column_id = 0
        for plan in self.plans:
            for col in plan.columns:
                col.column_id = column_id
                column_id += 1
        self.num_rows = sum(p.num_rows for p in self.plans)

    # -- 2: keys ----------------------------------------------------------------------------

    def keys(self, hasher: Hasher, arrays: Arrays) -> None:
        """Read the keys a table's pass needs before it starts: those of tables that a table
        at the same or an earlier position refers to. Every other table's keys are read in
        its own pass (one pass over its file, decoded in parallel with its other columns)."""
        position = {p.name: i for i, p in enumerate(self.plans)}
        self.referenced = {f.parent for p in self.plans for f in p.foreign_keys}
        needed_first = {f.parent for p in self.plans for f in p.foreign_keys
                        if position[f.parent] >= position[p.name]}
        keyed = [p for p in self.plans if p.name in needed_first]
        with self._stage("keys", sum(p.num_rows for p in keyed)) as st:
            for plan in keyed:
                index, nbytes = read_primary_keys(plan, self.batch_rows, hasher, self.progress,
                                                  arrays)
                assert index is not None, "referenced (the default): the index is kept"
                self.indexes[plan.name] = index
                st.bytes += nbytes
                st.rows += plan.num_rows
                st.columns += 1
        self.keys_in_pass = {p.name for p in self.plans
                             if p.primary_key is not None and p.name not in needed_first}

    # -- 3: tables --------------------------------------------------------------------------

    def tables(self, hasher: Hasher, arrays: Arrays) -> None:
        with self._stage("tables", self.num_rows) as st:
            self.graph_writer = GraphWriter(self.plans, hasher, arrays)
            self.texts = TextStore(hasher, self.embedder, arrays)
            ctx = TablePassContext(
                plans={p.name: p for p in self.plans}, indexes=self.indexes,
                schema=self.schema, graph=self.graph_writer, texts=self.texts, hasher=hasher,
                arrays=arrays, progress=self.progress, batch_rows=self.batch_rows,
                on_dangling=self.on_dangling, keys_in_pass=self.keys_in_pass,
                referenced=self.referenced)
            cat_start = 0
            keys = self.stages["keys"]
            jobs = [read_job(plan, self.keys_in_pass) for plan in self.plans]
            # a small budget also gets a smaller head start (the bytes are the same)
            startup = min(STARTUP_READ_AHEAD_BYTES,
                          max(READ_AHEAD_BYTES, self.memory_budget // 16))
            with ReadAhead(jobs, self.batch_rows, READ_AHEAD_BYTES, startup_budget=startup,
                           consumer_ready=self.kernels_ready) as ahead:
                for i, (plan, job) in enumerate(zip(self.plans, jobs)):
                    task_meta, warnings, key_bytes = stream_table(plan, ctx, job,
                                                                  ahead.batches(i))
                    if plan.name in self.keys_in_pass:
                        keys.rows += plan.num_rows
                        keys.columns += 1
                        keys.bytes += key_bytes
                    self.task_meta.extend(task_meta)
                    self.warnings.extend(warnings)
                    for col in plan.columns:
                        if col.stype == fmt.CATEGORICAL:
                            col.cat_emb_start = cat_start
                            cat_start += len(col.filled_categories())
                    st.rows += plan.num_rows
                    st.columns += len(plan.columns)
                    st.edges += sum(f.num_edges for f in plan.foreign_keys)
            self.texts.close()
            self.task_meta.sort(key=lambda t: t.index)
            self.num_categories = cat_start
            st.bytes = sum(f.size for f in hasher.files.values()) - self.stages["keys"].bytes
        self.indexes.clear()
        emb = self.stages["embeddings"]
        emb.seconds += self.texts.embed_seconds
        self.stages["tables"].seconds -= self.texts.embed_seconds
        emb.bytes += hasher.files[fmt.TEXT_EMBEDDINGS_FILE].size
        emb.rows += self.texts.count
        self.num_edges = sum(f.num_edges for p in self.plans for f in p.foreign_keys)

    # -- 4: graph ---------------------------------------------------------------------------

    def graph(self) -> None:
        with self._stage("graph", self.num_edges, "edges") as st:
            writer = self.graph_writer
            assert writer is not None, "the tables pass made it"
            if writer.num_edges != self.num_edges:
                raise AssertionError(f"edge count {writer.num_edges} != {self.num_edges}")
            writer.finish()
            if self.schema.aggregates.any:
                self._aggregates(writer)
            self.progress.advance(self.num_edges)
            st.edges = self.num_edges
            st.rows = self.num_rows
            st.bytes = writer.size

    def _aggregates(self, writer: GraphWriter) -> None:
        """The as-of aggregate files (``[aggregates]``), from the files written so far."""
        hasher, arrays = writer.hasher, self.arrays
        assert arrays is not None, "the build runs"
        hasher.flush()
        self.aggregates = write_aggregates(
            hasher.root, self.schema.aggregates, self.plans, hasher, arrays, self.embedder,
            self.num_edges, writer.id_dtype, writer.offset_dtype)

    # -- 5: embeddings ----------------------------------------------------------------------

    def embeddings(self, hasher: Hasher) -> None:
        # the texts were embedded in the tables pass; here the column and category names are
        # embedded
        with self._stage("embeddings", num_schema_embeddings(self.plans), "names") as st:
            write_schema_embeddings(self.plans, self.embedder, hasher, self.progress, st)

    # -- 6: manifest ------------------------------------------------------------------------

    def manifest(self, root: Path, hasher: Hasher) -> bytes:
        with self._stage("manifest", None, "files") as st:
            metadata = database_metadata(
                self.schema, self.plans, num_texts=self.texts.count, tasks=self.task_meta,
                embedder=self.embedder, on_dangling=self.on_dangling,
                aggregates=self.aggregates)
            digest, self.total_bytes = write_manifest(root, hasher, metadata, st)
            self.progress.advance(1)
        return digest

    def run(self, out: AtomicDirectory, root: Path, fsync: bool) -> bytes:
        scratch = root / "_scratch"
        hasher = Hasher(root, sync=fsync)
        try:
            arrays = self.arrays = Arrays(scratch, self.memory_budget,
                                          on_spill=self.progress.spilled)
            self.keys(hasher, arrays)
            self.tables(hasher, arrays)
            self.graph()
            self.embeddings(hasher)
            if scratch.exists():
                shutil.rmtree(scratch)
            digest = self.manifest(root, hasher)
        finally:
            self.graph_writer = None
            hasher.close()
        with self._stage("commit", None, "steps"):
            out.commit(fsync=fsync)
        return digest


def _warm_up(embedder: Embedder, done: threading.Event, strict: bool = False) -> None:
    """Load every kernel's compiled code (numba's cache) on tiny inputs of the real types
    (strided batch slices, arrays over maps, ...), on a background thread while the input is
    scanned; the first real call then costs nothing. Sets ``done`` at the end."""
    try:
        # in the order a pass first needs them: a table's columns, its keys, the lookups of
        # a table with foreign keys, its task seeds, then the graph stage's kernels
        state = welford_state()
        welford_update(*to_micros(pa.array([1, None], pa.timestamp("us")), ""), state)
        numbers, _ = to_numeric(pa.array([1.0, None]))  # read-only, as every converted batch
        welford_update(numbers, np.ones(2, bool), state)
        to_numeric(pa.array([1.0, 2.0]))  # no null: the same kernel with an empty bitmap
        indices, _, valid = dictionary_parts(pa.array(["a", "a"]), "")
        first_uses(indices, valid, np.full(1, -1, np.int64))
        map_entries(indices, np.zeros(1, np.int32), valid, np.int32(-1), np.empty(2, np.int32))
        for keys in (np.arange(3, dtype=np.int64), np.array([0, 1 << 40], dtype=np.int64)):
            KeyIndex.build_int(keys, "").lookup(pa.array([1, 5]), 0, np.empty(2, np.int64), "")
        strings = StringColumn(Arrays(Path(tempfile.gettempdir()), budget=1 << 30))
        strings.extend(*to_string_buffers(pa.array(["a", "b"]))[:2])
        KeyIndex.build_str(strings.data, strings.offsets, "").lookup(
            pa.array(["a", None]), 0, np.empty(2, np.int64), "")
        TextIndex(strings.arrays).encode_row_major([pa.array(["a", None, "bb"])] * 2, ["", ""])
        # the id and offset dtype of every graph below 2^31 rows and edges
        ids, offsets = fmt.graph_id_dtype(1), fmt.graph_offset_dtype(1)
        po = np.zeros(4, offsets)
        pi = np.zeros(3, ids)
        parents = np.array([[0, -1, 0], [1, 2, 0]], dtype=np.int64)
        # a full batch: a C-contiguous slice (5 edges)
        csr.append_parent_csr(parents, 0, 0, po, np.zeros(6, ids))
        csr.append_parent_csr(parents[:, :2], 1, 0, po, pi)  # a shorter one: strided
        gather_seeds(valid, 0, np.zeros(2, np.int64), numbers, np.empty(2, np.int64),
                     np.empty(2, np.int64), np.empty(2))
        # out of order (ascending keys need no index): the dense and the hash check
        for keys in (np.array([2, 0, 1], dtype=np.int64), np.array([1 << 40, 0], dtype=np.int64)):
            check_unique_ints(keys, "")
        remap_ids(np.zeros(2, np.int32), np.zeros(1, np.int32))
        remap_ids(np.zeros(2, np.float64), np.zeros(1, np.int32))
        csr.transpose_csr(po, pi, np.zeros(3, np.int64), np.zeros(4, offsets),
                          np.empty(3, ids), np.empty(3, np.int64), threads=1)
        csr.bucket_histogram(pi, np.int64(0), np.int64(3), 6, np.zeros(1, np.int32),
                             np.zeros((1, 1), np.int64)[0])
        embed_texts(embedder, ["warm up"]) if isinstance(embedder, HashedNgramEmbedder) else None
    except Exception:
        # Warming up is only an optimisation, so a build never fails for it; but a kernel
        # whose signature changed would silently lose its warm-up: the tests call this with
        # ``strict`` (tests/db/write/test_warm_up.py), where any failure is raised.
        if strict:
            raise
    finally:
        done.set()


def preprocess(
    input_dir: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    schema: str | os.PathLike[str] | Schema | None = None,
    overwrite: bool = False,
    on_dangling: str = "drop",
    batch_rows: int = DEFAULT_BATCH_ROWS,
    embedder: Embedder | None = None,
    progress: Progress | None = None,
    fsync: bool = True,
    memory_budget: int | None = None,
) -> PreprocessReport:
    """Build the database for ``input_dir`` at ``output`` (atomically; see module doc).

    ``schema`` defaults to ``input_dir/dlkit.toml``. Raises :class:`SchemaError` or
    :class:`DataError` (nothing written) for bad input, :class:`OutputError` when ``output``
    exists (without ``overwrite``; with it, when it is no database or holds a file its
    manifest does not list) or cannot be written.
    """
    started = time.perf_counter()
    if on_dangling not in ON_DANGLING:
        raise InvalidArgumentError(f"on_dangling must be one of {ON_DANGLING}, got {on_dangling!r}")
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise InvalidArgumentError(f"batch_rows must be a positive integer, got {batch_rows!r}")
    budget = default_memory_budget() if memory_budget is None else int(memory_budget)
    input_path = Path(input_dir)
    if not input_path.is_dir():
        raise SchemaError("input is not a directory of Parquet files", path=input_path)
    schema_path: Path | None = None  # the file a schema problem found in the data is in
    if not isinstance(schema, Schema):
        schema_path = Path(schema) if schema is not None else input_path / SCHEMA_FILE
        schema = load_schema(schema_path, default_name=input_path.resolve().name)
    embedder = embedder if embedder is not None else load_embedder(None)
    target = Path(output)
    check_target(target.absolute(), overwrite, DATABASE)
    kernels_ready = threading.Event()
    builder = _Builder(input_path, schema, on_dangling=on_dangling, batch_rows=batch_rows,
                       embedder=embedder, progress=progress or Progress(), memory_budget=budget,
                       kernels_ready=kernels_ready)
    # Not a daemon: a build that ends early (a busy target, a schema error) while the warm-up
    # still compiles would otherwise exit with the thread inside numba's compiler, which can
    # abort the process; the interpreter waits for it instead (at most the warm-up's rest).
    threading.Thread(target=_warm_up, args=(embedder, kernels_ready), name="dlkit-warm-up",
                     daemon=False).start()
    try:
        builder.scan()
    except SchemaError as exc:  # a schema entry the data contradicts: name the schema's file
        if exc.path is None and schema_path is not None:
            raise SchemaError(exc.message, path=schema_path) from None
        raise
    out = AtomicDirectory(target, DATABASE, overwrite=overwrite)
    with out as root:
        digest = builder.run(out, root, fsync)
    return PreprocessReport(
        output=str(target),
        database_id=schema.name,
        database_hash=digest.hex(),
        num_tables=len(builder.plans),
        num_rows=builder.num_rows,
        num_edges=builder.num_edges,
        num_columns=sum(len(p.columns) for p in builder.plans),
        num_texts=builder.texts.count,
        num_categories=builder.num_categories,
        num_tasks=len(schema.tasks),
        size_bytes=builder.total_bytes,
        seconds=time.perf_counter() - started,
        stages=[builder.stages[name] for name in STAGES],
        tables=[TableReport(
            name=p.name, rows=p.num_rows, columns=len(p.columns),
            edges=sum(f.num_edges for f in p.foreign_keys),
            dangling=sum(f.num_dangling for f in p.foreign_keys),
        ) for p in builder.plans],
        dangling={f"{p.name}.{f.column}": f.num_dangling for p in builder.plans
                  for f in p.foreign_keys},
        warnings=builder.warnings,
        memory_budget=budget,
        spilled_bytes=builder.arrays.spilled if builder.arrays is not None else 0,
    )
