"""Linearisation and batch collation: visited rows to the arrays of one batch.

A sequence is its rows in visit order, each row's non-key cells in column order, cut at ``S``
cells; the positions after the last cell are padding. Per sequence this module fills the cell
arrays, ``fk_adj`` and the three attention permutations; per batch it deduplicates text ids
and gathers their embeddings. The format is pinned in ``docs/batch_format.md``.

Arguments are the named records of ``dlkit.core.records``. Column data is reached through a
*catalog* built once by ``dlkit.sampler.catalog``: catalog column ``c`` has a semantic type,
a global column id, normalisation statistics (``records.Columns``) and slots into per-dtype
typed lists of column arrays (``records.ColumnLists``: ``f64_cols`` numeric values,
``u8_cols`` boolean values and validity masks, ``i64_cols`` timestamps and text ids,
``i32_cols`` categorical ids). A typed-list lookup costs far more than an array read, so
``fill_values`` groups a batch's cells by column and looks each column up once per batch.
The catalog builder has range-checked every categorical and text id, so no lookup here can
leave its table.
"""

from __future__ import annotations

import numpy as np

from dlkit.core.aggregates import fill_aggregates, mark_aggregate_cells
from dlkit.core.bfs import (
    row_set_capacity,
    row_set_find,
    row_set_put,
    table_of,
    temporal_bfs,
)
from dlkit.core.codes import BOOLEAN, CATEGORICAL, NO_TIME, NUMERIC, TEXT, TIMESTAMP
from dlkit.core.examples import add_examples, mark_examples
from dlkit.core.jit import kernel
from dlkit.core.memory import prefetch
from dlkit.core.records import FlatValues, Layout, Stream, Visit
from dlkit.core.streams import example_key, sequence_key
from dlkit.core.timefeatures import NUM_TIME_FEATURES, time_features

INT64_MAX = np.iinfo(np.int64).max


@kernel
def layout_sequences(visits, tables, columns, target_col, out, layout):
    """Lay out every sequence of ``layout`` (a ``records.Layout``): which cell (catalog column,
    local row) sits at each position; also the cells' column-level arrays of ``out``.

    Sequence ``b`` is its visited rows (``visits``) in visit order, each row's columns in
    order, cut at ``S``; its cell count goes to ``layout.cell_counts[b]``. Row ``i``'s cells
    are positions ``layout.row_first[b, i]:layout.row_first[b, i + 1]``. Row 0 is the seed:
    its cell of catalog column ``target_col`` is marked ``is_target``. Values are filled
    afterwards by ``fill_values``. One call for the batch: the records' arrays are bound once
    (each field read updates a reference count, and a record argument costs one per array).
    """
    semantic_types = out.semantic_types
    column_ids = out.column_ids
    seq_row_ids = out.seq_row_ids
    is_target = out.is_target
    is_padding = out.is_padding
    col_stype = columns.stype
    col_column_id = columns.column_id
    position_col = layout.col
    position_row = layout.row
    table_offsets = tables.offsets
    table_col_start = tables.col_start
    S = semantic_types.shape[1]
    for b in range(visits.counts.shape[0]):
        rows = visits.rows[b]
        num_rows = visits.counts[b]
        row_first = layout.row_first[b]
        pos = 0
        for i in range(num_rows):
            row_first[i] = pos
            if pos == S:
                continue
            row = rows[i]
            t = table_of(table_offsets, row)
            local = row - table_offsets[t]
            for c in range(table_col_start[t], table_col_start[t + 1]):
                if pos == S:
                    break
                semantic_types[b, pos] = col_stype[c]
                column_ids[b, pos] = col_column_id[c]
                seq_row_ids[b, pos] = i
                is_padding[b, pos] = 0
                position_col[b, pos] = c
                position_row[b, pos] = local
                if i == 0 and c == target_col:
                    is_target[b, pos] = 1
                pos += 1
        row_first[num_rows] = pos
        layout.cell_counts[b] = pos


