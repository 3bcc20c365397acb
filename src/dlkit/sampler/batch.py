"""Batch construction: seeds of one task to the §3b batch dict (docs/batch_format.md).

``BatchBuilder`` holds read-only views of an open database and its column catalog; ``build``
is a pure function of (task, seed indices, epoch) and the sampler configuration, safe to call
from several threads at once (each call allocates its own outputs and scratch, and the
kernels release the GIL).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import cached_property
from typing import Any

import numpy as np

from dlkit.core.aggregates import Aggregates
from dlkit.core.bfs import (
    CHILD_QUOTA,
    CHILD_RECENT,
    CHILD_UNIFORM,
    RECORD_WIDTH,
    child_edge_records,
    parent_edge_records,
    table_links_of,
)
from dlkit.core.codes import CATEGORICAL
from dlkit.core.collate import build_sequences
from dlkit.core.gather import gather_rows
from dlkit.core.records import (
    BatchOutput,
    ColumnLists,
    Columns,
    Graph,
    RowValues,
    Seeds,
    Tables,
    Task,
    Visits,
    Walk,
)
from dlkit.db.task_rules import TaskRules, rules_of
from dlkit.errors import DatabaseError, InvalidArgumentError, SamplerShutdown
from dlkit.sampler.aggregates import kernel_aggregates
from dlkit.sampler.catalog import (
    ColumnCatalog,
    RowRecords,
    build_catalog,
    readonly_view,
)
from dlkit.sampler.hugepages import memory_path
from dlkit.sampler.labels import LABEL_DTYPES, LabelInfo, labels_of
from dlkit.sampler.shared import PrivateMemory, SegmentSizer, SharedSegment, segment_key
from dlkit.text import unknown_name

MAX_U16_EXTENT = 1 << 16
MAX_RECORD_EDGES = 1 << 31

# key -> (dtype, shape in terms of B, S, R, U, D): exactly the seed's §3b layout.
BATCH_LAYOUT: dict[str, tuple[np.dtype, str]] = {
    "semantic_types": (np.dtype(np.int8), "B,S"),
    "column_ids": (np.dtype(np.int32), "B,S"),
    "seq_row_ids": (np.dtype(np.uint16), "B,S"),
    "numeric_values": (np.dtype(np.float32), "B,S"),
    "timestamp_values": (np.dtype(np.float32), "B,S,15"),
    "bool_values": (np.dtype(np.uint8), "B,S"),
    "categorical_embed_ids": (np.dtype(np.uint32), "B,S"),
    "text_embed_ids": (np.dtype(np.uint32), "B,S"),
    "is_null": (np.dtype(np.uint8), "B,S"),
    "is_target": (np.dtype(np.uint8), "B,S"),
    "is_hidden": (np.dtype(np.uint8), "B,S"),
    "is_padding": (np.dtype(np.uint8), "B,S"),
    "fk_adj": (np.dtype(np.uint8), "B,R,R"),
    "col_perm": (np.dtype(np.uint16), "B,S"),
    "out_perm": (np.dtype(np.uint16), "B,S"),
    "in_perm": (np.dtype(np.uint16), "B,S"),
    "text_batch_embeddings": (np.dtype(np.float16), "U,D"),
    "target_stype": (np.dtype(np.uint8), "1"),
    "task_idx": (np.dtype(np.uint32), "1"),
    "cat_emb_start": (np.dtype(np.uint32), "1"),
    "cat_emb_count": (np.dtype(np.uint32), "1"),
    # What the seed is and what the model must predict (never an input: the target cell stays
    # hidden). ``labels``' dtype depends on the task's target type: ``LABEL_DTYPES``.
    "labels": (np.dtype(np.float32), "B"),
    "anchor_rows": (np.dtype(np.int64), "B"),
    "observation_times": (np.dtype(np.int64), "B"),
    "sequence_mask": (np.dtype(np.uint8), "B"),
}
BATCH_KEYS = tuple(BATCH_LAYOUT)


def batch_dtype(key: str, target_stype: int) -> np.dtype:
    """The dtype of batch array ``key`` in a batch of a task whose target has ``target_stype``."""
    return LABEL_DTYPES[target_stype] if key == "labels" else BATCH_LAYOUT[key][0]
# The two largest arrays (2 MiB each at B=32, S=1024, R=256) are zeroed by the kernels, a
# sequence at a time right before they write it, instead of up front (build_sequences).
SELF_ZEROED = frozenset({"fk_adj", "timestamp_values"})
# Made from the seeds after the kernels ran, not allocated for them.
SEED_KEYS = frozenset({"text_batch_embeddings", "labels", "anchor_rows", "observation_times",
                       "sequence_mask"})
# The arrays the kernels write (dlkit.core.records.BatchOutput, by the same names).
OUTPUT_KEYS = BatchOutput._fields


def _no_records() -> np.ndarray:
    empty = np.empty((0, RECORD_WIDTH), dtype=np.int64)
    empty.setflags(write=False)
    return empty


def _int_dtype(array: Any) -> np.dtype:
    """Row ids and edge offsets are int32 or int64 (``graph.bin`` stores int32 while they
    fit); anything else is refused by ``readonly_view`` as an int64 mismatch."""
    dtype = np.asarray(array).dtype
    return dtype if dtype in (np.dtype(np.int32), np.dtype(np.int64)) else np.dtype(np.int64)


@dataclass(frozen=True)
class GraphArrays:
    """The CSR of ``graph.bin`` as read-only views: times int64, offsets and row ids int32 or
    int64 (lengths checked here; ids and offsets were range-checked by the database reader on
    open), and optionally the edge records of ``dlkit.core.bfs`` (each edge's far row with
    the CSR ranges and time that a walk reads next, so that read does not wait for the row
    id; empty when absent)."""

    parent_offsets: np.ndarray
    parent_ids: np.ndarray
    child_offsets: np.ndarray
    child_ids: np.ndarray
    child_times: np.ndarray
    row_times: np.ndarray
    parent_records: np.ndarray = field(default_factory=_no_records)
    child_records: np.ndarray = field(default_factory=_no_records)

    @classmethod
    def from_database(cls, db: Any) -> GraphArrays:
        g, n, path = db.graph, int(db.num_rows), getattr(db, "path", None)
        num_parents = int(np.asarray(g.parent_offsets)[-1]) if n >= 0 else 0
        num_children = int(np.asarray(g.child_offsets)[-1]) if n >= 0 else 0
        return cls(
            parent_offsets=readonly_view(g.parent_offsets, _int_dtype(g.parent_offsets), n + 1,
                                         "parent_offsets", path),
            parent_ids=readonly_view(g.parent_ids, _int_dtype(g.parent_ids), num_parents,
                                     "parent_ids", path),
            child_offsets=readonly_view(g.child_offsets, _int_dtype(g.child_offsets), n + 1,
                                        "child_offsets", path),
            child_ids=readonly_view(g.child_ids, _int_dtype(g.child_ids), num_children,
                                    "child_ids", path),
            child_times=readonly_view(g.child_times, np.int64, num_children, "child_times", path),
            row_times=readonly_view(g.row_times, np.int64, n, "row_times", path),
        )

    @property
    def has_records(self) -> bool:
        return self.parent_records.shape[0] > 0

    def kernel_graph(self) -> Graph:
        """These arrays as the kernels' record."""
        return Graph(parent_offsets=self.parent_offsets, parent_ids=self.parent_ids,
                     child_offsets=self.child_offsets, child_ids=self.child_ids,
                     child_times=self.child_times, row_times=self.row_times,
                     parent_records=self.parent_records, child_records=self.child_records)

    def records_fit(self) -> bool:
        """Edge records pack a row's parent and child counts in 32 bits each: graphs of fewer
        than 2^31 edges (each way) always fit."""
        return self.parent_ids.shape[0] < MAX_RECORD_EDGES

    def walked(self) -> tuple[np.ndarray, ...]:
        """The arrays the BFS and the structure pass read at random."""
        if self.has_records:
            return (self.parent_offsets, self.child_offsets, self.child_times,
                    self.parent_records, self.child_records)
        return (self.parent_offsets, self.parent_ids, self.child_offsets, self.child_ids,
                self.child_times, self.row_times)

    def huge_page_bytes(self) -> int:
        """RAM that ``huge_page_copy`` takes."""
        if not self.records_fit():
            return sum(int(a.nbytes) for a in self.walked())
        edges = int(self.parent_ids.shape[0])
        return (int(self.parent_offsets.nbytes) + int(self.child_offsets.nbytes)
                + int(self.child_times.nbytes) + 2 * edges * RECORD_WIDTH * 8)

    def huge_page_copy(self, memory: Any = PrivateMemory()) -> GraphArrays:
        """Offsets and child times copied into huge pages, plus both edge records built there
        (the walk then reads parent and child ids and row times from the records only);
        without records (2^31 edges or more) every walked array is copied instead. ``memory``
        says where (``dlkit.sampler.shared``); when it does not ``fill``, another process has
        built the same arrays there already."""
        if not self.records_fit():
            walked = tuple(memory.copy(a) for a in self.walked())
            return replace(self, parent_offsets=walked[0], parent_ids=walked[1],
                           child_offsets=walked[2], child_ids=walked[3],
                           child_times=walked[4], row_times=walked[5])
        edges = int(self.parent_ids.shape[0])
        parent_records = memory.empty((edges, RECORD_WIDTH), np.int64)
        child_records = memory.empty((edges, RECORD_WIDTH), np.int64)
        if memory.fill:
            # Two gathers of random reads, each a nogil kernel: one on each of two threads.
            with ThreadPoolExecutor(max_workers=2, thread_name_prefix="dlkit-records") as pool:
                built = [pool.submit(parent_edge_records, self.parent_ids, self.row_times,
                                     self.parent_offsets, self.child_offsets, parent_records),
                         pool.submit(child_edge_records, self.child_ids, self.parent_offsets,
                                     self.child_offsets, child_records)]
                for future in built:
                    future.result()
            parent_records.setflags(write=False)
            child_records.setflags(write=False)
        return replace(self, parent_offsets=memory.copy(self.parent_offsets),
                       child_offsets=memory.copy(self.child_offsets),
                       child_times=memory.copy(self.child_times),
                       parent_records=parent_records, child_records=child_records)


