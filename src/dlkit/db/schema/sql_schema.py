"""The ``dlkit.toml`` of a SQL database: what its catalog says, merged with a partial schema.

The catalog says which tables there are, their columns, primary keys and foreign keys
(composite ones written ``primary_key = ["a", "b"]`` and
``name = { columns = ["a", "b"], table = "T" }``). What it cannot say comes from a partial
``dlkit.toml`` (and the flags of ``dlkit import sql``), merged over it; the order of
precedence is flags, then the partial schema, then the catalog:

* top level: ``name``, ``[tasks.*]`` and any other section are the partial schema's;
  ``exclude_tables = [...]`` (partial schema only) leaves tables out; a foreign key to a
  left-out table goes too, and its columns are excluded, as are those of a foreign key to a
  table the import cannot have (in another SQL schema, or missing);
* ``[tables.T]``: ``T`` must be a table of the catalog (else an error naming it); its
  ``primary_key`` replaces the catalog's; its ``foreign_keys`` entries are added to the
  catalog's (an entry of the same name replaces the catalog's); a column in its ``exclude``
  drops the catalog's foreign keys that use it (with a note); every other key
  (``time_column``, ``types``, ...) is taken as written. ``path`` is refused: the rows come
  from the database. A column it names that the table lacks is an error naming both.

A table name that is not a dlkit name (1-128 of ``A-Z a-z 0-9 _ . -``, not starting with
``.`` or ``-``) is mapped: every other character becomes ``_`` (and a leading ``.``/``-``
too); two tables mapped to the same name (ignoring case) are refused unless all but one are
excluded. The written schema's header lists each mapping, and every note. A partial
schema's ``[tables.*]`` headers, ``exclude_tables`` and ``--time`` may use either name;
references inside it (a task's ``table``, a foreign key's parent) use the dlkit name.

A flag naming what the database lacks is an :class:`InvalidArgumentError` naming the flag;
the partial schema's mistakes are :class:`SchemaError` s naming its file.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from dlkit.db.format import path_name_problem
from dlkit.db.schema.render import toml_key, toml_str
from dlkit.db.schema.sql_catalog import SqlCatalog, SqlForeignKey, SqlTable
from dlkit.errors import DlkitError, InvalidArgumentError, SchemaError
from dlkit.text import unknown_name

EXCLUDE_TABLES = "exclude_tables"  # the partial schema's own top-level key
_COLUMN_LISTS = ("exclude",)
_COLUMN_MAPS = ("types", "known_after")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class SqlSchemaOptions:
    """What the flags of ``dlkit import sql`` add. ``time_columns``: ``TABLE.COLUMN`` each;
    ``exclude_tables``: table names; ``name``: the database id."""

    time_columns: tuple[str, ...] = ()
    exclude_tables: tuple[str, ...] = ()
    name: str | None = None


@dataclass
class MergedSchema:
    """The merged ``dlkit.toml`` text and what the import does per table."""

    text: str
    tables: dict[str, SqlTable]  # dlkit name -> the catalog's table, in output order
    notes: list[str] = field(default_factory=list)


def dlkit_table_name(name: str) -> str:
    """``name`` if it is a valid dlkit table name, else its mapped form (module doc)."""
    if path_name_problem(name) is None:
        return name
    mapped = _UNSAFE.sub("_", name)[:128] or "_"
    if mapped[0] in ".-":
        mapped = "_" + mapped[1:]
    return mapped


def shown(name: str) -> str:
    """A table or column name as a note writes it: bare when it reads as one word, else
    quoted (a table ``..`` with a column ``t`` is ``'..'.t``, never ``...t``)."""
    return name if name.isidentifier() else repr(name)


def mapped_names(catalog: SqlCatalog) -> dict[str, str]:
    """SQL name -> dlkit name of every table of the catalog (two may share one: see
    :func:`table_names`)."""
    return {t.name: dlkit_table_name(t.name) for t in catalog.tables}


def table_names(catalog: SqlCatalog, excluded: Collection[str] = ()) -> dict[str, str]:
    """SQL name -> dlkit name of every table not ``excluded``; raises when two land on one
    name (an excluded table takes no name, so excluding one of two settles it)."""
    out: dict[str, str] = {}
    seen: dict[str, str] = {}
    for table in catalog.tables:
        if table.name in excluded:
            continue
        mapped = dlkit_table_name(table.name)
        other = seen.get(mapped.casefold())
        if other is not None:
            raise SchemaError(f"tables {other!r} and {table.name!r} both become dlkit table "
                              f"{mapped!r} (names are directory names, compared ignoring case): "
                              f"exclude one (--exclude-table {table.name}) or rename it in the "
                              "database", path=catalog.url.display)
        seen[mapped.casefold()] = table.name
        out[table.name] = mapped
    return out


def _input_error(message: str, source: str | None) -> DlkitError:
    """The error of a mistake in the partial schema file ``source`` (a :class:`SchemaError`
    naming it) or, ``source`` None, in a flag's value (an :class:`InvalidArgumentError`,
    ``message`` naming the flag)."""
    if source is None:
        return InvalidArgumentError(message)
    return SchemaError(message, path=source)


def resolve_table(name: str, names: Mapping[str, str], where: str, source: str | None) -> str:
    """The SQL name of the table a partial schema (``source``) or a flag (None) calls
    ``name``: its SQL name, or its dlkit name when that is one table's alone."""
    if name in names:
        return name
    found = [sql_name for sql_name, mapped in names.items() if mapped == name]
    if len(found) == 1:
        return found[0]
    if found:
        raise _input_error(f"{where}: {name!r} is the dlkit name of tables "
                          f"{', '.join(map(repr, found))}: name one by its SQL name", source)
    raise _input_error(f"{where}: " + unknown_name("table", name, list(names.values()),
                                                  "the database"), source)


