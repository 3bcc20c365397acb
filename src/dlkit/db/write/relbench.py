"""Reading a dataset RelBench has saved: its tables, keys, time columns and tasks.

RelBench (``relbench`` 1.x) caches a dataset as a directory::

    <dataset>/db/<table>.parquet                  one file per table
    <dataset>/tasks/<task>/train.parquet          one directory per task, one file per split
    <dataset>/tasks/<task>/val.parquet
    <dataset>/tasks/<task>/test.parquet

(``~/.cache/relbench/<dataset>`` for ``relbench.datasets.get_dataset``). Every file carries
three JSON values in its Parquet key-value metadata: ``pkey_col`` (a column name or null),
``time_col`` (a column name or null) and ``fkey_col_to_pkey_table`` (column -> parent table).
Keys have been renumbered by RelBench to ``0..n-1`` (dangling references made null).

A task file of an *entity* task (node classification or regression) has three columns: the
entity (its only foreign key), the observation time (``time_col``) and the label. A
*recommendation* (link-prediction) task has two foreign keys, the second a list of
destination rows per row; dlkit does not support those yet and refuses them by name.

This module turns the layout into the exact ``dlkit.toml``: the tables with RelBench's keys
and time columns (column types inferred as ``dlkit schema infer`` does), and one task-table
task per entity task with RelBench's own train/val/test files as given splits. Its label lag
is the spacing of the task's training timestamps: RelBench's label at time ``t`` summarises
``(t, t + timedelta]``, so it is known ``timedelta`` after ``t``.
"""

from __future__ import annotations

import json
import stat
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dlkit.db.format import path_name_problem
from dlkit.db.schema.arrow_types import infer_stype, type_family
from dlkit.db.schema.render import render_duration, render_schema
from dlkit.db.schema.spec import (
    SPLIT_NAMES,
    Schema,
    TableSpec,
    TaskSpec,
)
from dlkit.db.write.plan import infer_string_column
from dlkit.db.write.source import DEFAULT_BATCH_ROWS, TableSource
from dlkit.errors import DlkitError, InvalidArgumentError, SchemaError
from dlkit.text import unknown_name

# The metadata keys RelBench's Table.save writes (JSON values).
META_PKEY = b"pkey_col"
META_TIME = b"time_col"
META_FKEYS = b"fkey_col_to_pkey_table"
META_KEYS = (META_PKEY, META_TIME, META_FKEYS)

DB_DIR = "db"
TASKS_DIR = "tasks"

# RelBench 1.x's recommendation tasks, named in the refusal even when a file is unreadable.
KNOWN_LINK_TASKS = frozenset({
    "user-item-purchase", "user-item-rate", "user-item-review", "user-ad-visit",
    "user-post-comment", "post-post-related", "condition-sponsor-run", "site-sponsor-run",
})


@dataclass(frozen=True)
class RelbenchTable:
    """One table file: its name, path relative to the dataset directory and RelBench keys."""

    name: str
    path: str
    primary_key: str | None
    time_column: str | None
    foreign_keys: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class RelbenchTask:
    """An entity task: split files (train, val, test) of (entity, time, target) rows."""

    name: str
    entity_table: str
    entity_column: str
    time_column: str
    target: str
    paths: tuple[str, str, str]
    label_lag_us: int | None  # None: the training timestamps do not show a spacing
    binary: bool = False      # integer labels, every one 0 or 1: typed boolean


class RelbenchWarning(UserWarning):
    """Something of a RelBench dataset was left out of its dlkit schema."""


@dataclass(frozen=True)
class RelbenchLayout:
    root: Path
    tables: tuple[RelbenchTable, ...]
    tasks: tuple[RelbenchTask, ...]


def _metadata(path: Path) -> dict[bytes, bytes]:
    try:
        return pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowException, ValueError) as exc:  # ValueError: names not UTF-8
        raise SchemaError(f"cannot read the Parquet footer: {exc}", path=path) from None


def _is_relbench_file(path: Path) -> bool:
    meta = _metadata(path)
    return all(k in meta for k in META_KEYS)


