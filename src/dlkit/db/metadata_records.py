"""``metadata.json`` as records: the database, its tables, their foreign keys and columns, its
tasks and embeddings, each a frozen dataclass with one ``to_json``/``from_json`` pair.

``to_json`` gives the JSON object with the keys in the documented order, and
:func:`metadata_bytes` the file's bytes as a build writes them: they are hashed into the
database hash, so both are fixed. What follows from other fields is derived, not stored
(one field in one place): the counts and ``table_offsets`` from the lists, ``stype_name``
from ``stype``, a column's ``num_categories`` / ``cat_emb_count`` from its categories.

:meth:`DatabaseMetadata.from_json` validates first, with
:func:`dlkit.db.read.checks.check_metadata` (types and internal consistency: everything opening a
database sizes anything from) and each task's rules; the keys only ``dlkit verify`` checks
(:func:`dlkit.db.read.checks.check_metadata_rules`: ``arrow_type``, ``inferred``,
``num_null_times``, ``num_null``, ``num_dangling``, ``target_column_id``, the embedder and
the options) are carried as the file has them.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlkit.db import aggregates as agg
from dlkit.db import format as fmt
from dlkit.db.aggregates import AggregateMetadata
from dlkit.db.read.checks import Checks, check_metadata
from dlkit.db.schema.task_rules import TaskRules

_STATS = (fmt.NUMERIC, fmt.TIMESTAMP)  # the stypes whose columns have a mean and a std


def _unchecked(obj: dict[str, Any], key: str, default: Any = None) -> Any:
    """A key only ``dlkit verify`` checks (``check_metadata_rules``), as the file has it."""
    return obj.get(key, default)


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
    def from_json(cls, obj: dict[str, Any]) -> ColumnMetadata:
        stype = obj["stype"]
        stats = stype in _STATS
        categorical = stype == fmt.CATEGORICAL
        return cls(name=obj["name"], index=obj["index"], column_id=obj["column_id"], stype=stype,
                   arrow_type=_unchecked(obj, "arrow_type", ""),
                   inferred=_unchecked(obj, "inferred"),
                   num_valid=obj["num_valid"], mean=obj["mean"] if stats else None,
                   std=obj["std"] if stats else None,
                   cat_emb_start=obj["cat_emb_start"] if categorical else 0,
                   categories=tuple(obj["categories"]) if categorical else None,
                   known_after_us=obj.get("known_after_us", 0))


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
    def from_json(cls, obj: dict[str, Any]) -> ForeignKeyMetadata:
        return cls(column=obj["column"], parent_table=obj["parent_table"],
                   num_edges=obj["num_edges"], num_null=_unchecked(obj, "num_null"),
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
    def from_json(cls, obj: dict[str, Any]) -> TableMetadata:
        pk = obj.get("primary_key")
        return cls(name=obj["name"], index=obj["index"], num_rows=obj["num_rows"],
                   row_offset=obj["row_offset"],
                   primary_key=tuple(pk) if isinstance(pk, list) else pk,
                   primary_key_type=obj.get("primary_key_type"),
                   primary_key_part_types=tuple(obj.get("primary_key_part_types", ())),
                   time_column=obj.get("time_column"),
                   num_null_times=_unchecked(obj, "num_null_times"),
                   foreign_keys=tuple(ForeignKeyMetadata.from_json(fk)
                                      for fk in obj["foreign_keys"]),
                   columns=tuple(ColumnMetadata.from_json(c) for c in obj["columns"]),
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

    @classmethod
    def from_json(cls, obj: dict[str, Any], table: dict[str, Any]) -> TaskMetadata:
        """The task entry ``obj`` of a table entry ``table``; ``ValueError`` (from
        :meth:`TaskRules.from_metadata`) when its rules break the format."""
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
    def from_json(cls, obj: dict[str, Any]) -> EmbeddingsMetadata:
        return cls(embedder=_unchecked(obj, "embedder"), config=_unchecked(obj, "config"),
                   text_dim=obj["text_dim"], column_dim=obj["column_dim"],
                   categorical_dim=obj["categorical_dim"])


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
        """The records of a parsed ``metadata.json``, validated first (module doc); a failure
        goes to ``checks`` (default: raise :class:`~dlkit.errors.DatabaseError`)."""
        if checks is None:
            checks = Checks(collect=False, root=Path("."))
        check_metadata(doc, checks)
        by_name = {t["name"]: t for t in doc["tables"]}
        tasks = []
        for task in doc["tasks"]:
            try:
                tasks.append(TaskMetadata.from_json(task, by_name[task["table"]]))
            except ValueError as exc:
                checks.fail(fmt.METADATA_FILE, "metadata.schema", f"task {task['name']!r}: "
                            f"{exc}", fatal=True)
        options = doc.get("options")
        return cls(database_id=doc["database_id"], num_texts=doc["num_texts"],
                   tables=tuple(TableMetadata.from_json(t) for t in doc["tables"]),
                   tasks=tuple(tasks), embeddings=EmbeddingsMetadata.from_json(doc["embeddings"]),
                   on_dangling=_unchecked(options if isinstance(options, dict) else {},
                                          "on_dangling"),
                   aggregates=tuple(AggregateMetadata.from_json(a)
                                    for a in doc.get("aggregates", ())))


def metadata_bytes(meta: DatabaseMetadata) -> bytes:
    """``metadata.json`` as a build writes it: UTF-8 JSON, ``indent=2``, a final newline."""
    return (json.dumps(meta.to_json(), indent=2, ensure_ascii=False) + "\n").encode()
