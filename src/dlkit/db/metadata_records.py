"""``metadata.json`` as records: the database, its tables, their foreign keys and columns, its
tasks and embeddings, each a frozen dataclass with one ``to_json``/``from_json`` pair.

``to_json`` gives the JSON object with the keys in the documented order, and
:func:`metadata_bytes` the file's bytes as a build writes them: they are hashed into the
database hash, so both are fixed. What follows from other fields is derived, not stored
(one field in one place): the counts and ``table_offsets`` from the lists, ``stype_name``
from ``stype``, a column's ``num_categories`` / ``cat_emb_count`` from its categories.

:meth:`DatabaseMetadata.from_json` is the one parse of the file's JSON: each record's
``from_json`` validates the keys it reads while it builds the record (types and internal
consistency: everything opening a database sizes anything from; each task's rules), the first
problem a failure of ``metadata.schema`` or ``metadata.consistency``. The keys only
``dlkit verify`` checks (:func:`dlkit.db.read.checks.check_metadata_rules`: ``arrow_type``,
``inferred``, ``num_null_times``, ``num_null``, ``num_dangling``, ``target_column_id``, the
embedder and the options) are carried as the file has them.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlkit.db import aggregates as agg
from dlkit.db import format as fmt
from dlkit.db.aggregates import AggregateMetadata, check_entries
from dlkit.db.failures import Checks
from dlkit.db.task_rules import MAX_LAG_US, TaskRules

_STATS = (fmt.NUMERIC, fmt.TIMESTAMP)  # the stypes whose columns have a mean and a std
_M = fmt.METADATA_FILE

# Sizes beyond any database dlkit writes: a metadata.json claiming more is refused before
# anything is sized from it.
MAX_DATABASE_ID = 1024
MAX_EMBEDDING_DIM = 65536


def _unchecked(obj: dict[str, Any], key: str, default: Any = None) -> Any:
    """A key only ``dlkit verify`` checks (``check_metadata_rules``), as the file has it."""
    return obj.get(key, default)


# --- validation while reading: the first problem is fatal ------------------------------------


def _req(obj: Any, key: str, kind: type | tuple[type, ...], where: str, checks: Checks,
         lo: int | None = None) -> Any:
    """``obj[key]``, of type ``kind`` (a number at least ``lo``), or a fatal failure."""
    if not isinstance(obj, dict) or key not in obj:
        checks.fail(_M, "metadata.schema", f"{where}: missing {key!r}", fatal=True)
    value = obj[key]
    ok = isinstance(value, kind) and not isinstance(value, bool)  # JSON true is no number
    if kind is int and ok and lo is not None and value < lo:
        ok = False
    if not ok:
        checks.fail(_M, "metadata.schema", f"{where}: {key!r} has a bad value {value!r}",
                    fatal=True)
    return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: int | float) -> bool:
    """Whether a JSON number is a finite float64 (an integer too large for one is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _names(value: object, least: int) -> bool:
    """Whether ``value`` is a list of at least ``least`` distinct non-empty strings."""
    return (isinstance(value, list) and len(value) >= least
            and all(isinstance(c, str) and c for c in value) and len(set(value)) == len(value))


def _opt_str(obj: dict[str, Any], key: str, where: str, checks: Checks) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        checks.fail(_M, "metadata.schema", f"{where}: {key!r} must be a string", fatal=True)
    return value


def _check_primary_key(table: dict[str, Any], where: str, checks: Checks) -> None:
    """``primary_key`` (a name, or a list of two or more for a composite key), its
    ``primary_key_type`` and, for a composite key only, ``primary_key_part_types``."""
    pk, pk_type = table.get("primary_key"), table.get("primary_key_type")
    if isinstance(pk, list):
        if not _names(pk, 2):
            checks.fail(_M, "metadata.schema", f"{where}: a composite primary_key must be a "
                        "list of two or more distinct column names", fatal=True)
        parts = table.get("primary_key_part_types")
        if (pk_type != "composite" or not isinstance(parts, list) or len(parts) != len(pk)
                or not all(p in ("integer", "string") for p in parts)):
            checks.fail(_M, "metadata.schema", f"{where}: a composite primary key needs "
                        "primary_key_type \"composite\" and a primary_key_part_types entry "
                        "(integer or string) per column", fatal=True)
        return
    _opt_str(table, "primary_key", where, checks)
    if (pk is None) != (pk_type is None) or pk_type not in (None, "integer", "string") \
            or "primary_key_part_types" in table:
        checks.fail(_M, "metadata.schema", f"{where}: bad primary_key_type {pk_type!r}",
                    fatal=True)


@dataclass
class _Tally:
    """What the tables read so far add up to, for the next table and the totals."""

    rows: int = 0
    column_id: int = 0
    categories: int = 0


@dataclass(frozen=True)
class ColumnMetadata:
    """A feature column (the primary key and the foreign keys are not feature columns)."""

    name: str
    index: int  # within its table
    column_id: int  # across tables: the row of column_embeddings.bin
    stype: int
    arrow_type: str
    inferred: bool  # the stype was inferred, not given by the schema
    num_valid: int
    mean: float | None = None  # numeric and timestamp columns
    std: float | None = None
    cat_emb_start: int = 0  # categorical columns: first row of categorical_embeddings.bin
    categories: tuple[str | int | bool, ...] | None = None  # categorical columns
    # the schema's known_after: a row's value is known this long after the row's time (0:
    # at once); key "known_after_us", only when not 0
    known_after_us: int = 0

    @property
    def stype_name(self) -> str:
        return fmt.STYPE_NAMES[self.stype]

    @property
    def cat_emb_count(self) -> int:
        return len(self.categories) if self.categories is not None else 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name, "index": self.index, "column_id": self.column_id,
            "stype": self.stype, "stype_name": self.stype_name,
            "arrow_type": self.arrow_type, "inferred": self.inferred, "num_valid": self.num_valid,
        }
        if self.stype in _STATS:
            out["mean"] = self.mean
            out["std"] = self.std
        if self.stype == fmt.CATEGORICAL:
            out["num_categories"] = self.cat_emb_count
            out["cat_emb_start"] = self.cat_emb_start
            out["cat_emb_count"] = self.cat_emb_count
            out["categories"] = list(self.categories or ())
        if self.known_after_us:
            out["known_after_us"] = int(self.known_after_us)
        return out

    @classmethod
    def from_json(cls, obj: Any, c: int, where: str, timed: bool, tally: _Tally,
                  checks: Checks) -> ColumnMetadata:
        """Column ``c`` of a table (``timed``: with a time column), validated; ``tally``
        counts its column id and categories."""
        name = _req(obj, "name", str, where, checks)
        if _req(obj, "index", int, where, checks) != c:
            checks.fail(_M, "metadata.consistency", f"{where}: index is not {c}", fatal=True)
        column_id = _req(obj, "column_id", int, where, checks)
        if column_id != tally.column_id:
            checks.fail(_M, "metadata.consistency", f"{where}: column_id is not "
                        f"{tally.column_id}", fatal=True)
        tally.column_id += 1
        stype = _req(obj, "stype", int, where, checks, lo=0)
        if stype >= len(fmt.STYPE_NAMES):
            checks.fail(_M, "metadata.schema", f"{where}: unknown stype {stype}", fatal=True)
        num_valid = _req(obj, "num_valid", int, where, checks, lo=0)
        if "known_after_us" in obj:  # the sampler's hiding kernel needs 0 < lag <= 2^62
            lag = obj["known_after_us"]
            if not _is_int(lag) or not 0 < lag <= MAX_LAG_US or not timed:
                checks.fail(_M, "metadata.schema", f"{where}: known_after_us must be an "
                            f"integer in [1, 2^62] on a table with a time column, got {lag!r}",
                            fatal=True)
        stats: dict[str, float] = {}
        if stype in _STATS:
            for key in ("mean", "std"):
                v = _req(obj, key, (int, float), where, checks)
                if not _finite(v) or (key == "std" and v <= 0):
                    checks.fail(_M, "metadata.schema", f"{where}: bad {key} {v!r}", fatal=True)
                stats[key] = v
        cat_emb_start, categories = 0, None
        if stype == fmt.CATEGORICAL:
            count = _req(obj, "cat_emb_count", int, where, checks, lo=0)
            cats = _req(obj, "categories", list, where, checks)
            cat_emb_start = _req(obj, "cat_emb_start", int, where, checks, lo=0)
            if (cat_emb_start != tally.categories or len(cats) != count
                    or obj.get("num_categories") != count):
                checks.fail(_M, "metadata.consistency", f"{where}: categorical embedding "
                            "range disagrees with the categories", fatal=True)
            tally.categories += count
            categories = tuple(cats)
        return cls(name=name, index=c, column_id=column_id, stype=stype,
                   arrow_type=_unchecked(obj, "arrow_type", ""),
                   inferred=_unchecked(obj, "inferred"), num_valid=num_valid,
                   mean=stats.get("mean"), std=stats.get("std"), cat_emb_start=cat_emb_start,
                   categories=categories, known_after_us=obj.get("known_after_us", 0))