@kernel
def is_valid(bitmap, row):
    """Bit ``row`` of a little-endian validity bitmap."""
    return (bitmap[row >> 3] >> (row & 7)) & 1 != 0


_AHEAD = 16  # cells between a cell's prefetch and its read


@kernel
def _prefetch_ahead(order, rows, q, last, valid, values):
    """Prefetch the validity byte and the value of the cell ``_AHEAD`` places after ``q`` in
    ``order`` (a column's reads are independent misses: fetched ahead, they overlap)."""
    ahead = q + _AHEAD
    if ahead < last:
        local = rows[order[ahead]]
        prefetch(valid, local >> 3)
        prefetch(values, local)


@kernel
def _flat(layout, skip, out):
    """The per-position arrays of a batch addressed flat (``f = b * S + p``): the layout's
    columns and rows, ``skip``, and the value outputs (a ``records.FlatValues``)."""
    B, S = layout.col.shape
    times = out.timestamp_values
    flat = FlatValues(nulls=out.is_null.reshape(-1), numbers=out.numeric_values.reshape(-1),
                      times=times.reshape((B * S, times.shape[2])),
                      time_words=times.reshape(-1), flags=out.bool_values.reshape(-1),
                      categories=out.categorical_embed_ids.reshape(-1))
    return layout.col.reshape(-1), layout.row.reshape(-1), skip.reshape(-1), flat


@kernel
def _put_value(stype, f, value, mean, std, cat_start, numbers_out, times_out, flags_out,
               categories_out):
    """Write the value of valid, non-text cell ``f`` (the one rule both fill paths share;
    called per cell, so it takes the arrays of ``records.FlatValues``, not the record)."""
    if stype == NUMERIC:
        numbers_out[f] = np.float32((np.float64(value) - mean) / std)
    elif stype == BOOLEAN:
        flags_out[f] = 1 if value != 0 else 0
    elif stype == TIMESTAMP:
        time_features(np.int64(value), mean, std, times_out[f])
    else:
        categories_out[f] = np.uint32(cat_start + np.int64(value))


@kernel
def _fill_column(values, valid, order, rows, first, last, stype, mean, std, cat_start, flat,
                 text_cells, text_ids, num_texts):
    """The cells ``order[first:last]`` of one column (validity bitmap ``valid``) into
    ``flat``; null cells get ``is_null = 1`` and keep 0 values, text cells are appended to
    ``text_cells`` / ``text_ids``. Returns the new text cell count."""
    nulls, numbers_out, times_out, times_flat, flags_out, categories_out = flat
    for q in range(first, last):
        _prefetch_ahead(order, rows, q, last, valid, values)
        if stype == TIMESTAMP and q + _AHEAD < last:
            # A cell's 15 features land on one or two lines of a 2 MiB output that is no
            # longer cached: fetched ahead, those writes stop waiting for memory.
            at = order[q + _AHEAD] * NUM_TIME_FEATURES
            prefetch(times_flat, at)
            prefetch(times_flat, at + NUM_TIME_FEATURES - 1)
        f = order[q]
        local = rows[f]
        if not is_valid(valid, local):
            nulls[f] = 1
        elif stype == TEXT:
            text_cells[num_texts] = f
            text_ids[num_texts] = values[local]
            num_texts += 1
        else:
            _put_value(stype, f, values[local], mean, std, cat_start, numbers_out, times_out,
                       flags_out, categories_out)
    return num_texts


