"""Batch construction: seeds of one task to the §3b batch dict (docs/batch_format.md).

``build_batch`` is a pure function of a resident database (``dlkit.sampler.resident``: the
kernels' records of an opened database), the walk's limits, the sampling seed and the step's
job (task, seed indices, epoch), safe to call from several threads at once (each call
allocates its own outputs and scratch, and the kernels release the GIL). ``BatchBuilder``
holds one resident database with one configuration.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

import numpy as np

from dlkit.core.bfs import CHILD_QUOTA, CHILD_RECENT, CHILD_UNIFORM
from dlkit.core.codes import CATEGORICAL
from dlkit.core.collate import build_sequences
from dlkit.core.examples import EXAMPLES_PARENT, EXAMPLES_RANDOM, EXAMPLES_RECENT
from dlkit.core.gather import gather_rows
from dlkit.core.records import BatchOutput, Examples, Seeds, Visits, Walk
from dlkit.errors import InvalidArgumentError, SamplerShutdown
from dlkit.sampler import knobs
from dlkit.sampler.database import SamplerDatabase
from dlkit.sampler.hugepages import physical_memory
from dlkit.sampler.labels import LABEL_DTYPES, LabelInfo
from dlkit.sampler.resident import ResidentDatabase, place, read_resident
from dlkit.sampler.shared import SharedSegment
from dlkit.sampler.tasks import TaskView, find_task, label_info
from dlkit.text import human_bytes

MAX_U16_EXTENT = knobs.MAX_EXTENT

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
    "is_context_example": (np.dtype(np.uint8), "B,S"),
    "text_batch_embeddings": (np.dtype(np.float16), "U,D"),
    "target_stype": (np.dtype(np.uint8), "1"),
    "task_idx": (np.dtype(np.uint32), "1"),
    "database_idx": (np.dtype(np.uint32), "1"),
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
# The batch's own facts (shape [1]): the same on every rank of a step, never sliced.
BATCH_SCALAR_KEYS = frozenset(key for key, (_, spec) in BATCH_LAYOUT.items() if spec == "1")


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


_Policy = TypeVar("_Policy", bound=Enum)


def _named(cls: type[_Policy], value: Any, argument: str) -> _Policy:
    """``value`` (a member of ``cls`` or its name, in any case) as the member, or an
    ``InvalidArgumentError`` naming ``argument`` and the names it takes."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        for member in cls:
            if member.value == value.lower():
                return member
    raise InvalidArgumentError(f"{argument} must be one of "
                               f"{', '.join(m.value for m in cls)}, got {value!r}")


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
        return _named(cls, value, "bfs_child_policy")

    @property
    def code(self) -> int:
        """The kernels' code of the policy (``dlkit.core.bfs.CHILD_*``)."""
        return {ChildPolicy.UNIFORM: CHILD_UNIFORM, ChildPolicy.RECENT: CHILD_RECENT,
                ChildPolicy.QUOTA: CHILD_QUOTA}[self]


class ContextExamplePolicy(str, Enum):
    """Which other seeds of the task fill a sequence whose walk stops short, when
    ``context_examples`` is not 0 (docs/batch_format.md, "Context examples"): among the seeds
    observed no later than the sequence's own, ``recent`` (the default) takes the latest,
    ``random`` chooses uniformly (a draw of the sampling seed, the epoch and the seed),
    ``parent`` first those sharing a foreign-key parent with the seed's row (its siblings:
    the same customer's earlier orders), latest first, then the latest others."""

    RECENT = "recent"
    RANDOM = "random"
    PARENT = "parent"

    @classmethod
    def parse(cls, value: Any) -> ContextExamplePolicy:
        """``value`` (a ``ContextExamplePolicy`` or its name) as a ``ContextExamplePolicy``."""
        return _named(cls, value, "context_example_policy")

    @property
    def code(self) -> int:
        """The kernels' code of the policy (``dlkit.core.examples.EXAMPLES_*``)."""
        return {ContextExamplePolicy.RECENT: EXAMPLES_RECENT,
                ContextExamplePolicy.RANDOM: EXAMPLES_RANDOM,
                ContextExamplePolicy.PARENT: EXAMPLES_PARENT}[self]


