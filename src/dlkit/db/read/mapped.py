"""The objects of the reader API: read-only views of a database's memory-mapped files.

:class:`FileMaps` maps files read-only (``mmap`` + ``np.frombuffer``, so pages are shared
between processes) and checks each file's size against the manifest and the metadata before
an array is made of it. A file smaller than :data:`READ_BELOW_BYTES` is read into memory
instead: a map holds a file descriptor for as long as an array of it lives (Python's
``mmap`` keeps a duplicate of the descriptor before 3.13), so a mixture of hundreds of small
databases, dozens of files each, would otherwise need thousands of descriptors, beyond the
usual limit of 1024. The arrays are the same read-only arrays either way. The frozen data
classes and :class:`Database` are what ``open_database`` returns (``docs/database_format.md``,
"Reader API").
"""

from __future__ import annotations

import errno
import mmap
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import numpy as np
import numpy.typing as npt

from dlkit.db import format as fmt
from dlkit.db.failures import Checks
from dlkit.db.keys import decode_key
from dlkit.db.manifest import FileEntry
from dlkit.db.metadata_records import DatabaseMetadata
from dlkit.db.task_rules import TaskRules
from dlkit.errors import DatabaseError, OutOfMemoryError, TooManyOpenFilesError
from dlkit.files import open_file_limit, open_regular, raise_open_file_limit
from dlkit.text import unknown_name

if TYPE_CHECKING:
    from dlkit.db.read.aggregates import AggregateData

# --- the data classes of the reader API ----------------------------------------------------


@dataclass(frozen=True, eq=False)
class ColumnData:
    name: str
    table: str
    index: int
    column_id: int
    stype: int
    values: np.ndarray
    valid_bitmap: np.ndarray
    num_valid: int
    mean: float | None
    std: float | None
    cat_emb_start: int
    cat_emb_count: int
    categories: tuple[str | int | bool, ...] | None
    arrow_type: str
    known_after_us: int = 0  # metadata's known_after_us: the value shows this long after its row

    @property
    def stype_name(self) -> str:
        return fmt.STYPE_NAMES[self.stype]

    @cached_property
    def valid(self) -> np.ndarray:
        """bool[num_rows], True = not null (unpacked from the bitmap on first use, cached)."""
        out = np.unpackbits(self.valid_bitmap, count=self.values.shape[0], bitorder="little")
        out = out.view(bool)
        out.flags.writeable = False
        return out


@dataclass(frozen=True, eq=False)
class TableData:
    name: str
    index: int
    num_rows: int
    row_offset: int
    primary_key: str | tuple[str, ...] | None  # a tuple: a composite key's columns
    primary_key_type: str | None
    time_column: str | None
    foreign_keys: tuple[tuple[str, str], ...]  # (column or composite key's name, parent)
    columns: tuple[ColumnData, ...]
    key_values: np.ndarray | None
    key_offsets: np.ndarray | None
    primary_key_part_types: tuple[str, ...] = ()  # a composite key's part types
    time_unit: str | None = None  # metadata's time_unit of an integer time column
    time_position: str | None = None

    def column(self, name: str) -> ColumnData:
        for col in self.columns:
            if col.name == name:
                return col
        raise KeyError(unknown_name("column", name, [c.name for c in self.columns],
                                    f"table {self.name!r}"))

    def key(self, row: int) -> int | str | tuple[int | str, ...]:
        """The primary-key value of local ``row`` (a tuple for a composite key)."""
        if self.key_values is None:
            raise KeyError(f"table {self.name!r} has no primary key")
        if not 0 <= row < self.num_rows:
            raise IndexError(f"row {row} out of range for table {self.name!r} ({self.num_rows} rows)")
        if self.key_offsets is None:
            return int(self.key_values[row])
        a, b = int(self.key_offsets[row]), int(self.key_offsets[row + 1])
        if self.primary_key_part_types:
            raw = bytes(self.key_values[a:b])
            try:
                return decode_key(raw, self.primary_key_part_types)
            except ValueError as exc:
                raise DatabaseError(f"key of row {row} is not a composite key: {exc}",
                                    path=fmt.key_values_file(self.name)) from None
        return _utf8_text(self.key_values[a:b], fmt.key_values_file(self.name), f"key of row {row}")


