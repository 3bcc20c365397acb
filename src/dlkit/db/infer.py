"""``dlkit schema infer``: draft a ``dlkit.toml`` from a directory of Parquet files.

Heuristics (the draft is for a person to review):

* tables: every ``*.parquet`` file (table = file stem) and every directory holding Parquet
  parts (table = directory name), sorted by name; names that are not safe file names are
  listed in the header comment and skipped;
* primary key: the first integer or string column named ``id``, ``<table>_id`` or
  ``<singular table>_id`` (``users`` -> ``user_id``) whose values are unique and non-null;
* foreign keys: other columns named ``<x>_id`` / ``<x>id`` where ``x``, ``x + "s"`` or
  ``x + "es"`` is a table with a primary key of the same type family;
* time column: the only timestamp/date column, or the first whose name contains ``time``,
  ``date``, ``created`` or ends with ``_at``;
* types: every remaining column's inferred semantic type (strings read once to count distinct
  values), unsupported columns in ``exclude``.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc

from dlkit.db.format import path_name_problem
from dlkit.db.schema import (
    KEY_FAMILIES,
    Schema,
    TableSpec,
    infer_stype,
    render_schema,
    type_family,
)
from dlkit.db.source import DEFAULT_BATCH_ROWS, TableSource, parquet_parts
from dlkit.db.plan import infer_string_column
from dlkit.errors import SchemaError


def _candidates(input_dir: Path) -> list[tuple[str, Path]]:
    found = []
    for p in sorted(input_dir.iterdir(), key=lambda q: q.name):
        if p.name.startswith((".", "_")):
            continue
        if p.is_file() and p.name.endswith(".parquet"):
            found.append((p.name[: -len(".parquet")], p))
        elif p.is_dir() and parquet_parts(p):
            found.append((p.name, p))
    return found


def _singular(name: str) -> list[str]:
    out = [name]
    if name.endswith("ies"):
        out.append(name[:-3] + "y")
    if name.endswith("es"):
        out.append(name[:-2])
    if name.endswith("s"):
        out.append(name[:-1])
    return out


def _is_unique_key(source: TableSource, column: str, batch_rows: int) -> bool:
    values = []
    for arr in source.iter_column(column, batch_rows):
        if arr.null_count:
            return False
        values.append(arr)
    if not values:
        return True
    total = sum(len(v) for v in values)
    import pyarrow as pa

    return pc.count_distinct(pa.chunked_array(values)).as_py() == total


def infer_schema(input_dir: str | Path, *, name: str | None = None,
                 batch_rows: int = DEFAULT_BATCH_ROWS) -> tuple[Schema, str]:
    """``(draft schema, TOML text)`` for the Parquet tables in ``input_dir``."""
    root = Path(input_dir)
    if not root.is_dir():
        raise SchemaError("input is not a directory", path=root)
    skipped = []
    sources: dict[str, TableSource] = {}
    for tname, path in _candidates(root):
        if path_name_problem(tname):
            skipped.append(tname)
            continue
        sources[tname] = TableSource.open(tname, path)
    if not sources:
        raise SchemaError("no Parquet tables found (expected *.parquet files or directories of "
                          "parts)", path=root)
    fam = {t: {f.name: type_family(f.type) for f in s.schema} for t, s in sources.items()}

    pks: dict[str, str | None] = {}
    for tname, src in sources.items():
        pks[tname] = None
        wanted = ["id"] + [f"{s}_id" for s in _singular(tname)]
        for column in wanted:
            if fam[tname].get(column) in KEY_FAMILIES and _is_unique_key(src, column, batch_rows):
                pks[tname] = column
                break

    def parent_for(column: str, family: str, own: str) -> str | None:
        low = column.lower()
        stem = low[:-3] if low.endswith("_id") else low[:-2] if low.endswith("id") else None
        if not stem:
            return None
        for cand in (stem, stem + "s", stem + "es", stem[:-1] + "ies" if stem.endswith("y") else None):
            for tname in sources:
                if cand and tname.lower() == cand and pks[tname] is not None:
                    if fam[tname][pks[tname]] == family and not (tname == own and pks[own] == column):
                        return tname
        return None

    specs = []
    notes: dict[tuple[str, str], str] = {}
    for tname, src in sources.items():
        pk = pks[tname]
        fks = []
        for f in src.schema:
            if f.name == pk:
                continue
            parent = parent_for(f.name, fam[tname][f.name], tname)
            if parent is not None:
                fks.append((f.name, parent))
        fk_cols = {c for c, _ in fks}
        times = [f.name for f in src.schema
                 if fam[tname][f.name] in ("timestamp", "date") and f.name != pk]
        time_column = None
        if len(times) == 1:
            time_column = times[0]
        else:
            for column in times:
                low = column.lower()
                if any(w in low for w in ("time", "date", "created")) or low.endswith("_at"):
                    time_column = column
                    break
        types: dict[str, str] = {}
        exclude = []
        for f in src.schema:
            if f.name == pk or f.name in fk_cols:
                continue
            family = fam[tname][f.name]
            if family == "unsupported":
                exclude.append(f.name)
                notes[(tname, f.name)] = f"{f.type}: not supported"
                continue
            if family == "string":
                stype = infer_string_column(src, f.name, batch_rows)
            else:
                stype = infer_stype(family)
            types[f.name] = stype
            notes[(tname, f.name)] = str(f.type)
        rel = src.location.relative_to(root).as_posix()
        default_rel = f"{tname}.parquet"
        specs.append(TableSpec(name=tname, path=None if rel == default_rel else rel,
                               primary_key=pk, time_column=time_column, foreign_keys=tuple(fks),
                               exclude=tuple(exclude), types=types))
    schema = Schema(name=name or root.resolve().name, tables=tuple(specs), tasks=())
    header = (f"dlkit.toml drafted by `dlkit schema infer` from {root}.\n"
              "Review it: primary keys, foreign keys, time columns and types are guesses.\n"
              "Semantic types: numeric, boolean, timestamp, categorical, text.")
    if skipped:
        header += f"\nSkipped (not safe table names): {', '.join(skipped)}"
    return schema, render_schema(schema, notes, header)
