"""The schema as a picture: tables with their keys and time columns, foreign keys as arrows
(with edge counts when drawn from a built database), tasks marked on their tables.

One record, :class:`SchemaDiagram`, made from a parsed ``dlkit.toml`` or from a database's
metadata, and rendered as Mermaid (a flowchart: it takes any table name, where Mermaid's ER
syntax refuses dots and dashes) or Graphviz DOT text. SVG needs Graphviz's ``dot`` program
(Debian's ``graphviz`` package); without it the text forms still work.
"""

from __future__ import annotations

import html
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from dlkit.db.metadata_records import DatabaseMetadata
from dlkit.db.schema.spec import Schema
from dlkit.errors import InvalidArgumentError, OutputError


@dataclass(frozen=True)
class DiagramTable:
    name: str
    key: tuple[str, ...]
    time_column: str | None
    num_rows: int | None  # None: drawn from a schema, before any row was read
    tasks: tuple[str, ...]  # "task: target" of the tasks whose seeds are this table's rows


@dataclass(frozen=True)
class DiagramEdge:
    table: str  # the child: its column(s) refer to the parent's key
    columns: tuple[str, ...]
    parent: str
    num_edges: int | None


@dataclass(frozen=True)
class SchemaDiagram:
    name: str
    tables: tuple[DiagramTable, ...]
    edges: tuple[DiagramEdge, ...]

    def to_mermaid(self) -> str:
        ids = {t.name: f"t{i}" for i, t in enumerate(self.tables)}
        out = ["flowchart LR"]
        for t in self.tables:
            out.append(f'  {ids[t.name]}["{_mermaid(_label_lines(t), "<br/>")}"]')
            if t.tasks:
                out.append(f"  class {ids[t.name]} task")
        for e in self.edges:
            out.append(f'  {ids[e.table]} -->|"{_mermaid(_edge_lines(e), "<br/>")}"| '
                       f"{ids[e.parent]}")
        out.append("  classDef task stroke:#c0392b,stroke-width:3px")
        return "\n".join(out) + "\n"

    def to_dot(self) -> str:
        ids = {t.name: f"t{i}" for i, t in enumerate(self.tables)}
        out = [f"digraph {_dot_string(self.name)} {{", "  rankdir=LR;",
               '  node [shape=plaintext, fontname="Helvetica", fontsize=11];',
               '  edge [fontname="Helvetica", fontsize=9, color="#555555"];']
        for t in self.tables:
            lines = _label_lines(t)
            border = "#c0392b" if t.tasks else "#34495e"
            rows = "".join(f'<TR><TD ALIGN="LEFT">{html.escape(line)}</TD></TR>'
                           for line in lines[1:])
            out.append(f'  {ids[t.name]} [label=<<TABLE BORDER="2" CELLBORDER="0" '
                       f'CELLSPACING="0" COLOR="{border}"><TR><TD BGCOLOR="#ecf0f1"><B>'
                       f"{html.escape(lines[0])}</B></TD></TR>{rows}</TABLE>>];")
        for e in self.edges:
            out.append(f"  {ids[e.table]} -> {ids[e.parent]} "
                       f"[label={_dot_string(chr(10).join(_edge_lines(e)))}];")
        out.append("}")
        return "\n".join(out) + "\n"

    def to_svg(self) -> str:
        """SVG drawn by Graphviz; :class:`InvalidArgumentError` when ``dot`` is not installed."""
        dot = graphviz_dot()
        if dot is None:
            raise InvalidArgumentError(
                "SVG needs Graphviz's `dot` program (Debian: apt-get install graphviz); "
                "--format mermaid or --format dot print the diagram as text without it")
        try:
            done = subprocess.run([dot, "-Tsvg"], input=self.to_dot().encode("utf-8"),
                                  capture_output=True, timeout=120, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise OutputError(f"Graphviz's dot failed: {exc}", path=dot) from None
        if done.returncode != 0:
            message = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise OutputError(f"Graphviz's dot failed: {message[-1] if message else '?'}",
                              path=dot)
        return done.stdout.decode("utf-8")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name,
                "tables": [t.__dict__ for t in self.tables],
                "edges": [e.__dict__ for e in self.edges]}


def graphviz_dot() -> str | None:
    return shutil.which("dot")


def _label_lines(t: DiagramTable) -> list[str]:
    lines = [t.name if t.num_rows is None else f"{t.name} ({t.num_rows:,} rows)"]
    if t.key:
        lines.append("key: " + ", ".join(t.key))
    if t.time_column:
        lines.append(f"time: {t.time_column}")
    lines.extend(f"task {task}" for task in t.tasks)
    return lines


def _edge_lines(e: DiagramEdge) -> list[str]:
    lines = [", ".join(e.columns)]
    if e.num_edges is not None:
        lines.append(f"{e.num_edges:,} edges")
    return lines


def _mermaid(lines: list[str], sep: str) -> str:
    # Mermaid's entity codes: the label is quoted, so only quotes and markup need escaping
    return sep.join(html.escape(line, quote=False).replace('"', "#quot;") for line in lines)


def _dot_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _key_columns(key: Any) -> tuple[str, ...]:
    """A primary key as its columns: a string (one column), a sequence, or none."""
    if key is None:
        return ()
    if isinstance(key, str):
        return (key,)
    return tuple(str(k) for k in key)


def _fk_parts(fk: Any) -> tuple[tuple[str, ...], str]:
    """A foreign key's (columns, parent table), from the forms a schema or metadata hold:
    a ``(column, parent)`` pair, or a record with ``columns``/``column`` and a parent."""
    if isinstance(fk, tuple) and len(fk) == 2 and isinstance(fk[1], str):
        return _key_columns(fk[0]), fk[1]
    columns = getattr(fk, "columns", None) or getattr(fk, "column", None)
    parent = getattr(fk, "parent_table", None) or getattr(fk, "table", None)
    return _key_columns(columns), str(parent)


def diagram_of_schema(schema: Schema) -> SchemaDiagram:
    tasks: dict[str, list[str]] = {}
    for task in schema.tasks:
        tasks.setdefault(task.table, []).append(f"{task.name}: {task.target}")
    tables = tuple(DiagramTable(t.name, _key_columns(t.primary_key), t.time_column, None,
                                tuple(tasks.get(t.name, ()))) for t in schema.tables)
    edges = []
    for t in schema.tables:
        for fk in t.foreign_keys:
            columns, parent = _fk_parts(fk)
            edges.append(DiagramEdge(t.name, columns, parent, None))
    return SchemaDiagram(schema.name, tables, tuple(edges))


def diagram_of_metadata(meta: DatabaseMetadata) -> SchemaDiagram:
    tasks: dict[str, list[str]] = {}
    for task in meta.tasks:
        tasks.setdefault(task.table, []).append(f"{task.name}: {task.target_column}")
    tables = tuple(DiagramTable(t.name, _key_columns(t.primary_key), t.time_column, t.num_rows,
                                tuple(tasks.get(t.name, ()))) for t in meta.tables)
    edges = []
    for t in meta.tables:
        for fk in t.foreign_keys:
            columns, parent = _fk_parts(fk)
            edges.append(DiagramEdge(t.name, columns, parent, fk.num_edges))
    return SchemaDiagram(meta.database_id, tables, tuple(edges))


__all__ = ["DiagramEdge", "DiagramTable", "SchemaDiagram", "diagram_of_metadata",
           "diagram_of_schema", "graphviz_dot"]