@dataclass(frozen=True, eq=False)
class Graph:
    parent_offsets: np.ndarray
    parent_ids: np.ndarray
    child_offsets: np.ndarray
    child_ids: np.ndarray
    child_times: np.ndarray
    row_table: np.ndarray
    row_times: np.ndarray

    @property
    def num_rows(self) -> int:
        return int(self.row_times.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.parent_ids.shape[0])

    def parents(self, row: int) -> np.ndarray:
        return self.parent_ids[self.parent_offsets[row]:self.parent_offsets[row + 1]]

    def children(self, row: int, before: int | None = None) -> np.ndarray:
        """Children of ``row``; with ``before=T`` only those with time ``<= T``."""
        a, b = int(self.child_offsets[row]), int(self.child_offsets[row + 1])
        if before is not None:
            b = a + int(np.searchsorted(self.child_times[a:b], before, side="right"))
        return self.child_ids[a:b]


@dataclass(frozen=True, eq=False)
class TaskData:
    name: str
    index: int
    table: str
    target_column: str
    target_stype: int
    anchor_row: np.ndarray
    obs_time: np.ndarray
    target: np.ndarray
    target_valid: np.ndarray
    rules: TaskRules = TaskRules()

    @property
    def num_seeds(self) -> int:
        return int(self.anchor_row.shape[0])


# --- mapping files -------------------------------------------------------------------------


# Files below this size are read, not mapped: they then hold no file descriptor and no map
# of their own. The price is their bytes in each process (a map's pages are shared between
# processes through the page cache): a database's size, for one of up to ~100k rows.
READ_BELOW_BYTES = 1 << 20


class FileMaps:
    def __init__(self, root: Path, checks: Checks, sizes: dict[str, int]):
        self.root = root
        self.checks = checks
        self.sizes = sizes  # manifest sizes
        self.mmaps: list[mmap.mmap] = []

    def raw(self, rel: str) -> mmap.mmap | bytes | None:
        """The file's bytes, read-only: mapped, or read when smaller than
        ``READ_BELOW_BYTES``; None for an empty file."""
        path = self.root / rel
        try:
            size = path.stat().st_size
        except OSError:
            self.checks.fail(rel, "file.missing", "the file does not exist", fatal=True)
        if rel in self.sizes and size != self.sizes[rel]:
            self.checks.fail(rel, "file.size", f"{size} bytes, manifest says {self.sizes[rel]}",
                             fatal=True)
        for attempt in range(2):
            try:
                return self._read_or_map(path, size)
            except OSError as exc:
                if exc.errno == errno.EMFILE and attempt == 0 and raise_open_file_limit():
                    continue
                self._refuse(rel, path, exc)
        raise AssertionError("unreachable")  # the second attempt returns or refuses

    def _read_or_map(self, path: Path, size: int) -> mmap.mmap | bytes | None:
        with os.fdopen(open_regular(path), "rb") as f:
            if size == 0:
                return None
            if size < READ_BELOW_BYTES:
                return f.read()
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.mmaps.append(mm)
        return mm

    def _refuse(self, rel: str, path: Path, exc: OSError) -> NoReturn:
        """One error for a file that could not be read or mapped: the process's limits are
        not the database's fault, so they are not reported as a damaged file."""
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            limit = open_file_limit()
            held = f" (this process may hold {limit})" if limit is not None else ""
            raise TooManyOpenFilesError(
                f"cannot map: too many open files{held}; each mapped file of an open database "
                "holds one until its arrays are dropped: drop databases and samplers no longer "
                "used, or raise the limit (ulimit -n)", path=path) from None
        if exc.errno == errno.ENOMEM:
            raise OutOfMemoryError(
                f"cannot map: {exc.strerror} (the process's address space, or its count of "
                "maps, vm.max_map_count, is used up)", path=path) from None
        self.checks.fail(rel, "file.type", f"cannot map: {exc.strerror or exc}", fatal=True)
        raise AssertionError("unreachable")  # a fatal failure raises

    def array(self, rel: str, dtype: npt.DTypeLike, count: int, shape: tuple[int, ...] | None = None) -> np.ndarray:
        dtype = np.dtype(dtype)
        expected = count * dtype.itemsize
        mm = self.raw(rel)
        size = 0 if mm is None else len(mm)
        if size != expected:
            self.checks.fail(rel, "file.size", f"{size} bytes, metadata implies {expected} "
                             f"({count} x {dtype})", fatal=True)
        arr = np.zeros(0, dtype=dtype) if mm is None else np.frombuffer(mm, dtype=dtype, count=count)
        arr.flags.writeable = False
        return arr.reshape(shape) if shape is not None else arr

    def close(self) -> None:
        for mm in self.mmaps:
            try:
                mm.close()
            except BufferError:
                pass  # arrays still reference it; it is unmapped when they are collected
        self.mmaps = []