def _check_columns(table: SqlTable, columns: Iterable[str], dropped: Mapping[str, str],
                   where: str, source: str | None) -> None:
    have = [c.name for c in table.columns]
    for column in columns:
        if column in dropped:
            raise _input_error(f"{where}: column {column!r} is left out of the import "
                              f"({dropped[column]})", source)
        if column not in have:
            raise _input_error(f"{where}: " + unknown_name("column", column, have,
                                                          f"table {table.name!r}"), source)


def _fk_columns(value: Any) -> list[str]:
    if isinstance(value, dict) and isinstance(value.get("columns"), list):
        return [c for c in value["columns"] if isinstance(c, str)]
    return []


def _partial_columns(raw: dict[str, Any]) -> list[str]:
    """The columns a partial ``[tables.T]`` names."""
    names: list[str] = []
    for key in ("time_column", "primary_key"):
        value = raw.get(key)
        names.extend([value] if isinstance(value, str) else
                     [v for v in value if isinstance(v, str)] if isinstance(value, list) else [])
    for key in _COLUMN_LISTS:
        if isinstance(raw.get(key), list):
            names.extend(v for v in raw[key] if isinstance(v, str))
    for key in _COLUMN_MAPS:
        if isinstance(raw.get(key), dict):
            names.extend(raw[key])
    for column, value in (raw.get("foreign_keys") or {}).items():
        names.extend(_fk_columns(value) or [column])
    return names


def _fk_label(table: str, columns: Iterable[str], parent: str, schema: str | None = None
              ) -> str:
    """``orders(user_id) -> users``, ``orders(user) -> other_schema.users``."""
    where = f"{shown(schema)}." if schema is not None else ""
    return f"{shown(table)}({', '.join(map(shown, columns))}) -> {where}{shown(parent)}"


