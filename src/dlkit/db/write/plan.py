"""Stage ``scan`` of preprocessing: check the schema against the Parquet footers, plan columns.

Nothing is read beyond the footers here, except for string columns without a type override,
whose type (categorical or text) needs their distinct values counted
(:func:`infer_string_column`, which stops as soon as a column is clearly text).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlkit.db import format as fmt
from dlkit.db.schema.arrow_types import (
    ALLOWED_STYPES,
    CATEGORICAL_MAX_DISTINCT,
    KEY_FAMILIES,
    infer_stype,
    type_family,
)
from dlkit.db.schema.spec import PrimaryKey, Schema, TableSpec, key_columns, key_label
from dlkit.db.time_units import TIME_UNIT_NAMES, TimePosition, TimeUnit
from dlkit.db.write.convert import unique_values
from dlkit.db.write.source import TableSource, resolve_table_locations
from dlkit.errors import DataError, SchemaError

# TablePlan.pk_family (and metadata's primary_key_type) of a composite primary key
COMPOSITE = "composite"


@dataclass
class ColumnPlan:
    name: str
    index: int
    family: str
    arrow_type: str
    stype: int = -1
    inferred: bool = False
    column_id: int = -1
    # filled by the columns stage
    num_valid: int = 0
    mean: float | None = None
    std: float | None = None
    categories: list[Any] | None = None  # Python values of the column (from Arrow)
    cat_emb_start: int = 0
    known_after_us: int = 0  # the schema's known_after lag of the column (0: none)

    def filled_categories(self) -> list[Any]:
        """A categorical column's categories, once the columns stage has filled them."""
        assert self.categories is not None, f"column {self.name!r}: categories not filled yet"
        return self.categories