@dataclass(frozen=True)
class ForeignKeyMetadata:
    """A foreign-key column: each row's key gives one edge to its parent row, unless null or
    dangling (a key no parent row has, dropped under ``on_dangling = "drop"``)."""

    column: str
    parent_table: str
    num_edges: int
    num_null: int
    num_dangling: int
    # a composite foreign key's columns (``column`` is then its name); the JSON key
    # "columns" exists only for one
    columns: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"column": self.column}
        if self.columns:
            out["columns"] = list(self.columns)
        out.update({"parent_table": self.parent_table,
                    "num_edges": self.num_edges, "num_null": self.num_null,
                    "num_dangling": self.num_dangling})
        return out

    @classmethod
    def from_json(cls, obj: Any, where: str, checks: Checks) -> ForeignKeyMetadata:
        column = _req(obj, "column", str, where, checks)
        parent_table = _req(obj, "parent_table", str, where, checks)
        num_edges = _req(obj, "num_edges", int, where, checks, lo=0)
        if "columns" in obj and not _names(obj["columns"], 1):
            checks.fail(_M, "metadata.schema", f"{where}: 'columns' must be a list of distinct "
                        "column names", fatal=True)
        return cls(column=column, parent_table=parent_table, num_edges=num_edges,
                   num_null=_unchecked(obj, "num_null"),
                   num_dangling=_unchecked(obj, "num_dangling"),
                   columns=tuple(obj.get("columns", ())))


