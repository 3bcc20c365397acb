"""What ``dlkit schema infer`` reads of each column before it guesses: names that say key
(the word rules) and a probe of the values (a sample of each key-kind column, read whole and
indexed when it may be unique). :mod:`dlkit.db.write.infer` guesses from these."""


from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dlkit.db.write.convert import to_int_keys, to_string_buffers
from dlkit.db.write.primary_keys import KeyIndex
from dlkit.db.write.source import TableSource, parquet_parts
from dlkit.errors import DataError

SAMPLE_ROWS = 20_000
READ_ROWS = 1 << 20
# A string key is a code or a name; a column holding a longer sampled value is not one.
MAX_KEY_BYTES = 256
# Tables of at most READ_ROWS rows and this many (uncompressed) bytes are read whole, once.
SMALL_TABLE_BYTES = 64 << 20

# Last words of key names: ``user_id``, ``userId``, ``tail_no``, ``airport_code``, ...
_KEY_SUFFIXES = ("id", "key", "code", "no", "num", "number", "uuid", "guid")


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


def _norm(name: str) -> str:
    """Lower case, letters and digits only: ``driverId``, ``driver_id`` -> ``driverid``."""
    return re.sub(r"[^0-9a-z]", "", name.lower())


def _words(name: str) -> list[str]:
    """``driverId`` -> [driver, id]; ``tail_no`` -> [tail, no]; ``userID`` -> [user, id]."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return [w for w in re.split(r"[^0-9a-z]+", spaced.lower()) if w]


def _named_like_a_key(column: str) -> bool:
    """A name whose last word says key (``store_id``, ``flightNo``, ``code``), not a word that
    merely ends in those letters (``grid``, ``paid``)."""
    words = _words(column)
    return bool(words) and words[-1] in _KEY_SUFFIXES and (
        len(words) >= 2 or words[-1] in ("id", "key", "code", "uuid", "guid"))


def _singular(name: str) -> list[str]:
    out = [name]
    if name.endswith("ies"):
        out.append(name[:-3] + "y")
    if name.endswith("es"):
        out.append(name[:-2])
    if name.endswith("s"):
        out.append(name[:-1])
    return out


def _table_words(table: str) -> set[str]:
    """Normalised names a column may use for ``table``: ``airlines`` -> airlines, airline."""
    return {w for w in (_norm(s) for s in _singular(table)) if w}


def pk_name_score(table: str, column: str) -> int:
    """How much a column's name says it is ``table``'s key: 3 for ``id`` or ``<table>_id``,
    2 for ``<table>_key``/``_code``/``_no``..., 1 for any name ending like a key, else 0."""
    col = _norm(column)
    words = _table_words(table)
    if col == "id" or col in {w + "id" for w in words}:
        return 3
    if col in {w + s for w in words for s in _KEY_SUFFIXES}:
        return 2
    return 1 if _named_like_a_key(column) else 0


def fk_name_score(column: str, parent: str, parent_key: str) -> int:
    """How much a column's name points at ``parent`` (key ``parent_key``): 2 when it names
    the parent or its key (``user_id``, ``userId``, ``user`` for ``users``; ``carrier`` for
    ``airlines.carrier``), 1 when its last words do after a role (``buyer_user_id``,
    ``origin_faa``), else 0."""
    key = _norm(parent_key)
    named = {w + s for w in _table_words(parent) for s in ("", *_KEY_SUFFIXES)}
    if key != "id":
        named.add(key)
    words = _words(column)
    if "".join(words) in named:
        return 2
    return 1 if any("".join(words[i:]) in named for i in range(1, len(words))) else 0


@dataclass
class ColumnProbe:
    """What sampling learnt about one integer or string column."""

    table: str
    column: str
    family: str
    position: int
    sample: pa.Array                   # sampled non-null values, in row order
    distinct: int                      # distinct values among them
    maybe_unique: bool                 # no null in what was read, no repeat in the sample
    complete: pa.ChunkedArray | None   # the whole column, when reading the part read it all
    unique: bool = False               # proven: no null and no repeat in the whole column
    num_rows: int = 0                  # rows of its table
    has_null: bool = False             # a null in what was read
    # key candidates: share of each other column's sample found among this column's values
    shares: dict[tuple[str, str], float] = field(default_factory=dict)
    # key candidates: share of rows of each same-table column equal to this one in that row
    # (a self-reference that mostly points at its own row is a copy of the key)
    same_row: dict[str, float] = field(default_factory=dict)


@contextmanager
def _reading(source: TableSource) -> Iterator[None]:
    """Reading ``source``'s data: a corrupt page (Arrow's I/O error) is bad input, not an
    output error."""
    try:
        yield
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"table {source.name!r}: cannot read its Parquet data: {exc}",
                        path=source.location) from None


class _Reader:
    """Row groups of one table, to read a spread-out part of a column."""

    def __init__(self, source: TableSource):
        self.source = source
        self.files = [pq.ParquetFile(f) for f in source.files]
        self.groups = [(i, g) for i, f in enumerate(self.files)
                       for g in range(f.metadata.num_row_groups)]
        self.total = sum(f.metadata.num_rows for f in self.files)
        size = sum(f.metadata.row_group(g).total_byte_size for f in self.files
                   for g in range(f.metadata.num_row_groups))
        # a small table is read once, whole (a wide one column by column would parse its
        # footer once per column)
        self.table: pa.Table | None = None
        if self.total <= READ_ROWS and size <= SMALL_TABLE_BYTES:
            with _reading(source):
                self.table = pa.concat_tables([f.read() for f in self.files]) \
                    if len(self.files) != 1 else self.files[0].read()

    def _chunked(self, parts: list[pa.ChunkedArray], column: str) -> pa.ChunkedArray:
        return pa.chunked_array([c for p in parts for c in p.chunks],
                                type=self.source.schema.field(column).type)

    def spread(self, column: str) -> tuple[pa.ChunkedArray, bool]:
        """The column in whole row groups spread evenly over the table, about ``READ_ROWS``
        rows (all of it when that is no more), and whether that is the whole column."""
        if self.total <= READ_ROWS or len(self.groups) <= 1:
            return self.whole(column), True
        k = max(1, min(len(self.groups), round(READ_ROWS * len(self.groups) / self.total)))
        chosen = sorted({round(x) for x in np.linspace(0, len(self.groups) - 1, k)})
        with _reading(self.source):
            parts = [self.files[i].read_row_group(g, columns=[column]).column(0)
                     for i, g in (self.groups[j] for j in chosen)]
        return self._chunked(parts, column), len(chosen) == len(self.groups)

    def whole(self, column: str) -> pa.ChunkedArray:
        if self.table is not None:
            return self.table.column(column)
        with _reading(self.source):
            return self._chunked([f.read(columns=[column]).column(0) for f in self.files], column)


def _probe(reader: _Reader, column: str, family: str, position: int) -> ColumnProbe:
    part, complete = reader.spread(column)
    valid = pc.drop_null(part)
    if len(valid) > SAMPLE_ROWS:
        picks = np.linspace(0, len(valid) - 1, SAMPLE_ROWS).round().astype(np.int64)
        sample = pc.take(valid, pa.array(picks)).combine_chunks()
    else:
        sample = valid.combine_chunks()
    if pa.types.is_dictionary(sample.type):
        sample = sample.dictionary_decode()
    distinct = pc.count_distinct(sample).as_py() if len(sample) else 0
    maybe_unique = part.null_count == 0 and distinct == len(sample)
    if maybe_unique and family == "string" and len(sample) and \
            pc.max(pc.binary_length(sample)).as_py() > MAX_KEY_BYTES:
        maybe_unique = False  # unique prose (reviews, descriptions): not worth reading whole
    return ColumnProbe(table=reader.source.name, column=column, family=family, position=position,
                       sample=sample, distinct=distinct, maybe_unique=maybe_unique,
                       complete=part if complete and maybe_unique else None,
                       num_rows=reader.total, has_null=part.null_count > 0)


def _key_index(values: pa.ChunkedArray, family: str) -> KeyIndex | None:
    """The index preprocess builds for a primary key (the same kernels), or None when the
    values are not unique, hold a null or do not fit."""
    arr = values.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if arr.null_count:
        return None
    try:
        if family == "integer":
            keys, _ = to_int_keys(arr, "")
            return KeyIndex.build_int(keys, "")
        return KeyIndex.build_str(*to_string_buffers(arr)[:2], "")
    except DataError:  # a duplicate, or an integer beyond int64
        return None


def _share_found(index: KeyIndex, sample: pa.Array) -> float:
    """Share of ``sample``'s values (none null) that are keys of ``index``."""
    out = np.empty(len(sample), dtype=np.int64)
    try:
        num_valid, dangling, _ = index.lookup(sample, 0, out, "")
    except DataError:  # an integer beyond int64: not among the keys
        return 0.0
    return 1.0 - dangling / num_valid if num_valid else 0.0