def _catalog_keys(table: SqlTable, catalog: dict[str, SqlTable], names: dict[str, str],
                  kept: set[str], notes: list[str]) -> tuple[Any, dict[str, Any], set[str]]:
    """``(primary_key value, foreign_keys entries, columns of foreign keys left out)``."""
    pk: Any = None
    if len(table.primary_key) == 1:
        pk = table.primary_key[0]
    elif table.primary_key:
        pk = list(table.primary_key)
    fks: dict[str, Any] = {}
    left_out: set[str] = set()
    for fk in table.foreign_keys:
        label = _fk_label(table.name, fk.columns, fk.parent, fk.parent_schema)
        if fk.parent_schema is not None or fk.parent not in catalog:
            # the import has no such table: its references are no edges, as an excluded
            # parent's are not
            why = (f"its table is in SQL schema {fk.parent_schema!r}, not the one imported"
                   if fk.parent_schema is not None else "the database has no such table")
            notes.append(f"foreign key {label} left out: {why}; its columns excluded")
            left_out.update(fk.columns)
            continue
        parent = catalog[fk.parent]
        if fk.parent not in kept:
            notes.append(f"foreign key {label} left out with its table; its columns excluded")
            left_out.update(fk.columns)
            continue
        ordered = _in_key_order(fk, parent)
        if ordered is None:
            notes.append(f"foreign key {label} left out: it refers to "
                         f"({', '.join(map(shown, fk.parent_columns))}), not to the primary "
                         f"key of {shown(fk.parent)}")
            continue
        if len(ordered) == 1:
            column = ordered[0]
            if column == pk or column in fks:
                notes.append(f"foreign key {label} left out: column {column!r} is "
                             + ("the primary key" if column == pk else "already a foreign key"))
                continue
            fks[column] = names[fk.parent]
        else:
            entry = "_".join(ordered)
            while entry in fks or entry in {c.name for c in table.columns}:
                entry += "_fk"
            fks[entry] = {"columns": list(ordered), "table": names[fk.parent]}
    return pk, fks, left_out


def _in_key_order(fk: SqlForeignKey, parent: SqlTable) -> tuple[str, ...] | None:
    """The child columns of ``fk`` in the order of the parent's primary key, or None when
    ``fk`` refers to other columns than that key."""
    if not parent.primary_key or sorted(fk.parent_columns) != sorted(parent.primary_key) \
            or len(set(fk.parent_columns)) != len(fk.parent_columns):
        return None
    by_parent = dict(zip(fk.parent_columns, fk.columns))
    return tuple(by_parent[c] for c in parent.primary_key)


def merge_schema(catalog: SqlCatalog, arrow_schemas: Mapping[str, pa.Schema],
                 dropped: Mapping[str, Mapping[str, str]], partial: dict[str, Any] | None,
                 options: SqlSchemaOptions, *, partial_source: str | None = None,
                 default_name: str) -> MergedSchema:
    """The merged schema of the tables in ``arrow_schemas`` (SQL name -> the Arrow schema of
    the rows read; ``dropped[table][column]``: why a column was left out). ``partial_source``:
    the partial schema's file, which its errors name."""
    partial = dict(partial or {})
    source = partial_source or "the partial schema"
    kept = set(arrow_schemas)
    every_name = mapped_names(catalog)
    names = table_names(catalog, excluded=set(every_name) - kept)
    by_sql = {t.name: t for t in catalog.tables}
    notes: list[str] = []
    partial.pop(EXCLUDE_TABLES, None)
    raw_tables = partial.pop("tables", {}) or {}
    if not isinstance(raw_tables, dict):
        raise SchemaError("tables must be a table of [tables.<name>] sections", path=source)
    given: dict[str, dict[str, Any]] = {}
    for name, raw in raw_tables.items():
        sql_name = resolve_table(name, every_name, f"[tables.{name}]", source)
        if sql_name not in kept:
            raise SchemaError(f"[tables.{name}]: the table is excluded from the import",
                              path=source)
        if not isinstance(raw, dict):
            raise SchemaError(f"[tables.{name}] must be a table of settings", path=source)
        if "path" in raw:
            raise SchemaError(f"[tables.{name}]: path is not allowed here: the rows come from "
                              "the database", path=source)
        _check_columns(by_sql[sql_name], _partial_columns(raw), dropped.get(sql_name, {}),
                       f"[tables.{name}]", source)
        given[sql_name] = dict(raw)
    for item in options.time_columns:
        table_part, dot, column = item.rpartition(".")
        if not dot or not table_part or not column:
            raise InvalidArgumentError(f"--time {item}: expected TABLE.COLUMN")
        sql_name = resolve_table(table_part, every_name, f"--time {item}", None)
        if sql_name not in kept:
            raise InvalidArgumentError(f"--time {item}: table {table_part!r} is excluded")
        _check_columns(by_sql[sql_name], [column], dropped.get(sql_name, {}),
                       f"--time {item}", None)
        given.setdefault(sql_name, {})["time_column"] = column

    tables: dict[str, dict[str, Any]] = {}
    for table in catalog.tables:
        if table.name not in kept:
            continue
        raw = given.get(table.name, {})
        pk, fks, left_out = _catalog_keys(table, by_sql, names, kept, notes)
        for column in raw.get("exclude", []) if isinstance(raw.get("exclude"), list) else []:
            for entry, value in list(fks.items()):
                columns = _fk_columns(value) or [entry]
                if column in columns:
                    del fks[entry]
                    parent = value["table"] if isinstance(value, dict) else value
                    notes.append(f"foreign key {_fk_label(table.name, columns, parent)} left "
                                 f"out: its column {column!r} is excluded")
        entry_out: dict[str, Any] = {}
        if "primary_key" in raw:
            pk = raw["primary_key"]
        if pk is not None:
            entry_out["primary_key"] = pk
        excluded = list(raw.get("exclude", [])) if isinstance(raw.get("exclude"), list) else []
        present = set(arrow_schemas[table.name].names)
        excluded += sorted(c for c in left_out if c in present and c not in excluded)
        for key, value in raw.items():
            if key not in ("primary_key", "foreign_keys", "exclude"):
                entry_out[key] = value
        if excluded or "exclude" in raw:
            entry_out["exclude"] = excluded
        partial_fks = raw.get("foreign_keys", {})
        if partial_fks is not None and not isinstance(partial_fks, dict):
            raise SchemaError(f"[tables.{names[table.name]}]: foreign_keys must map column -> "
                              "parent table", path=source)
        fks.update(partial_fks or {})
        if fks:
            entry_out["foreign_keys"] = fks
        tables[names[table.name]] = entry_out
        if names[table.name] != table.name:
            notes.append(f"table {table.name!r} is dlkit table {names[table.name]!r}")
        for column, why in dropped.get(table.name, {}).items():
            notes.append(f"{shown(table.name)}.{shown(column)} left out: {why}")
    if catalog.views:
        notes.append("views not imported (dlkit reads base tables): "
                     + ", ".join(map(shown, catalog.views)))
    name = partial.pop("name", None) or options.name or default_name
    doc: dict[str, Any] = {"format_version": partial.pop("format_version", 1), "name": name,
                           "tables": tables}
    doc.update(partial)
    header = [f"dlkit.toml of the SQL database {catalog.url.display}:",
              "tables, primary and foreign keys from its catalog; time columns, types,",
              "exclusions and tasks from the partial schema and flags (which win).",
              "`dlkit import sql URL OUT --schema THIS_FILE` builds the same database again."]
    header += notes
    text = "\n".join(f"# {line}" for line in header) + "\n" + render_toml(doc)
    return MergedSchema(text=text, tables={names[t]: by_sql[t] for t in by_sql if t in kept},
                        notes=notes)