@dataclass
class ForeignKeyPlan:
    column: str  # the column, or a composite foreign key's name
    parent: str
    num_edges: int = 0
    num_null: int = 0
    num_dangling: int = 0
    parts: tuple[str, ...] = ()  # a composite foreign key's columns (else empty)
    part_families: tuple[str, ...] = ()  # their type families (the parent key's)

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns this foreign key reads."""
        return self.parts or (self.column,)


@dataclass
class TablePlan:
    name: str
    index: int
    source: TableSource
    primary_key: PrimaryKey | None
    pk_family: str | None  # "integer", "string" or, for a composite key, COMPOSITE
    time_column: str | None
    foreign_keys: list[ForeignKeyPlan]
    columns: list[ColumnPlan]
    num_rows: int = 0
    row_offset: int = 0
    num_null_times: int = 0
    pk_families: tuple[str, ...] = ()  # a composite key's part type families
    time_unit: TimeUnit | None = None  # an integer time column's unit
    time_position: TimePosition = TimePosition.START

    @property
    def pk_columns(self) -> tuple[str, ...]:
        return key_columns(self.primary_key)

    @property
    def pk_where(self) -> str:
        """How messages name the primary key: ``table 't', column 'id'`` or ``table 't',
        key (a, b)``."""
        assert self.primary_key is not None, "only a table with a primary key"
        if isinstance(self.primary_key, str):
            return where(self.name, self.primary_key)
        return f"table {self.name!r}, key {key_label(self.primary_key)}"


def where(table: str, column: str) -> str:
    """How error messages name a column: ``table 't', column 'c'``."""
    return f"table {table!r}, column {column!r}"


def check_rows(plan: TablePlan, what: str, seen: int, final: bool = False) -> None:
    """The Parquet data of ``plan`` must hold exactly the rows its footers promise."""
    if seen > plan.num_rows or (final and seen != plan.num_rows):
        raise DataError(f"table {plan.name!r}, {what}: the Parquet data holds {seen} rows "
                        f"but its footer says {plan.num_rows} (corrupt file)")


def _missing(source: TableSource, column: str, role: str) -> SchemaError:
    return SchemaError(f"{where(source.name, column)} ({role}) is missing from "
                       f"{source.location}; its columns are: {', '.join(source.schema.names)}")


def plan_tables(input_dir: Path, schema: Schema) -> list[TablePlan]:
    """Open and check every table of ``schema`` (stage ``scan`` minus type inference)."""
    plans: list[TablePlan] = []
    offset = 0
    for index, spec in enumerate(schema.tables):
        src = TableSource.open(spec.name, resolve_table_locations(input_dir, spec.name,
                                                                  spec.path, spec.split_paths))
        names = set(src.schema.names)
        pk_family = None
        pk_families: list[str] = []
        for part in key_columns(spec.primary_key):
            if part not in names:
                raise _missing(src, part, "primary key")
            family = type_family(src.column_type(part))
            if family not in KEY_FAMILIES:
                raise SchemaError(f"{where(spec.name, part)}: primary key has type "
                                  f"{src.column_type(part)}; it must be an integer or "
                                  "a string")
            pk_families.append(family)
        if spec.primary_key is not None:
            pk_family = pk_families[0] if isinstance(spec.primary_key, str) else COMPOSITE
        if spec.time_column is not None:
            if spec.time_column not in names:
                raise _missing(src, spec.time_column, "time column")
            _check_time_type(spec, src)
        for column, _ in spec.known_after:
            if column not in names:
                raise _missing(src, column, "known_after")
        for name, _ in spec.foreign_keys:
            for column in spec.fk_columns(name):
                if column not in names:
                    raise _missing(src, column, "foreign key")
            if name in spec.composite_fks and name in names and \
                    name not in spec.key_column_set():
                raise SchemaError(f"table {spec.name!r}, foreign key {name!r}: a composite "
                                  "foreign key's name cannot be a feature column of the "
                                  "table; choose another name")
        for column in spec.exclude:
            if column not in names:
                raise _missing(src, column, "excluded")
        for column in spec.types:
            if column not in names:
                raise _missing(src, column, "typed")
        keys = spec.key_column_set()
        columns: list[ColumnPlan] = []
        for fld in src.schema:
            # A key column that is also the (integer) time column matches as an integer and is
            # the table's timestamp feature too.
            if (fld.name in keys and fld.name != spec.time_column) or fld.name in spec.exclude:
                continue
            family = type_family(fld.type)
            plan = ColumnPlan(name=fld.name, index=len(columns), family=family,
                              arrow_type=str(fld.type))
            override = spec.types.get(fld.name)
            if fld.name == spec.time_column and spec.time_unit is not None:
                plan.stype = fmt.TIMESTAMP  # its values are the row times, in microseconds
                plan.inferred = override is None
            elif override is not None:
                if override not in ALLOWED_STYPES.get(family, ()):
                    raise SchemaError(f"{where(spec.name, fld.name)}: Arrow type {fld.type} "
                                      f"cannot be {override}")
                plan.stype = fmt.STYPE_BY_NAME[override]
            elif family == "unsupported":
                raise SchemaError(f"{where(spec.name, fld.name)}: Arrow type {fld.type} is not "
                                  f"supported; exclude the column (exclude = [\"{fld.name}\"])")
            elif family != "string":
                plan.stype = fmt.STYPE_BY_NAME[infer_stype(family)]
                plan.inferred = True
            plan.known_after_us = dict(spec.known_after).get(fld.name, 0)
            columns.append(plan)
        plans.append(TablePlan(
            name=spec.name, index=index, source=src, primary_key=spec.primary_key,
            pk_family=pk_family, time_column=spec.time_column,
            foreign_keys=[ForeignKeyPlan(c, p, parts=spec.composite_fks.get(c, ()))
                          for c, p in spec.foreign_keys], columns=columns,
            num_rows=src.num_rows, row_offset=offset, pk_families=tuple(pk_families),
            time_unit=spec.time_unit, time_position=spec.time_position))
        offset += src.num_rows
    by_name = {p.name: p for p in plans}
    for table in plans:
        for fk in table.foreign_keys:
            parent = by_name[fk.parent]
            # the schema refuses a foreign key to a table without a primary key
            assert parent.primary_key is not None
            for column, part in zip(fk.columns, parent.pk_columns, strict=True):
                child_type = table.source.column_type(column)
                if type_family(child_type) != type_family(parent.source.column_type(part)):
                    raise SchemaError(
                        f"{where(table.name, column)}: foreign key has type {child_type}, but "
                        f"the primary key {fk.parent}.{part} it refers to has type "
                        f"{parent.source.column_type(part)}")
            if fk.parts:
                fk.part_families = parent.pk_families
    for task in schema.tasks:
        table = by_name[task.table]
        if not table.source.has_column(task.target):
            raise _missing(table.source, task.target, f"target of task {task.name!r}")
    return plans


def _check_time_type(spec: TableSpec, src: TableSource) -> None:
    """A time column is a timestamp or a date, or an integer column with a ``time_unit``."""
    assert spec.time_column is not None, "called for a table with a time column"
    arrow_type = src.column_type(spec.time_column)
    family = type_family(arrow_type)
    name = where(spec.name, spec.time_column)
    if spec.time_unit is not None and family != "integer":
        raise SchemaError(f"{name}: time_unit = {spec.time_unit.value!r} is for integer time "
                          f"columns, and this one has type {arrow_type}; drop time_unit")
    if spec.time_unit is None and family == "integer":
        raise SchemaError(f"{name}: time column has type {arrow_type}; say what its integers "
                          f"count with time_unit = one of {', '.join(TIME_UNIT_NAMES)} (e.g. "
                          "time_unit = \"year\" for 2023, \"s\" for seconds since 1970)")
    if family not in ("timestamp", "date", "integer"):
        raise SchemaError(f"{name}: time column has type {arrow_type}; it must be a timestamp, "
                          "a date, or an integer with a time_unit")


def infer_string_column(source: TableSource, column: str, batch_rows: int) -> str:
    """``categorical`` or ``text`` for a string column (stops reading once it is text)."""
    seen: set[Any] = set()
    num_valid = 0
    for arr in source.iter_column(column, batch_rows):
        num_valid += len(arr) - arr.null_count
        seen.update(unique_values(arr, where(source.name, column)))
        if len(seen) > CATEGORICAL_MAX_DISTINCT:
            return "text"
    return infer_stype("string", len(seen), num_valid)
