"""The relational schema file ``dlkit.toml``: parsing, validation and rendering a draft.

A schema names every table to preprocess (in output order), its primary key, foreign keys,
optional time column, column exclusions and semantic-type overrides, and the tasks::

    format_version = 1            # optional; only 1 exists
    name = "shop"                 # database id (default: the input directory's name)

    [tables.users]                # tables in this order become table 0, 1, ...
    path = "users.parquet"        # file or directory of parts, relative to the input dir
                                  # (default: "<name>.parquet", else the directory "<name>/")
    primary_key = "user_id"       # integer or string column; optional for tables nobody
                                  # references (event tables)
    time_column = "signup_time"   # optional timestamp/date column: the row's time
    exclude = ["email"]           # optional: columns not to preprocess
    foreign_keys = { referrer = "users" }     # column -> parent table, in this order
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
against the Parquet data happen when the input is scanned (``dlkit.db.build.source``).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlkit.db.format import STYPE_BY_NAME, STYPE_NAMES, path_name_problem
from dlkit.db.read.checks import MAX_DATABASE_ID
from dlkit.errors import SchemaError
from dlkit.files import read_regular
from dlkit.text import did_you_mean

SCHEMA_FILE = "dlkit.toml"


_TOP_KEYS = {"format_version", "name", "tables", "tasks"}
_TABLE_KEYS = {"path", "primary_key", "time_column", "exclude", "foreign_keys", "types"}
_TASK_KEYS = {"table", "target", "label_lag", "boundary", "static", "split", "val_from",
              "test_from"}
# A task defined by its own table: these keys make that table (named after the task).
_TASK_TABLE_KEYS = {"kind", "entity_table", "entity_column", "time_column", "path", "exclude",
                    "types"}
SPLIT_KINDS = ("hash", "time", "given")
BOUNDARIES = ("inclusive", "strict")
SPLIT_NAMES = ("train", "val", "test")
_DURATION_PART = re.compile(r"(\d+)\s*(us|µs|ms|s|m|h|d|w)")
_DURATION_US = {"us": 1, "µs": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000,
                "h": 3_600_000_000, "d": 86_400_000_000, "w": 604_800_000_000}
MAX_DURATION_US = (1 << 62)


@dataclass(frozen=True)
class TableSpec:
    name: str
    path: str | None = None  # or, for given splits, see split_paths
    primary_key: str | None = None
    time_column: str | None = None
    foreign_keys: tuple[tuple[str, str], ...] = ()
    exclude: tuple[str, ...] = ()
    types: dict[str, str] = field(default_factory=dict)
    # Given splits: the (train, val, test) files or directories whose rows, in that order,
    # are the table's rows (``path`` is then None).
    split_paths: tuple[str, str, str] | None = None


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
class Schema:
    name: str
    tables: tuple[TableSpec, ...]
    tasks: tuple[TaskSpec, ...]
    source: str = SCHEMA_FILE

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
            if by_name[parent].primary_key is None:
                raise _err(source, f"table {spec.name!r}, column {column!r}: foreign key refers to "
                                   f"table {parent!r}, which has no primary_key")

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
        if target == spec.primary_key or target in dict(spec.foreign_keys):
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
    return Schema(name=name, tables=tuple(tables), tasks=tuple(tasks), source=source)


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
    for key in ("time_column", "path", "exclude", "types"):
        if key in raw:
            table_raw[key] = raw[key]
    return _parse_table(task_name, table_raw, source)


def parse_duration(value: Any, what: str, source: str) -> int:
    """Microseconds of a duration like ``"6h"``, ``"1d12h"``, ``"90s"`` or ``"250ms"``
    (units us, ms, s, m, h, d, w; 0 needs no unit)."""
    if isinstance(value, str):
        text = value.strip()
        if text == "0":
            return 0
        total, pos = 0, 0
        for match in _DURATION_PART.finditer(text):
            if text[pos:match.start()].strip():
                break
            total += int(match.group(1)) * _DURATION_US[match.group(2)]
            pos = match.end()
        else:
            if pos and not text[pos:].strip() and total <= MAX_DURATION_US:
                return total
    raise _err(source, f"{what} must be a duration like \"6h\", \"7d\" or \"1d12h\" (units "
                       f"us, ms, s, m, h, d, w), got {value!r}")


def parse_instant(value: Any, what: str, source: str) -> int:
    """Microseconds since the epoch (UTC) of a TOML date or date-time, or an ISO 8601 string
    (a time without an offset is UTC)."""
    import datetime as dt

    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise _err(source, f"{what} must be a date or date-time like 2024-01-01 or "
                               f"2024-01-01T12:00:00Z, got {value!r}") from None
    if isinstance(value, dt.datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
    elif isinstance(value, dt.date):
        moment = dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC)
    else:
        raise _err(source, f"{what} must be a date or date-time like 2024-01-01, got {value!r}")
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    delta = moment - epoch
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _task_options(task: TaskSpec, raw: dict[str, Any], table: TableSpec,
                  source: str) -> TaskSpec:
    """``task`` with its lag, boundary, static flag and split rule from ``raw``."""
    where = f"task {task.name!r}"
    lag = parse_duration(raw["label_lag"], f"{where}: label_lag", source) \
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
        val_from = parse_instant(raw["val_from"], f"{where}: val_from", source)
        test_from = parse_instant(raw["test_from"], f"{where}: test_from", source)
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
    pk = raw.get("primary_key")
    if pk is not None:
        _need_str(pk, f"{where}: primary_key", source)
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
    for column, parent in fks.items():
        _need_str(parent, f"{where}, column {column!r}: foreign key parent table", source)
        if column == pk:
            raise _err(source, f"{where}, column {column!r}: the primary key cannot also be a "
                               "foreign key")
        foreign_keys.append((column, parent))
    types = raw.get("types", {})
    if not isinstance(types, dict):
        raise _err(source, f"{where}: types must map column -> semantic type")
    for column, stype in types.items():
        if not isinstance(stype, str) or stype not in STYPE_BY_NAME:
            raise _err(source, f"{where}, column {column!r}: unknown type {stype!r}; use one of "
                               f"{', '.join(STYPE_NAMES)}")
    keys = {pk} | set(dict(foreign_keys))
    for column in exclude:
        if column in keys:
            raise _err(source, f"{where}, column {column!r}: a key column cannot be excluded")
    for column in types:
        if column in keys:
            raise _err(source, f"{where}, column {column!r}: key columns have no semantic type")
        if column in exclude:
            raise _err(source, f"{where}, column {column!r} is both excluded and typed")
    if time_column is not None and (time_column in keys or time_column in exclude):
        raise _err(source, f"{where}, column {time_column!r}: the time column cannot be a key "
                           "or excluded")
    if time_column is not None and types.get(time_column, "timestamp") != "timestamp":
        raise _err(source, f"{where}, column {time_column!r}: the time column must have type "
                           "timestamp")
    return TableSpec(name=tname, path=path, primary_key=pk, time_column=time_column,
                     foreign_keys=tuple(foreign_keys), exclude=tuple(exclude), types=dict(types),
                     split_paths=split_paths)  # type: ignore[arg-type]


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


# --- rendering a draft ------------------------------------------------------------------

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else toml_str(name)


def toml_str(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, and TOML also forbids a raw DEL."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _render_path(spec: TableSpec) -> str:
    if spec.split_paths is None:
        return toml_str(spec.path or "")
    parts = ", ".join(f"{k} = {toml_str(v)}" for k, v in zip(SPLIT_NAMES, spec.split_paths))
    return f"{{ {parts} }}"


def render_duration(us: int) -> str:
    """The shortest exact ``parse_duration`` text of ``us`` microseconds."""
    for unit in ("w", "d", "h", "m", "s", "ms"):
        if us and us % _DURATION_US[unit] == 0:
            return f"{us // _DURATION_US[unit]}{unit}"
    return f"{us}us" if us else "0"


def render_instant(us: int) -> str:
    import datetime as dt

    moment = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=us)
    return moment.isoformat().replace("+00:00", "Z")


def _render_task_options(task: TaskSpec) -> list[str]:
    out = []
    if task.label_lag_us:
        out.append(f"label_lag = {toml_str(render_duration(task.label_lag_us))}")
    if task.strict:
        out.append('boundary = "strict"')
    if task.static:
        out.append("static = true")
    if task.split != "hash":
        out.append(f"split = {toml_str(task.split)}")
    if task.split == "time":
        out.append(f"val_from = {render_instant(task.val_from_us or 0)}")
        out.append(f"test_from = {render_instant(task.test_from_us or 0)}")
    return out


def render_schema(schema: Schema, notes: dict[tuple[str, str], str] | None = None,
                  header: str = "") -> str:
    """TOML text of ``schema``; ``notes[(table, column)]`` become end-of-line comments."""
    notes = notes or {}
    out: list[str] = []
    if header:
        out.extend(f"# {line}".rstrip() for line in header.splitlines())
    out.append("format_version = 1")
    out.append(f"name = {toml_str(schema.name)}")
    own_tables = {task.table: task for task in schema.tasks if task.entity_table is not None}
    for spec in schema.tables:
        if spec.name in own_tables:
            continue  # written with its task
        out.append("")
        out.append(f"[tables.{toml_key(spec.name)}]")
        if spec.path is not None or spec.split_paths is not None:
            out.append(f"path = {_render_path(spec)}")
        if spec.primary_key is not None:
            line = f"primary_key = {toml_str(spec.primary_key)}"
            note = notes.get((spec.name, spec.primary_key))  # a key column has no type line
            out.append(f"{line:<40} # {note}" if note else line)
        else:
            out.append("# primary_key = \"...\"   # none found: only needed if other tables refer here")
        if spec.time_column is not None:
            out.append(f"time_column = {toml_str(spec.time_column)}")
        else:
            out.append("# time_column = \"...\"   # none found: rows are then visible at any time")
        excl = ", ".join(toml_str(c) for c in spec.exclude)
        out.append(f"exclude = [{excl}]")
        if spec.foreign_keys:
            out.append(f"[tables.{toml_key(spec.name)}.foreign_keys]")
            for column, parent in spec.foreign_keys:
                line = f"{toml_key(column)} = {toml_str(parent)}"
                note = notes.get((spec.name, column))
                out.append(f"{line:<40} # {note}" if note else line)
        if spec.types:
            out.append(f"[tables.{toml_key(spec.name)}.types]")
            for column, stype in spec.types.items():
                note = notes.get((spec.name, column))
                line = f"{toml_key(column)} = {toml_str(stype)}"
                out.append(f"{line:<40} # {note}" if note else line)
    out.append("")
    if schema.tasks:
        for task in schema.tasks:
            out.append(f"[tasks.{toml_key(task.name)}]")
            if task.entity_table is None:
                out.append(f"table = {toml_str(task.table)}")
            else:
                spec = schema.table(task.table)
                (entity_column, _), = spec.foreign_keys
                out.append(f"entity_table = {toml_str(task.entity_table)}")
                out.append(f"entity_column = {toml_str(entity_column)}")
                if spec.time_column is not None:
                    out.append(f"time_column = {toml_str(spec.time_column)}")
                if spec.path is not None or spec.split_paths is not None:
                    out.append(f"path = {_render_path(spec)}")
                if spec.exclude:
                    out.append(f"exclude = [{', '.join(toml_str(c) for c in spec.exclude)}]")
                if spec.types:
                    types = ", ".join(f"{toml_key(c)} = {toml_str(t)}"
                                      for c, t in spec.types.items())
                    out.append(f"types = {{ {types} }}")
            out.append(f"target = {toml_str(task.target)}")
            out.extend(_render_task_options(task))
            out.append("")
    else:
        out.append("# Tasks: each is a (table, target column); the table's rows with a non-null")
        out.append("# target are the seeds, observed at the row's time.")
        out.append("# [tasks.my_task]")
        out.append("# table = \"...\"")
        out.append("# target = \"...\"")
        out.append("")
    return "\n".join(out)
