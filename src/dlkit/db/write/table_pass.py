"""Stage ``tables`` of preprocessing: one streaming pass over each table's columns.

Record batches are decoded on Arrow's threads, a reader thread ahead of this one. Per batch:
the time column gives the row times; foreign keys are resolved to global parent ids (null ->
no edge; dangling -> counted, then dropped or an error) and appended to the graph, on a
helper thread, in batch order; meanwhile every feature column is converted and appended to
its files (``dlkit.db.write.columns``, text ids by ``dlkit.db.write.texts``) and task seeds are appended
as their rows go by.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from dlkit.db import format as fmt
from dlkit.db.metadata_records import TaskMetadata
from dlkit.db.schema.spec import Schema, key_label
from dlkit.db.task_rules import timeless_warning
from dlkit.db.write.columns import ColumnWriter
from dlkit.db.write.composite import encode_keys
from dlkit.db.write.convert import int_to_micros, to_micros
from dlkit.db.write.graph_writer import GraphWriter
from dlkit.db.write.hashing import Hasher
from dlkit.db.write.plan import ColumnPlan, TablePlan, check_rows, where
from dlkit.db.write.primary_keys import KeyIndex, PrimaryKeys
from dlkit.db.write.report import Progress
from dlkit.db.write.scratch import Arrays, empty_small_pages
from dlkit.db.write.source import ReadJob
from dlkit.db.write.tasks import TaskWriter
from dlkit.db.write.texts import TextStore
from dlkit.errors import DataError
from dlkit.text import counted


@dataclass(frozen=True)
class TablePassContext:
    """What every table's pass shares: the other tables, their key indexes and the outputs."""

    plans: dict[str, TablePlan]
    indexes: dict[str, KeyIndex]
    schema: Schema
    graph: GraphWriter
    texts: TextStore
    hasher: Hasher
    arrays: Arrays  # the working arrays, within the memory budget
    progress: Progress
    batch_rows: int
    on_dangling: str
    keys_in_pass: set[str]  # tables whose primary keys are read in their own pass
    referenced: set[str]  # tables some foreign key refers to


def read_job(plan: TablePlan, keys_in_pass: set[str]) -> ReadJob:
    """The columns a table's pass reads: foreign keys, features, time, and the primary key
    when it is read in this pass (repeating strings dictionary-encoded)."""
    needed = [c for f in plan.foreign_keys for c in f.columns] + [c.name for c in plan.columns]
    if plan.time_column is not None:
        needed.append(plan.time_column)
    if plan.name in keys_in_pass:
        needed.extend(plan.pk_columns)
    needed = list(dict.fromkeys(needed))  # a column of several keys is read once
    repeating = [c.name for c in plan.columns
                 if c.stype in (fmt.CATEGORICAL, fmt.TEXT) and c.family == "string"]
    return ReadJob(plan.source, tuple(needed), tuple(repeating))


def stream_table(plan: TablePlan, ctx: TablePassContext, job: ReadJob,
                 batches: Iterable[pa.RecordBatch]) -> tuple[list[TaskMetadata], list[str], int]:
    """One pass over ``plan``'s columns (``job``, read as ``batches``): ``(metadata of its
    tasks, warnings, bytes of primary keys written)``; the primary keys too, when they are
    read in this pass."""
    writers = {c.name: ColumnWriter(plan, c, ctx.hasher, ctx.arrays) for c in plan.columns}
    text_cols = [c for c in plan.columns if c.stype == fmt.TEXT]
    plain_cols = [c for c in plan.columns if c.stype != fmt.TEXT]
    tasks = [TaskWriter(task, i, next(c for c in plan.columns if c.name == task.target),
                        ctx.hasher, plan.num_rows, ctx.arrays, plan.source.location_rows)
             for i, task in enumerate(ctx.schema.tasks) if task.table == plan.name]
    row_times = ctx.graph.row_times
    assert row_times is not None, "table passes run before the graph writer's finish"
    rt = row_times[plan.row_offset:plan.row_offset + plan.num_rows]
    if plan.time_column is None:
        rt[:] = fmt.NO_TIME
    keys = PrimaryKeys(plan, ctx.hasher, ctx.arrays) if plan.name in ctx.keys_in_pass else None
    # Two parent buffers: the helper may still resolve one batch while the next is queued.
    parents = empty_small_pages(np.int64, (2, len(plan.foreign_keys), ctx.batch_rows))
    first_dangling: dict[int, tuple[int, Any]] = {}
    if not plan.foreign_keys:
        ctx.graph.no_edges(plan)
    pos = 0
    # Foreign keys are resolved and their edges appended to the graph on a helper thread
    # (nogil kernels), in batch order, while this one converts the columns; the helper may
    # lag one batch behind. An error of this thread's is only reported once the helper's
    # jobs for earlier batches are known to have passed, so the first bad row still wins.
    pending: deque[Future[None]] = deque()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dlkit-lookup") as helper:
        own = None  # the helper's job for the batch this thread is converting
        try:
            for number, batch in enumerate(batches):
                own = None
                n = batch.num_rows
                check_rows(plan, "columns", pos + n)
                column = dict(zip(batch.schema.names, batch.columns))
                if plan.foreign_keys:
                    if len(pending) == 2:
                        pending.popleft().result()  # frees the buffer of two batches ago
                    own = helper.submit(_resolve_foreign_keys, plan, ctx, column,
                                        parents[number % 2, :, :n], pos, first_dangling)
                    pending.append(own)
                _convert_batch(plan, ctx, column, n, pos, rt, keys, writers, plain_cols,
                               text_cols, tasks)
                pos += n
                ctx.progress.advance(n)
            own = None
            while pending:
                pending.popleft().result()
        except BaseException:
            for earlier in pending:
                if earlier is not own:
                    earlier.result()  # an earlier batch's error is reported instead
            raise
    if job.columns:
        check_rows(plan, "columns", pos, final=True)
    elif plan.num_rows:
        ctx.progress.advance(plan.num_rows)
    key_bytes = 0
    if keys is not None:
        index, key_bytes = keys.finish(plan.name in ctx.referenced)
        if index is not None:
            ctx.indexes[plan.name] = index
    mappings = {name: w.finish() for name, w in writers.items()}
    task_meta = [tw.finish(mappings[tw.task.target]) for tw in tasks]
    warnings = [timeless_warning(task.name, plan.name) for task in ctx.schema.tasks
                if task.table == plan.name and plan.time_column is None and not task.static]
    if plan.num_null_times:
        assert plan.time_column is not None, "null times are counted in a time column only"
        warnings.append(f"{where(plan.name, plan.time_column)}: "
                        f"{counted(plan.num_null_times, 'null time')}; those rows get no "
                        "time (always visible)")
    problems = []
    for k, fkp in enumerate(plan.foreign_keys):
        if fkp.num_dangling:
            row, value = first_dangling[k]
            parent = ctx.plans[fkp.parent]
            assert parent.primary_key is not None, "a foreign key's parent has a key"
            named = (where(plan.name, fkp.column) if not fkp.parts else
                     f"table {plan.name!r}, foreign key {fkp.column!r} "
                     f"{key_label(fkp.parts)}")
            problems.append(f"{named}: "
                            f"{counted(fkp.num_dangling, 'dangling foreign key')} to "
                            f"{fkp.parent}.{key_label(parent.primary_key)} (first: row {row}, "
                            f"value {value!r})")
    if problems and ctx.on_dangling == "error":
        raise DataError("; ".join(problems) + " (--on-dangling error)")
    warnings.extend(p + "; edges dropped, rows kept" for p in problems)
    return task_meta, warnings, key_bytes


