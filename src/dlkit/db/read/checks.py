"""Structural checks of a database: failures, and ``metadata.json`` validated before use.

A :class:`Checks` either raises :class:`DatabaseError` at the first failure (``open_database``)
or collects every :class:`Failure` (``check_database``); a failure that makes further checks
of the same part meaningless stops that part (:class:`Stop`). :func:`check_metadata` validates
the types and internal consistency of ``metadata.json`` before anything is sized from it;
:func:`check_metadata_rules` (``dlkit verify`` only) the rest of what the format says of it:
exactly the documented keys, names, category lists, statistics' types, the counts that must
add up. Both read the parsed JSON as it is; :mod:`dlkit.db.metadata_records` makes records of
it once :func:`check_metadata` has passed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlkit.db import format as fmt
from dlkit.db.aggregates import check_entries
from dlkit.db.schema.task_rules import MAX_LAG_US, OPTIONAL_TASK_KEYS
from dlkit.db.schema.time_units import TIME_UNIT_NAMES, TimeUnit
from dlkit.encoding import is_utf8
from dlkit.errors import DatabaseError
from dlkit.files import read_regular


@dataclass(frozen=True)
class Failure:
    """One failed check: the file it concerns, the check's name and what was found."""

    file: str
    check: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.check}: {self.message}"


class Stop(Exception):
    """Raised internally when a failure makes further checks of the same part meaningless."""


class Checks:
    def __init__(self, collect: bool, root: Path):
        self.collect = collect
        self.root = root
        self.failures: list[Failure] = []

    def fail(self, file: str, check: str, message: str, fatal: bool = False) -> None:
        failure = Failure(file, check, message)
        if not self.collect:
            raise DatabaseError(f"{check}: {message}", path=self.root / file)
        self.failures.append(failure)
        if fatal:
            raise Stop()


# --- metadata validation -------------------------------------------------------------------


