"""Linearisation and batch collation: visited rows to the arrays of one batch.

A sequence is its rows in visit order, each row's non-key cells in column order, cut at ``S``
cells; the positions after the last cell are padding. Per sequence this module fills the cell
arrays, ``fk_adj`` and the three attention permutations; per batch it deduplicates text ids
and gathers their embeddings. The format is pinned in ``docs/batch_format.md``.

Column data is reached through a *catalog* built once by ``dlkit.sampler.catalog``: catalog
column ``c`` has a semantic type, a global column id, normalisation statistics and slots into
per-dtype typed lists of column arrays (``f64_cols`` numeric values, ``u8_cols`` boolean
values and validity masks, ``i64_cols`` timestamps and text ids, ``i32_cols`` categorical
ids). A typed-list lookup costs far more than an array read, so ``fill_values`` groups a
batch's cells by column and looks each column up once per batch. The catalog builder has
range-checked every categorical and text id, so no lookup here can leave its table.
"""

from __future__ import annotations

import numpy as np

from dlkit.core.bfs import (
    NO_TIME,
    row_set_capacity,
    row_set_find,
    row_set_put,
    table_links_of,
    table_of,
    temporal_bfs,
)
from dlkit.core.jit import kernel
from dlkit.core.memory import prefetch
from dlkit.core.streams import sequence_key
from dlkit.core.timefeatures import NUM_TIME_FEATURES, time_features

NUMERIC = 0
BOOLEAN = 1
TIMESTAMP = 2
CATEGORICAL = 3
TEXT = 4
INT64_MAX = np.iinfo(np.int64).max


@kernel
def layout_sequence(b, rows, num_rows, table_offsets, table_col_start, col_stype,
                    col_column_id, target_col, semantic_types, column_ids, seq_row_ids,
                    is_target, is_padding, position_col, position_row, row_first):
    """Lay out sequence ``b``: which cell (catalog column, local row) sits at each position.

    Rows in visit order, each row's columns in order, cut at ``S``; returns the cell count.
    Row ``i``'s cells are positions ``row_first[i]:row_first[i + 1]`` (int64[num_rows + 1]).
    Row 0 is the seed: its cell of catalog column ``target_col`` is marked ``is_target``.
    Values are filled afterwards by ``fill_values``.
    """
    S = semantic_types.shape[1]
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
    return pos


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
def _flat(position_col, position_row, is_target, is_null, numeric_values, timestamp_values,
          bool_values, categorical_embed_ids):
    """The per-position arrays of a batch addressed flat (``f = b * S + p``); timestamp
    features as ``[B * S, 15]``."""
    B, S = position_col.shape
    return (position_col.reshape(-1), position_row.reshape(-1), is_target.reshape(-1),
            is_null.reshape(-1), numeric_values.reshape(-1),
            timestamp_values.reshape((B * S, timestamp_values.shape[2])),
            bool_values.reshape(-1), categorical_embed_ids.reshape(-1))


@kernel
def _put_value(stype, f, value, mean, std, cat_start, numbers_out, times_out, flags_out,
               categories_out):
    """Write the value of valid, non-text cell ``f`` (the one rule both fill paths share)."""
    if stype == NUMERIC:
        numbers_out[f] = np.float32((np.float64(value) - mean) / std)
    elif stype == BOOLEAN:
        flags_out[f] = 1 if value != 0 else 0
    elif stype == TIMESTAMP:
        time_features(np.int64(value), mean, std, times_out[f])
    else:
        categories_out[f] = np.uint32(cat_start + np.int64(value))