# --- the database --------------------------------------------------------------------------


class Database:
    """An open database. Arrays are read-only views of memory-mapped files."""

    def __init__(self, path: Path, metadata: DatabaseMetadata, manifest_files: dict[str, FileEntry],
                 recorded_hash: bytes, maps: FileMaps, tables: tuple[TableData, ...], graph: Graph,
                 tasks: tuple[TaskData, ...], embeddings: dict[str, np.ndarray],
                 texts: tuple[np.ndarray, np.ndarray], aggregates: AggregateData | None = None):
        self.path = path
        # the as-of aggregate cells (dlkit.db.read.aggregates.AggregateData), None without
        self.aggregates = aggregates
        self.metadata = metadata  # metadata.json's records (to_json() gives the JSON object)
        self.manifest_files = manifest_files
        self.database_hash = recorded_hash
        self._maps = maps
        self.tables = tables
        self.graph = graph
        self.tasks = tasks
        self._embeddings = embeddings
        self._text_offsets, self._text_data = texts
        self._table_by_name = {t.name: t for t in tables}
        self._task_by_name = {t.name: t for t in tasks}

    # identity
    @property
    def database_id(self) -> str:
        return self.metadata.database_id

    @property
    def num_rows(self) -> int:
        return self.metadata.num_rows

    @property
    def num_edges(self) -> int:
        return self.metadata.num_edges

    @cached_property
    def table_offsets(self) -> np.ndarray:
        out = np.asarray(self.metadata.table_offsets, dtype=np.int64)
        out.flags.writeable = False
        return out

    @property
    def num_texts(self) -> int:
        return self.metadata.num_texts

    def table(self, name: str) -> TableData:
        try:
            return self._table_by_name[name]
        except KeyError:
            raise KeyError(unknown_name("table", name, list(self._table_by_name),
                                        str(self.path))) from None

    def task(self, name: str) -> TaskData:
        try:
            return self._task_by_name[name]
        except KeyError:
            raise KeyError(unknown_name("task", name, list(self._task_by_name),
                                        str(self.path))) from None

    @cached_property
    def columns(self) -> tuple[ColumnData, ...]:
        """Every feature column, indexed by ``column_id``."""
        return tuple(c for t in self.tables for c in t.columns)

    def text_embeddings(self) -> np.ndarray:
        return self._embeddings["text"]

    def column_embeddings(self) -> np.ndarray:
        return self._embeddings["column"]

    def categorical_embeddings(self) -> np.ndarray:
        return self._embeddings["categorical"]

    def text(self, text_id: int) -> str:
        """The string of global text id ``text_id``."""
        if not 0 <= text_id < self.num_texts:
            raise IndexError(f"text id {text_id} out of range [0, {self.num_texts})")
        a, b = int(self._text_offsets[text_id]), int(self._text_offsets[text_id + 1])
        return _utf8_text(self._text_data[a:b], fmt.TEXT_DATA_FILE, f"text {text_id}")

    def row_of(self, global_row: int) -> tuple[TableData, int]:
        """``(table, local row)`` of a global row id."""
        if not 0 <= global_row < self.num_rows:
            raise IndexError(f"row {global_row} out of range [0, {self.num_rows})")
        t = int(np.searchsorted(self.table_offsets, global_row, side="right")) - 1
        return self.tables[t], global_row - int(self.table_offsets[t])

    def close(self) -> None:
        self._maps.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Database({str(self.path)!r}, id={self.database_id!r}, tables={len(self.tables)}, "
                f"rows={self.num_rows}, edges={self.num_edges})")


def _utf8_text(data: np.ndarray, file: str, what: str) -> str:
    """Stored bytes as text; opening a database does not read every string, so bytes that
    are not UTF-8 (a corrupted file) surface here, as the database's error."""
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise DatabaseError(f"{what} is not valid UTF-8 text (`dlkit verify` checks them all)",
                            path=file) from None