def _table_files(directory: Path) -> list[Path]:
    """The ``*.parquet`` files of ``directory``; one that is a directory (a table saved in
    parts: RelBench saves one file per table) or cannot be opened (a dangling symbolic link,
    a loop of them) is an error, never silently left out."""
    if not directory.is_dir():
        return []
    files = []
    for p in directory.iterdir():
        if not p.name.endswith(".parquet") or p.name.startswith((".", "_")):
            continue
        try:
            mode = p.stat().st_mode
        except OSError as exc:
            raise SchemaError(f"cannot open: {exc.strerror or exc}", path=p) from None
        if stat.S_ISDIR(mode):
            raise SchemaError("is a directory: a RelBench table is one Parquet file (for a "
                              "table saved in parts, write a dlkit.toml naming the directory "
                              "and use dlkit preprocess)", path=p)
        if stat.S_ISREG(mode):
            files.append(p)
    return sorted(files, key=lambda p: p.name)


def relbench_db_dir(root: str | Path) -> Path | None:
    """The directory of RelBench table files for ``root`` (``root/db`` for a dataset
    directory, ``root`` itself for a bare ``db`` directory), or None when ``root`` is not in
    RelBench's layout. Files of both kinds mixed are an error."""
    root = Path(root)
    for directory in (root / DB_DIR, root):
        files = _table_files(directory)
        marked = [f for f in files if _is_relbench_file(f)]
        if not marked:
            continue
        unmarked = [f for f in files if f not in marked]
        if unmarked:
            raise SchemaError(f"{marked[0].name} has RelBench's key metadata (pkey_col, "
                              f"time_col, fkey_col_to_pkey_table) but {unmarked[0].name} has "
                              "not: not one RelBench database", path=directory)
        return directory
    return None


def _json_meta(path: Path, meta: dict[bytes, bytes], key: bytes) -> Any:
    try:
        return json.loads(meta[key].decode("utf-8"))
    except (KeyError, UnicodeDecodeError, json.JSONDecodeError):
        raise SchemaError(f"metadata {key.decode()!r} is missing or not JSON", path=path) from None
    except RecursionError:  # "[[[[...]]]]" nested beyond Python's recursion limit
        raise SchemaError(f"metadata {key.decode()!r} is nested too deeply to be a RelBench "
                          "key", path=path) from None


def _file_keys(path: Path) -> tuple[str | None, str | None, dict[str, str], pa.Schema]:
    """``(pkey_col, time_col, fkey_col_to_pkey_table, arrow schema)`` of one RelBench file."""
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        raise SchemaError(f"cannot read the Parquet footer: {exc}", path=path) from None
    meta = schema.metadata or {}
    pkey = _json_meta(path, meta, META_PKEY)
    time = _json_meta(path, meta, META_TIME)
    fkeys = _json_meta(path, meta, META_FKEYS)
    if pkey is not None and not isinstance(pkey, str):
        raise SchemaError(f"pkey_col must be a column name or null, got {pkey!r}", path=path)
    if time is not None and not isinstance(time, str):
        raise SchemaError(f"time_col must be a column name or null, got {time!r}", path=path)
    if not isinstance(fkeys, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in fkeys.items()):
        raise SchemaError(f"fkey_col_to_pkey_table must map column names to table names, got "
                          f"{fkeys!r}", path=path)
    for column in [pkey, time, *fkeys]:
        if column is not None and column not in schema.names:
            raise SchemaError(f"the metadata names column {column!r}, which the file does not "
                              f"have (columns: {', '.join(schema.names)})", path=path)
    return pkey, time, fkeys, schema


def _is_link_task(fkeys: dict[str, str], schema: pa.Schema) -> bool:
    """RelBench's RecommendationTask tables: a source and a destination foreign key, the
    destination a list of rows (an entity task has one foreign key, its entity)."""
    lists = [c for c in fkeys if pa.types.is_list(schema.field(c).type)
             or pa.types.is_large_list(schema.field(c).type)]
    return bool(lists) or len(fkeys) == 2