@dataclass(frozen=True)
class TableMetadata:
    name: str
    index: int
    num_rows: int
    row_offset: int  # global row id of its first row
    # a column's name, or a composite key's column names (a list in JSON)
    primary_key: str | tuple[str, ...] | None
    # "integer", "string" or "composite" (None without a primary key)
    primary_key_type: str | None
    time_column: str | None
    num_null_times: int
    foreign_keys: tuple[ForeignKeyMetadata, ...]
    columns: tuple[ColumnMetadata, ...]
    # a composite key's part types ("integer" / "string"); the JSON key
    # "primary_key_part_types" exists only for one
    primary_key_part_types: tuple[str, ...] = ()
    # An integer time column's unit ("year", ..., "ns") and "end" when a calendar period's
    # row time is its last microsecond; keys only when set (the row times are microseconds
    # either way: these say where they came from)
    time_unit: str | None = None
    time_position: str | None = None

    def to_json(self) -> dict[str, Any]:
        pk = self.primary_key
        out: dict[str, Any] = {
            "name": self.name, "index": self.index, "num_rows": self.num_rows,
            "row_offset": self.row_offset,
            "primary_key": list(pk) if isinstance(pk, tuple) else pk,
            "primary_key_type": self.primary_key_type}
        if self.primary_key_part_types:
            out["primary_key_part_types"] = list(self.primary_key_part_types)
        out["time_column"] = self.time_column
        if self.time_unit is not None:
            out["time_unit"] = self.time_unit
        if self.time_position is not None:
            out["time_position"] = self.time_position
        out.update({"num_null_times": self.num_null_times,
                    "foreign_keys": [fk.to_json() for fk in self.foreign_keys],
                    "columns": [c.to_json() for c in self.columns]})
        return out

    @classmethod
    def from_json(cls, obj: Any, t: int, offsets: list[int], names: set[str], tally: _Tally,
                  checks: Checks) -> TableMetadata:
        """Table ``t``, validated against ``table_offsets`` and the table ``names`` before it
        (its own added); ``tally`` counts its rows, column ids and categories."""
        where = f"tables[{t}]"
        name = _req(obj, "name", str, where, checks)
        problem = fmt.path_name_problem(name)
        if problem or name in names:
            checks.fail(_M, "metadata.schema", f"{where}: table name {name!r} "
                        f"{problem or 'is repeated'}", fatal=True)
        names.add(name)
        if _req(obj, "index", int, where, checks) != t:
            checks.fail(_M, "metadata.consistency", f"{where}: index is not {t}", fatal=True)
        n = _req(obj, "num_rows", int, where, checks, lo=0)
        row_offset = _req(obj, "row_offset", int, where, checks, lo=0)
        if row_offset != tally.rows or offsets[t] != tally.rows:
            checks.fail(_M, "metadata.consistency", f"{where}: row_offset/table_offsets "
                        "disagree with the row counts", fatal=True)
        tally.rows += n
        time_column = _opt_str(obj, "time_column", where, checks)
        _check_primary_key(obj, where, checks)
        foreign_keys = tuple(
            ForeignKeyMetadata.from_json(fk, f"{where}.foreign_keys[{k}]", checks)
            for k, fk in enumerate(_req(obj, "foreign_keys", list, where, checks)))
        columns = tuple(
            ColumnMetadata.from_json(col, c, f"{where}.columns[{c}]", time_column is not None,
                                     tally, checks)
            for c, col in enumerate(_req(obj, "columns", list, where, checks)))
        pk = obj.get("primary_key")
        return cls(name=name, index=t, num_rows=n, row_offset=row_offset,
                   primary_key=tuple(pk) if isinstance(pk, list) else pk,
                   primary_key_type=obj.get("primary_key_type"),
                   primary_key_part_types=tuple(obj.get("primary_key_part_types", ())),
                   time_column=time_column,
                   num_null_times=_unchecked(obj, "num_null_times"),
                   foreign_keys=foreign_keys, columns=columns,
                   time_unit=obj.get("time_unit"), time_position=obj.get("time_position"))