@kernel
def _fill_column(values, valid, order, rows, first, last, stype, mean, std, cat_start, nulls,
                 numbers_out, times_out, times_flat, flags_out, categories_out, text_cells,
                 text_ids, num_texts):
    """The cells ``order[first:last]`` of one column (validity bitmap ``valid``); null cells
    get ``is_null = 1`` and keep 0 values, text cells are appended to ``text_cells`` /
    ``text_ids``. Returns the new text cell count."""
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
def fill_values(cell_counts, position_col, position_row, is_target, col_stype, col_value_slot,
                col_valid_slot, col_mean, col_std, col_cat_start, f64_cols, u8_cols, i64_cols,
                i32_cols, numeric_values, timestamp_values, bool_values, categorical_embed_ids,
                is_null):
    """Fill every laid-out cell's value (the target cell stays zero: its value is hidden).

    Cells are grouped by column first (a counting sort), so each column's arrays are looked
    up once per batch rather than once per cell. A null cell gets ``is_null = 1``. Arrays are
    addressed flat (``f = b * S + p``). Returns the non-null text cells as ``(positions f,
    global text ids)`` for the deduplication.
    """
    B, S = position_col.shape
    C = col_stype.shape[0]
    cols, rows, targets, nulls, numbers_out, times_out, flags_out, categories_out = _flat(
        position_col, position_row, is_target, is_null, numeric_values, timestamp_values,
        bool_values, categorical_embed_ids)
    times_flat = timestamp_values.reshape(-1)
    timestamp_values[:, :, :] = 0  # arrives uninitialised (see build_sequences)
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
        valid = u8_cols[col_valid_slot[c]]
        stype = col_stype[c]
        slot = col_value_slot[c]
        args = (order, rows, first, last, stype, col_mean[c], col_std[c], col_cat_start[c],
                nulls, numbers_out, times_out, times_flat, flags_out, categories_out,
                text_cells, text_ids, num_texts)
        if stype == NUMERIC:
            num_texts = _fill_column(f64_cols[slot], valid, *args)
        elif stype == BOOLEAN:
            num_texts = _fill_column(u8_cols[slot], valid, *args)
        elif stype == CATEGORICAL:
            num_texts = _fill_column(i32_cols[slot], valid, *args)
        else:  # timestamps and text ids are int64
            num_texts = _fill_column(i64_cols[slot], valid, *args)
    return text_cells[:num_texts], text_ids[:num_texts]


ROW_VALUES_AT = 1  # word 0 of a row record is the validity mask, column k's value is word 1 + k
_ROWS_AHEAD = 3  # rows between a row record's prefetch and its reads


@kernel
def fill_values_from_rows(cell_counts, row_first, visited_counts, position_col, position_row,
                          is_target, table_col_start, col_stype, col_mean, col_std,
                          col_cat_start, row_start, row_width, row_words, row_floats,
                          numeric_values, timestamp_values, bool_values, categorical_embed_ids,
                          is_null):
    """``fill_values`` reading row records instead of column arrays (same outputs).

    A row record of table ``t`` holds the validity of its ``k``-th column in bit ``k`` of word
    0 and the value in word ``1 + k`` (a float64's bits for numeric columns); row ``r`` of
    table ``t`` starts at word ``row_start[t] + r * row_width[t]``. ``row_floats`` is
    ``row_words`` viewed as float64. A sequence's cells are row after row (row ``i`` of
    sequence ``b`` at positions ``row_first[b, i]:row_first[b, i + 1]``), so one record (one
    or two cache lines) serves all of a row's cells, where columns cost two lines per cell;
    cells are therefore filled row by row, each record fetched a few rows ahead.
    """
    B, S = position_col.shape
    num_tables = table_col_start.shape[0] - 1
    col_table = np.empty(col_stype.shape[0], dtype=np.int64)
    for t in range(num_tables):
        for c in range(table_col_start[t], table_col_start[t + 1]):
            col_table[c] = t
    cols, rows, targets, nulls, numbers_out, times_out, flags_out, categories_out = _flat(
        position_col, position_row, is_target, is_null, numeric_values, timestamp_values,
        bool_values, categorical_embed_ids)
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
def sequence_structure(b, rows, num_rows, row_first, parent_start, parents, col_sort_rank,
                       num_columns, position_col, fk_adj, col_perm, out_perm, in_perm):
    """``fk_adj`` and the permutations of sequence ``b`` (cells already laid out).

    ``fk_adj[b, i, j] = 1`` when row ``j`` is a foreign-key parent of row ``i``. ``col_perm``
    sorts positions by column id, ``out_perm`` by sequence row, ``in_perm`` by the sequence row
    of the row's first foreign-key parent present in the sequence (rows without one after all
    others); every sort is stable and puts padding last. Row ``i``'s cells are positions
    ``row_first[i]:row_first[i + 1]`` (``layout_sequence``); its parent ids, in edge order,
    are ``parents[parent_start[i]:parent_start[i + 1]]`` (written by the walk).
    """
    keys = np.full(row_set_capacity(num_rows), -1, dtype=np.int64)
    index = np.empty(keys.shape[0], dtype=np.int64)
    for i in range(num_rows):
        row_set_put(keys, index, rows[i], i)
    first_parent = np.full(num_rows, num_rows, dtype=np.int64)
    # fk_adj arrives uninitialised: zeroed here, its writes below hit the cache.
    fk_adj[b, :, :] = 0
    for i in range(num_rows):
        for e in range(parent_start[i], parent_start[i + 1]):
            j = row_set_find(keys, index, parents[e])
            if j >= 0:
                fk_adj[b, i, j] = 1
                if first_parent[i] == num_rows:
                    first_parent[i] = j
    order_by_column(row_first, num_rows, position_col[b], col_sort_rank, num_columns,
                    col_perm[b])
    # Cells are laid out row after row, so the stable sort by sequence row is the identity.
    for p in range(out_perm.shape[1]):
        out_perm[b, p] = p
    order_by_row_key(row_first, num_rows, first_parent, num_rows + 1, in_perm[b])