@kernel
def fill_values(layout, skip, columns, column_lists, out):
    """Fill the value arrays of ``out`` for every cell of ``layout`` from the column arrays
    (``columns``, ``column_lists``), except the cells marked in ``skip`` (the target, whose
    value is hidden, and with label lags the values not known yet), which stay zero.

    Cells are grouped by column first (a counting sort), so each column's arrays are looked
    up once per batch rather than once per cell. A null cell gets ``is_null = 1``. Arrays are
    addressed flat (``f = b * S + p``). Returns the non-null text cells as ``(positions f,
    global text ids)`` for the deduplication.
    """
    B, S = layout.col.shape
    cell_counts = layout.cell_counts
    col_stype = columns.stype
    C = col_stype.shape[0]
    cols, rows, targets, flat = _flat(layout, skip, out)
    out.timestamp_values[:, :, :] = 0  # arrives uninitialised (see build_sequences)
    starts = np.zeros(C + 1, dtype=np.int64)
    for b in range(B):
        for f in range(b * S, b * S + cell_counts[b]):
            if targets[f] == 0:
                starts[cols[f] + 1] += 1
    for c in range(C):
        starts[c + 1] += starts[c]
    num_text_cells = 0
    for c in range(C):
        if col_stype[c] == TEXT:
            num_text_cells += starts[c + 1] - starts[c]
    text_cells = np.empty(num_text_cells, dtype=np.int64)
    text_ids = np.empty(num_text_cells, dtype=np.int64)
    num_texts = 0
    order = np.empty(starts[C], dtype=np.int64)
    cursor = starts[:C].copy()
    for b in range(B):
        for f in range(b * S, b * S + cell_counts[b]):
            if targets[f] == 0:
                c = cols[f]
                order[cursor[c]] = f
                cursor[c] += 1
    for c in range(C):
        first, last = starts[c], starts[c + 1]
        if first == last:
            continue
        # A column's values are one of four typed lists; _fill_column is compiled per dtype.
        valid = column_lists.u8_cols[columns.valid_slot[c]]
        stype = col_stype[c]
        slot = columns.value_slot[c]
        args = (order, rows, first, last, stype, columns.mean[c], columns.std[c],
                columns.cat_start[c], flat, text_cells, text_ids, num_texts)
        if stype == NUMERIC:
            num_texts = _fill_column(column_lists.f64_cols[slot], valid, *args)
        elif stype == BOOLEAN:
            num_texts = _fill_column(column_lists.u8_cols[slot], valid, *args)
        elif stype == CATEGORICAL:
            num_texts = _fill_column(column_lists.i32_cols[slot], valid, *args)
        else:  # timestamps and text ids are int64
            num_texts = _fill_column(column_lists.i64_cols[slot], valid, *args)
    return text_cells[:num_texts], text_ids[:num_texts]


ROW_VALUES_AT = 1  # word 0 of a row record is the validity mask, column k's value is word 1 + k
_ROWS_AHEAD = 3  # rows between a row record's prefetch and its reads