def _timestamps_us(path: Path, column: str) -> pa.Array:
    try:
        col = pq.read_table(path, columns=[column]).column(column)
    except (OSError, pa.ArrowException) as exc:
        raise SchemaError(f"cannot read column {column!r}: {exc}", path=path) from None
    t = col.type
    if pa.types.is_date(t):
        col = pc.cast(col, pa.timestamp("s"))
        t = col.type
    if not pa.types.is_timestamp(t):
        raise SchemaError(f"time column {column!r} has type {t}, not a timestamp or date",
                          path=path)
    # truncation as preprocess does it: toward zero, to microseconds
    return pc.cast(pc.cast(col, pa.timestamp("us", t.tz), safe=False),
                   pa.int64()).combine_chunks()


def _label_lag(path: Path, column: str) -> int | None:
    """The one spacing between the distinct timestamps of a training file, or None."""
    times = pc.unique(pc.drop_null(_timestamps_us(path, column))).to_pylist()
    times.sort()
    gaps = {b - a for a, b in zip(times, times[1:])}
    return gaps.pop() if len(gaps) == 1 else None


def _zero_one(paths: list[Path], column: str) -> bool:
    """Whether every non-null value of ``column`` in ``paths`` is 0 or 1 (RelBench's binary
    classification labels; its task types are not saved with the files)."""
    for path in paths:
        try:
            values = pq.read_table(path, columns=[column]).column(column)
        except (OSError, pa.ArrowException) as exc:
            raise SchemaError(f"cannot read column {column!r}: {exc}", path=path) from None
        if pa.types.is_boolean(values.type):
            continue  # True and False are 1 and 0
        # compared in the column's own type (a cast to int64 fails on uint64 >= 2^63)
        low, high = pc.min_max(values).values()
        if low.is_valid and not (0 <= low.as_py() and high.as_py() <= 1):
            return False
    return True


def _read_task(root: Path, directory: Path, tables: dict[str, RelbenchTable]) -> RelbenchTask | str:
    """The task in ``directory``, or its name when it is a recommendation task."""
    name = directory.name
    where = f"task {name!r}"
    paths = []
    found: list[tuple[str | None, str | None, dict[str, str], pa.Schema]] = []
    for split in SPLIT_NAMES:
        path = directory / f"{split}.parquet"
        if not path.is_file():
            raise SchemaError(f"{where}: no {split}.parquet (RelBench saves train, val and "
                              "test)", path=directory)
        paths.append(path)
        found.append(_file_keys(path))
    pkey, time, fkeys, schema = found[0]
    if _is_link_task(fkeys, schema) or name in KNOWN_LINK_TASKS:
        return name
    for path, (p2, t2, f2, s2) in zip(paths[1:], found[1:]):
        if (p2, t2, f2) != (pkey, time, fkeys) or s2.names != schema.names:
            raise SchemaError(f"{where}: {path.name} has other columns or keys than "
                              "train.parquet", path=path)
    if len(fkeys) != 1:
        raise SchemaError(f"{where}: fkey_col_to_pkey_table must name the one entity column, "
                          f"got {fkeys!r}", path=paths[0])
    (entity_column, entity_table), = fkeys.items()
    if time is None:
        raise SchemaError(f"{where}: time_col is null; an entity task needs the observation "
                          "time of each row", path=paths[0])
    targets = [c for c in schema.names if c not in (entity_column, time)]
    if len(targets) != 1:
        raise SchemaError(f"{where}: expected one label column beside {entity_column!r} and "
                          f"{time!r}, found {targets or 'none'} (a test file saved without "
                          "its labels cannot be imported)", path=paths[0])
    target = targets[0]
    family = type_family(schema.field(target).type)
    if family not in ("integer", "float", "decimal", "boolean"):
        raise SchemaError(f"{where}: label column {target!r} has type "
                          f"{schema.field(target).type}; dlkit takes numeric and boolean labels "
                          "(multilabel tasks are not supported yet)", path=paths[0])
    parent = tables.get(entity_table)
    if parent is None or parent.primary_key is None:
        raise SchemaError(f"{where}: its entity table {entity_table!r} is "
                          + ("not in the database" if parent is None else "without a primary key"),
                          path=paths[0])
    rel = tuple(p.relative_to(root).as_posix() for p in paths)
    return RelbenchTask(name=name, entity_table=entity_table, entity_column=entity_column,
                        time_column=time, target=target, paths=rel,  # type: ignore[arg-type]
                        label_lag_us=_label_lag(paths[0], time),
                        binary=family in ("integer", "boolean") and _zero_one(paths, target))