@dataclass(frozen=True)
class TaskMetadata:
    """A task: its seeds are the rows of ``table`` with a non-null ``target_column``."""

    name: str
    index: int
    table: str
    target_column: str
    target_stype: int
    target_column_id: int
    num_seeds: int
    # its optional keys (label_lag_us, boundary, static, split), each only when not the default
    rules: TaskRules = field(default_factory=TaskRules)

    @property
    def target_stype_name(self) -> str:
        return fmt.STYPE_NAMES[self.target_stype]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "index": self.index, "table": self.table,
                "target_column": self.target_column, "target_stype": self.target_stype,
                "target_stype_name": self.target_stype_name,
                "target_column_id": self.target_column_id, "num_seeds": self.num_seeds,
                **self.rules.to_metadata()}

    @staticmethod
    def check_json(obj: Any, i: int, names: set[str], tables: dict[str, TableMetadata],
                   checks: Checks) -> None:
        """The keys of task entry ``i`` (its rules aside), against the task ``names`` before
        it (its own added) and the tables read."""
        where = f"tasks[{i}]"
        name = _req(obj, "name", str, where, checks)
        if fmt.path_name_problem(name) or name in names:
            checks.fail(_M, "metadata.schema", f"{where}: bad or repeated task name {name!r}",
                        fatal=True)
        names.add(name)
        if _req(obj, "index", int, where, checks) != i:
            checks.fail(_M, "metadata.consistency", f"{where}: index is not {i}", fatal=True)
        table = _req(obj, "table", str, where, checks)
        target = _req(obj, "target_column", str, where, checks)
        stype = _req(obj, "target_stype", int, where, checks)
        _req(obj, "num_seeds", int, where, checks, lo=0)
        cols = {c.name: c for c in tables[table].columns} if table in tables else {}
        if target not in cols or cols[target].stype != stype or stype not in fmt.TARGET_STYPES:
            checks.fail(_M, "metadata.consistency", f"{where}: target {table}.{target} is not a "
                        "column of that type", fatal=True)

    @classmethod
    def from_json(cls, obj: dict[str, Any], table: dict[str, Any]) -> TaskMetadata:
        """The task entry ``obj`` (its keys passed :meth:`check_json`) of a table entry
        ``table``; ``ValueError`` (from :meth:`TaskRules.from_metadata`) when its rules break
        the format."""
        return cls(name=obj["name"], index=obj["index"], table=obj["table"],
                   target_column=obj["target_column"], target_stype=obj["target_stype"],
                   target_column_id=_unchecked(obj, "target_column_id"), num_seeds=obj["num_seeds"],
                   rules=TaskRules.from_metadata(obj, table))