@kernel
def fill_values_from_rows(layout, visited_counts, skip, tables, columns, row_values, out):
    """``fill_values`` reading the row records ``row_values`` (a ``records.RowValues``)
    instead of column arrays (same outputs); sequence ``b`` visited ``visited_counts[b]``
    rows.

    A row record of table ``t`` holds the validity of its ``k``-th column in bit ``k`` of word
    0 and the value in word ``1 + k`` (a float64's bits for numeric columns); row ``r`` of
    table ``t`` starts at word ``start[t] + r * width[t]``. ``floats`` is ``words`` viewed as
    float64. A sequence's cells are row after row (row ``i`` of sequence ``b`` at positions
    ``row_first[b, i]:row_first[b, i + 1]``), so one record (one or two cache lines) serves
    all of a row's cells, where columns cost two lines per cell; cells are therefore filled
    row by row, each record fetched a few rows ahead.
    """
    cell_counts = layout.cell_counts
    row_first = layout.row_first
    table_col_start = tables.col_start
    col_stype = columns.stype
    col_mean = columns.mean
    col_std = columns.std
    col_cat_start = columns.cat_start
    row_start = row_values.start
    row_width = row_values.width
    row_words = row_values.words
    row_floats = row_values.floats
    timestamp_values = out.timestamp_values
    B, S = layout.col.shape
    num_tables = table_col_start.shape[0] - 1
    col_table = np.empty(col_stype.shape[0], dtype=np.int64)
    for t in range(num_tables):
        for c in range(table_col_start[t], table_col_start[t + 1]):
            col_table[c] = t
    cols, rows, targets, flat = _flat(layout, skip, out)
    nulls, numbers_out, times_out, _, flags_out, categories_out = flat
    total = 0
    for b in range(B):
        total += cell_counts[b]
    text_cells = np.empty(total, dtype=np.int64)
    text_ids = np.empty(total, dtype=np.int64)
    num_texts = 0
    for b in range(B):
        # timestamp_values arrives uninitialised: each sequence's block is zeroed just before
        # its cells are written, so those writes hit the cache.
        timestamp_values[b, :, :] = 0
        firsts = row_first[b]
        num_rows = visited_counts[b]
        # Rows past the cut of S cells have none: dropped, every kept row starts below the
        # sequence's cell count, so its first position (and the one prefetched ahead) holds a
        # written column, also for a kept row of a table without cells.
        while num_rows > 0 and firsts[num_rows - 1] == firsts[num_rows]:
            num_rows -= 1
        for i in range(num_rows):
            if i + _ROWS_AHEAD < num_rows:
                f_ahead = b * S + firsts[i + _ROWS_AHEAD]
                t_ahead = col_table[cols[f_ahead]]
                prefetch(row_words, row_start[t_ahead] + rows[f_ahead] * row_width[t_ahead])
            first = b * S + firsts[i]
            first_col = cols[first]
            t = col_table[first_col]
            base = row_start[t] + rows[first] * row_width[t]
            valid = row_words[base]
            for k in range(firsts[i + 1] - firsts[i]):
                f = first + k
                if targets[f] != 0:
                    continue
                if (valid >> k) & 1 == 0:
                    nulls[f] = 1
                    continue
                c = first_col + k
                at = base + ROW_VALUES_AT + k
                stype = col_stype[c]
                if stype == TEXT:
                    text_cells[num_texts] = f
                    text_ids[num_texts] = row_words[at]
                    num_texts += 1
                elif stype == NUMERIC:
                    _put_value(stype, f, row_floats[at], col_mean[c], col_std[c],
                               col_cat_start[c], numbers_out, times_out, flags_out,
                               categories_out)
                else:
                    _put_value(stype, f, row_words[at], col_mean[c], col_std[c],
                               col_cat_start[c], numbers_out, times_out, flags_out,
                               categories_out)
    return text_cells[:num_texts], text_ids[:num_texts]


@kernel
def order_by_row_key(row_first, num_rows, row_key, num_keys, out):
    """Positions stably sorted by the key of their row (row ``i``'s cells are positions
    ``row_first[i]:row_first[i + 1]``, its key ``row_key[i]`` in ``[0, num_keys)``), then
    the padding positions in order. A counting sort over rows: each row's cells move as one
    run, where a sort of cells would update the same counter once per cell.
    """
    starts = np.zeros(num_keys + 1, dtype=np.int64)
    for i in range(num_rows):
        starts[row_key[i] + 1] += row_first[i + 1] - row_first[i]
    for k in range(num_keys):
        starts[k + 1] += starts[k]
    for i in range(num_rows):
        at = starts[row_key[i]]
        for p in range(row_first[i], row_first[i + 1]):
            out[at] = p
            at += 1
        starts[row_key[i]] = at
    for p in range(row_first[num_rows], out.shape[0]):
        out[p] = p