# --- a small TOML writer --------------------------------------------------------------------


def toml_value(value: Any) -> str:
    """TOML text of a value read by ``tomllib`` (inline tables for dicts)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return ("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")) \
            if not math.isfinite(value) else repr(value)
    if isinstance(value, str):
        return toml_str(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}"
                                for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {value!r}")


def _section(path: list[str], body: dict[str, Any], depth: int, out: list[str]) -> None:
    """``[path]`` with ``body``'s values; dicts become sub-sections down to ``depth``."""
    plain = {k: v for k, v in body.items() if not (isinstance(v, dict) and depth > 0)}
    nested = {k: v for k, v in body.items() if k not in plain}
    if path:
        out.append("")
        out.append("[" + ".".join(toml_key(p) for p in path) + "]")
    for key, value in plain.items():
        out.append(f"{toml_key(key)} = {toml_value(value)}")
    for key, value in nested.items():
        _section([*path, key], value, depth - 1, out)


def render_toml(doc: dict[str, Any]) -> str:
    """TOML text of ``doc``: top-level values, then one section per table and task (their
    dict values as sub-sections, deeper dicts inline)."""
    out: list[str] = []
    plain = {k: v for k, v in doc.items() if not isinstance(v, dict) or not v}
    for key, value in plain.items():
        out.append(f"{toml_key(key)} = {toml_value(value)}")
    for key, value in doc.items():
        if key in plain:
            continue
        if key in ("tables", "tasks"):
            for name, body in value.items():
                if isinstance(body, dict):
                    _section([key, name], body, 1, out)
                else:
                    out.append(f"{toml_key(key)}.{toml_key(name)} = {toml_value(body)}")
        else:
            _section([key], value, 2, out)
    return "\n".join(out) + "\n"