class ChildPolicy(str, Enum):
    """Which children a visited row with more than ``bfs_child_width`` visible ones queues
    (docs/batch_format.md, "Temporal BFS"): ``uniform`` (the default) draws them uniformly,
    ``recent`` takes the latest ones, ``quota`` gives every child table its share of the width
    (a table with fewer children passes the rest of its share on) and draws uniformly within
    each table."""

    UNIFORM = "uniform"
    RECENT = "recent"
    QUOTA = "quota"

    @classmethod
    def parse(cls, value: Any) -> ChildPolicy:
        """``value`` (a ``ChildPolicy`` or its name) as a ``ChildPolicy``."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            for policy in cls:
                if policy.value == value.lower():
                    return policy
        raise InvalidArgumentError(f"bfs_child_policy must be one of "
                                   f"{', '.join(p.value for p in cls)}, got {value!r}")

    @property
    def code(self) -> int:
        """The kernels' code of the policy (``dlkit.core.bfs.CHILD_*``)."""
        return {ChildPolicy.UNIFORM: CHILD_UNIFORM, ChildPolicy.RECENT: CHILD_RECENT,
                ChildPolicy.QUOTA: CHILD_QUOTA}[self]


@dataclass(frozen=True)
class BatchConfig:
    """Shape and BFS knobs of every batch (validated), and whether the builder reads the
    graph and columns from huge-page copies (``dlkit.sampler.hugepages``: True, False, or
    None = when THP is available and they fit in a quarter of the RAM)."""

    sequence_length: int = 1024
    max_rows: int = 256
    bfs_child_width: int = 16
    huge_pages: bool | None = False
    bfs_child_policy: ChildPolicy = ChildPolicy.UNIFORM

    @property
    def walk(self) -> Walk:
        """The kernels' walk limits of every sequence."""
        return Walk(child_width=self.bfs_child_width, max_cells=self.sequence_length,
                    max_rows=self.max_rows, child_policy=self.bfs_child_policy.code)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bfs_child_policy", ChildPolicy.parse(self.bfs_child_policy))
        if self.huge_pages is not None and not isinstance(self.huge_pages, bool):
            raise InvalidArgumentError(f"huge_pages must be True, False or None (automatic), "
                                       f"got {self.huge_pages!r}")
        for name, low, high in (("sequence_length", 1, MAX_U16_EXTENT),
                                ("max_rows", 1, MAX_U16_EXTENT),
                                ("bfs_child_width", 0, 1 << 30)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InvalidArgumentError(f"{name} must be an integer in [{low}, {high}], "
                                           f"got {value!r}")


@dataclass(frozen=True)
class TaskView:
    """One task's seeds (local rows of its table, which starts at global row ``row_offset``),
    plus what every batch of it carries. A batch's seeds become global rows as it is built:
    a copy of every seed's global row would cost 8 bytes per seed for the Sampler's life."""

    name: str
    index: int
    table_index: int
    anchor_row: np.ndarray
    row_offset: int
    obs_time: np.ndarray
    target_col: int
    target_stype: int
    cat_emb_start: int
    cat_emb_count: int
    target_values: np.ndarray
    target_mean: float
    target_std: float
    rules: TaskRules = TaskRules()

    @property
    def num_seeds(self) -> int:
        return int(self.anchor_row.shape[0])

    @cached_property
    def kernel_task(self) -> Task:
        """What the batch kernels need of this task (made once per task)."""
        return Task(index=self.index, target_col=self.target_col, strict=int(self.rules.strict))

    def labels(self, anchor_rows: np.ndarray) -> np.ndarray:
        """The hidden target cells of the seeds at ``anchor_rows`` as labels."""
        return labels_of(self.target_values[anchor_rows], self.target_stype, self.target_mean,
                         self.target_std)


@dataclass(frozen=True)
class KernelInputs:
    """What ``build_sequences`` reads of the database and the configuration: the same for
    every batch, so made once (after the huge-page copies, whose arrays they hold)."""

    graph: Graph
    tables: Tables
    columns: Columns
    column_lists: ColumnLists
    row_values: RowValues
    walk: Walk
    aggregates: Aggregates


@dataclass(frozen=True)
class BuiltBatch:
    """A batch plus what produced it (for inspection and tests; never sent to training)."""

    arrays: dict[str, np.ndarray]
    task: str
    epoch: int
    seed_indices: np.ndarray
    anchor_rows: np.ndarray
    obs_times: np.ndarray
    visited_rows: np.ndarray
    visited_depth: np.ndarray
    visited_source: np.ndarray
    visited_via: np.ndarray
    visited_counts: np.ndarray
    cell_counts: np.ndarray
    text_ids: np.ndarray


class BatchBuilder:
    """Builds batches from an open database (anything with the ``dlkit.db`` reader API).

    ``local_copies`` is how many processes on this machine build batches from the same
    database (the local ranks): the automatic huge-page choice counts a copy for each."""

    def __init__(self, db: Any, config: BatchConfig, seed: int, local_copies: int = 1):
        self.db = db
        self.config = config
        self.seed = int(seed)
        self.path = getattr(db, "path", None)
        self.graph = GraphArrays.from_database(db)
        self.catalog: ColumnCatalog = build_catalog(db)
        num_tables = int(self.catalog.table_num_cells.shape[0])
        self.rows = RowRecords.none(num_tables)
        row_layout = RowRecords.layout(self.catalog)
        value_bytes = (8 * row_layout[2] if row_layout is not None else
                       sum(int(a.nbytes) for a in self.catalog.column_arrays()))
        self.segment: SharedSegment | None = None
        self.memory_path = memory_path(config.huge_pages,
                                       self.graph.huge_page_bytes() + value_bytes, local_copies)
        self.huge_pages = self.memory_path != "mmap"
        if self.memory_path == "private":
            self._copy_into(PrivateMemory())
        elif self.memory_path == "shared":
            sizer = SegmentSizer()
            self._copy_into(sizer, update=False)
            self.segment = SharedSegment.join(segment_key(db.database_hash), sizer.size)
            try:
                self._copy_into(self.segment)
                self.segment.publish()
            except BaseException:
                self.segment.close()
                raise
        text = np.asarray(db.text_embeddings())
        if text.ndim != 2 or text.dtype != np.float16:
            raise DatabaseError(f"text embeddings have shape {text.shape} and dtype {text.dtype}, "
                                "expected a 2-D float16 array", path=self.path)
        self.text_bits = np.ascontiguousarray(text.view(np.uint16))  # gather_rows wants C order
        self.inputs: KernelInputs | None = self._kernel_inputs()
        self.tasks = tuple(self._task_view(task) for task in db.tasks)
        for view in self.tasks:
            cells = int(self.catalog.table_num_features[view.table_index])
            if config.sequence_length < cells:
                raise InvalidArgumentError(
                    f"sequence_length {config.sequence_length} is shorter than the {cells} cells "
                    f"of a row of table {db.tables[view.table_index].name!r} (task "
                    f"{view.name!r}): the seed's target could be cut off")

    def _task_view(self, task: Any) -> TaskView:
        table = self.db.table(task.table)
        target_col = self.catalog.index(table.name, task.target_column)
        if target_col < 0:
            raise DatabaseError(f"task {task.name}: target column {task.target_column!r} is not "
                                f"a non-key column of table {table.name}", path=self.path)
        n = int(task.num_seeds)
        anchor = readonly_view(task.anchor_row, np.int64, n, f"task {task.name} anchor_row",
                               self.path)
        obs = readonly_view(task.obs_time, np.int64, n, f"task {task.name} obs_time", self.path)
        if n and (int(anchor.min()) < 0 or int(anchor.max()) >= int(table.num_rows)):
            raise DatabaseError(f"task {task.name}: anchor rows outside table {table.name}'s "
                                f"{table.num_rows} rows", path=self.path)
        if n > 1 and bool(np.any(anchor[1:] <= anchor[:-1])):
            raise DatabaseError(f"task {task.name}: anchor rows are not strictly ascending",
                                path=self.path)
        stype = int(task.target_stype)
        if stype != int(self.catalog.col_stype[target_col]):
            raise DatabaseError(f"task {task.name}: target type {stype} disagrees with column "
                                f"{table.name}.{task.target_column}'s type "
                                f"{int(self.catalog.col_stype[target_col])}", path=self.path)
        values = self.catalog.values(target_col)
        return TaskView(task.name, int(task.index), int(table.index), anchor,
                        int(table.row_offset), obs,
                        target_col, stype,
                        int(self.catalog.col_cat_start[target_col]),
                        int(self.catalog.col_cat_count[target_col]),
                        values, float(self.catalog.col_mean[target_col]),
                        float(self.catalog.col_std[target_col]), rules_of(task))

    def _copy_into(self, memory: Any, update: bool = True) -> None:
        """The huge-page copies of the graph and the values, in ``memory``: the same arrays
        in the same order whatever the memory, so a shared segment's offsets agree in every
        process (``update=False`` only measures them)."""
        graph = self.graph.huge_page_copy(memory)
        rows = RowRecords.build(self.catalog, memory)
        catalog = self.catalog.with_columns(memory.copy) if rows is None else self.catalog
        if update:
            self.graph, self.catalog = graph, catalog
            if rows is not None:
                self.rows = rows

    def _kernel_inputs(self) -> KernelInputs:
        """The kernels' records of the arrays this builder reads (call after the copies)."""
        g, catalog = self.graph, self.catalog
        links = table_links_of(g.parent_offsets, g.child_offsets, catalog.table_offsets)
        return KernelInputs(g.kernel_graph(), catalog.kernel_tables(links),
                            catalog.kernel_columns(), catalog.kernel_lists(),
                            self.rows.kernel_values(), self.config.walk,
                            kernel_aggregates(self.db, catalog, g.child_offsets))

    def label_info(self, task: TaskView) -> LabelInfo:
        """What ``task``'s labels are (see ``dlkit.sampler.labels``)."""
        table = self.db.tables[task.table_index]
        column = self.catalog.names[task.target_col][1]
        categories = None
        if task.target_stype == CATEGORICAL:
            found = next((c for c in table.columns if c.name == column), None)
            names = getattr(found, "categories", None)
            categories = tuple(str(name) for name in names) if names is not None else None
        return LabelInfo(task.name, task.index, table.name, column, task.target_stype,
                         task.target_mean, task.target_std, task.cat_emb_count, categories,
                         LABEL_DTYPES[task.target_stype])

    def release(self) -> None:
        """Drop the graph, column and record arrays now (the huge-page copies are gigabytes
        for a large database) rather than whenever the garbage collector gets to the sampler;
        ``build`` refuses afterwards."""
        self.graph = self.catalog = self.rows = self.inputs = None  # type: ignore[assignment]
        if self.segment is not None:
            self.segment.close()
            self.segment = None

    def task(self, name_or_index: str | int) -> TaskView:
        for view in self.tasks:
            if name_or_index in (view.name, view.index):
                return view
        raise InvalidArgumentError(unknown_name("task", name_or_index,
                                                [v.name for v in self.tasks], "the database"))

    def build(self, task: TaskView, seed_indices: np.ndarray, epoch: int,
              num_real: int | None = None) -> BuiltBatch:
        """The batch of ``task``'s seeds ``seed_indices`` (positions in its seed list). Only
        the first ``num_real`` sequences (default: all) are real: the others pad an eval batch
        to its fixed size, and their ``sequence_mask`` is 0."""
        inputs = self.inputs
        if inputs is None:
            raise SamplerShutdown("the batch builder was released: no more batches")
        cfg = self.config
        idx = np.asarray(seed_indices, dtype=np.int64)
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= task.num_seeds):
            raise InvalidArgumentError(f"seed indices outside task {task.name}'s "
                                       f"{task.num_seeds} seeds")
        B, S, R = idx.shape[0], cfg.sequence_length, cfg.max_rows
        arrays = {key: (np.empty if key in SELF_ZEROED else np.zeros)(_shape(spec, B, S, R),
                                                                      dtype=dtype)
                  for key, (dtype, spec) in BATCH_LAYOUT.items() if key not in SEED_KEYS}
        arrays["is_padding"].fill(1)
        visits = Visits(rows=np.zeros((B, R), dtype=np.int64),
                        depth=np.zeros((B, R), dtype=np.int64),
                        source=np.zeros((B, R), dtype=np.int64),
                        via=np.zeros((B, R), dtype=np.int8), counts=np.zeros(B, dtype=np.int64))
        anchors = task.anchor_row[idx]
        obs = task.obs_time[idx]
        seeds = Seeds(rows=anchors + np.int64(task.row_offset), obs_times=obs, anchors=anchors)
        out = BatchOutput(**{key: arrays[key] for key in OUTPUT_KEYS})
        cells, unique = build_sequences(
            seeds, np.uint64(self.seed), np.uint64(epoch), task.kernel_task, inputs.walk,
            inputs.graph, inputs.tables, inputs.columns, inputs.column_lists, inputs.row_values,
            out, visits, inputs.aggregates)
        D = self.text_bits.shape[1]
        bits = np.empty((unique.shape[0], D), np.uint16)
        gather_rows(self.text_bits, unique, bits)
        arrays["text_batch_embeddings"] = bits.view(np.float16)
        arrays["target_stype"][0] = task.target_stype
        arrays["task_idx"][0] = task.index
        arrays["cat_emb_start"][0] = task.cat_emb_start
        arrays["cat_emb_count"][0] = task.cat_emb_count
        arrays["labels"] = task.labels(anchors)
        arrays["anchor_rows"] = anchors
        arrays["observation_times"] = obs
        mask = np.ones(B, dtype=np.uint8)
        if num_real is not None:
            mask[num_real:] = 0
        arrays["sequence_mask"] = mask
        ordered = {key: arrays[key] for key in BATCH_KEYS}
        return BuiltBatch(ordered, task.name, int(epoch), idx, anchors, obs, visits.rows,
                          visits.depth, visits.source, visits.via, visits.counts, cells, unique)


def _shape(spec: str, B: int, S: int, R: int) -> tuple[int, ...]:
    sizes = {"B": B, "S": S, "R": R}
    return tuple(sizes[p] if p in sizes else int(p) for p in spec.split(","))