@kernel
def hide_unknown_values(b, cells, obs_time, position_col, position_row, is_target,
                        col_label_lag, col_table, table_offsets, row_times, is_hidden, skip):
    """Mark the cells of sequence ``b`` whose value is not known yet at ``obs_time``: a
    column with a label lag ``L > 0`` shows a row's value only once ``row time + L <=
    obs_time`` (rows without a time are always known; the target cell is ``is_target``
    instead). A hidden cell gets ``is_hidden = 1`` and, like the target, ``skip = 1``: no
    value and no null flag is filled in. Returns how many cells were hidden."""
    hidden = 0
    known_until = INT64_MAX if obs_time == NO_TIME else obs_time
    for p in range(cells):
        c = position_col[b, p]
        lag = col_label_lag[c]
        if lag == 0 or is_target[b, p] != 0:
            continue
        t = row_times[table_offsets[col_table[c]] + position_row[b, p]]
        # row time + lag > known_until, computed without overflow: lags are below 2^62 and
        # a known_until within a lag of INT64_MIN knows nothing.
        if t != NO_TIME and (known_until < NO_TIME + lag or t > known_until - lag):
            is_hidden[b, p] = 1
            skip[b, p] = 1
            hidden += 1
    return hidden


@kernel
def build_sequences(seed_rows, obs_times, anchors, seed, epoch, task_idx, child_width,
                    max_rows, strict, col_label_lag, parent_offsets, parent_ids, child_offsets, child_ids, child_times,
                    row_times, parent_records, child_records, table_num_cells, table_offsets,
                    table_col_start, col_stype, col_column_id, col_sort_rank, col_value_slot,
                    col_valid_slot, col_mean, col_std, col_cat_start, f64_cols, u8_cols,
                    i64_cols, i32_cols, row_start, row_width, row_words, row_floats, target_col,
                    semantic_types, column_ids, seq_row_ids, numeric_values, timestamp_values,
                    bool_values, categorical_embed_ids, text_embed_ids, is_null, is_target,
                    is_hidden, is_padding, fk_adj, col_perm, out_perm, in_perm, visited_rows,
                    visited_depth, visited_source, visited_via, visited_counts):
    """A batch: BFS, layout and structure of every sequence, then every value, then the text
    deduplication (design phases 1 and 2).

    ``parent_records`` / ``child_records`` are the graph's edge records or empty (see
    ``temporal_bfs``); values come from the row records (``fill_values_from_rows``) when
    ``row_words`` is not empty, else from the column arrays. Output arrays arrive zeroed
    (``is_padding`` all ones), except the two large ones, ``fk_adj`` and ``timestamp_values``,
    which the kernels zero sequence by sequence just before writing them. The ``visited_*``
    arrays receive each sequence's rows and their provenance (see ``temporal_bfs``). Returns
    the cell count of each sequence and the batch's distinct text ids (ascending).

    ``strict`` (0/1): rows at exactly the observation time are not visible. A column whose
    ``col_label_lag`` is not 0 has its not-yet-known values hidden (``hide_unknown_values``).
    """
    B = seed_rows.shape[0]
    S = semantic_types.shape[1]
    k0, k1 = sequence_key(seed, epoch, task_idx)
    # Only the first cells[b] positions of each are written and read.
    position_col = np.empty((B, S), dtype=np.int32)
    position_row = np.empty((B, S), dtype=np.int64)
    row_first = np.empty((B, max_rows + 1), dtype=np.int64)
    cells = np.zeros(B, dtype=np.int64)
    parent_start = np.empty((B, max_rows + 1), dtype=np.int64)
    parents = np.empty(B * max_rows * 2, dtype=np.int64)  # grown by the walk when needed
    used = 0
    num_columns = col_stype.shape[0]
    links = table_links_of(parent_offsets, child_offsets, table_offsets)
    for b in range(B):
        cutoff = INT64_MAX if obs_times[b] == NO_TIME else obs_times[b] - strict
        visited_counts[b], parents, used = temporal_bfs(
            parent_offsets, parent_ids, child_offsets, child_ids, child_times, row_times,
            parent_records, child_records, table_offsets, table_num_cells, links, seed_rows[b],
            cutoff, child_width, S, max_rows, k0, k1, anchors[b], visited_rows[b],
            visited_depth[b], visited_source[b], visited_via[b], parent_start[b], parents,
            used)
    for b in range(B):
        n = visited_counts[b]
        cells[b] = layout_sequence(b, visited_rows[b], n, table_offsets,
                                   table_col_start, col_stype, col_column_id, target_col,
                                   semantic_types, column_ids, seq_row_ids, is_target,
                                   is_padding, position_col, position_row, row_first[b])
        sequence_structure(b, visited_rows[b], n, row_first[b], parent_start[b], parents,
                           col_sort_rank, num_columns, position_col, fk_adj, col_perm,
                           out_perm, in_perm)
    # The fill kernels leave the cells marked in ``skip`` empty: the target, and with label
    # lags the values not known yet.
    skip = is_target
    lagged = False
    for c in range(num_columns):
        if col_label_lag[c] != 0:
            lagged = True
    if lagged:
        skip = is_target.copy()
        col_table = np.empty(num_columns, dtype=np.int64)
        for t in range(table_col_start.shape[0] - 1):
            for c in range(table_col_start[t], table_col_start[t + 1]):
                col_table[c] = t
        for b in range(B):
            hide_unknown_values(b, cells[b], obs_times[b], position_col, position_row,
                                is_target, col_label_lag, col_table, table_offsets, row_times,
                                is_hidden, skip)
    if row_words.shape[0] > 0:
        text_cells, text_ids = fill_values_from_rows(
            cells, row_first, visited_counts, position_col, position_row, skip,
            table_col_start, col_stype, col_mean, col_std, col_cat_start, row_start, row_width,
            row_words, row_floats, numeric_values, timestamp_values, bool_values,
            categorical_embed_ids, is_null)
    else:
        text_cells, text_ids = fill_values(
            cells, position_col, position_row, skip, col_stype, col_value_slot,
            col_valid_slot, col_mean, col_std, col_cat_start, f64_cols, u8_cols, i64_cols,
            i32_cols, numeric_values, timestamp_values, bool_values, categorical_embed_ids,
            is_null)
    return cells, dedup_text(text_cells, text_ids, text_embed_ids)


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
