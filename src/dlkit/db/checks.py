"""Structural checks of a database: failures, and ``metadata.json`` validated before use.

A :class:`Checks` either raises :class:`DatabaseError` at the first failure (``open_database``)
or collects every :class:`Failure` (``check_database``); a failure that makes further checks
of the same part meaningless stops that part (:class:`Stop`). :func:`check_metadata` validates
the types and internal consistency of ``metadata.json`` before anything is sized from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlkit.db import format as fmt
from dlkit.errors import DatabaseError


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
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if kind is int and ok and lo is not None and value < lo:
        ok = False
    if not ok:
        checks.fail(fmt.METADATA_FILE, "metadata.schema", f"{where}: {key!r} has a bad value "
                    f"{value!r}", fatal=True)
    return value


def _opt_str(obj: dict, key: str, where: str, checks: Checks) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        checks.fail(fmt.METADATA_FILE, "metadata.schema", f"{where}: {key!r} must be a string",
                    fatal=True)
    return value


def check_metadata(meta: Any, checks: Checks) -> None:
    """Types and internal consistency of metadata.json (fatal on the first problem)."""
    M = fmt.METADATA_FILE
    if _req(meta, "format", str, "top", checks) != fmt.FORMAT_NAME:
        checks.fail(M, "metadata.schema", f"format is {meta['format']!r}", fatal=True)
    if _req(meta, "format_version", int, "top", checks) != fmt.FORMAT_VERSION:
        checks.fail(M, "metadata.schema", f"format_version {meta['format_version']}; this dlkit "
                    f"reads version {fmt.FORMAT_VERSION}: build the database again with "
                    "`dlkit preprocess`", fatal=True)
    _req(meta, "database_id", str, "top", checks)
    for key in ("num_tables", "num_rows", "num_edges", "num_columns", "num_texts",
                "num_categories", "num_tasks"):
        _req(meta, key, int, "top", checks, lo=0)
    tables = _req(meta, "tables", list, "top", checks)
    tasks = _req(meta, "tasks", list, "top", checks)
    offsets = _req(meta, "table_offsets", list, "top", checks)
    emb = _req(meta, "embeddings", dict, "top", checks)
    for key in ("text_dim", "column_dim", "categorical_dim"):
        _req(emb, key, int, "embeddings", checks, lo=1)
    if len(tables) != meta["num_tables"] or len(tasks) != meta["num_tasks"]:
        checks.fail(M, "metadata.consistency", "num_tables/num_tasks disagree with the lists",
                    fatal=True)
    if len(offsets) != len(tables) + 1 or not all(isinstance(o, int) for o in offsets):
        checks.fail(M, "metadata.consistency", "table_offsets has the wrong length", fatal=True)
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
        _opt_str(table, "primary_key", where, checks)
        _opt_str(table, "time_column", where, checks)
        pk_type = table.get("primary_key_type")
        if (table.get("primary_key") is None) != (pk_type is None) or pk_type not in (
                None, "integer", "string"):
            checks.fail(M, "metadata.schema", f"{where}: bad primary_key_type {pk_type!r}",
                        fatal=True)
        for k, fk in enumerate(_req(table, "foreign_keys", list, where, checks)):
            _req(fk, "column", str, f"{where}.foreign_keys[{k}]", checks)
            _req(fk, "parent_table", str, f"{where}.foreign_keys[{k}]", checks)
            _req(fk, "num_edges", int, f"{where}.foreign_keys[{k}]", checks, lo=0)
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
            if stype in (fmt.NUMERIC, fmt.TIMESTAMP):
                for key in ("mean", "std"):
                    v = _req(col, key, (int, float), cw, checks)
                    if not np.isfinite(v) or (key == "std" and v <= 0):
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


def load_json(root: Path, rel: str, checks: Checks) -> Any:
    try:
        data = (root / rel).read_bytes()
    except OSError as exc:
        checks.fail(rel, "file.missing", f"cannot read: {exc.strerror or exc}", fatal=True)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        checks.fail(rel, "metadata.parse", f"not valid JSON: {exc}", fatal=True)


def expected_files(meta: dict[str, Any]) -> set[str]:
    files = {fmt.GRAPH_FILE, fmt.METADATA_FILE, fmt.TEXT_EMBEDDINGS_FILE,
             fmt.COLUMN_EMBEDDINGS_FILE, fmt.CATEGORICAL_EMBEDDINGS_FILE, fmt.TEXT_OFFSETS_FILE,
             fmt.TEXT_DATA_FILE}
    for t in meta["tables"]:
        if t.get("primary_key") is not None:
            files.add(fmt.key_values_file(t["name"]))
            if t.get("primary_key_type") == "string":
                files.add(fmt.key_offsets_file(t["name"]))
        for c in t["columns"]:
            files.add(fmt.column_values_file(t["name"], c["index"]))
            files.add(fmt.column_valid_file(t["name"], c["index"]))
    for task in meta["tasks"]:
        for stem, _ in fmt.TASK_ARRAYS:
            files.add(fmt.task_file(task["name"], stem))
    return files
