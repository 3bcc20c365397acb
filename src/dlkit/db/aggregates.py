"""As-of aggregate cells of a database (``[aggregates]`` in ``dlkit.toml``): their entries in
``metadata.json``, the layout of their prefix-sum files, and the checks of both.

An aggregate cell belongs to every row of its ``parent_table`` and summarises the row's
children from ``child_table`` (the edges of the child table's foreign keys into the parent
table): ``count`` their number, ``sum`` / ``mean`` the sum / mean of the non-null values of
the child table's ``column``, ``recency`` the days since the latest. A database with
aggregates has three more files:

- ``aggregates/counts.bin`` (int64): per count, recency or mean cell, in cell order, one
  running value per position of the parent table's child lists (a count or a mean's count of
  values, a recency's latest child time);
- ``aggregates/sums.bin`` (float64): per sum cell, in cell order, one running sum per
  position (its mean cell, which follows it, divides it by the mean's counts);
- ``aggregates/embeddings.bin`` (float16 ``[cells, column_dim]``): the cell names embedded
  like column names; cell ``j``'s ``column_id`` is ``num_columns + j``.

See ``dlkit.core.aggregates`` for the prefix sums and docs/database_format.md for the format.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

COUNTS_FILE = "aggregates/counts.bin"
SUMS_FILE = "aggregates/sums.bin"
EMBEDDINGS_FILE = "aggregates/embeddings.bin"
FILES = (COUNTS_FILE, SUMS_FILE, EMBEDDINGS_FILE)
KINDS = ("count", "sum", "mean", "recency")
# the kinds that summarise the children themselves, not a column of theirs
ROW_KINDS = ("count", "recency")
KEYS = ("name", "kind", "parent_table", "child_table", "column", "column_id", "mean", "std")


def cell_name(kind: str, parent: str, child: str, column: str | None) -> str:
    """The text a cell's column embedding is made from."""
    if kind == "count":
        return f"number of {child} of {parent}"
    if kind == "recency":
        return f"days since the last {child} of {parent}"
    return f"{kind} of {column} of {child} of {parent}"


@dataclass(frozen=True)
class AggregateMetadata:
    """One aggregate cell of every row of ``parent_table`` (module doc). ``mean`` / ``std``
    z-score its value: over the parent rows' totals for counts and sums, the child column's
    statistics for means (0 and 1 for a boolean column), over the log1p days between
    consecutive children for a recency."""

    name: str
    kind: str
    parent_table: str
    child_table: str
    column: str | None
    column_id: int
    mean: float
    std: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "parent_table": self.parent_table,
                "child_table": self.child_table, "column": self.column,
                "column_id": self.column_id, "mean": self.mean, "std": self.std}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> AggregateMetadata:
        return cls(**{key: obj[key] for key in KEYS})


@dataclass(frozen=True)
class Segment:
    """Where cell ``j``'s prefix arrays are: ``length`` positions (the edges into its parent
    table) from ``count_at`` in counts.bin and ``sum_at`` in sums.bin (-1: none)."""

    count_at: int
    sum_at: int
    length: int


def parent_edges(tables: Any) -> dict[str, int]:
    """Edges into each table (its rows' child lists), from the foreign-key counts."""
    edges = {t.name: 0 for t in tables}
    for t in tables:
        for fk in t.foreign_keys:
            edges[fk.parent_table] += fk.num_edges
    return edges


def layout(cells: tuple[AggregateMetadata, ...],
           tables: Any) -> tuple[list[Segment], int, int]:
    """Each cell's segment, and the lengths of counts.bin and sums.bin (in values). A mean's
    sums are those of the sum cell just before it."""
    edges = parent_edges(tables)
    segments: list[Segment] = []
    counts = sums = 0
    for j, cell in enumerate(cells):
        n = edges.get(cell.parent_table, 0)
        if cell.kind in ROW_KINDS:
            segments.append(Segment(counts, -1, n))
            counts += n
        elif cell.kind == "sum":
            segments.append(Segment(-1, sums, n))
            sums += n
        else:
            segments.append(Segment(counts, segments[j - 1].sum_at, n))
            counts += n
    return segments, counts, sums


def check_entries(doc: dict[str, Any], fail: Callable[[str], None]) -> None:
    """The ``aggregates`` list of a parsed metadata.json (called only when present): types,
    names, tables, columns, kinds, order and column ids; each problem goes to ``fail``."""
    cells = doc.get("aggregates")
    if not isinstance(cells, list) or not cells:
        fail("aggregates must be a non-empty list (absent when there are none)")
        return
    tables = {t.get("name"): t for t in doc.get("tables", []) if isinstance(t, dict)}
    for j, cell in enumerate(cells):
        where = f"aggregates[{j}]"
        if not isinstance(cell, dict) or set(cell) != set(KEYS):
            fail(f"{where} must be an object with exactly the keys {list(KEYS)}")
            return
        kind, parent, child, column = (cell["kind"], cell["parent_table"], cell["child_table"],
                                       cell["column"])
        if kind not in KINDS:
            fail(f"{where}: kind {kind!r} is not one of {list(KINDS)}")
            return
        if parent not in tables or child not in tables:
            fail(f"{where}: tables {parent!r} / {child!r} are not both in the database")
            return
        if not any(isinstance(fk, dict) and fk.get("parent_table") == parent
                   for fk in tables[child].get("foreign_keys", [])):
            fail(f"{where}: table {child!r} has no foreign key into {parent!r}")
            return
        if (kind in ROW_KINDS) != (column is None):
            fail(f"{where}: a count or recency has column null, a sum or mean names a column")
            return
        if column is not None:
            found = [c for c in tables[child].get("columns", []) if isinstance(c, dict)
                     and c.get("name") == column]
            if not found or found[0].get("stype") not in (0, 1):
                fail(f"{where}: {child}.{column} is not a numeric or boolean column")
                return
        if kind == "mean":
            before = cells[j - 1] if j > 0 else None
            if (not isinstance(before, dict) or before.get("kind") != "sum"
                    or [before.get(k) for k in ("parent_table", "child_table", "column")]
                    != [parent, child, column]):
                fail(f"{where}: a mean follows the sum of the same column and tables")
                return
        if cell["name"] != cell_name(kind, parent, child, column):
            fail(f"{where}: name {cell['name']!r}, expected "
                 f"{cell_name(kind, parent, child, column)!r}")
            return
        expected_id = doc.get("num_columns", 0) + j
        if type(cell["column_id"]) is not int or cell["column_id"] != expected_id:
            fail(f"{where}: column_id {cell['column_id']!r}, expected {expected_id}")
            return
        for key in ("mean", "std"):
            value = cell[key]
            if type(value) not in (int, float) or value != value or abs(value) == float("inf"):
                fail(f"{where}: {key} {value!r} is not a finite number")
                return
        if not cell["std"] > 0:
            fail(f"{where}: std {cell['std']!r} must be > 0")
            return
