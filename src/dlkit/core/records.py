"""The records the batch kernels take: arrays that travel together, by name.

Numba compiles a ``NamedTuple`` of arrays, scalars and typed lists in nopython mode: a field
read is a struct member read, and a record passed between kernels is no more than its
fields passed one by one (a kernel binds the fields its loops read to locals first: each
read of a record's array field updates the array's reference count). The sampler builds
the records that do not change between batches (``Graph``, ``Tables``, ``Columns``,
``ColumnLists``, ``RowValues``: ``dlkit.sampler.resident``; ``Walk``, ``Task``) once, when it
opens a database, and holds them as they are; it builds the per-batch ones (``Seeds``,
``BatchOutput``, ``Visits``) for each batch; the kernels build the per-sequence ones
(``Stream``, ``Visit``, ``Layout``, ``FlatValues``) themselves; ``Examples`` is made per batch
from what the task holds once. Shapes below use ``B``
sequences of ``S`` cells and ``R`` rows, ``N`` global rows, ``E`` foreign-key edges, ``T``
tables and ``C`` catalog columns.

A record of arrays and numbers costs about a microsecond to pass from Python: numba's
dispatcher types it natively. A typed list it types in Python, hashing the list's type per
call (microseconds); in a record with many arrays that hash covers every field's type (the
column arrays and lists in one record: about 60 us per batch, measured). So the typed lists
travel alone in ``ColumnLists``, whose type is cached here by its lists' (interned) types.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from dlkit.core.jit import on_numba_load


class Graph(NamedTuple):
    """The foreign-key CSR over global rows (``graph.bin``), read-only. Row ``r``'s parents
    are ``parent_ids[parent_offsets[r]:parent_offsets[r + 1]]`` in foreign-key column order,
    its children ``child_ids[child_offsets[r]:child_offsets[r + 1]]`` in time order with
    their times in ``child_times``. Offsets and ids are int32 or int64."""

    parent_offsets: np.ndarray  # [N + 1]
    parent_ids: np.ndarray  # [E]
    child_offsets: np.ndarray  # [N + 1]
    child_ids: np.ndarray  # [E]
    child_times: np.ndarray  # int64[E]
    row_times: np.ndarray  # int64[N], NO_TIME for rows without a time
    # The edge records of dlkit.core.bfs (parent_edge_records / child_edge_records), or
    # int64[0, 4] each: the walk then reads the CSR alone, to the same visits.
    parent_records: np.ndarray  # int64[E, 4]
    child_records: np.ndarray  # int64[E, 4]


class Tables(NamedTuple):
    """Per table, in catalog order (global rows and catalog columns are table after table)."""

    offsets: np.ndarray  # int64[T + 1]: table t's global rows are offsets[t]:offsets[t + 1]
    col_start: np.ndarray  # int64[T + 1]: its catalog columns col_start[t]:col_start[t + 1]
    num_cells: np.ndarray  # int64[T]: cells of one of its rows (its non-key columns)
    # int8[T]: bfs.HAS_PARENTS / HAS_CHILDREN when some row of the table has a parent / a
    # child (bfs.table_links_of); a walk skips reading the offsets of other tables' rows.
    links: np.ndarray


class Columns(NamedTuple):
    """Per catalog column ``c`` (``dlkit.sampler.catalog``); its values are
    ``ColumnLists.<dtype>_cols[value_slot[c]]`` and its validity bitmap
    ``ColumnLists.u8_cols[valid_slot[c]]``."""

    stype: np.ndarray  # int8[C]: semantic type (collate.NUMERIC ... TEXT)
    column_id: np.ndarray  # int32[C]: the database's global column id
    sort_rank: np.ndarray  # int64[C]: dense rank of column_id (col_perm sorts by it)
    value_slot: np.ndarray  # int64[C]
    valid_slot: np.ndarray  # int64[C]
    mean: np.ndarray  # float64[C]: z-score statistics (0 and 1 where not numeric/timestamp)
    std: np.ndarray  # float64[C]
    cat_start: np.ndarray  # int64[C]: first categorical embedding row of the column
    label_lag: np.ndarray  # int64[C]: microseconds until a row's value is known (0: at once)


class ColumnLists(NamedTuple):
    """Every column array of the catalog, per dtype, as numba typed lists of read-only 1-D
    arrays (``dlkit.core.lists``), indexed by ``Columns.value_slot`` / ``valid_slot``."""

    f64_cols: Any  # numeric values
    u8_cols: Any  # boolean values and every validity bitmap
    i64_cols: Any  # timestamps and text ids
    i32_cols: Any  # categorical ids


class RowValues(NamedTuple):
    """Every table's cells row-major (``collate.fill_values_from_rows``): row ``r`` of table
    ``t`` is ``width[t]`` int64 words from ``start[t] + r * width[t]``, the validity of the
    table's column ``k`` in bit ``k`` of the first word and its value in word ``1 + k``.
    Empty ``words``: values come from the column arrays instead."""

    start: np.ndarray  # int64[T]
    width: np.ndarray  # int64[T]
    words: np.ndarray  # int64[...]
    floats: np.ndarray  # words viewed as float64 (numeric values)


class Walk(NamedTuple):
    """How a sequence is walked (``bfs.temporal_bfs``): at most ``child_width`` visible
    children of a row are queued, and the walk stops at ``max_cells`` cells or ``max_rows``
    rows. For a batch, ``max_cells`` is the sequence length ``S`` of its ``BatchOutput``
    and ``max_rows`` the ``R`` of its ``Visits``. ``child_policy`` picks which children a
    row over the width queues (``bfs.CHILD_UNIFORM``, ``CHILD_RECENT``, ``CHILD_QUOTA``)."""

    child_width: int
    max_cells: int
    max_rows: int
    child_policy: int = 0


class Task(NamedTuple):
    """What a batch kernel needs of its task."""

    # the task's index (part of every sequence's random stream); shadows tuple.index, which
    # nothing calls on a record
    index: int  # type: ignore[assignment]
    target_col: int  # catalog column of the seed's hidden target cell
    strict: int  # 1: rows at exactly the observation time are not visible; 0: they are


class Seeds(NamedTuple):
    """One batch's seeds."""

    rows: np.ndarray  # int64[B]: global row of each seed
    obs_times: np.ndarray  # int64[B]: observation time, NO_TIME for none
    anchors: np.ndarray  # int64[B]: row within the task's table (the stream's anchor)


