"""``dlkit schema infer``: draft a ``dlkit.toml`` from a directory of Parquet files.

A directory in RelBench's layout (``db/<table>.parquet`` with RelBench's key metadata, tasks
under ``tasks/``) is read exactly, keys and tasks included (:mod:`dlkit.db.write.relbench`). Any
other directory gets a draft for a person to review:

* tables: every ``*.parquet`` file (table = file stem) and every directory holding Parquet
  parts (table = directory name), sorted by name; names that are not safe file names are
  listed in the header comment and skipped;
* keys, found by their values (:func:`find_keys`): a column of integers or strings (none
  longer than ``MAX_KEY_BYTES``) with no null and no repeated value is a *key candidate*; a
  column of the same kind whose sampled values are at least ``FK_MIN_FOUND`` contained in a
  candidate *refers* to it. A table's primary key is its candidate that other tables refer
  to (most references first), else the one named like a key (``id``, ``<table>_id``,
  ``<singular>Id``, ``<table>_code``, ...); a candidate with neither is only suggested in a
  comment. Then every column that refers to a chosen primary key is a foreign key to its
  table. Integer ids ``0..n`` lie inside each other everywhere, so an integer reference also
  needs its name to point at the parent (``user_id``/``userId``/``user`` -> ``users``, the
  parent key's own name, or either after a role: ``buyer_user_id``); string codes
  (carriers, airports, tail numbers) rarely do, so their values suffice and names break
  ties. What the values do not settle (a share of dangling values, fewer than
  ``FK_MIN_DISTINCT`` distinct values, an integer named only like some key, a tie) stays an
  active entry marked ``guess:`` in its comment;
* time column: the only timestamp/date column, or the first whose name contains ``time``,
  ``date``, ``created`` or ends with ``_at``;
* types: every remaining column's inferred semantic type (strings read once to count distinct
  values), unsupported columns in ``exclude``.

Composite keys are found by :mod:`dlkit.db.write.infer_composite`.

Sampling keeps inference fast on large tables: each key-kind column is read in about
``READ_ROWS`` rows (whole row groups spread over the table), of which ``SAMPLE_ROWS`` evenly
spaced values are its sample. Only a column with no null in what was read and no repeat in
its sample is read whole: to prove it unique and index it, with the kernels preprocess uses
for primary keys (:class:`dlkit.db.write.primary_keys.KeyIndex`); every other column's sample is then
looked up in that index. docs/schema.md gives the measured speed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dlkit.db.format import path_name_problem
from dlkit.db.schema.arrow_types import (
    CATEGORICAL_MAX_DISTINCT,
    KEY_FAMILIES,
    infer_stype,
    type_family,
)
from dlkit.db.schema.render import render_schema
from dlkit.db.schema.spec import (
    PrimaryKey,
    Schema,
    TableSpec,
    key_columns,
    key_label,
)
from dlkit.db.write.convert import unique_values
from dlkit.db.write.infer_probe import (
    _KEY_SUFFIXES,
    ColumnProbe,
    _candidates,
    _key_index,
    _named_like_a_key,
    _norm,
    _probe,
    _Reader,
    _reading,
    _share_found,
    _table_words,
    _words,
    fk_name_score,
    pk_name_score,
)
from dlkit.db.write.infer_time import with_int_time
from dlkit.db.write.plan import infer_string_column
from dlkit.db.write.source import DEFAULT_BATCH_ROWS, TableSource
from dlkit.errors import InvalidArgumentError, SchemaError

# A reference may dangle: real reference tables miss some codes (a flights table's tail
# numbers absent from its planes table, airports missing from an airports list). At least
# this share of a column's sampled non-null values must be keys of the parent...
FK_MIN_FOUND = 0.75
# ...and below this share the foreign key is written as a guess.
FK_SURE_FOUND = 0.99
# Fewer distinct sampled values than this cannot tell a reference from chance.
FK_MIN_DISTINCT = 3
# A column named for a key with at least this share (and less than FK_MIN_FOUND) of its
# values found gets a note saying why it is no foreign key.
SMALL_SHARE = 0.05

@dataclass(frozen=True)
class KeyGuess:
    """A primary or foreign key found by values, with why (the draft's comment)."""

    table: str
    column: str
    parent: str | None      # foreign keys: the parent table
    sure: bool
    reason: str


@dataclass
class FoundKeys:
    primary: dict[str, KeyGuess] = field(default_factory=dict)
    foreign: dict[str, list[KeyGuess]] = field(default_factory=dict)
    suggestions: dict[str, str] = field(default_factory=dict)  # table -> unique column
    # table -> what the draft says of it beyond its keys' own comments (warnings included)
    notes: dict[str, list[str]] = field(default_factory=dict)

    def note(self, table: str, text: str) -> None:
        self.notes.setdefault(table, []).append(text)


def probe_columns(sources: dict[str, TableSource],
                  readers: dict[str, _Reader] | None = None) -> list[ColumnProbe]:
    """Sample every integer and string column; prove unique each column whose read part has
    no null and whose sample no repeat, indexing its values as preprocess would; and look up
    every other column's sample of the same kind in that index."""
    probes: list[ColumnProbe] = []
    readers = readers if readers is not None else {t: _Reader(s) for t, s in sources.items()}
    for tname, src in sources.items():
        for position, f in enumerate(src.schema):
            family = type_family(f.type)
            if family in KEY_FAMILIES:
                probes.append(_probe(readers[tname], f.name, family, position))
    pairs = _Pairs(probes)
    for key in probes:
        if not key.maybe_unique:
            continue
        children = pairs.children(key)
        if not children and _proven_unique(key) and not pa.types.is_uint64(key.sample.type):
            key.unique = True  # nothing to look up in its index: no need to build it
            key.complete = None
            continue
        values = key.complete if key.complete is not None else readers[key.table].whole(key.column)
        key.complete = None  # read once: free it
        index = _key_index(values, key.family)
        del values
        if index is None:
            continue
        key.unique = True
        for child in children:
            share = _share_found(index, child.sample)
            key.shares[(child.table, child.column)] = share
            if child.table == key.table and share >= FK_MIN_FOUND:
                key.same_row[child.column] = _same_row_share(readers[key.table], key.column,
                                                             child.column)
    for p in probes:
        p.complete = None
    return probes


def _proven_unique(p: ColumnProbe) -> bool:
    """Unique with no null, known from the sample alone (it is the whole column)."""
    return p.maybe_unique and len(p.sample) == p.num_rows


def _plain_child(p: ColumnProbe) -> bool:
    """Whether ``p`` may refer to a key whose table its name does not point at: it has
    enough distinct values to tell a reference from chance, is not its own table's key
    (unique in every row: a second key, not a reference, unless its name points) and, an
    integer, is named like a key but not like its own table's (``id``, ``<table>_id``)."""
    if p.distinct < FK_MIN_DISTINCT:
        return False
    if _proven_unique(p):
        return False
    if p.family == "string":
        return True
    return _named_like_a_key(p.column) and pk_name_score(p.table, p.column) < 3


def _bounds_array(values: list[Any], family: str) -> np.ndarray:
    """Sample minima or maxima as an array numpy compares in bulk: integers as float64 (an
    order-preserving, if coarse, image: ranges compare safely with ``<=``), strings as
    their UTF-8 bytes."""
    if family == "integer":
        return np.array([float(v) for v in values], dtype=np.float64)
    return np.array([v.encode("utf-8", "surrogatepass") if isinstance(v, str) else bytes(v)
                     for v in values], dtype=np.bytes_)


def _same_row_share(reader: _Reader, a: str, b: str) -> float:
    """Share of the rows read (where ``b`` is not null) whose ``a`` and ``b`` are equal."""
    part_a, _ = reader.spread(a)
    part_b, _ = reader.spread(b)
    try:
        if part_a.type != part_b.type:
            part_a, part_b = part_a.cast(pa.large_string()), part_b.cast(pa.large_string())
        equal = pc.equal(part_a, part_b)
    except (pa.ArrowException, ValueError):
        return 0.0
    valid = len(equal) - equal.null_count
    return pc.sum(equal).as_py() / valid if valid else 0.0


def _suffix_names(column: str) -> list[str]:
    """The column's name and the names after each of its leading words (a role):
    ``buyer_user_id`` -> [buyeruserid, userid, id]; the first is the whole name."""
    words = _words(column)
    return ["".join(words[i:]) for i in range(len(words))] or [""]


class _Pairs:
    """Which columns are worth looking up in a key candidate's index, found by cheap
    signatures instead of trying every pair (a table of 10,000 columns would make 10^8):
    the same type family, overlapping value ranges, and a name that points at the key's
    table, or else :func:`_plain_child`."""

    def __init__(self, probes: list[ColumnProbe]):
        self.groups: dict[str, list[ColumnProbe]] = {}
        for p in probes:
            if len(p.sample):
                self.groups.setdefault(p.family, []).append(p)
        self.lo: dict[str, np.ndarray] = {}
        self.hi: dict[str, np.ndarray] = {}
        self.plain: dict[str, np.ndarray] = {}  # telling without a name pointing at the key
        self.proven: dict[str, np.ndarray] = {}  # unique: the sample is the whole column
        self.where: dict[str, dict[tuple[str, str], int]] = {}
        self.by_name: dict[str, dict[str, list[int]]] = {}
        for family, group in self.groups.items():
            bounds = [pc.min_max(p.sample) for p in group]
            lo = [b["min"].as_py() for b in bounds]
            hi = [b["max"].as_py() for b in bounds]
            self.lo[family] = _bounds_array(lo, family)
            self.hi[family] = _bounds_array(hi, family)
            self.plain[family] = np.array([_plain_child(p) for p in group], dtype=bool)
            self.proven[family] = np.array([_proven_unique(p) for p in group], dtype=bool)
            self.where[family] = {(p.table, p.column): i for i, p in enumerate(group)}
            names: dict[str, list[int]] = {}
            for i, p in enumerate(group):
                for name in _suffix_names(p.column):
                    names.setdefault(name, []).append(i)
            self.by_name[family] = names

    def children(self, key: ColumnProbe) -> list[ColumnProbe]:
        group = self.groups.get(key.family, [])
        if not group or not len(key.sample):
            return []
        family = key.family
        pointed = np.zeros(len(group), dtype=bool)  # names the key's table
        for name in {w + s for w in _table_words(key.table) for s in ("", *_KEY_SUFFIXES)}:
            pointed[self.by_name[family].get(name, [])] = True
        if _norm(key.column) != "id":  # names the key itself: not a key of its own table
            same = np.zeros(len(group), dtype=bool)
            same[self.by_name[family].get(_norm(key.column), [])] = True
            pointed |= same & ~self.proven[family]
        maybe = pointed | self.plain[family]
        maybe[self.where[family][(key.table, key.column)]] = False
        at = np.flatnonzero(maybe)
        if not len(at):
            return []
        bounds = pc.min_max(key.sample)
        lo, hi = _bounds_array([bounds["min"].as_py(), bounds["max"].as_py()], family)
        overlap = (self.lo[family][at] <= hi) & (self.hi[family][at] >= lo)
        return [group[i] for i in at[overlap]]


@dataclass(frozen=True)
class _Ref:
    child: ColumnProbe
    key: ColumnProbe
    share: float     # share of the child's sampled values that are keys of ``key``
    name: int        # fk_name_score
    sure: bool
    reason: str
    # whether it may make ``key`` its table's primary key: a string reference, or an integer
    # one whose name points at the table (not merely named like some key)
    telling: bool


def _percent(share: float) -> str:
    """``0.999`` -> ``99.9%`` (never a rounded ``100%`` or ``0%`` for a share strictly
    between 0 and 1)."""
    for digits in range(0, 5):
        text = f"{share:.{digits}%}"
        if not (0 < share < 1) or float(text[:-1]) not in (0.0, 100.0):
            return text
    return text


def _reference(child: ColumnProbe, key: ColumnProbe) -> _Ref | None:
    """``child`` as a reference to key candidate ``key``, or None when it is not one."""
    share = key.shares.get((child.table, child.column))
    if child is key or share is None or share < FK_MIN_FOUND:
        return None
    name = fk_name_score(child.column, key.table, key.column)
    if child.table == key.table and name == 2:
        return None  # ``flight`` in flights is a flight number: a self-reference has a role
    if child.table == key.table and (share < FK_SURE_FOUND
                                     or key.same_row.get(child.column, 0.0) >= 0.5):
        return None  # reported by :func:`_self_reference_notes`
    doubts = []
    telling = child.family == "string" or name > 0
    if not telling:
        if not _named_like_a_key(child.column):
            return None  # small integers lie inside every 0..n key
        doubts.append(f"named like a key, not like {key.table}")
    if share < FK_SURE_FOUND:
        doubts.append(f"{_percent(1 - share)} of sampled values not found (dangling?)")
    if child.distinct < FK_MIN_DISTINCT:
        doubts.append(f"only {child.distinct} distinct value{'s' if child.distinct != 1 else ''}")
    found = f"{_percent(share)} of sampled values are keys of {key.table}.{key.column}"
    if share >= 1.0:
        found = f"every sampled value is a key of {key.table}.{key.column}"
    reason = found + (f"; guess: {', '.join(doubts)}" if doubts else "")
    return _Ref(child, key, share, name, not doubts, reason, telling)


def _self_reference_notes(key: ColumnProbe, out: FoundKeys) -> None:
    """Why a column of ``key``'s own table whose values are keys of it is not drafted as a
    self-reference: most rows point at themselves (a copy of the key: built, each would be
    a self-loop), or too few values are found."""
    for (table, column), share in key.shares.items():
        if table != key.table or share < SMALL_SHARE:
            continue
        if fk_name_score(column, key.table, key.column) == 2:
            continue
        loops = key.same_row.get(column, 0.0)
        if loops >= 0.5:
            out.note(table, f"not drafted: {column} -> {table}.{key.column}: "
                            f"{_percent(loops)} of rows hold their own key (a copy of the "
                            "key; each would be a self-loop)")
        elif share < FK_SURE_FOUND:
            out.note(table, f"not drafted: self-reference {column} -> {table}.{key.column} "
                            f"matches only {_percent(share)} of sampled values")


def _small_share_notes(probes: list[ColumnProbe], by_column: dict[tuple[str, str], ColumnProbe],
                       out: FoundKeys) -> None:
    """Columns named for a key whose values are mostly not its keys: no foreign key, said."""
    for key in probes:
        if not key.unique:
            continue
        for (table, column), share in key.shares.items():
            child = by_column[(table, column)]
            if (SMALL_SHARE <= share < FK_MIN_FOUND and table != key.table
                    and fk_name_score(column, key.table, key.column) > 0
                    and len(child.sample)):
                out.note(table, f"no foreign key drafted: {column} is named for "
                                f"{key.table}.{key.column}, but only {_percent(share)} of "
                                "its sampled values are keys of it")


def find_keys(probes: list[ColumnProbe], tables: Sequence[str],
              arrow_types: dict[tuple[str, str], pa.DataType]) -> FoundKeys:
    """Choose each table's primary key, then each column's foreign key, from the probes."""
    candidates = [p for p in probes if p.unique]
    by_column = {(p.table, p.column): p for p in probes}
    refs = [r for key in candidates for child_at in key.shares
            if (r := _reference(by_column[child_at], key)) is not None]
    refs_to: dict[int, list[_Ref]] = {}
    refs_from: dict[int, list[_Ref]] = {}
    for r in refs:
        refs_to.setdefault(id(r.key), []).append(r)
        refs_from.setdefault(id(r.child), []).append(r)
    mine_of: dict[str, list[ColumnProbe]] = {}
    for p in candidates:
        mine_of.setdefault(p.table, []).append(p)
    out = FoundKeys()
    for key in candidates:
        _self_reference_notes(key, out)
    _small_share_notes(probes, by_column, out)
    for table in tables:
        mine = mine_of.get(table, [])
        if not mine:
            continue

        def incoming(p: ColumnProbe) -> list[_Ref]:
            return [r for r in refs_to.get(id(p), ()) if r.child.table != table and r.telling]

        def rank(p: ColumnProbe) -> tuple[bool, int, int, int, int]:
            inc = incoming(p)
            return (bool(inc), pk_name_score(table, p.column), sum(r.sure for r in inc),
                    len(inc), -p.position)

        best = max(mine, key=rank)
        inc = incoming(best)
        score = pk_name_score(table, best.column)
        if not inc and score == 0:
            out.suggestions[table] = best.column
            continue
        if inc:
            referrers = ", ".join(sorted(f"{r.child.table}.{r.child.column}" for r in inc))
            reason = f"unique; referred to by {referrers}"
            # a string reference, or an integer one named for this table, with enough
            # distinct values: the key is sure even when some of the references dangle
            sure = score >= 2 or any(r.child.distinct >= FK_MIN_DISTINCT for r in inc)
        else:
            reason = "unique, named like a key"
            sure = score >= 2
        if not sure:
            reason += "; guess"
        out.primary[table] = KeyGuess(table, best.column, None, sure, reason)
    chosen = {(g.table, g.column) for g in out.primary.values()}
    probes_of: dict[str, list[ColumnProbe]] = {}
    for p in probes:
        probes_of.setdefault(p.table, []).append(p)
    for table in tables:
        fks = []
        pk = out.primary.get(table)
        for child in sorted(probes_of.get(table, ()), key=lambda p: p.position):
            if pk is not None and child.column == pk.column:
                continue
            options = [r for r in refs_from.get(id(child), ())
                       if (r.key.table, r.key.column) in chosen]
            if not options:
                continue
            # names first, then values, then the same Arrow type, then a fixed order
            options.sort(key=lambda r: (-r.name, -r.share, arrow_types[(table, child.column)]
                                        != arrow_types[(r.key.table, r.key.column)], r.key.table))
            best_ref = options[0]
            rivals = [r for r in options[1:] if r.name == best_ref.name
                      and abs(r.share - best_ref.share) < 1e-12]
            reason, sure = best_ref.reason, best_ref.sure
            if rivals:
                also = ", ".join(f"{r.key.table}.{r.key.column}" for r in rivals)
                reason += ("; guess: " if sure else ", ") + f"as much in {also}"
                sure = False
            fks.append(KeyGuess(table, child.column, best_ref.key.table, sure, reason))
        if fks:
            out.foreign[table] = fks
    return out


def _string_stype(reader: _Reader, src: TableSource, column: str, batch_rows: int) -> str:
    """``categorical`` or ``text`` for a string column, as preprocess infers it
    (:func:`infer_string_column`), from the table read whole when it was."""
    if reader.table is None:
        with _reading(src):
            return infer_string_column(src, column, batch_rows)
    values = reader.table.column(column)
    if pc.count_distinct(values).as_py() > CATEGORICAL_MAX_DISTINCT:
        return "text"
    seen = set(unique_values(values.combine_chunks(), f"table {src.name!r}, column {column!r}"))
    if len(seen) > CATEGORICAL_MAX_DISTINCT:
        return "text"
    return infer_stype("string", len(seen), len(values) - values.null_count)


def _time_column(src: TableSource, fam: dict[str, str], skip: set[str]) -> str | None:
    times: list[str] = [f.name for f in src.schema
             if fam[f.name] in ("timestamp", "date") and f.name not in skip]
    if len(times) == 1:
        return times[0]
    for column in times:
        low = column.lower()
        if any(w in low for w in ("time", "date", "created")) or low.endswith("_at"):
            return column
    return None


def infer_schema(input_dir: str | Path, *, name: str | None = None,
                 batch_rows: int = DEFAULT_BATCH_ROWS,
                 tasks: Sequence[str] | None = None) -> tuple[Schema, str]:
    """``(draft schema, TOML text)`` for the Parquet tables in ``input_dir``.

    A RelBench dataset gives its exact schema (``tasks``: the RelBench tasks to take,
    default all; see :func:`dlkit.db.write.relbench.relbench_schema`).
    """
    from dlkit.db.write.relbench import relbench_db_dir, relbench_schema

    root = Path(input_dir)
    if not root.is_dir():
        raise SchemaError("input is not a directory", path=root)
    if relbench_db_dir(root) is not None:
        return relbench_schema(root, name=name, tasks=tasks, batch_rows=batch_rows)
    if tasks:
        raise InvalidArgumentError(f"{root}: tasks can be chosen for a RelBench dataset only, "
                                   "and this is not one")
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
    arrow_types = {(t, f.name): f.type for t, s in sources.items() for f in s.schema}
    readers = {t: _Reader(s) for t, s in sources.items()}
    from dlkit.db.write.infer_composite import find_composite_keys, part_score

    probes = probe_columns(sources, readers)
    keys = find_keys(probes, list(sources), arrow_types)
    composite_pks, composite_refs = find_composite_keys(probes, readers, keys)

    specs = []
    notes: dict[tuple[str, str], str] = {}
    for tname, src in sources.items():
        pk_guess = keys.primary.get(tname)
        pk: PrimaryKey | None = pk_guess.column if pk_guess is not None else None
        if pk_guess is not None:
            notes[(tname, pk_guess.column)] = pk_guess.reason
        composite = composite_pks.get(tname)
        if composite is not None:
            referred = any(k.parent == tname for ks in composite_refs.values() for k in ks)
            if referred or all(part_score(c) for c in composite.columns):
                pk = composite.columns
                referrers = sorted(t for t, ks in composite_refs.items()
                                   if any(k.parent == tname for k in ks))
                notes[(tname, key_label(pk))] = composite.reason + (
                    f"; referred to by {', '.join(referrers)}" if referred
                    else "; its names say key")
            else:
                keys.note(tname, f"{composite.reason}; not drafted: no table refers to it "
                                 "and the names do not say key")
        fks = []
        for g in keys.foreign.get(tname, []):
            assert g.parent is not None, "a foreign key guess names its parent"
            fks.append((g.column, g.parent))
            notes[(tname, g.column)] = g.reason
        composite_fks = {}
        for ref in composite_refs.get(tname, []):
            # its parent's key is drafted: a composite key referred to always is
            assert ref.parent is not None, "a composite reference names its parent"
            if pk is not None and ref.columns == key_columns(pk):
                # a primary key cannot also be a foreign key (the schema refuses it)
                keys.note(tname, f"no foreign key drafted: {key_label(ref.columns)} is this "
                                 f"table's primary key and also matches {ref.parent}'s "
                                 "(a one-to-one link; declare one of them by hand)")
                continue
            fks.append((ref.name, ref.parent))
            composite_fks[ref.name] = ref.columns
            notes[(tname, ref.name)] = ref.reason
        fk_cols = {c for c, _ in fks} | {c for cs in composite_fks.values() for c in cs}
        key_cols = set(key_columns(pk))
        time_column = _time_column(src, fam[tname], key_cols)
        types: dict[str, str] = {}
        exclude = []
        for f in src.schema:
            if f.name in key_cols or f.name in fk_cols:
                continue
            family = fam[tname][f.name]
            if family == "unsupported":
                exclude.append(f.name)
                notes[(tname, f.name)] = f"{f.type}: not supported"
                continue
            if family == "string":
                stype = _string_stype(readers[tname], src, f.name, batch_rows)
            else:
                stype = infer_stype(family)
            types[f.name] = stype
            notes[(tname, f.name)] = str(f.type)
            if keys.suggestions.get(tname) == f.name:
                notes[(tname, f.name)] += ("; unique: the primary key? (no table refers here "
                                           "and the name does not say)")
        rel = src.location.relative_to(root).as_posix()
        default_rel = f"{tname}.parquet"
        rel_path = None if rel == default_rel else rel
        specs.append(TableSpec(name=tname, path=rel_path, composite_fks=composite_fks,
                               primary_key=pk, time_column=time_column, foreign_keys=tuple(fks),
                               exclude=tuple(exclude), types=types))
        specs[-1] = with_int_time(specs[-1], src.files, src.schema, notes)  # integer times
    schema = Schema(name=name or root.resolve().name, tables=tuple(specs), tasks=())
    header = (f"dlkit.toml drafted by `dlkit schema infer` from {root}.\n"
              "Review it: primary keys, foreign keys, time columns and types are guesses;\n"
              "keys were found by their values (comments say why; 'guess:' marks the doubtful).\n"
              "Semantic types: numeric, boolean, timestamp, categorical, text.")
    if skipped:
        header += f"\nSkipped (not safe table names): {', '.join(skipped)}"
    _isolated_notes(schema, keys)
    return schema, render_schema(schema, notes, header, table_notes=keys.notes)


def _isolated_notes(schema: Schema, keys: FoundKeys) -> None:
    """Warn, in the draft, of each table no foreign key links to another table."""
    linked: set[str] = set()
    for spec in schema.tables:
        for _, parent in spec.foreign_keys:
            if parent != spec.name:
                linked.update((spec.name, parent))
    for spec in schema.tables:
        if spec.name not in linked and len(schema.tables) > 1:
            keys.note(spec.name, "isolated: no foreign key found to or from another table; "
                                 "its rows reach no other table's (declare keys by hand if "
                                 "they exist)")