def read_relbench(root: str | Path, *, tasks: Sequence[str] | None = None) -> RelbenchLayout:
    """The RelBench dataset at ``root`` (a dataset directory, or its ``db`` directory alone).

    ``tasks``: the names of the tasks to take (default: every task under ``root/tasks``
    that dlkit supports: recommendation tasks are left out with a ``RelbenchWarning`` naming
    them). A recommendation task named in ``tasks`` is refused by name: :class:`SchemaError`.
    """
    root = Path(root)
    if not root.is_dir():
        raise SchemaError("not a directory", path=root)
    db_dir = relbench_db_dir(root)
    if db_dir is None:
        raise SchemaError("not a RelBench dataset: expected db/<table>.parquet files with "
                          "RelBench's key metadata (pkey_col, time_col, fkey_col_to_pkey_table)",
                          path=root)
    tables: dict[str, RelbenchTable] = {}
    for path in _table_files(db_dir):
        name = path.name[: -len(".parquet")]
        problem = path_name_problem(name)
        if problem:
            raise SchemaError(f"table name {name!r} {problem}", path=path)
        pkey, time, fkeys, _ = _file_keys(path)
        tables[name] = RelbenchTable(name=name, path=path.relative_to(root).as_posix(),
                                     primary_key=pkey, time_column=time,
                                     foreign_keys=tuple(fkeys.items()))
    for table in tables.values():
        for column, parent in table.foreign_keys:
            if parent not in tables or tables[parent].primary_key is None:
                raise SchemaError(f"table {table.name!r}, column {column!r}: foreign key to "
                                  f"{parent!r}, which is " + ("not a table of the database"
                                  if parent not in tables else "a table without a primary key"),
                                  path=root / table.path)

    task_root = root / TASKS_DIR if db_dir != root else None
    available = sorted((p for p in task_root.iterdir() if p.is_dir()
                        and not p.name.startswith(".")), key=lambda p: p.name) \
        if task_root is not None and task_root.is_dir() else []
    by_name = {p.name: p for p in available}
    if tasks is not None:
        missing = [t for t in tasks if t not in by_name]
        if missing:
            # a name given by the caller (--task), not a fault of the input: a usage error
            raise InvalidArgumentError(unknown_name("task", missing[0], list(by_name),
                                                    "the dataset"),
                                       path=task_root if task_root is not None else root)
        chosen = [by_name[t] for t in dict.fromkeys(tasks)]
    else:
        chosen = available
    entity: list[RelbenchTask] = []
    link: list[str] = []
    for directory in chosen:
        problem = path_name_problem(directory.name)
        if problem:
            raise SchemaError(f"task name {directory.name!r} {problem}", path=directory)
        if directory.name.casefold() in {t.casefold() for t in tables}:
            raise SchemaError(f"task {directory.name!r} has the name of a table; dlkit makes a "
                              "table of each task, named after it", path=directory)
        task = _read_task(root, directory, tables)
        if isinstance(task, str):
            link.append(task)
        else:
            entity.append(task)
    if link and tasks is None:
        warnings.warn(f"{'tasks' if len(link) > 1 else 'task'} {', '.join(map(repr, link))} "
                      "left out: link prediction (RelBench recommendation tasks, each row "
                      "listing destination rows) is not supported by dlkit yet",
                      RelbenchWarning, stacklevel=2)
    elif link:
        others = [t.name for t in entity] or _entity_task_names(
            root, [d for d in available if d.name not in link], tables)
        hint = (" choose the others with " + " ".join(f"--task {t}" for t in others)
                if others else "")
        raise SchemaError(
            f"{'tasks' if len(link) > 1 else 'task'} {', '.join(map(repr, link))}: "
            f"link prediction (RelBench recommendation {'tasks' if len(link) > 1 else 'task'}: "
            "each row lists destination rows) is not supported by dlkit yet;" + (hint or
            " leave it out by naming the tasks to import"),
            path=task_root)
    return RelbenchLayout(root=root, tables=tuple(tables.values()), tasks=tuple(entity))