@kernel
def order_by_column(row_first, num_rows, row_columns, col_sort_rank, num_columns, out):
    """Positions stably sorted by ``col_sort_rank`` of their column, then the padding
    positions in order. A row's cells are consecutive catalog columns from the column of its
    first cell (``row_columns[row_first[i]]``), so the keys come from the rank table directly.
    """
    starts = np.zeros(num_columns + 1, dtype=np.int64)
    for i in range(num_rows):
        if row_first[i + 1] > row_first[i]:
            first_column = row_columns[row_first[i]]
            for k in range(row_first[i + 1] - row_first[i]):
                starts[col_sort_rank[first_column + k] + 1] += 1
    for k in range(num_columns):
        starts[k + 1] += starts[k]
    for i in range(num_rows):
        if row_first[i + 1] > row_first[i]:
            first_column = row_columns[row_first[i]]
            for k in range(row_first[i + 1] - row_first[i]):
                rank = col_sort_rank[first_column + k]
                out[starts[rank]] = row_first[i] + k
                starts[rank] += 1
    for p in range(row_first[num_rows], out.shape[0]):
        out[p] = p


@kernel
def sequence_structures(visits, parent_start, parents, columns, layout, out):
    """``fk_adj`` and the permutations of every sequence of ``out`` (cells already laid out
    in ``layout``; rows visited in ``visits``).

    ``fk_adj[b, i, j] = 1`` when row ``j`` is a foreign-key parent of row ``i``. ``col_perm``
    sorts positions by column id, ``out_perm`` by sequence row, ``in_perm`` by the sequence row
    of the row's first foreign-key parent present in the sequence (rows without one after all
    others); every sort is stable and puts padding last. Row ``i``'s cells are positions
    ``layout.row_first[b, i]:layout.row_first[b, i + 1]`` (``layout_sequences``); its parent
    ids, in edge order, are ``parents[parent_start[b, i]:parent_start[b, i + 1]]`` (written by
    the walk).
    """
    fk_adj = out.fk_adj
    col_perm = out.col_perm
    out_perm = out.out_perm
    in_perm = out.in_perm
    col_sort_rank = columns.sort_rank
    num_columns = columns.stype.shape[0]
    for b in range(visits.counts.shape[0]):
        rows = visits.rows[b]
        num_rows = visits.counts[b]
        starts = parent_start[b]
        row_first = layout.row_first[b]
        keys = np.full(row_set_capacity(num_rows), -1, dtype=np.int64)
        index = np.empty(keys.shape[0], dtype=np.int64)
        for i in range(num_rows):
            row_set_put(keys, index, rows[i], i)
        first_parent = np.full(num_rows, num_rows, dtype=np.int64)
        # fk_adj arrives uninitialised: zeroed here, its writes below hit the cache.
        fk_adj[b, :, :] = 0
        for i in range(num_rows):
            for e in range(starts[i], starts[i + 1]):
                j = row_set_find(keys, index, parents[e])
                if j >= 0:
                    fk_adj[b, i, j] = 1
                    if first_parent[i] == num_rows:
                        first_parent[i] = j
        order_by_column(row_first, num_rows, layout.col[b], col_sort_rank, num_columns,
                        col_perm[b])
        # Cells are laid out row after row, so the stable sort by sequence row is the identity.
        for p in range(out_perm.shape[1]):
            out_perm[b, p] = p
        order_by_row_key(row_first, num_rows, first_parent, num_rows + 1, in_perm[b])