@dataclass(frozen=True)
class EmbeddingsMetadata:
    """The embedder that made the three embedding files, and their widths."""

    embedder: str
    config: dict[str, Any]  # the embedder's own description of itself (a JSON object)
    text_dim: int
    column_dim: int
    categorical_dim: int

    def to_json(self) -> dict[str, Any]:
        return {"embedder": self.embedder, "config": copy.deepcopy(self.config),
                "text_dim": self.text_dim,
                "column_dim": self.column_dim, "categorical_dim": self.categorical_dim}

    @classmethod
    def from_json(cls, obj: dict[str, Any], checks: Checks) -> EmbeddingsMetadata:
        dims = []
        for key in ("text_dim", "column_dim", "categorical_dim"):
            dims.append(_req(obj, key, int, "embeddings", checks, lo=1))
            if dims[-1] > MAX_EMBEDDING_DIM:
                checks.fail(_M, "metadata.schema", f"embeddings: {key} is {obj[key]:,}; at "
                            f"most {MAX_EMBEDDING_DIM} (as `dlkit preprocess --embedding-dim`)",
                            fatal=True)
        config = obj.get("config")
        configured = config.get("dim") if isinstance(config, dict) else None
        if configured is not None:  # the embedder says how wide its vectors are: all three are
            for key in ("text_dim", "column_dim", "categorical_dim"):
                if not _is_int(configured) or obj[key] != configured:
                    checks.fail(_M, "metadata.consistency", f"embeddings: {key} is {obj[key]}, "
                                f"but the embedder's config says dim {configured!r}", fatal=True)
        text_dim, column_dim, categorical_dim = dims
        return cls(embedder=_unchecked(obj, "embedder"), config=_unchecked(obj, "config"),
                   text_dim=text_dim, column_dim=column_dim, categorical_dim=categorical_dim)