def _convert_batch(plan: TablePlan, ctx: TablePassContext, column: dict[str, pa.Array], n: int,
                   pos: int, rt: np.ndarray, keys: PrimaryKeys | None,
                   writers: dict[str, ColumnWriter], plain_cols: list[ColumnPlan],
                   text_cols: list[ColumnPlan],
                   tasks: list[TaskWriter]) -> None:
    """This thread's share of a batch: primary keys, row times, feature columns, task seeds."""
    if keys is not None:
        keys.add(column)
    converted = {}
    if plan.time_column is not None:
        name = where(plan.name, plan.time_column)
        if plan.time_unit is None:
            values, valid = to_micros(column[plan.time_column], name)
        else:
            values, valid = int_to_micros(column[plan.time_column], plan.time_unit,
                                          plan.time_position, name, pos)
        converted[plan.time_column] = (values, valid)
        batch_times = rt[pos:pos + n]
        np.copyto(batch_times, values)
        batch_times[~valid] = fmt.NO_TIME
        plan.num_null_times += int(n - np.count_nonzero(valid))
    for c in plain_cols:
        w = writers[c.name]
        got = converted.get(c.name)
        w.append(*(got if got is not None else w.convert(column[c.name])))
    if text_cols:
        encoded = ctx.texts.encode_row_major([column[c.name] for c in text_cols],
                                             [where(plan.name, c.name) for c in text_cols])
        for c, (values, valid) in zip(text_cols, encoded):
            writers[c.name].append(values, valid)
    for tw in tasks:
        last = writers[tw.task.target].last
        assert last is not None, "the target column's batch was appended above"
        values, valid = last
        tw.append(pos, rt[pos:pos + n], values, valid)


def _shown(key: pa.Scalar) -> Any:
    """A foreign key's value for a message: its bytes when it is not valid UTF-8 text (it
    dangles then: every primary key is valid text)."""
    try:
        return key.as_py()
    except UnicodeDecodeError:
        return key.cast(pa.binary()).as_py()


def _resolve_foreign_keys(plan: TablePlan, ctx: TablePassContext, column: dict[str, pa.Array],
                          parents: np.ndarray, pos: int,
                          first_dangling: dict[int, tuple[int, Any]]) -> None:
    """Row ``r`` of the batch gets ``parents[k, r]``: its global parent id for foreign key
    ``k``, or -1 (null or dangling key); the counts go to the plan, the edges to the graph."""
    n = parents.shape[1]
    for k, fkp in enumerate(plan.foreign_keys):
        index, base = ctx.indexes[fkp.parent], ctx.plans[fkp.parent].row_offset
        if fkp.parts:
            arrs = [column[c] for c in fkp.parts]
            enc = encode_keys(arrs, fkp.part_families, where(plan.name, fkp.column))
            num_valid, dangling, first = index.lookup_bytes(enc.data, enc.offsets, enc.valid,
                                                            base, parents[k])
        else:
            arr = column[fkp.column]
            num_valid, dangling, first = index.lookup(arr, base, parents[k],
                                                      where(plan.name, fkp.column))
        fkp.num_null += n - num_valid
        fkp.num_dangling += dangling
        fkp.num_edges += num_valid - dangling
        if dangling and k not in first_dangling:
            shown = (tuple(_shown(a[first]) for a in arrs) if fkp.parts
                     else _shown(arr[first]))
            first_dangling[k] = (pos + first, shown)
    ctx.graph.append(parents, plan.row_offset + pos)