@dataclass(frozen=True)
class ContextExamples:
    """How a sequence whose walk stops short is filled: with the neighbourhoods of at most
    ``count`` other seeds of its task (0: never), chosen by ``policy``."""

    count: int = knobs.CONTEXT_EXAMPLES
    policy: ContextExamplePolicy = ContextExamplePolicy.RECENT

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", ContextExamplePolicy.parse(self.policy))
        value, high = self.count, knobs.MAX_CONTEXT_EXAMPLES
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
            raise InvalidArgumentError(f"context_examples must be an integer in [0, {high}], "
                                       f"got {value!r}")

    def kernel_examples(self, task: TaskView, seed_indices: np.ndarray) -> Examples:
        """The kernels' record of the batch of ``task``'s seeds ``seed_indices``."""
        if self.count == 0:
            empty = np.zeros(0, dtype=np.int64)
            return Examples(0, self.policy.code, empty, empty, task.row_offset, empty, empty,
                            empty)
        anchors, times, ranks = task.time_order
        return Examples(self.count, self.policy.code, anchors, times, task.row_offset,
                        task.anchor_row, ranks, seed_indices)


NO_CONTEXT_EXAMPLES = ContextExamples()


@dataclass(frozen=True)
class BatchConfig:
    """Shape and BFS knobs of every batch (validated), and whether the builder reads the
    graph and columns from huge-page copies (``dlkit.sampler.hugepages``: True, False, or
    None = when THP is available and they fit in a quarter of the RAM)."""

    sequence_length: int = knobs.SEQUENCE_LENGTH
    max_rows: int = knobs.MAX_ROWS
    bfs_child_width: int = knobs.BFS_CHILD_WIDTH
    huge_pages: bool | None = False
    bfs_child_policy: ChildPolicy = ChildPolicy.UNIFORM
    context_examples: int = knobs.CONTEXT_EXAMPLES
    context_example_policy: ContextExamplePolicy = ContextExamplePolicy.RECENT

    @property
    def walk(self) -> Walk:
        """The kernels' walk limits of every sequence."""
        return Walk(child_width=self.bfs_child_width, max_cells=self.sequence_length,
                    max_rows=self.max_rows, child_policy=self.bfs_child_policy.code)

    @property
    def examples(self) -> ContextExamples:
        """The context examples of every sequence (none by default)."""
        return ContextExamples(self.context_examples, self.context_example_policy)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bfs_child_policy", ChildPolicy.parse(self.bfs_child_policy))
        object.__setattr__(self, "context_example_policy",
                           ContextExamplePolicy.parse(self.context_example_policy))
        if self.huge_pages is not None and not isinstance(self.huge_pages, bool):
            raise InvalidArgumentError(f"huge_pages must be True, False or None (automatic), "
                                       f"got {self.huge_pages!r}")
        for name, low, high in (("sequence_length", 1, MAX_U16_EXTENT),
                                ("max_rows", 1, MAX_U16_EXTENT),
                                ("bfs_child_width", 0, knobs.MAX_CHILD_WIDTH),
                                ("context_examples", 0, knobs.MAX_CONTEXT_EXAMPLES)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InvalidArgumentError(f"{name} must be an integer in [{low}, {high}], "
                                           f"got {value!r}")
        if self.context_examples >= self.max_rows:
            # each example takes a row at least: more could never be placed, and the random
            # choice's cost grows with the square of the count
            raise InvalidArgumentError(
                f"context_examples must be below max_rows ({self.max_rows}): a sequence holds "
                f"at most {self.max_rows - 1} other seeds, got {self.context_examples}")


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


def build_batch(resident: ResidentDatabase, walk: Walk, seed: int, task: TaskView,
                seed_indices: np.ndarray, epoch: int, num_real: int | None = None,
                examples: ContextExamples = NO_CONTEXT_EXAMPLES) -> BuiltBatch:
    """The batch of ``task``'s seeds ``seed_indices`` (positions in its seed list) in
    ``epoch`` of the sampling seed ``seed``, read from ``resident`` (the database ``task`` is
    a task of), walked by ``walk`` and filled with ``examples`` (none by default): a pure
    function of them, safe to call from several threads at once (each call allocates its
    own outputs and scratch, and the kernels release the GIL). Only the first ``num_real``
    sequences (default: all) are real: the others pad an eval batch to its fixed size, and
    their ``sequence_mask`` is 0."""
    idx = np.asarray(seed_indices, dtype=np.int64)
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= task.num_seeds):
        raise InvalidArgumentError(f"seed indices outside task {task.name}'s "
                                   f"{task.num_seeds} seeds")
    B, S, R = idx.shape[0], walk.max_cells, walk.max_rows
    check_batch_memory(B, S, R)
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
        seeds, np.uint64(seed), np.uint64(epoch), task.kernel_task, walk, resident.graph,
        resident.tables, resident.columns, resident.column_lists, resident.row_values, out,
        visits, resident.aggregates, examples.kernel_examples(task, idx))
    D = resident.text_bits.shape[1]
    bits = np.empty((unique.shape[0], D), np.uint16)
    gather_rows(resident.text_bits, unique, bits)
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