@kernel
def hide_unknown_values(obs_times, layout, columns, col_table, tables, row_times, out, skip):
    """Mark the cells of every sequence ``b`` whose value is not known yet at ``obs_times[b]``:
    a column with a label lag ``L > 0`` shows a row's value only once ``row time + L <=
    obs_time`` (rows without a time are always known; the target cell is ``is_target``
    instead). A hidden cell gets ``is_hidden = 1`` and, like the target, ``skip = 1``: no
    value and no null flag is filled in. ``col_table[c]`` is catalog column ``c``'s table.
    Returns how many cells were hidden."""
    position_col = layout.col
    position_row = layout.row
    is_target = out.is_target
    is_hidden = out.is_hidden
    col_label_lag = columns.label_lag
    table_offsets = tables.offsets
    hidden = 0
    for b in range(obs_times.shape[0]):
        obs_time = obs_times[b]
        known_until = INT64_MAX if obs_time == NO_TIME else obs_time
        for p in range(layout.cell_counts[b]):
            c = position_col[b, p]
            lag = col_label_lag[c]
            if lag == 0 or is_target[b, p] != 0:
                continue
            t = row_times[table_offsets[col_table[c]] + position_row[b, p]]
            # row time + lag > known_until, computed without overflow: lags are below 2^62
            # and a known_until within a lag of INT64_MIN knows nothing.
            if t != NO_TIME and (known_until < NO_TIME + lag or t > known_until - lag):
                is_hidden[b, p] = 1
                skip[b, p] = 1
                hidden += 1
    return hidden


@kernel
def build_sequences(seeds, seed, epoch, task, walk, graph, tables, columns, column_lists,
                    row_values, out, visits, aggregates, examples):
    """A batch: BFS, layout and structure of every sequence, then every value, then the text
    deduplication (design phases 1 and 2). Returns the cell count of each sequence and the
    batch's distinct text ids (ascending).

    The sequences are those of ``seeds`` (a ``records.Seeds``) of ``task`` (a
    ``records.Task``), their random streams keyed by ``(seed, epoch, task.index)``, walked
    (``walk``, a ``records.Walk``) over ``graph`` and ``tables``; values come from the row
    records ``row_values`` (``fill_values_from_rows``) when its ``words`` are not empty, else
    from the column arrays (``columns``, ``column_lists``). ``out`` (a ``records.BatchOutput``
    of sequence length ``walk.max_cells``) receives the batch arrays and ``visits`` (a
    ``records.Visits`` of ``walk.max_rows`` rows) each sequence's rows and their provenance
    (see ``temporal_bfs``).

    With ``task.strict`` (0/1), rows at exactly the observation time are not visible. A
    column whose ``columns.label_lag`` is not 0 has its not-yet-known values hidden
    (``hide_unknown_values``). The as-of aggregate cells of ``aggregates`` (a
    ``dlkit.core.aggregates.Aggregates``; none when its ``kind`` is empty) are laid out like
    columns and filled by ``dlkit.core.aggregates.fill_aggregates``. A sequence whose walk
    stops short is filled with context examples (``dlkit.core.examples``) when
    ``examples.limit`` is not 0; their cells get ``is_context_example = 1``.
    """
    B = seeds.rows.shape[0]
    S = out.semantic_types.shape[1]
    max_rows = walk.max_rows
    k0, k1 = sequence_key(seed, epoch, task.index)
    # Only the first cell_counts[b] positions of each are written and read.
    layout = Layout(np.empty((B, S), dtype=np.int32), np.empty((B, S), dtype=np.int64),
                    np.empty((B, max_rows + 1), dtype=np.int64), np.zeros(B, dtype=np.int64))
    parent_start = np.empty((B, max_rows + 1), dtype=np.int64)
    parents = np.empty(B * max_rows * 2, dtype=np.int64)  # grown by the walk when needed
    used = 0
    num_columns = columns.stype.shape[0]
    with_examples = examples.limit > 0
    own_counts = np.empty(B, dtype=np.int64)
    scratch = Visit(np.empty(max_rows, dtype=np.int64), np.empty(max_rows, dtype=np.int64),
                    np.empty(max_rows, dtype=np.int64), np.empty(max_rows, dtype=np.int8),
                    np.empty(max_rows + 1, dtype=np.int64))
    e0, e1 = example_key(seed, epoch, task.index)
    for b in range(B):
        obs_time = seeds.obs_times[b]
        cutoff = INT64_MAX if obs_time == NO_TIME else obs_time - task.strict
        visit = Visit(visits.rows[b], visits.depth[b], visits.source[b], visits.via[b],
                      parent_start[b])
        stream = Stream(k0, k1, seeds.anchors[b])
        visits.counts[b], parents, used = temporal_bfs(
            graph, tables, walk, seeds.rows[b], cutoff, stream, visit, parents, used)
        own_counts[b] = visits.counts[b]
        if with_examples:
            visits.counts[b], parents, used = add_examples(
                graph, tables, walk, examples, b, cutoff, stream,
                Stream(e0, e1, seeds.anchors[b]), visit, own_counts[b], parents, used, scratch)
    layout_sequences(visits, tables, columns, task.target_col, out, layout)
    if with_examples:
        mark_examples(layout, own_counts, out.is_context_example)
    sequence_structures(visits, parent_start, parents, columns, layout, out)
    # The fill kernels leave the cells marked in ``skip`` empty: the target, and with label
    # lags the values not known yet.
    skip = out.is_target
    lagged = False
    for c in range(num_columns):
        if columns.label_lag[c] != 0:
            lagged = True
    with_aggregates = aggregates.kind.shape[0] > 0
    col_table = np.empty(num_columns, dtype=np.int64)
    if lagged or with_aggregates:
        skip = out.is_target.copy()
        for t in range(tables.col_start.shape[0] - 1):
            for c in range(tables.col_start[t], tables.col_start[t + 1]):
                col_table[c] = t
    if lagged:
        hide_unknown_values(seeds.obs_times, layout, columns, col_table, tables,
                            graph.row_times, out, skip)
    if with_aggregates:
        mark_aggregate_cells(layout, aggregates.col_agg, skip)
    if row_values.words.shape[0] > 0:
        text_cells, text_ids = fill_values_from_rows(layout, visits.counts, skip, tables,
                                                     columns, row_values, out)
    else:
        text_cells, text_ids = fill_values(layout, skip, columns, column_lists, out)
    if with_aggregates:
        fill_aggregates(seeds.obs_times, task.strict, task.target_col, layout, col_table,
                        tables.offsets, graph.child_offsets, graph.child_times,
                        columns.label_lag, aggregates, out)
    return layout.cell_counts, dedup_text(text_cells, text_ids, out.text_embed_ids)