def _req(obj: Any, key: str, kind, where: str, checks: Checks, lo: int | None = None) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        checks.fail(fmt.METADATA_FILE, "metadata.schema", f"{where}: missing {key!r}", fatal=True)
    value = obj[key]
    ok = isinstance(value, kind) and not isinstance(value, bool)  # JSON true is no number
    if kind is int and ok and lo is not None and value < lo:
        ok = False
    if not ok:
        checks.fail(fmt.METADATA_FILE, "metadata.schema", f"{where}: {key!r} has a bad value "
                    f"{value!r}", fatal=True)
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: int | float) -> bool:
    """Whether a JSON number is a finite float64 (an integer too large for one is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _names(value: Any, least: int) -> bool:
    """Whether ``value`` is a list of at least ``least`` distinct non-empty strings."""
    return (isinstance(value, list) and len(value) >= least
            and all(isinstance(c, str) and c for c in value) and len(set(value)) == len(value))


def _check_primary_key(table: dict, where: str, checks: Checks) -> None:
    """``primary_key`` (a name, or a list of two or more for a composite key), its
    ``primary_key_type`` and, for a composite key only, ``primary_key_part_types``."""
    pk, pk_type = table.get("primary_key"), table.get("primary_key_type")
    if isinstance(pk, list):
        if not _names(pk, 2):
            checks.fail(fmt.METADATA_FILE, "metadata.schema", f"{where}: a composite primary_key must be a "
                        "list of two or more distinct column names", fatal=True)
        parts = table.get("primary_key_part_types")
        if (pk_type != "composite" or not isinstance(parts, list) or len(parts) != len(pk)
                or not all(p in ("integer", "string") for p in parts)):
            checks.fail(fmt.METADATA_FILE, "metadata.schema", f"{where}: a composite primary key needs "
                        "primary_key_type \"composite\" and a primary_key_part_types entry "
                        "(integer or string) per column", fatal=True)
        return
    _opt_str(table, "primary_key", where, checks)
    if (pk is None) != (pk_type is None) or pk_type not in (None, "integer", "string") \
            or "primary_key_part_types" in table:
        checks.fail(fmt.METADATA_FILE, "metadata.schema", f"{where}: bad primary_key_type {pk_type!r}",
                    fatal=True)


def _opt_str(obj: dict, key: str, where: str, checks: Checks) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        checks.fail(fmt.METADATA_FILE, "metadata.schema", f"{where}: {key!r} must be a string",
                    fatal=True)
    return value


# Sizes beyond any database dlkit writes: a metadata.json claiming more is refused before
# anything is sized from it.
MAX_DATABASE_ID = 1024
MAX_EMBEDDING_DIM = 65536


def check_metadata(meta: Any, checks: Checks) -> None:
    """Types and internal consistency of metadata.json (fatal on the first problem)."""
    M = fmt.METADATA_FILE
    if _req(meta, "format", str, "top", checks) != fmt.FORMAT_NAME:
        checks.fail(M, "metadata.schema", f"format is {meta['format']!r}", fatal=True)
    if _req(meta, "format_version", int, "top", checks) != fmt.FORMAT_VERSION:
        checks.fail(M, "metadata.schema", f"format_version {meta['format_version']}; this dlkit "
                    f"reads version {fmt.FORMAT_VERSION}: build the database again with "
                    "`dlkit preprocess`", fatal=True)
    database_id = _req(meta, "database_id", str, "top", checks)
    if not 0 < len(database_id) <= MAX_DATABASE_ID:
        checks.fail(M, "metadata.schema", f"database_id is {len(database_id):,} characters "
                    f"long; it must have 1 to {MAX_DATABASE_ID}", fatal=True)
    for key in ("num_tables", "num_rows", "num_edges", "num_columns", "num_texts",
                "num_categories", "num_tasks"):
        _req(meta, key, int, "top", checks, lo=0)
    tables = _req(meta, "tables", list, "top", checks)
    tasks = _req(meta, "tasks", list, "top", checks)
    offsets = _req(meta, "table_offsets", list, "top", checks)
    emb = _req(meta, "embeddings", dict, "top", checks)
    for key in ("text_dim", "column_dim", "categorical_dim"):
        if _req(emb, key, int, "embeddings", checks, lo=1) > MAX_EMBEDDING_DIM:
            checks.fail(M, "metadata.schema", f"embeddings: {key} is {emb[key]:,}; at most "
                        f"{MAX_EMBEDDING_DIM} (as `dlkit preprocess --embedding-dim`)",
                        fatal=True)
    config = emb.get("config")
    configured = config.get("dim") if isinstance(config, dict) else None
    if configured is not None:  # the embedder says how wide its vectors are: all three are
        for key in ("text_dim", "column_dim", "categorical_dim"):
            if not _is_int(configured) or emb[key] != configured:
                checks.fail(M, "metadata.consistency", f"embeddings: {key} is {emb[key]}, but "
                            f"the embedder's config says dim {configured!r}", fatal=True)
    if len(tables) != meta["num_tables"] or len(tasks) != meta["num_tasks"]:
        checks.fail(M, "metadata.consistency", "num_tables/num_tasks disagree with the lists",
                    fatal=True)
    if len(offsets) != len(tables) + 1 or not all(_is_int(o) for o in offsets):
        checks.fail(M, "metadata.consistency", "table_offsets must be num_tables + 1 integers",
                    fatal=True)
    row = 0
    column_id = 0
    cat = 0
    names = set()
    for t, table in enumerate(tables):
        where = f"tables[{t}]"
        name = _req(table, "name", str, where, checks)
        problem = fmt.path_name_problem(name)
        if problem or name in names:
            checks.fail(M, "metadata.schema", f"{where}: table name {name!r} "
                        f"{problem or 'is repeated'}", fatal=True)
        names.add(name)
        if _req(table, "index", int, where, checks) != t:
            checks.fail(M, "metadata.consistency", f"{where}: index is not {t}", fatal=True)
        n = _req(table, "num_rows", int, where, checks, lo=0)
        if _req(table, "row_offset", int, where, checks, lo=0) != row or offsets[t] != row:
            checks.fail(M, "metadata.consistency", f"{where}: row_offset/table_offsets disagree "
                        "with the row counts", fatal=True)
        row += n
        _opt_str(table, "time_column", where, checks)
        _check_primary_key(table, where, checks)
        for k, fk in enumerate(_req(table, "foreign_keys", list, where, checks)):
            _req(fk, "column", str, f"{where}.foreign_keys[{k}]", checks)
            _req(fk, "parent_table", str, f"{where}.foreign_keys[{k}]", checks)
            _req(fk, "num_edges", int, f"{where}.foreign_keys[{k}]", checks, lo=0)
            if "columns" in fk and not _names(fk["columns"], 1):
                checks.fail(M, "metadata.schema", f"{where}.foreign_keys[{k}]: 'columns' must "
                            "be a list of distinct column names", fatal=True)
        for c, col in enumerate(_req(table, "columns", list, where, checks)):
            cw = f"{where}.columns[{c}]"
            _req(col, "name", str, cw, checks)
            if _req(col, "index", int, cw, checks) != c:
                checks.fail(M, "metadata.consistency", f"{cw}: index is not {c}", fatal=True)
            if _req(col, "column_id", int, cw, checks) != column_id:
                checks.fail(M, "metadata.consistency", f"{cw}: column_id is not {column_id}",
                            fatal=True)
            column_id += 1
            stype = _req(col, "stype", int, cw, checks, lo=0)
            if stype >= len(fmt.STYPE_NAMES):
                checks.fail(M, "metadata.schema", f"{cw}: unknown stype {stype}", fatal=True)
            _req(col, "num_valid", int, cw, checks, lo=0)
            if "known_after_us" in col:  # the sampler's hiding kernel needs 0 < lag <= 2^62
                lag = col["known_after_us"]
                if not _is_int(lag) or not 0 < lag <= MAX_LAG_US \
                        or table.get("time_column") is None:
                    checks.fail(M, "metadata.schema", f"{cw}: known_after_us must be an integer "
                                f"in [1, 2^62] on a table with a time column, got {lag!r}",
                                fatal=True)
            if stype in (fmt.NUMERIC, fmt.TIMESTAMP):
                for key in ("mean", "std"):
                    v = _req(col, key, (int, float), cw, checks)
                    if not _finite(v) or (key == "std" and v <= 0):
                        checks.fail(M, "metadata.schema", f"{cw}: bad {key} {v!r}", fatal=True)
            if stype == fmt.CATEGORICAL:
                count = _req(col, "cat_emb_count", int, cw, checks, lo=0)
                cats = _req(col, "categories", list, cw, checks)
                if (_req(col, "cat_emb_start", int, cw, checks, lo=0) != cat
                        or len(cats) != count or col.get("num_categories") != count):
                    checks.fail(M, "metadata.consistency", f"{cw}: categorical embedding range "
                                "disagrees with the categories", fatal=True)
                cat += count
    if row != meta["num_rows"] or offsets[-1] != row:
        checks.fail(M, "metadata.consistency", "num_rows disagrees with the tables", fatal=True)
    if column_id != meta["num_columns"] or cat != meta["num_categories"]:
        checks.fail(M, "metadata.consistency", "num_columns/num_categories disagree with the "
                    "tables", fatal=True)
    by_name = {t["name"]: t for t in tables}
    for t in tables:
        for fk in t["foreign_keys"]:
            if fk["parent_table"] not in by_name or by_name[fk["parent_table"]].get("primary_key") is None:
                checks.fail(M, "metadata.consistency", f"table {t['name']!r}: foreign key to "
                            f"{fk['parent_table']!r}, which has no primary key", fatal=True)
            parent_key = by_name[fk["parent_table"]]["primary_key"]
            parts = len(parent_key) if isinstance(parent_key, list) else 0
            if len(fk.get("columns", ())) != parts:
                checks.fail(M, "metadata.consistency", f"table {t['name']!r}: foreign key "
                            f"{fk['column']!r} has {len(fk.get('columns', ())) or 1} column(s), "
                            f"the primary key of {fk['parent_table']!r} {parts or 1}",
                            fatal=True)
    if sum(fk["num_edges"] for t in tables for fk in t["foreign_keys"]) != meta["num_edges"]:
        checks.fail(M, "metadata.consistency", "num_edges disagrees with the foreign keys",
                    fatal=True)
    task_names = set()
    for i, task in enumerate(tasks):
        where = f"tasks[{i}]"
        name = _req(task, "name", str, where, checks)
        if fmt.path_name_problem(name) or name in task_names:
            checks.fail(M, "metadata.schema", f"{where}: bad or repeated task name {name!r}",
                        fatal=True)
        task_names.add(name)
        if _req(task, "index", int, where, checks) != i:
            checks.fail(M, "metadata.consistency", f"{where}: index is not {i}", fatal=True)
        table = _req(task, "table", str, where, checks)
        target = _req(task, "target_column", str, where, checks)
        stype = _req(task, "target_stype", int, where, checks)
        _req(task, "num_seeds", int, where, checks, lo=0)
        cols = {c["name"]: c for c in by_name.get(table, {"columns": []})["columns"]}
        if target not in cols or cols[target]["stype"] != stype or stype not in fmt.TARGET_STYPES:
            checks.fail(M, "metadata.consistency", f"{where}: target {table}.{target} is not a "
                        "column of that type", fatal=True)
    if "aggregates" in meta:
        check_entries(meta, lambda message: checks.fail(M, "metadata.schema", message,
                                                         fatal=True))


# --- the format's rules for metadata.json (``dlkit verify``) ---------------------------------

# The keys metadata.json has, each object exactly these (docs/database_format.md).
TOP_KEYS = frozenset({
    "format", "format_version", "database_id", "num_tables", "num_rows", "num_edges",
    "num_columns", "num_texts", "num_categories", "num_tasks", "table_offsets", "no_time",
    "stypes", "tables", "tasks", "embeddings", "options"})
TABLE_KEYS = frozenset({
    "name", "index", "num_rows", "row_offset", "primary_key", "primary_key_type",
    "time_column", "num_null_times", "foreign_keys", "columns"})
# Optional keys, each only when set: an integer time column's unit and position, a column's lag
OPTIONAL_TABLE_KEYS = frozenset({"time_unit", "time_position", "primary_key_part_types"})
OPTIONAL_COLUMN_KEYS = frozenset({"known_after_us"})
FOREIGN_KEY_KEYS = frozenset({"column", "parent_table", "num_edges", "num_null", "num_dangling"})
COLUMN_KEYS = frozenset({"name", "index", "column_id", "stype", "stype_name", "arrow_type",
                         "inferred", "num_valid"})
STATS_KEYS = frozenset({"mean", "std"})  # numeric and timestamp columns
CATEGORY_KEYS = frozenset({"num_categories", "cat_emb_start", "cat_emb_count", "categories"})
TASK_KEYS = frozenset({"name", "index", "table", "target_column", "target_stype",
                       "target_stype_name", "target_column_id", "num_seeds"})
EMBEDDING_KEYS = frozenset({"embedder", "config", "text_dim", "column_dim", "categorical_dim"})
OPTION_KEYS = frozenset({"on_dangling"})


def _column_keys(stype: int) -> frozenset[str]:
    if stype in (fmt.NUMERIC, fmt.TIMESTAMP):
        return COLUMN_KEYS | STATS_KEYS
    if stype == fmt.CATEGORICAL:
        return COLUMN_KEYS | CATEGORY_KEYS
    return COLUMN_KEYS


def _category_problem(cats: list) -> str | None:
    """Why a categorical column's ``categories`` break the format, or None: all strings, all
    integers or all booleans, in strictly ascending order (code point, numeric,
    ``false < true``), so each once."""
    kinds = {bool if isinstance(c, bool) else int if isinstance(c, int)
             else str if isinstance(c, str) else None for c in cats}
    if None in kinds or len(kinds) > 1:
        return "are not all strings, all integers or all booleans"
    for k in range(1, len(cats)):
        if not cats[k - 1] < cats[k]:
            what = "repeated" if cats[k - 1] == cats[k] else "out of order"
            return f"are not distinct and sorted: {cats[k]!r} at {k} is {what}"
    return None


def _bad(checks: Checks, where: str, message: str, check: str = "metadata.schema") -> None:
    checks.fail(fmt.METADATA_FILE, check, f"{where}: {message}")


def _keys(checks: Checks, obj: dict, expected: frozenset[str], where: str) -> None:
    unknown, missing = sorted(set(obj) - expected), sorted(expected - set(obj))
    if unknown or missing:
        _bad(checks, where, f"unknown keys {unknown}, missing keys {missing}")


def check_metadata_rules(meta: dict[str, Any], checks: Checks) -> None:
    """Everything else the format says of metadata.json; ``meta`` has passed
    :func:`check_metadata`. Each problem is one failure (none stops the other checks)."""
    _keys(checks, {k: v for k, v in meta.items() if k != "aggregates"}, TOP_KEYS, "top")
    no_time = meta.get("no_time")
    if not _is_int(no_time) or no_time != fmt.NO_TIME:
        _bad(checks, "top", f"no_time is {no_time!r}, not NO_TIME = {int(fmt.NO_TIME)}")
    stypes = meta.get("stypes")
    if (not isinstance(stypes, dict) or stypes != fmt.STYPE_BY_NAME
            or not all(_is_int(v) for v in stypes.values())):
        _bad(checks, "top", f"stypes is {stypes!r}, not the format's names and numbers")
    emb = meta["embeddings"]
    _keys(checks, emb, EMBEDDING_KEYS, "embeddings")
    if not isinstance(emb.get("embedder"), str) or not isinstance(emb.get("config"), dict):
        _bad(checks, "embeddings", "embedder must be a string and config an object")
    options = meta.get("options")
    if not isinstance(options, dict):
        _bad(checks, "top", "options must be an object")
    else:
        _keys(checks, options, OPTION_KEYS, "options")
        if options.get("on_dangling") not in fmt.ON_DANGLING:
            _bad(checks, "options", f"on_dangling is {options.get('on_dangling')!r}, not one "
                 f"of {list(fmt.ON_DANGLING)}")
    strict = isinstance(options, dict) and options.get("on_dangling") == "error"
    for kind, items in (("table", meta["tables"]), ("task", meta["tasks"])):
        folded: dict[str, str] = {}
        for item in items:
            other = folded.setdefault(item["name"].casefold(), item["name"])
            if other != item["name"]:
                _bad(checks, "top", f"{kind} names {other!r} and {item['name']!r} differ only "
                     "in case")
    for t, table in enumerate(meta["tables"]):
        _check_table_rules(table, f"tables[{t}]", strict, checks)
    by_name = {t["name"]: t for t in meta["tables"]}
    for i, task in enumerate(meta["tasks"]):
        where = f"tasks[{i}]"
        _keys(checks, {k: v for k, v in task.items() if k not in OPTIONAL_TASK_KEYS}, TASK_KEYS,
              where)
        col = next(c for c in by_name[task["table"]]["columns"]
                   if c["name"] == task["target_column"])
        stype_name = task.get("target_stype_name")
        if stype_name != fmt.STYPE_NAMES[task["target_stype"]]:
            _bad(checks, where, f"target_stype_name {stype_name!r} is not the name of "
                 f"target_stype {task['target_stype']}")
        column_id = task.get("target_column_id")
        if not _is_int(column_id) or column_id != col["column_id"]:
            _bad(checks, where, f"target_column_id {column_id!r} is not the target column's "
                 f"column_id {col['column_id']}", "metadata.consistency")
        if task["num_seeds"] != col["num_valid"]:
            _bad(checks, where, f"num_seeds {task['num_seeds']} differs from the target "
                 f"column's num_valid {col['num_valid']} (the seeds are its non-null rows)",
                 "metadata.consistency")


def _check_table_rules(table: dict, where: str, strict: bool, checks: Checks) -> None:
    """One table of :func:`check_metadata_rules` (``strict``: on_dangling is ``error``)."""
    n = table["num_rows"]
    _keys(checks, {k: v for k, v in table.items() if k not in OPTIONAL_TABLE_KEYS},
          TABLE_KEYS, where)
    unit = table.get("time_unit")
    if "time_unit" in table and (unit not in TIME_UNIT_NAMES or table.get("time_column") is None):
        _bad(checks, where, f"time_unit {unit!r} is not one of {', '.join(TIME_UNIT_NAMES)} "
             "or the table has no time column")
    if "time_position" in table and (table["time_position"] != "end" or unit not in
                                     [u.value for u in TimeUnit if u.calendar]):
        _bad(checks, where, f"time_position {table['time_position']!r} must be \"end\" when "
             "present, with a time_unit of year, yyyymm or yyyymmdd")
    columns = table["columns"]
    names = [c["name"] for c in columns]
    if len(set(names)) != len(names):
        _bad(checks, where, f"column names {names} repeat")
    # An integer time column (one with a time_unit) may also be a key column: its integers
    # match as keys and it is the table's timestamp feature.
    key_time = table.get("time_column") if "time_unit" in table else None
    names = [c for c in names if c != key_time]
    fk_columns = [fk["column"] for fk in table["foreign_keys"]]
    if len(set(fk_columns)) != len(fk_columns) or set(fk_columns) & set(names):
        _bad(checks, where, f"foreign-key columns {fk_columns} repeat or are also feature "
             "columns")
    parts = {c for fk in table["foreign_keys"] for c in fk.get("columns", ())}
    if parts & set(names):
        _bad(checks, where, f"composite foreign-key columns {sorted(parts & set(names))} are "
             "also feature columns")
    pk = table.get("primary_key")
    if isinstance(pk, list):
        if set(pk) & set(names):
            _bad(checks, where, f"primary_key {pk!r}: a column of it is also a feature column")
    elif pk is not None and (not pk or pk in names or pk in fk_columns):
        _bad(checks, where, f"primary_key {pk!r} is empty, a feature column or a foreign-key "
             "column")
    time_column = table.get("time_column")
    time_col = next((c for c in columns if c["name"] == time_column), None)
    if time_column is not None and (time_col is None or time_col["stype"] != fmt.TIMESTAMP):
        _bad(checks, where, f"time_column {time_column!r} is not a timestamp column of the "
             "table")
    null_times = table.get("num_null_times")
    expected = n - time_col["num_valid"] if time_col is not None else 0
    if not _is_int(null_times) or null_times != expected:
        _bad(checks, where, f"num_null_times is {null_times!r}, the time column implies "
             f"{expected}", "metadata.consistency")
    for k, fk in enumerate(table["foreign_keys"]):
        fw = f"{where}.foreign_keys[{k}]"
        _keys(checks, fk, FOREIGN_KEY_KEYS | ({"columns"} if "columns" in fk else set()), fw)
        null, dangling = fk.get("num_null"), fk.get("num_dangling")
        if not (_is_int(null) and _is_int(dangling) and null >= 0 and dangling >= 0):
            _bad(checks, fw, f"num_null {null!r} and num_dangling {dangling!r} must be "
                 "integers >= 0")
        elif fk["num_edges"] + null + dangling != n:
            _bad(checks, fw, f"num_edges + num_null + num_dangling = "
                 f"{fk['num_edges'] + null + dangling}, not the table's {n} rows",
                 "metadata.consistency")
        elif strict and dangling:
            _bad(checks, fw, f"{dangling} dangling keys although options.on_dangling is "
                 "'error'", "metadata.consistency")
    for c, col in enumerate(columns):
        cw = f"{where}.columns[{c}]"
        stype = col["stype"]
        _keys(checks, {k: v for k, v in col.items() if k not in OPTIONAL_COLUMN_KEYS},
              _column_keys(stype), cw)
        if col.get("stype_name") != fmt.STYPE_NAMES[stype]:
            _bad(checks, cw, f"stype_name {col.get('stype_name')!r} is not the name of stype "
                 f"{stype}")
        if not isinstance(col.get("arrow_type"), str) or not isinstance(col.get("inferred"), bool):
            _bad(checks, cw, "arrow_type must be a string and inferred a boolean")
        if col["num_valid"] > n:
            _bad(checks, cw, f"num_valid {col['num_valid']} exceeds the table's {n} rows",
                 "metadata.consistency")
        if stype == fmt.CATEGORICAL:
            if not _is_int(col.get("num_categories")):
                _bad(checks, cw, f"num_categories is {col.get('num_categories')!r}")
            problem = _category_problem(col["categories"])
            if problem:
                _bad(checks, cw, f"categories {problem}")


def load_json(root: Path, rel: str, checks: Checks) -> Any:
    try:
        data = read_regular(root / rel)
    except OSError as exc:
        checks.fail(rel, "file.missing", f"cannot read: {exc.strerror or exc}", fatal=True)
    try:
        doc = json.loads(data.decode("utf-8"))
    except ValueError as exc:  # not UTF-8, not JSON, an integer of too many digits
        checks.fail(rel, "metadata.parse", f"not valid JSON: {exc}", fatal=True)
    except RecursionError:
        checks.fail(rel, "metadata.parse", "not valid JSON: nested too deeply", fatal=True)
    pending = [doc]  # a walk without recursion: the document may nest as deep as JSON allows
    while pending:
        value = pending.pop()
        if isinstance(value, str) and not is_utf8(value):
            checks.fail(rel, "metadata.parse", f"{value!r} is not UTF-8 text (a lone "
                        "surrogate)", fatal=True)
        elif isinstance(value, dict):
            pending.extend(value)
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return doc