def sequence_length_problem(resident: ResidentDatabase, config: BatchConfig,
                            view: TaskView) -> str | None:
    """Why ``view``'s seeds cannot be sampled with ``config``: its seed row does not fit in a
    sequence (its target could be cut off); None when they can."""
    cells = int(resident.catalog.table_num_features[view.table_index])
    if config.sequence_length >= cells:
        return None
    table = resident.catalog.names[int(resident.tables.col_start[view.table_index])][0]
    return (f"sequence_length {config.sequence_length} is shorter than the {cells} cells of a "
            f"row of table {table!r} (task {view.name!r}): the seed's target could be cut off")


class BatchBuilder:
    """Builds batches of one open database (anything with the ``dlkit.db`` reader API) with
    one configuration and sampling seed: the database resident (``dlkit.sampler.resident``)
    and placed as ``config.huge_pages`` says, ``build`` a ``build_batch`` of it.

    ``local_copies`` is how many processes on this machine build batches from the same
    database (the local ranks): the automatic huge-page choice counts a copy for each.
    ``member`` places the database in a mixture: its batches carry its position as
    ``database_idx`` and their column and category ids index the mixture's shared tables."""

    def __init__(self, db: SamplerDatabase, config: BatchConfig, seed: int, local_copies: int = 1,
                 member: MixtureMember | None = None):
        self.db = db
        self.config = config
        self.seed = int(seed)
        self.member = member
        self.path = getattr(db, "path", None)
        self.walk = config.walk
        self.examples = config.examples
        resident = read_resident(db)
        # why each task cannot be sampled (None: its seed row fits), refused when asked for
        self._problems = {view.name: sequence_length_problem(resident, config, view)
                          for view in resident.tasks}
        if resident.tasks and all(self._problems.values()):  # nothing could ever be sampled
            raise InvalidArgumentError(str(next(iter(self._problems.values()))))
        self.fitting_tasks = tuple(view for view in resident.tasks
                                   if self._problems[view.name] is None)
        self._resident: ResidentDatabase | None = place(resident, config.huge_pages,
                                                        local_copies)
        self.tasks = self._resident.tasks
        self.memory_path = self._resident.memory_path
        self.huge_pages = self._resident.huge_pages

    @property
    def resident(self) -> ResidentDatabase:
        """The database's records this builder reads; ``SamplerShutdown`` once released."""
        if self._resident is None:
            raise SamplerShutdown("the batch builder was released: no more batches")
        return self._resident

    @property
    def segment(self) -> SharedSegment | None:
        """The shared segment the records are read from (None: not shared, or released)."""
        return None if self._resident is None else self._resident.segment

    def label_info(self, task: TaskView) -> LabelInfo:
        """What ``task``'s labels are (see ``dlkit.sampler.labels``)."""
        return label_info(self.db, self.resident.catalog, task)

    def release(self) -> None:
        """Drop the graph, column and record arrays now (the huge-page copies are gigabytes
        for a large database) rather than whenever the garbage collector gets to the sampler;
        ``build`` refuses afterwards."""
        resident, self._resident = self._resident, None
        if resident is not None:
            resident.close()

    def task(self, name_or_index: str | int) -> TaskView:
        """The task named (or at that index), refused when its seed row does not fit."""
        view = find_task(self.tasks, name_or_index)
        problem = self._problems[view.name]
        if problem is not None:
            raise InvalidArgumentError(problem)
        return view

    def build(self, task: TaskView, seed_indices: np.ndarray, epoch: int,
              num_real: int | None = None) -> BuiltBatch:
        """The batch of ``task``'s seeds ``seed_indices`` (``build_batch``), placed in the
        mixture when the builder is a member of one."""
        built = build_batch(self.resident, self.walk, self.seed, task, seed_indices, epoch,
                            num_real, self.examples)
        if self.member is not None:
            self.member.place(built.arrays)
        return built