@kernel
def _text_slot(keys, text_id):
    """The slot of ``text_id`` in the open-addressing table ``keys`` (-1 = free), claimed if
    it is not there yet (multiplicative hash, linear probing; the table is under half full)."""
    mask = keys.shape[0] - 1
    i = np.int64((np.uint64(text_id) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)) & mask
    while keys[i] != -1 and keys[i] != text_id:
        i = (i + 1) & mask
    keys[i] = text_id
    return i


@kernel
def dedup_text(text_cells, text_ids, text_embed_ids):
    """Phase 2: the batch's distinct text ids, ascending, and each text cell's batch-local
    index into them (``text_embed_ids`` at flat position ``text_cells[q]`` gets the index of
    ``text_ids[q]``; other cells keep 0). Ids are hashed once each; only the distinct ones
    are sorted."""
    n = text_ids.shape[0]
    capacity = 16
    while capacity < 2 * n:
        capacity *= 2
    keys = np.full(capacity, -1, dtype=np.int64)
    index = np.full(capacity, -1, dtype=np.int64)
    slots = np.empty(n, dtype=np.int64)
    distinct = np.empty(n, dtype=np.int64)
    count = 0
    for q in range(n):
        i = _text_slot(keys, text_ids[q])
        if index[i] < 0:
            index[i] = 0
            distinct[count] = text_ids[q]
            count += 1
        slots[q] = i
    unique = np.sort(distinct[:count])
    for r in range(count):
        index[_text_slot(keys, unique[r])] = r
    flat = text_embed_ids.reshape(-1)
    for q in range(n):
        flat[text_cells[q]] = np.uint32(index[slots[q]])
    return unique
