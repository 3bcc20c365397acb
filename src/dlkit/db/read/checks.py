"""``metadata.json`` read and checked: :func:`load_json` parses the file (UTF-8 JSON, no lone
surrogate), and :func:`check_metadata_rules` (``dlkit verify`` only) checks what the format
says of it beyond what :meth:`dlkit.db.metadata_records.DatabaseMetadata.from_json` validates
while it builds the records (types and internal consistency): exactly the documented keys,
names, category lists, statistics' types, the counts that must add up. The failures are
:class:`dlkit.db.failures.Checks`'.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dlkit.db import format as fmt
from dlkit.db.failures import Checks
from dlkit.db.task_rules import OPTIONAL_TASK_KEYS
from dlkit.db.time_units import TIME_UNIT_NAMES, TimeUnit
from dlkit.encoding import is_utf8
from dlkit.files import read_regular


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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


def _category_problem(cats: list[Any]) -> str | None:
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


def _keys(checks: Checks, obj: dict[str, Any], expected: frozenset[str], where: str) -> None:
    unknown, missing = sorted(set(obj) - expected), sorted(expected - set(obj))
    if unknown or missing:
        _bad(checks, where, f"unknown keys {unknown}, missing keys {missing}")


def check_metadata_rules(meta: dict[str, Any], checks: Checks) -> None:
    """Everything else the format says of metadata.json; ``meta`` has passed
    :meth:`DatabaseMetadata.from_json <dlkit.db.metadata_records.DatabaseMetadata.from_json>`.
    Each problem is one failure (none stops the other checks)."""
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


def _check_table_rules(table: dict[str, Any], where: str, strict: bool, checks: Checks) -> None:
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