class Examples(NamedTuple):
    """Which other seeds of the batch's task may fill a sequence as context examples
    (``dlkit.core.examples``): at most ``limit`` per sequence (0: none), chosen by ``policy``
    (``examples.EXAMPLES_RECENT``, ``EXAMPLES_RANDOM`` or ``EXAMPLES_PARENT``) among the
    task's ``n`` seeds in time order. With ``limit`` 0 the arrays may be empty."""

    limit: int
    policy: int
    anchors: np.ndarray  # int64[n]: the task's anchor rows in (obs_time, anchor row) order
    times: np.ndarray  # int64[n]: their observation times (ascending; NO_TIME first)
    row_offset: int  # global row of the task table's local row 0
    seed_rows: np.ndarray  # int64[n]: the task's anchor rows in seed order (ascending)
    ranks: np.ndarray  # int64[n]: each seed's position in ``anchors``
    batch: np.ndarray  # int64[B]: the seed (index in seed order) of each sequence


class Stream(NamedTuple):
    """One sequence's random stream (``dlkit.core.streams``): key ``(k0, k1)``, anchor."""

    k0: Any
    k1: Any
    anchor: Any


class Visit(NamedTuple):
    """One sequence's walk, written by ``bfs.temporal_bfs``: visit ``i`` is row ``rows[i]``
    at ``depth[i]``, discovered from visit ``source[i]`` (-1 for the seed) as its parent or
    child (``via[i]``); its parents' ids are ``parents[parent_start[i]:parent_start[i + 1]]``
    of the walk's parent buffer."""

    rows: np.ndarray  # int64[R]
    depth: np.ndarray  # int64[R]
    source: np.ndarray  # int64[R]
    via: np.ndarray  # int8[R]
    parent_start: np.ndarray  # int64[R + 1]


