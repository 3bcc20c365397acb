"""The relational schema file ``dlkit.toml``: parsing, validation and rendering a draft.

A schema names every table to preprocess (in output order), its primary key, foreign keys,
optional time column, column exclusions and semantic-type overrides, and the tasks::

    format_version = 1            # optional; only 1 exists
    name = "shop"                 # database id (default: the input directory's name)

    [tables.users]                # tables in this order become table 0, 1, ...
    path = "users.parquet"        # file or directory of parts, relative to the input dir
                                  # (default: "<name>.parquet", else the directory "<name>/")
    primary_key = "user_id"       # integer or string column, or a list of them (a composite
                                  # key); optional for tables nobody references (event tables)
    time_column = "signup_time"   # optional timestamp/date column: the row's time
                                  # (or an integer column with time_unit = "year", "yyyymm",
                                  # "yyyymmdd", "s", "ms", "us" or "ns"; time_position =
                                  # "end" puts a year/month/day row at its period's end)
    known_after = { score = "6h" }  # optional: a column known only 6 hours after its row
    exclude = ["email"]           # optional: columns not to preprocess
    foreign_keys = { referrer = "users" }     # column -> parent table, in this order; a
                                  # composite one: name = { columns = [...], table = "..." }
    types = { country = "categorical" }       # semantic-type overrides

    [tasks.churn]                 # a task: seeds are the table's rows with a non-null target
    table = "users"
    target = "churned"
    label_lag = "30d"             # optional: a row's target is known 30 days after its time
    split = "time"                # optional: "hash" (default), "time" or "given"
    val_from = 2024-01-01         #   time splits: val from here, test from test_from
    test_from = 2024-07-01

    [tasks.user_churn]            # a task table: rows of (entity, observation time, label)
    entity_table = "users"        # makes table "user_churn" with a foreign key to users
    entity_column = "user_id"
    time_column = "timestamp"
    target = "churn"
    split = "given"               # rows from these files are train / val / test
    path = { train = "churn/train.parquet", val = "churn/val.parquet", test = "churn/test.parquet" }

The full format, with an example per feature, is in docs/schema.md.

Parsing checks the file's own consistency (names, references between tables, tasks); checks
against the Parquet data happen when the input is scanned (``dlkit.db.write.source``).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dlkit.db.format import STYPE_BY_NAME, STYPE_NAMES, path_name_problem
from dlkit.db.metadata_records import MAX_DATABASE_ID
from dlkit.db.schema.durations import (
    parse_lag,
    parse_table_instant,
)
from dlkit.db.time_units import (
    TIME_POSITION_NAMES,
    TIME_UNIT_NAMES,
    TimePosition,
    TimeUnit,
)
from dlkit.errors import SchemaError
from dlkit.files import read_regular
from dlkit.text import did_you_mean

SCHEMA_FILE = "dlkit.toml"


_TOP_KEYS = {"format_version", "name", "tables", "tasks", "aggregates"}
_TABLE_KEYS = {"path", "primary_key", "time_column", "exclude", "foreign_keys", "types",
               "time_unit", "time_position", "known_after"}
_TASK_KEYS = {"table", "target", "label_lag", "boundary", "static", "split", "val_from",
              "test_from"}
# A task defined by its own table: these keys make that table (named after the task).
_TASK_TABLE_KEYS = {"kind", "entity_table", "entity_column", "time_column", "path", "exclude",
                    "types", "time_unit", "time_position"}
SPLIT_KINDS = ("hash", "time", "given")
BOUNDARIES = ("inclusive", "strict")
SPLIT_NAMES = ("train", "val", "test")


# A primary key: one column's name, or the names of a composite key's columns (two or more).
PrimaryKey = str | tuple[str, ...]


def key_columns(key: PrimaryKey | None) -> tuple[str, ...]:
    """The columns of a primary key (none without one)."""
    if key is None:
        return ()
    return (key,) if isinstance(key, str) else key


def key_label(key: PrimaryKey) -> str:
    """How messages name a key: ``id`` or ``(yearID, teamID)``."""
    return key if isinstance(key, str) else f"({', '.join(key)})"


@dataclass(frozen=True)
class TableSpec:
    name: str
    path: str | None = None  # or, for given splits, see split_paths
    primary_key: PrimaryKey | None = None
    time_column: str | None = None
    # (name, parent table): the name is the column of a single-column foreign key, or the
    # name of a composite one, whose columns ``composite_fks[name]`` holds
    foreign_keys: tuple[tuple[str, str], ...] = ()
    exclude: tuple[str, ...] = ()
    types: dict[str, str] = field(default_factory=dict)
    # Given splits: the (train, val, test) files or directories whose rows, in that order,
    # are the table's rows (``path`` is then None).
    split_paths: tuple[str, str, str] | None = None
    composite_fks: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # An integer time column's unit, and which instant of a calendar period is the row's time
    time_unit: TimeUnit | None = None
    time_position: TimePosition = TimePosition.START
    # (column, lag in microseconds > 0): the column's value is known only that long after
    # its row's time (a lag of 0 is accepted in the file and dropped: it hides nothing)
    known_after: tuple[tuple[str, int], ...] = ()

    def fk_columns(self, name: str) -> tuple[str, ...]:
        """The columns of foreign key ``name`` (itself, unless it is composite)."""
        return self.composite_fks.get(name, (name,))

    def key_column_set(self) -> set[str]:
        """Every column of the primary key and of the foreign keys."""
        out = set(key_columns(self.primary_key))
        for name, _ in self.foreign_keys:
            out.update(self.fk_columns(name))
        return out


@dataclass(frozen=True)
class TaskSpec:
    """A task: the rows of ``table`` with a non-null ``target`` are its seeds.

    ``label_lag_us``: a row's target becomes known that long after the row's time; before
    that, every sequence shows the cell hidden (``is_hidden``). ``strict``: rows at exactly
    the observation time are not visible (default: they are). ``static``: the table has no
    time column on purpose (no warning that its context sees every row). ``split``: "hash"
    (by the sampler's split seed and ratios), "time" (observation time before ``val_from_us``
    is train, before ``test_from_us`` val, else test) or "given" (the table's split files).
    ``entity_table`` is set when the task's table was declared by the task itself.
    """

    name: str
    table: str
    target: str
    label_lag_us: int = 0
    strict: bool = False
    static: bool = False
    split: str = "hash"
    val_from_us: int | None = None
    test_from_us: int | None = None
    entity_table: str | None = None


@dataclass(frozen=True)
class AggregateSpec:
    """``[aggregates]``: ``counts`` asks for the as-of child count of every child edge type
    (each (child table, parent table) pair a foreign key links); ``recency`` for the days
    since the latest visible child of every such pair; ``columns`` for the as-of sum and mean
    of these numeric or boolean columns of a child table, per parent table its foreign keys
    point at. The default asks for nothing (a database without aggregates)."""

    counts: bool = False
    columns: tuple[tuple[str, tuple[str, ...]], ...] = ()
    recency: bool = False

    @property
    def any(self) -> bool:
        return self.counts or self.recency or any(cols for _, cols in self.columns)


@dataclass(frozen=True)
class Schema:
    name: str
    tables: tuple[TableSpec, ...]
    tasks: tuple[TaskSpec, ...]
    source: str = SCHEMA_FILE
    aggregates: AggregateSpec = AggregateSpec()

    def table(self, name: str) -> TableSpec:
        for spec in self.tables:
            if spec.name == name:
                return spec
        raise KeyError(name)


def _err(source: str, message: str) -> SchemaError:
    return SchemaError(message, path=source)


def _need_str(value: Any, what: str, source: str) -> str:
    if not isinstance(value, str) or not value:
        raise _err(source, f"{what} must be a non-empty string, got {value!r}")
    return value


def parse_schema(text: str, *, source: str = SCHEMA_FILE, default_name: str = "database") -> Schema:
    """Parse and check the text of a ``dlkit.toml``. Raises :class:`SchemaError`."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _err(source, f"not valid TOML: {exc}") from None
    unknown = set(doc) - _TOP_KEYS
    if unknown:
        raise _err(source, f"unknown top-level key(s) {sorted(unknown)}; allowed: {sorted(_TOP_KEYS)}")
    version = doc.get("format_version", 1)
    if type(version) is not int or version != 1:  # not 1.0, not true
        raise _err(source, f"format_version must be 1, got {version!r}")
    name = doc.get("name", default_name)
    _need_str(name, "name", source)
    if len(name) > MAX_DATABASE_ID:  # open and verify refuse a longer database id
        raise _err(source, f"name is {len(name):,} characters long; at most {MAX_DATABASE_ID}")
    if "/" in name:  # a dataset is named DATABASE_ID/TASK/SPLIT
        raise _err(source, f"name {name!r} holds '/', which separates the parts of a dataset "
                           "name (DATABASE_ID/TASK/SPLIT)")

    raw_tables = doc.get("tables")
    if not isinstance(raw_tables, dict) or not raw_tables:
        raise _err(source, "no tables: add at least one [tables.<name>] section")
    tables: list[TableSpec] = []
    seen_folded: dict[str, str] = {}
    for tname, raw in raw_tables.items():
        problem = path_name_problem(tname)
        if problem:
            raise _err(source, f"table {tname!r}: name {problem}")
        folded = tname.casefold()
        if folded in seen_folded:
            raise _err(source, f"tables {seen_folded[folded]!r} and {tname!r} differ only in case")
        seen_folded[folded] = tname
        tables.append(_parse_table(tname, raw, source))

    raw_tasks = doc.get("tasks", {})
    if not isinstance(raw_tasks, dict):
        raise _err(source, "tasks must be a table of [tasks.<name>] sections")
    for task_name, raw in raw_tasks.items():
        if isinstance(raw, dict) and ("entity_table" in raw or "kind" in raw):
            table_spec = _task_table(task_name, raw, source)
            folded = task_name.casefold()
            if folded in seen_folded:
                raise _err(source, f"task {task_name!r} declares its own table, but table "
                                   f"{seen_folded[folded]!r} has that name")
            seen_folded[folded] = task_name
            tables.append(table_spec)

    by_name = {t.name: t for t in tables}
    for spec in tables:
        for column, parent in spec.foreign_keys:
            if parent not in by_name:
                raise _err(source, f"table {spec.name!r}, column {column!r}: foreign key refers to "
                                   f"table {parent!r}, which is not in the schema"
                                   f"{did_you_mean(parent, by_name)}")
            parent_key = by_name[parent].primary_key
            if parent_key is None:
                raise _err(source, f"table {spec.name!r}, column {column!r}: foreign key refers to "
                                   f"table {parent!r}, which has no primary_key")
            parts = spec.fk_columns(column)
            if len(parts) != len(key_columns(parent_key)):
                raise _err(source, f"table {spec.name!r}, foreign key {column!r}: "
                                   f"{len(parts)} column(s) {list(parts)}, but the primary key "
                                   f"{key_label(parent_key)} of table {parent!r} has "
                                   f"{len(key_columns(parent_key))}")

    tasks: list[TaskSpec] = []
    task_folded: dict[str, str] = {}
    for task_name, raw in raw_tasks.items():
        problem = path_name_problem(task_name)
        if problem:
            raise _err(source, f"task {task_name!r}: name {problem}")
        folded = task_name.casefold()  # one directory each, on case-insensitive file systems too
        if folded in task_folded:
            raise _err(source, f"tasks {task_folded[folded]!r} and {task_name!r} differ only in "
                               "case")
        task_folded[folded] = task_name
        if not isinstance(raw, dict):
            raise _err(source, f"task {task_name!r} must be a table with 'table' and 'target'")
        entity_table = raw.get("entity_table") if ("entity_table" in raw or "kind" in raw) \
            else None
        allowed = _TASK_KEYS | _TASK_TABLE_KEYS if entity_table is not None else _TASK_KEYS
        unknown = set(raw) - allowed
        if unknown:
            raise _err(source, f"task {task_name!r}: unknown key(s) {sorted(unknown)}")
        if entity_table is not None:
            if "table" in raw:
                raise _err(source, f"task {task_name!r}: a task with entity_table declares "
                                   "its own table (named after the task): drop 'table'")
            table = task_name
        else:
            table = _need_str(raw.get("table"), f"task {task_name!r}: table", source)
        target = _need_str(raw.get("target"), f"task {task_name!r}: target", source)
        if table not in by_name:
            raise _err(source, f"task {task_name!r}: table {table!r} is not in the schema"
                               f"{did_you_mean(table, by_name)}")
        spec = by_name[table]
        if target in spec.key_column_set():
            raise _err(source, f"task {task_name!r}: table {table!r}, column {target!r}: a key "
                               "column cannot be a target")
        if target in spec.exclude:
            raise _err(source, f"task {task_name!r}: table {table!r}, column {target!r} is "
                               "excluded, so it cannot be a target")
        if spec.types.get(target) == "text":
            raise _err(source, f"task {task_name!r}: table {table!r}, column {target!r} is text; "
                               "targets must be numeric, boolean, timestamp or categorical")
        tasks.append(_task_options(TaskSpec(task_name, table, target, entity_table=entity_table),
                                   raw, spec, source))
    aggregates = parse_aggregates(doc.get("aggregates"), by_name, source)
    return Schema(name=name, tables=tuple(tables), tasks=tuple(tasks), source=source,
                  aggregates=aggregates)


def parse_aggregates(raw: Any, tables: dict[str, TableSpec], source: str) -> AggregateSpec:
    """The ``[aggregates]`` section (absent: none). Column types are checked against the data
    when it is scanned (``dlkit.db.write.aggregates``)."""
    if raw is None:
        return AggregateSpec()
    if not isinstance(raw, dict):
        raise _err(source, "aggregates must be a table: [aggregates] with counts, recency and "
                           "columns")
    unknown = set(raw) - {"counts", "recency", "columns"}
    if unknown:
        raise _err(source, f"aggregates: unknown key(s) {sorted(unknown)}; allowed: "
                           "['columns', 'counts', 'recency']")
    flags: dict[str, bool] = {}
    for key in ("counts", "recency"):
        value = raw.get(key, False)
        if not isinstance(value, bool):
            raise _err(source, f"aggregates.{key} must be true or false, got {value!r}")
        flags[key] = value
    raw_columns = raw.get("columns", {})
    if not isinstance(raw_columns, dict):
        raise _err(source, "aggregates.columns must be a table: { child_table = [columns] }")
    columns: list[tuple[str, tuple[str, ...]]] = []
    for tname, names in raw_columns.items():
        where_ = f"aggregates.columns.{tname}"
        if tname not in tables:
            raise _err(source, f"{where_}: table {tname!r} is not in the schema")
        spec = tables[tname]
        if not spec.foreign_keys:
            raise _err(source, f"{where_}: table {tname!r} has no foreign key, so no parent "
                               "row to aggregate its rows for")
        if (not isinstance(names, list) or not names
                or not all(isinstance(n, str) and n for n in names)):
            raise _err(source, f"{where_} must be a non-empty list of column names")
        if len(set(names)) != len(names):
            raise _err(source, f"{where_} names a column twice")
        for name in names:
            if name == spec.primary_key or name in dict(spec.foreign_keys):
                raise _err(source, f"{where_}: column {name!r} is a key column")
            if name in spec.exclude:
                raise _err(source, f"{where_}: column {name!r} is excluded")
        columns.append((tname, tuple(names)))
    return AggregateSpec(counts=flags["counts"], columns=tuple(columns),
                         recency=flags["recency"])


def _task_table(task_name: str, raw: dict[str, Any], source: str) -> TableSpec:
    """The table a task declares itself: (entity key, observation time, label, ...) rows with
    a foreign key to the entity's table and no primary key."""
    where = f"task {task_name!r}"
    kind = raw.get("kind", "table")
    if kind != "table":
        raise _err(source, f"{where}: kind must be \"table\" (a task with its own table), "
                           f"got {kind!r}")
    entity_table = _need_str(raw.get("entity_table"), f"{where}: entity_table", source)
    entity_column = _need_str(raw.get("entity_column"), f"{where}: entity_column", source)
    time_column = raw.get("time_column")
    if time_column is None and not raw.get("static", False):
        raise _err(source, f"{where}: a task table needs a time_column (its rows' observation "
                           "times), or static = true")
    table_raw = {"foreign_keys": {entity_column: entity_table}}
    for key in ("time_column", "path", "exclude", "types", "time_unit", "time_position"):
        if key in raw:
            table_raw[key] = raw[key]
    return _parse_table(task_name, table_raw, source)


def _task_options(task: TaskSpec, raw: dict[str, Any], table: TableSpec,
                  source: str) -> TaskSpec:
    """``task`` with its lag, boundary, static flag and split rule from ``raw``."""
    where = f"task {task.name!r}"
    lag = parse_lag(raw["label_lag"], f"{where}: label_lag", table, source) \
        if "label_lag" in raw else 0
    boundary = raw.get("boundary", "inclusive")
    if boundary not in BOUNDARIES:
        raise _err(source, f"{where}: boundary must be \"inclusive\" (rows at the observation "
                           f"time are visible) or \"strict\" (they are not), got {boundary!r}")
    static = raw.get("static", False)
    if not isinstance(static, bool):
        raise _err(source, f"{where}: static must be true or false, got {static!r}")
    if static and table.time_column is not None:
        raise _err(source, f"{where}: static = true, but table {table.name!r} has a time "
                           "column")
    split = raw.get("split", "hash")
    if split not in SPLIT_KINDS:
        raise _err(source, f"{where}: split must be one of {', '.join(SPLIT_KINDS)}, "
                           f"got {split!r}")
    val_from = test_from = None
    if split == "time":
        if table.time_column is None:
            raise _err(source, f"{where}: a time split needs a time column, and table "
                               f"{table.name!r} has none")
        for key in ("val_from", "test_from"):
            if key not in raw:
                raise _err(source, f"{where}: a time split needs val_from and test_from")
        val_from = parse_table_instant(raw["val_from"], f"{where}: val_from", table, source)
        test_from = parse_table_instant(raw["test_from"], f"{where}: test_from", table, source)
        if test_from < val_from:
            raise _err(source, f"{where}: test_from is before val_from")
    else:
        for key in ("val_from", "test_from"):
            if key in raw:
                raise _err(source, f"{where}: {key} applies to split = \"time\" only")
    if split == "given" and table.split_paths is None:
        raise _err(source, f"{where}: a given split needs table {table.name!r}'s path to be "
                           "{ train = ..., val = ..., test = ... }")
    if lag and table.time_column is None:
        raise _err(source, f"{where}: label_lag needs a time column, and table "
                           f"{table.name!r} has none")
    return TaskSpec(task.name, task.table, task.target, label_lag_us=lag,
                    strict=boundary == "strict", static=static, split=split,
                    val_from_us=val_from, test_from_us=test_from,
                    entity_table=task.entity_table)


def _parse_table(tname: str, raw: Any, source: str) -> TableSpec:
    where = f"table {tname!r}"
    if not isinstance(raw, dict):
        raise _err(source, f"{where} must be a table of settings")
    unknown = set(raw) - _TABLE_KEYS
    if unknown:
        raise _err(source, f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(_TABLE_KEYS)}")
    path = raw.get("path")
    split_paths = None
    if isinstance(path, dict):
        if set(path) != set(SPLIT_NAMES):
            raise _err(source, f"{where}: path must be a file or directory, or a table "
                               "{ train = ..., val = ..., test = ... }")
        split_paths = tuple(_need_str(path[k], f"{where}: path.{k}", source)
                            for k in SPLIT_NAMES)
        path = None
    elif path is not None:
        _need_str(path, f"{where}: path", source)
    pk = _parse_primary_key(raw.get("primary_key"), where, source)
    time_column = raw.get("time_column")
    if time_column is not None:
        _need_str(time_column, f"{where}: time_column", source)
    exclude = raw.get("exclude", [])
    if not isinstance(exclude, list) or not all(isinstance(c, str) and c for c in exclude):
        raise _err(source, f"{where}: exclude must be a list of column names")
    fks = raw.get("foreign_keys", {})
    if not isinstance(fks, dict):
        raise _err(source, f"{where}: foreign_keys must map column -> parent table")
    foreign_keys = []
    composite: dict[str, tuple[str, ...]] = {}
    for column, parent in fks.items():
        if isinstance(parent, dict):
            parent, parts = _parse_composite_fk(column, parent, where, source)
            if parts != (column,):
                composite[column] = parts
        _need_str(parent, f"{where}, column {column!r}: foreign key parent table", source)
        if column == pk:
            raise _err(source, f"{where}, column {column!r}: the primary key cannot also be a "
                               "foreign key")
        if column in composite and composite[column] == key_columns(pk):
            raise _err(source, f"{where}, foreign key {column!r}: the primary key cannot also "
                               "be a foreign key")
        foreign_keys.append((column, parent))
    types = raw.get("types", {})
    if not isinstance(types, dict):
        raise _err(source, f"{where}: types must map column -> semantic type")
    for column, stype in types.items():
        if not isinstance(stype, str) or stype not in STYPE_BY_NAME:
            raise _err(source, f"{where}, column {column!r}: unknown type {stype!r}; use one of "
                               f"{', '.join(STYPE_NAMES)}")
    keys = set(key_columns(pk))
    for column, _ in foreign_keys:
        keys.update(composite.get(column, (column,)))
    for column in exclude:
        if column in keys:
            raise _err(source, f"{where}, column {column!r}: a key column cannot be excluded")
    for column in types:
        if column in keys:
            raise _err(source, f"{where}, column {column!r}: key columns have no semantic type")
        if column in exclude:
            raise _err(source, f"{where}, column {column!r} is both excluded and typed")
    if time_column is not None and time_column in exclude:
        raise _err(source, f"{where}, column {time_column!r}: the time column cannot be "
                           "excluded")
    if time_column is not None and time_column in keys and "time_unit" not in raw:
        raise _err(source, f"{where}, column {time_column!r}: a key column can be the time "
                           "column only as an integer with a time_unit (e.g. time_unit = "
                           "\"year\"); a timestamp cannot be a key")
    if time_column is not None and types.get(time_column, "timestamp") != "timestamp":
        raise _err(source, f"{where}, column {time_column!r}: the time column must have type "
                           "timestamp")
    spec = TableSpec(name=tname, path=path, primary_key=pk, time_column=time_column,
                     foreign_keys=tuple(foreign_keys), exclude=tuple(exclude), types=dict(types),
                     split_paths=split_paths,  # type: ignore[arg-type]
                     composite_fks=composite)
    return _time_options(spec, raw, keys, source)


def _time_options(spec: TableSpec, raw: dict[str, Any], keys: set[str],
                  source: str) -> TableSpec:
    """``spec`` with its time unit, time position and column lags from ``raw``."""
    where = f"table {spec.name!r}"
    unit = position = None
    if "time_unit" in raw:
        if spec.time_column is None:
            raise _err(source, f"{where}: time_unit needs a time_column")
        if raw["time_unit"] not in TIME_UNIT_NAMES:
            raise _err(source, f"{where}: time_unit must be one of {', '.join(TIME_UNIT_NAMES)},"
                               f" got {raw['time_unit']!r}")
        unit = TimeUnit(raw["time_unit"])
    if "time_position" in raw:
        if unit is None or not unit.calendar:
            raise _err(source, f"{where}: time_position applies to time_unit = \"year\", "
                               "\"yyyymm\" or \"yyyymmdd\" only")
        if raw["time_position"] not in TIME_POSITION_NAMES:
            raise _err(source, f"{where}: time_position must be \"start\" (the first instant "
                               "of the period, the default) or \"end\" (its last "
                               f"microsecond), got {raw['time_position']!r}")
        position = TimePosition(raw["time_position"])
    spec = replace(spec, time_unit=unit, time_position=position or TimePosition.START)
    lags_raw = raw.get("known_after", {})
    if not isinstance(lags_raw, dict):
        raise _err(source, f"{where}: known_after must map column -> lag, like "
                           "{ score = \"6h\" }")
    if lags_raw and spec.time_column is None:
        raise _err(source, f"{where}: known_after needs a time_column (a lag counts from the "
                           "row's time)")
    lags = []
    for column, value in lags_raw.items():
        if column in keys or column in spec.exclude or column == spec.time_column:
            raise _err(source, f"{where}, column {column!r}: known_after applies to feature "
                               "columns, not to a key, excluded or time column")
        lag = parse_lag(value, f"{where}, column {column!r}: known_after", spec, source)
        if lag:
            lags.append((column, lag))
    return replace(spec, known_after=tuple(lags))


def _column_list(value: Any, what: str, source: str) -> tuple[str, ...]:
    """A non-empty list of distinct column names."""
    if (not isinstance(value, list) or not value
            or not all(isinstance(c, str) and c for c in value)):
        raise _err(source, f"{what} must be a column name or a non-empty list of column "
                           f"names, got {value!r}")
    if len(set(value)) != len(value):
        raise _err(source, f"{what} names a column twice: {value!r}")
    return tuple(value)


def _parse_primary_key(value: Any, where: str, source: str) -> PrimaryKey | None:
    """A string (one column) or a list of columns (a composite key; a list of one is that
    column)."""
    if value is None or isinstance(value, str):
        return value if value is None else _need_str(value, f"{where}: primary_key", source)
    parts = _column_list(value, f"{where}: primary_key", source)
    return parts[0] if len(parts) == 1 else parts


def _parse_composite_fk(name: str, value: dict[str, Any], where: str,
                        source: str) -> tuple[str, tuple[str, ...]]:
    """``{ columns = [...], table = "Parent" }``: (parent table, columns)."""
    what = f"{where}, foreign key {name!r}"
    unknown = set(value) - {"columns", "table"}
    if unknown or "columns" not in value or "table" not in value:
        raise _err(source, f"{what} must be \"Parent\" or {{ columns = [...], table = "
                           f"\"Parent\" }}, got {value!r}")
    parent = _need_str(value["table"], f"{what}: table", source)
    parts = _column_list(value["columns"], f"{what}: columns", source)
    if len(parts) == 1 and parts[0] != name:
        raise _err(source, f"{what}: a foreign key of one column is written "
                           f"{parts[0]} = \"{parent}\"")
    return parent, parts


def load_schema(path: str | os.PathLike[str], *, default_name: str | None = None) -> Schema:
    """Read and parse a ``dlkit.toml`` file."""
    p = Path(path)
    try:
        text = read_regular(p).decode("utf-8")
    except FileNotFoundError:
        raise SchemaError("schema file not found (draft one with `dlkit schema infer DIR`)",
                          path=p) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SchemaError(f"cannot read schema file: {exc}", path=p) from None
    return parse_schema(text, source=str(p), default_name=default_name or p.parent.resolve().name)
