"""A ``Schema`` written back as ``dlkit.toml`` text: the drafts of ``dlkit schema infer`` and
``dlkit import relbench``/``sql``, with comments saying why each guess was made. Parsing the
text gives the schema back (the tests round-trip it)."""

from __future__ import annotations

import json
import re

from dlkit.db.schema.durations import DURATION_US
from dlkit.db.schema.spec import (
    SPLIT_NAMES,
    PrimaryKey,
    Schema,
    TableSpec,
    TaskSpec,
    key_label,
)
from dlkit.db.time_units import TimePosition

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else toml_str(name)


def toml_str(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, and TOML also forbids a raw DEL."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _comment(text: str) -> str:
    """``text`` fit for a TOML comment: control characters (a newline in a column name)
    escaped, as TOML forbids them there."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _render_key(key: PrimaryKey) -> str:
    if isinstance(key, str):
        return toml_str(key)
    return f"[{', '.join(toml_str(c) for c in key)}]"


def _render_path(spec: TableSpec) -> str:
    if spec.split_paths is None:
        return toml_str(spec.path or "")
    parts = ", ".join(f"{k} = {toml_str(v)}" for k, v in zip(SPLIT_NAMES, spec.split_paths))
    return f"{{ {parts} }}"


def render_duration(us: int) -> str:
    """The shortest exact ``parse_duration`` text of ``us`` microseconds."""
    for unit in ("w", "d", "h", "m", "s", "ms"):
        if us and us % DURATION_US[unit] == 0:
            return f"{us // DURATION_US[unit]}{unit}"
    return f"{us}us" if us else "0"


def render_instant(us: int) -> str:
    import datetime as dt

    moment = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=us)
    return moment.isoformat().replace("+00:00", "Z")


def _render_time_options(spec: TableSpec) -> list[str]:
    out = []
    if spec.time_unit is not None:
        out.append(f"time_unit = {toml_str(spec.time_unit.value)}")
    if spec.time_position is not TimePosition.START:
        out.append(f"time_position = {toml_str(spec.time_position.value)}")
    if spec.known_after:
        lags = ", ".join(f"{toml_key(c)} = {toml_str(render_duration(us))}"
                         for c, us in spec.known_after)
        out.append(f"known_after = {{ {lags} }}")
    return out


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
                  header: str = "", table_notes: dict[str, list[str]] | None = None) -> str:
    """TOML text of ``schema``; ``notes[(table, column)]`` become end-of-line comments (a
    composite key's: ``notes[(table, key_label(key))]``), ``table_notes[table]`` comment
    lines under the table's header."""
    notes = {k: _comment(v) for k, v in (notes or {}).items()}
    table_notes = {t: [_comment(line) for line in lines]
                   for t, lines in (table_notes or {}).items()}
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
        out.extend(f"# {line}" for line in table_notes.get(spec.name, ()))
        if spec.path is not None or spec.split_paths is not None:
            out.append(f"path = {_render_path(spec)}")
        if spec.primary_key is not None:
            line = f"primary_key = {_render_key(spec.primary_key)}"
            # a key column has no type line
            note = notes.get((spec.name, key_label(spec.primary_key)))
            out.append(f"{line:<40} # {note}" if note else line)
        else:
            out.append("# primary_key = \"...\"   # none found: only needed if other tables refer here")
        if spec.time_column is not None:
            line = f"time_column = {toml_str(spec.time_column)}"
            # a key column that is the time column has no type line for its reason
            note = (notes.get((spec.name, spec.time_column))
                    if spec.time_column in spec.key_column_set() else None)
            out.append(f"{line:<40} # {note}" if note else line)
            out.extend(_render_time_options(spec))
        else:
            out.append("# time_column = \"...\"   # none found: rows are then visible at any time")
        excl = ", ".join(toml_str(c) for c in spec.exclude)
        out.append(f"exclude = [{excl}]")
        if spec.foreign_keys:
            out.append(f"[tables.{toml_key(spec.name)}.foreign_keys]")
            for column, parent in spec.foreign_keys:
                parts = spec.composite_fks.get(column)
                target = (toml_str(parent) if parts is None else
                          f"{{ columns = {_render_key(parts)}, table = {toml_str(parent)} }}")
                line = f"{toml_key(column)} = {target}"
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
                    out.extend(_render_time_options(spec))
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