class Visits(NamedTuple):
    """A batch's walks: sequence ``b`` visited ``counts[b]`` rows (see ``Visit``)."""

    rows: np.ndarray  # int64[B, R]
    depth: np.ndarray  # int64[B, R]
    source: np.ndarray  # int64[B, R]
    via: np.ndarray  # int8[B, R]
    counts: np.ndarray  # int64[B]


class Layout(NamedTuple):
    """Which cell sits at each position of a batch (``collate.layout_sequences``): position
    ``p`` of sequence ``b`` holds catalog column ``col[b, p]`` of local row ``row[b, p]``
    of its table, for ``p < cell_counts[b]``; row ``i`` of sequence ``b`` fills positions
    ``row_first[b, i]:row_first[b, i + 1]``."""

    col: np.ndarray  # int32[B, S]
    row: np.ndarray  # int64[B, S]
    row_first: np.ndarray  # int64[B, R + 1]
    cell_counts: np.ndarray  # int64[B]


class BatchOutput(NamedTuple):
    """The kernel-written arrays of a batch, as ``docs/batch_format.md`` names them. They
    arrive zeroed (``is_padding`` all ones), except ``fk_adj`` and ``timestamp_values``,
    which the kernels zero a sequence at a time just before writing it."""

    semantic_types: np.ndarray  # int8[B, S]
    column_ids: np.ndarray  # int32[B, S]
    seq_row_ids: np.ndarray  # uint16[B, S]
    numeric_values: np.ndarray  # float32[B, S]
    timestamp_values: np.ndarray  # float32[B, S, 15]
    bool_values: np.ndarray  # uint8[B, S]
    categorical_embed_ids: np.ndarray  # uint32[B, S]
    text_embed_ids: np.ndarray  # uint32[B, S]
    is_null: np.ndarray  # uint8[B, S]
    is_target: np.ndarray  # uint8[B, S]
    is_hidden: np.ndarray  # uint8[B, S]
    is_padding: np.ndarray  # uint8[B, S]
    fk_adj: np.ndarray  # uint8[B, R, R]
    col_perm: np.ndarray  # uint16[B, S]
    out_perm: np.ndarray  # uint16[B, S]
    in_perm: np.ndarray  # uint16[B, S]
    is_context_example: np.ndarray  # uint8[B, S]


class FlatValues(NamedTuple):
    """The value arrays of a ``BatchOutput`` addressed flat, cell ``f = b * S + p`` (the
    fill kernels of ``dlkit.core.collate``)."""

    nulls: np.ndarray  # is_null, uint8[B * S]
    numbers: np.ndarray  # numeric_values, float32[B * S]
    times: np.ndarray  # timestamp_values, float32[B * S, 15]
    time_words: np.ndarray  # timestamp_values, float32[B * S * 15] (for prefetching)
    flags: np.ndarray  # bool_values, uint8[B * S]
    categories: np.ndarray  # categorical_embed_ids, uint32[B * S]


def _register_column_lists_type() -> None:
    from numba.core import types
    from numba.extending import typeof_impl

    lists_types: dict[tuple[int, ...], types.Type] = {}

    @typeof_impl.register(ColumnLists)
    def typeof_column_lists(value: ColumnLists, context: Any) -> types.Type:
        """The numba type of a ``ColumnLists``, made once per combination of list types
        (numba interns types, so their ids name them; the cached record type keeps them
        alive)."""
        list_types = [getattr(v, "_numba_type_", None) or typeof_impl(v, context)
                      for v in value]
        key = tuple(map(id, list_types))
        cached = lists_types.get(key)
        if cached is None:
            # numba's types module builds its names at import: invisible to mypy
            cached = lists_types[key] = types.BaseTuple.from_types(  # type: ignore[attr-defined]
                list_types, ColumnLists)
        return cached


on_numba_load(_register_column_lists_type)