@dataclass(frozen=True)
class DatabaseMetadata:
    """What ``metadata.json`` says (docs/database_format.md, "metadata.json")."""

    database_id: str
    num_texts: int
    tables: tuple[TableMetadata, ...]
    tasks: tuple[TaskMetadata, ...]
    embeddings: EmbeddingsMetadata
    on_dangling: str  # options.on_dangling: what the build did with a dangling key
    # the as-of aggregate cells ([aggregates] in dlkit.toml); the key only when there are some
    aggregates: tuple[AggregateMetadata, ...] = ()

    @property
    def num_tables(self) -> int:
        return len(self.tables)

    @property
    def num_rows(self) -> int:
        return sum(t.num_rows for t in self.tables)

    @property
    def num_edges(self) -> int:
        return sum(fk.num_edges for t in self.tables for fk in t.foreign_keys)

    @property
    def num_columns(self) -> int:
        return sum(len(t.columns) for t in self.tables)

    @property
    def num_categories(self) -> int:
        return sum(c.cat_emb_count for t in self.tables for c in t.columns)

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    @property
    def table_offsets(self) -> tuple[int, ...]:
        """Global row id of each table's first row, then the number of rows."""
        return tuple(t.row_offset for t in self.tables) + (self.num_rows,)

    def expected_files(self) -> set[str]:
        """Every file of the database this metadata implies (``manifest.json`` aside)."""
        files = {fmt.GRAPH_FILE, fmt.METADATA_FILE, fmt.TEXT_EMBEDDINGS_FILE,
                 fmt.COLUMN_EMBEDDINGS_FILE, fmt.CATEGORICAL_EMBEDDINGS_FILE,
                 fmt.TEXT_OFFSETS_FILE, fmt.TEXT_DATA_FILE}
        for t in self.tables:
            if t.primary_key is not None:
                files.add(fmt.key_values_file(t.name))
                if t.primary_key_type in ("string", "composite"):
                    files.add(fmt.key_offsets_file(t.name))
            for c in t.columns:
                files.add(fmt.column_values_file(t.name, c.index))
                files.add(fmt.column_valid_file(t.name, c.index))
        for task in self.tasks:
            for stem, _ in fmt.TASK_ARRAYS:
                files.add(fmt.task_file(task.name, stem))
        if self.aggregates:
            files.update(agg.FILES)
        return files

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``metadata.json``, its keys in the documented order."""
        return {
            "format": fmt.FORMAT_NAME,
            "format_version": fmt.FORMAT_VERSION,
            "database_id": self.database_id,
            "num_tables": self.num_tables,
            "num_rows": self.num_rows,
            "num_edges": self.num_edges,
            "num_columns": self.num_columns,
            "num_texts": self.num_texts,
            "num_categories": self.num_categories,
            "num_tasks": self.num_tasks,
            "table_offsets": list(self.table_offsets),
            "no_time": int(fmt.NO_TIME),
            "stypes": dict(fmt.STYPE_BY_NAME),
            "tables": [t.to_json() for t in self.tables],
            "tasks": [t.to_json() for t in self.tasks],
            "embeddings": self.embeddings.to_json(),
            "options": {"on_dangling": self.on_dangling},
            **({"aggregates": [a.to_json() for a in self.aggregates]} if self.aggregates
               else {}),
        }

    @classmethod
    def from_json(cls, doc: Any, checks: Checks | None = None) -> DatabaseMetadata:
        """The records of a parsed ``metadata.json``, validated while they are built (module
        doc); a failure goes to ``checks`` (default: raise
        :class:`~dlkit.errors.DatabaseError`), the first one fatal."""
        if checks is None:
            checks = Checks(collect=False, root=Path("."))
        if _req(doc, "format", str, "top", checks) != fmt.FORMAT_NAME:
            checks.fail(_M, "metadata.schema", f"format is {doc['format']!r}", fatal=True)
        if _req(doc, "format_version", int, "top", checks) != fmt.FORMAT_VERSION:
            checks.fail(_M, "metadata.schema", f"format_version {doc['format_version']}; this "
                        f"dlkit reads version {fmt.FORMAT_VERSION}: build the database again "
                        "with `dlkit preprocess`", fatal=True)
        database_id = _req(doc, "database_id", str, "top", checks)
        if not 0 < len(database_id) <= MAX_DATABASE_ID:
            checks.fail(_M, "metadata.schema", f"database_id is {len(database_id):,} "
                        f"characters long; it must have 1 to {MAX_DATABASE_ID}", fatal=True)
        for key in ("num_tables", "num_rows", "num_edges", "num_columns", "num_texts",
                    "num_categories", "num_tasks"):
            _req(doc, key, int, "top", checks, lo=0)
        tables = _req(doc, "tables", list, "top", checks)
        tasks = _req(doc, "tasks", list, "top", checks)
        offsets = _req(doc, "table_offsets", list, "top", checks)
        embeddings = EmbeddingsMetadata.from_json(
            _req(doc, "embeddings", dict, "top", checks), checks)
        if len(tables) != doc["num_tables"] or len(tasks) != doc["num_tasks"]:
            checks.fail(_M, "metadata.consistency", "num_tables/num_tasks disagree with the "
                        "lists", fatal=True)
        if len(offsets) != len(tables) + 1 or not all(_is_int(o) for o in offsets):
            checks.fail(_M, "metadata.consistency", "table_offsets must be num_tables + 1 "
                        "integers", fatal=True)
        tally = _Tally()
        names: set[str] = set()
        records = tuple(TableMetadata.from_json(table, t, offsets, names, tally, checks)
                        for t, table in enumerate(tables))
        if tally.rows != doc["num_rows"] or offsets[-1] != tally.rows:
            checks.fail(_M, "metadata.consistency", "num_rows disagrees with the tables",
                        fatal=True)
        if tally.column_id != doc["num_columns"] or tally.categories != doc["num_categories"]:
            checks.fail(_M, "metadata.consistency", "num_columns/num_categories disagree with "
                        "the tables", fatal=True)
        by_name = {t.name: t for t in records}
        for t in records:
            for fk in t.foreign_keys:
                parent = by_name.get(fk.parent_table)
                if parent is None or parent.primary_key is None:
                    checks.fail(_M, "metadata.consistency", f"table {t.name!r}: foreign key to "
                                f"{fk.parent_table!r}, which has no primary key", fatal=True)
                    continue
                parts = len(parent.primary_key) if isinstance(parent.primary_key, tuple) else 0
                if len(fk.columns) != parts:
                    checks.fail(_M, "metadata.consistency", f"table {t.name!r}: foreign key "
                                f"{fk.column!r} has {len(fk.columns) or 1} column(s), the "
                                f"primary key of {fk.parent_table!r} {parts or 1}", fatal=True)
        if sum(fk.num_edges for t in records for fk in t.foreign_keys) != doc["num_edges"]:
            checks.fail(_M, "metadata.consistency", "num_edges disagrees with the foreign keys",
                        fatal=True)
        task_names: set[str] = set()
        for i, task in enumerate(tasks):
            TaskMetadata.check_json(task, i, task_names, by_name, checks)
        if "aggregates" in doc:
            check_entries(doc, lambda message: checks.fail(_M, "metadata.schema", message,
                                                           fatal=True))
        table_entries = {t["name"]: t for t in tables}
        task_records = []
        for task in tasks:
            try:
                task_records.append(TaskMetadata.from_json(task, table_entries[task["table"]]))
            except ValueError as exc:
                checks.fail(_M, "metadata.schema", f"task {task['name']!r}: {exc}", fatal=True)
        options = doc.get("options")
        return cls(database_id=database_id, num_texts=doc["num_texts"], tables=records,
                   tasks=tuple(task_records), embeddings=embeddings,
                   on_dangling=_unchecked(options if isinstance(options, dict) else {},
                                          "on_dangling"),
                   aggregates=tuple(AggregateMetadata.from_json(a)
                                    for a in doc.get("aggregates", ())))


def metadata_bytes(meta: DatabaseMetadata) -> bytes:
    """``metadata.json`` as a build writes it: UTF-8 JSON, ``indent=2``, a final newline."""
    return (json.dumps(meta.to_json(), indent=2, ensure_ascii=False) + "\n").encode()