def _entity_task_names(root: Path, directories: list[Path],
                       tables: dict[str, RelbenchTable]) -> list[str]:
    """The tasks among ``directories`` dlkit can import (to name in an error about the
    others): any that cannot be read or is link prediction is left out."""
    names = []
    for directory in directories:
        try:
            if not isinstance(_read_task(root, directory, tables), str):
                names.append(directory.name)
        except DlkitError:
            continue
    return names


def _column_types(source: TableSource, skip: set[str], batch_rows: int,
                  notes: dict[tuple[str, str], str]) -> tuple[dict[str, str], list[str]]:
    """Inferred semantic types of the columns not in ``skip``, and the unsupported ones."""
    types: dict[str, str] = {}
    exclude: list[str] = []
    for f in source.schema:
        if f.name in skip:
            continue
        family = type_family(f.type)
        if family == "unsupported":
            exclude.append(f.name)
            notes[(source.name, f.name)] = f"{f.type}: not supported"
            continue
        types[f.name] = (infer_string_column(source, f.name, batch_rows) if family == "string"
                         else infer_stype(family))
        notes[(source.name, f.name)] = str(f.type)
    return types, exclude


def relbench_schema(root: str | Path, *, name: str | None = None,
                    tasks: Sequence[str] | None = None,
                    batch_rows: int = DEFAULT_BATCH_ROWS) -> tuple[Schema, str]:
    """``(schema, dlkit.toml text)`` for the RelBench dataset at ``root``; the paths in it
    are relative to ``root``, the input directory of ``dlkit preprocess``."""
    layout = read_relbench(root, tasks=tasks)
    root = layout.root
    notes: dict[tuple[str, str], str] = {}
    specs = []
    for table in sorted(layout.tables, key=lambda t: t.name):
        source = TableSource.open(table.name, root / table.path)
        keys = {table.primary_key, *dict(table.foreign_keys)} - {None}
        types, exclude = _column_types(source, keys, batch_rows, notes)  # type: ignore[arg-type]
        specs.append(TableSpec(name=table.name, path=table.path, primary_key=table.primary_key,
                               time_column=table.time_column, foreign_keys=table.foreign_keys,
                               exclude=tuple(exclude), types=types))
    task_specs = []
    lags = []
    for task in layout.tasks:
        specs.append(TableSpec(name=task.name, time_column=task.time_column,
                               foreign_keys=((task.entity_column, task.entity_table),),
                               split_paths=task.paths,
                               types={task.target: "boolean"} if task.binary else {}))
        task_specs.append(TaskSpec(name=task.name, table=task.name, target=task.target,
                                   label_lag_us=task.label_lag_us or 0, split="given",
                                   entity_table=task.entity_table))
        lags.append(f"{task.name}: " + (render_duration(task.label_lag_us)
                                        if task.label_lag_us else "none found, 0"))
    schema = Schema(name=name or root.resolve().name, tables=tuple(specs),
                    tasks=tuple(task_specs))
    header = (f"dlkit.toml for the RelBench dataset {root}, from RelBench's own metadata\n"
              "(keys, time columns, tasks); column types are inferred. Paths are relative to\n"
              "that directory: `dlkit preprocess` it, or run `dlkit import relbench`.\n"
              "Semantic types: numeric, boolean, timestamp, categorical, text; a task's\n"
              "integer labels that are all 0 or 1 are boolean (binary classification).\n"
              "Each task's label_lag is the spacing of its training timestamps (RelBench's\n"
              "label at t covers (t, t + timedelta]): "
              + ("; ".join(lags) if lags else "no tasks") + ".")
    return schema, render_schema(schema, notes, header)
