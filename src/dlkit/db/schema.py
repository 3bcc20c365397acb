"""The relational schema file ``dlkit.toml``: parsing, validation and type inference.

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

Parsing checks the file's own consistency (names, references between tables, tasks); checks
against the Parquet data happen when the input is scanned (``dlkit.db.source``).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from dlkit.db.format import STYPE_BY_NAME, STYPE_NAMES, path_name_problem
from dlkit.errors import SchemaError
from dlkit.files import read_regular

SCHEMA_FILE = "dlkit.toml"

# Inference: a string column is categorical when it has at most this many distinct values
# and each value appears at least CATEGORICAL_MIN_REPEAT times on average; text otherwise.
CATEGORICAL_MAX_DISTINCT = 1000
CATEGORICAL_MIN_REPEAT = 2

_TOP_KEYS = {"format_version", "name", "tables", "tasks"}
_TABLE_KEYS = {"path", "primary_key", "time_column", "exclude", "foreign_keys", "types"}
_TASK_KEYS = {"table", "target"}


@dataclass(frozen=True)
class TableSpec:
    name: str
    path: str | None = None
    primary_key: str | None = None
    time_column: str | None = None
    foreign_keys: tuple[tuple[str, str], ...] = ()
    exclude: tuple[str, ...] = ()
    types: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskSpec:
    name: str
    table: str
    target: str


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

    by_name = {t.name: t for t in tables}
    for spec in tables:
        for column, parent in spec.foreign_keys:
            if parent not in by_name:
                raise _err(source, f"table {spec.name!r}, column {column!r}: foreign key refers to "
                                   f"table {parent!r}, which is not in the schema")
            if by_name[parent].primary_key is None:
                raise _err(source, f"table {spec.name!r}, column {column!r}: foreign key refers to "
                                   f"table {parent!r}, which has no primary_key")

    raw_tasks = doc.get("tasks", {})
    if not isinstance(raw_tasks, dict):
        raise _err(source, "tasks must be a table of [tasks.<name>] sections")
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
        unknown = set(raw) - _TASK_KEYS
        if unknown:
            raise _err(source, f"task {task_name!r}: unknown key(s) {sorted(unknown)}")
        table = _need_str(raw.get("table"), f"task {task_name!r}: table", source)
        target = _need_str(raw.get("target"), f"task {task_name!r}: target", source)
        if table not in by_name:
            raise _err(source, f"task {task_name!r}: table {table!r} is not in the schema")
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
        tasks.append(TaskSpec(task_name, table, target))
    return Schema(name=name, tables=tuple(tables), tasks=tuple(tasks), source=source)


def _parse_table(tname: str, raw: Any, source: str) -> TableSpec:
    where = f"table {tname!r}"
    if not isinstance(raw, dict):
        raise _err(source, f"{where} must be a table of settings")
    unknown = set(raw) - _TABLE_KEYS
    if unknown:
        raise _err(source, f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(_TABLE_KEYS)}")
    path = raw.get("path")
    if path is not None:
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
                     foreign_keys=tuple(foreign_keys), exclude=tuple(exclude), types=dict(types))


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


# --- Arrow types -> semantic types ------------------------------------------------------


def type_family(t: pa.DataType) -> str:
    """One of integer, float, decimal, boolean, string, timestamp, date, unsupported."""
    if pa.types.is_dictionary(t):
        return type_family(t.value_type)
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_decimal(t):
        return "decimal"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or _is_string_view(t):
        return "string"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_date(t):
        return "date"
    return "unsupported"


def _is_string_view(t: pa.DataType) -> bool:
    check = getattr(pa.types, "is_string_view", None)
    return bool(check and check(t))


# Which stypes each family may take (first one is the inferred default, except strings).
ALLOWED_STYPES: dict[str, tuple[str, ...]] = {
    "integer": ("numeric", "categorical", "boolean"),
    "float": ("numeric",),
    "decimal": ("numeric",),
    "boolean": ("boolean", "numeric", "categorical"),
    "string": ("categorical", "text"),
    "timestamp": ("timestamp",),
    "date": ("timestamp",),
}

KEY_FAMILIES = ("integer", "string")


def infer_stype(family: str, num_distinct: int | None = None, num_valid: int | None = None) -> str:
    """The inferred semantic type of a column of this Arrow type family.

    Strings need ``num_distinct`` (may be capped at ``CATEGORICAL_MAX_DISTINCT + 1``) and
    ``num_valid``: categorical when ``num_distinct <= CATEGORICAL_MAX_DISTINCT`` and
    ``num_distinct * CATEGORICAL_MIN_REPEAT <= num_valid``, text otherwise.
    """
    if family == "string":
        if num_distinct is None or num_valid is None:
            raise ValueError("string columns need num_distinct and num_valid")
        if (num_distinct <= CATEGORICAL_MAX_DISTINCT
                and num_distinct * CATEGORICAL_MIN_REPEAT <= num_valid):
            return "categorical"
        return "text"
    if family not in ALLOWED_STYPES:
        raise ValueError(f"no semantic type for {family}")
    return ALLOWED_STYPES[family][0]


# --- rendering a draft ------------------------------------------------------------------

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else toml_str(name)


def toml_str(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, and TOML also forbids a raw DEL."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def render_schema(schema: Schema, notes: dict[tuple[str, str], str] | None = None,
                  header: str = "") -> str:
    """TOML text of ``schema``; ``notes[(table, column)]`` become end-of-line comments."""
    notes = notes or {}
    out: list[str] = []
    if header:
        out.extend(f"# {line}".rstrip() for line in header.splitlines())
    out.append("format_version = 1")
    out.append(f"name = {toml_str(schema.name)}")
    for spec in schema.tables:
        out.append("")
        out.append(f"[tables.{toml_key(spec.name)}]")
        if spec.path is not None:
            out.append(f"path = {toml_str(spec.path)}")
        if spec.primary_key is not None:
            out.append(f"primary_key = {toml_str(spec.primary_key)}")
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
                out.append(f"{toml_key(column)} = {toml_str(parent)}")
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
            out.append(f"table = {toml_str(task.table)}")
            out.append(f"target = {toml_str(task.target)}")
            out.append("")
    else:
        out.append("# Tasks: each is a (table, target column); the table's rows with a non-null")
        out.append("# target are the seeds, observed at the row's time.")
        out.append("# [tasks.my_task]")
        out.append("# table = \"...\"")
        out.append("# target = \"...\"")
        out.append("")
    return "\n".join(out)
