"""Composite keys in ``dlkit schema infer``: a table without a single-column key gets the
smallest set of key-like columns that is unique and never null (tried on the sample, proven
on the whole columns), and another table's columns named as that key's parts whose value
tuples are mostly keys of it become a composite foreign key (:func:`find_composite_keys`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dlkit.db.write.composite import encode_keys
from dlkit.db.write.infer import (
    FK_MIN_FOUND,
    FK_SURE_FOUND,
    SMALL_SHARE,
    FoundKeys,
    _percent,
)
from dlkit.db.write.infer_probe import (
    SAMPLE_ROWS,
    ColumnProbe,
    _norm,
    _Reader,
    _singular,
    _words,
)
from dlkit.db.write.primary_keys import KeyIndex
from dlkit.errors import DataError


@dataclass(frozen=True)
class CompositeKey:
    """A composite primary key found by values, or a composite foreign key to one."""

    table: str
    columns: tuple[str, ...]
    sure: bool
    reason: str
    parent: str | None = None  # foreign keys: the parent table
    name: str = ""  # foreign keys: the name it is drafted under


# Word of a name that says "part of a key": ids, codes, years, seasons, sequence numbers.
_PART_WORDS = ("id", "key", "code", "no", "num", "number", "year", "season", "stint",
               "seq", "date", "round", "period", "month", "day", "game", "team", "player")
# Columns tried as parts of a composite key (the most key-like first), and most parts.
COMPOSITE_POOL = 8
COMPOSITE_MAX_PARTS = 3


def part_score(column: str) -> int:
    words = _words(column)
    if not words:
        return 0
    return 2 if words[-1] in _PART_WORDS else int(any(w in _PART_WORDS for w in words))


def _distinct_tuples(arrays: list[pa.Array], families: tuple[str, ...]) -> int:
    """How many distinct tuples the rows of ``arrays`` (no null) hold."""
    enc = encode_keys(arrays, families, "")
    binary = pa.Array.from_buffers(pa.large_binary(), len(enc.valid),
                                   [None, pa.py_buffer(enc.offsets), pa.py_buffer(enc.data)])
    return int(pc.count_distinct(binary).as_py())


def _composite_index(reader: _Reader, columns: tuple[str, ...],
                     families: tuple[str, ...]) -> KeyIndex | None:
    """The index of ``columns`` read whole, or None when a tuple repeats or has a null."""
    arrays = [reader.whole(c).combine_chunks() for c in columns]
    if any(a.null_count for a in arrays):
        return None
    enc = encode_keys(arrays, families, "")
    try:
        return KeyIndex.build_str(enc.data, enc.offsets, "")
    except DataError:
        return None


def _aligned_sample(reader: _Reader, columns: tuple[str, ...]) -> list[pa.Array]:
    """The same rows of each of ``columns``: about ``SAMPLE_ROWS`` of the part read."""
    parts = [reader.spread(c)[0].combine_chunks() for c in columns]
    n = len(parts[0])
    if n > SAMPLE_ROWS:
        picks = pa.array(np.linspace(0, n - 1, SAMPLE_ROWS).round().astype(np.int64))
        parts = [pc.take(p, picks) for p in parts]
    return [p.dictionary_decode() if pa.types.is_dictionary(p.type) else p for p in parts]


def find_composite_keys(probes: list[ColumnProbe], readers: dict[str, _Reader],
                        found: FoundKeys) -> tuple[dict[str, CompositeKey],
                                                   dict[str, list[CompositeKey]]]:
    """Composite primary keys of the tables without a single-column one (the smallest set
    of key-like columns, no null, unique: tried on the sample, proven on the whole
    columns), and the composite foreign keys to them: in another table, columns named as
    the key's parts whose value tuples are mostly keys of it."""
    primary: dict[str, CompositeKey] = {}
    foreign: dict[str, list[CompositeKey]] = {}
    indexes: dict[str, tuple[KeyIndex, tuple[str, ...]]] = {}
    by_table: dict[str, list[ColumnProbe]] = {}
    for p in probes:
        by_table.setdefault(p.table, []).append(p)
    for table, mine in by_table.items():
        if table in found.primary:
            continue
        pool = [p for p in mine if not p.has_null and len(p.sample) and
                (p.family == "string" or part_score(p.column))]
        pool.sort(key=lambda p: (-part_score(p.column), p.position))
        pool = pool[:COMPOSITE_POOL]
        if len(pool) < 2 or any(len(p.sample) != len(pool[0].sample) for p in pool):
            continue
        tried = 0
        for size in range(2, COMPOSITE_MAX_PARTS + 1):
            sets = sorted(itertools.combinations(pool, size),
                          key=lambda ps: (-sum(part_score(p.column) for p in ps),
                                          [p.position for p in ps]))
            for parts in sets:
                tried += 1
                families = tuple(p.family for p in parts)
                if _distinct_tuples([p.sample for p in parts], families) != len(parts[0].sample):
                    continue
                columns = tuple(p.column for p in parts)
                index = _composite_index(readers[table], columns, families)
                if index is None:
                    continue
                reason = (f"no single column is unique; this is the smallest unique set "
                          f"(found after trying {tried}, key-like names first)")
                primary[table] = CompositeKey(table, columns, True, reason)
                indexes[table] = (index, families)
                break
            if table in primary:
                break
    for parent, key in primary.items():
        index, families = indexes[parent]
        for table, mine in by_table.items():
            if table == parent:
                continue
            named = {_norm(p.column): p for p in mine}
            found_parts = [named.get(_norm(c)) for c in key.columns]
            matched = [p for p in found_parts if p is not None]
            if len(matched) != len(key.columns) or any(
                    p.family != f for p, f in zip(matched, families)):
                continue
            columns = tuple(p.column for p in matched)
            enc = encode_keys(_aligned_sample(readers[table], columns), families, "")
            if not enc.valid.any():
                continue
            out = np.empty(len(enc.valid), dtype=np.int64)
            num_valid, dangling, _ = index.lookup_bytes(enc.data, enc.offsets, enc.valid, 0, out)
            share = 1.0 - dangling / num_valid
            label = f"({', '.join(columns)})"
            if share < FK_MIN_FOUND:
                if share >= SMALL_SHARE:
                    found.note(table, f"no foreign key drafted: {label} is named as "
                                      f"{parent}'s key, but only {_percent(share)} of its "
                                      "sampled tuples are keys of it")
                continue
            name = _singular(parent.lower())[-1]
            taken = {p.column for p in mine} | {k.name for k in foreign.get(table, [])}
            while name in taken:
                name += "_key"
            sure = share >= FK_SURE_FOUND
            reason = (f"every sampled {label} is a key of {parent}" if share >= 1.0 else
                      f"{_percent(share)} of sampled {label} are keys of {parent}")
            if not sure:
                reason += f"; guess: {_percent(1 - share)} not found (dangling?)"
            foreign.setdefault(table, []).append(
                CompositeKey(table, columns, sure, reason, parent=parent, name=name))
    return primary, foreign