@dataclass(frozen=True)
class MixtureMember:
    """Where one database sits in a mixture (docs/mixture.md §4): its position in the list
    and the first rows of its column and category embeddings in the mixture's shared
    tables. Placing a batch sets ``database_idx`` and offsets its ids into those tables."""

    database_idx: int
    column_offset: int
    category_offset: int

    def place(self, arrays: dict[str, np.ndarray]) -> None:
        """Only real ids move: padding cells, cells that hold no category (another type, a
        null, a hidden value, the target) and a target that is not categorical keep their
        0, as in one database."""
        arrays["database_idx"][0] = self.database_idx
        if self.column_offset:
            column_ids = arrays["column_ids"]
            column_ids[arrays["is_padding"] == 0] += np.int32(self.column_offset)
        if self.category_offset:
            holds_category = ((arrays["semantic_types"] == CATEGORICAL)
                              & (arrays["is_padding"] == 0) & (arrays["is_null"] == 0)
                              & (arrays["is_hidden"] == 0) & (arrays["is_target"] == 0))
            arrays["categorical_embed_ids"][holds_category] += np.uint32(self.category_offset)
            if arrays["cat_emb_count"][0]:
                arrays["cat_emb_start"] += np.uint32(self.category_offset)


# A batch (or the batches a sampler holds at once) may take at most this share of the memory
BATCH_MEMORY_SHARE = 2


@functools.cache  # build_batch asks for every batch; the shapes of a run are a few
def batch_bytes(B: int, S: int, R: int) -> int:
    """Bytes of a batch of ``B`` sequences of ``S`` cells and ``R`` rows and of its walk's
    scratch (the per-batch text embeddings, at most one per cell, left out): ``fk_adj``
    alone is ``B x R x R`` bytes."""
    fixed = sum(dtype.itemsize * int(np.prod(_shape(spec, B, S, R)))
                for dtype, spec in BATCH_LAYOUT.values() if "U" not in spec)
    return fixed + B * R * (3 * 8 + 1)  # Visits: rows, depth, source (int64), via (int8)


def check_batch_memory(B: int, S: int, R: int, in_flight: int = 1) -> None:
    """Refuse batches that could not fit: ``in_flight`` of them (built, queued, in use) over
    half this machine's memory (the caller's settings are named, not an allocation failure
    deep in a producer thread or the machine swapping)."""
    need, memory = in_flight * batch_bytes(B, S, R), physical_memory()
    if memory and need > memory // BATCH_MEMORY_SHARE:
        held = f"{in_flight} batches" if in_flight > 1 else "a batch"
        raise InvalidArgumentError(
            f"{held} of {B} sequences of {S} cells and {R} rows would take "
            f"{human_bytes(need)} (fk_adj alone is batch size x max_rows^2 bytes), more than "
            f"half of this machine's {human_bytes(memory)}: lower max_rows or the batch size")


def _shape(spec: str, B: int, S: int, R: int) -> tuple[int, ...]:
    sizes = {"B": B, "S": S, "R": R}
    return tuple(sizes[p] if p in sizes else int(p) for p in spec.split(","))
