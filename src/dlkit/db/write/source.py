"""Reading the Parquet input: table files, schemas and column batches.

A table is one Parquet file or a directory of Parquet parts (``*.parquet`` files directly in
it, read in byte order of their names; hidden files and files starting with ``_`` are
ignored). Local row order is the concatenation of the parts' rows in that order. Columns are
read one at a time in record batches, so memory stays bounded by one batch of one column.
Every Arrow/OS failure is turned into a :class:`DataError` naming the table, file and column.
"""

from __future__ import annotations

import functools
import stat
import threading
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dlkit.errors import DataError, SchemaError

try:
    # The reader behind pq.ParquetFile, which alone takes a memory pool (pyarrow 15-26).
    from pyarrow._parquet import ParquetReader as _PoolParquetReader
except ImportError:  # pragma: no cover - a pyarrow that moved it: the public reader instead
    _PoolParquetReader = None

DEFAULT_BATCH_ROWS = 1 << 18


@functools.cache
def _decode_pool() -> pa.MemoryPool:
    """The memory pool decoded batches come from: jemalloc where pyarrow has it. Arrow's
    default (mimalloc) hands freed memory back to the system within milliseconds, so each
    batch decoded after the last one was freed lands in fresh pages, which cost as much to
    fault in as to decode on the virtual machines we measured; jemalloc keeps freed pages for
    the next batches (the reader's CPU at 20 M edges: 1.9-2.1 -> 1.5-1.6 s)."""
    try:
        return pa.jemalloc_memory_pool()
    except NotImplementedError:  # a build without jemalloc (Windows)
        return pa.default_memory_pool()


def parquet_parts(directory: Path) -> list[Path]:
    """The parts of a table directory; a part that cannot be followed (a symbolic link loop
    or a link to nothing) is an error, never silently left out."""
    parts = []
    for p in directory.iterdir():
        if not p.name.endswith(".parquet") or p.name.startswith((".", "_")):
            continue
        try:
            if stat.S_ISREG(p.stat().st_mode):
                parts.append(p)
        except OSError as exc:
            raise SchemaError(f"table part cannot be opened: "
                              f"{exc.strerror or exc}", path=p) from None
    return sorted(parts, key=lambda p: p.name.encode("utf-8", "surrogateescape"))


def _unreachable(table: str, candidate: Path) -> None:
    """Refuse a path that is there but cannot be followed (a symbolic link loop, a link to
    nothing, no permission), naming it: it is not "missing"."""
    if candidate.is_symlink() or candidate.parent.is_dir():
        try:
            candidate.stat()
        except FileNotFoundError:
            if candidate.is_symlink():
                raise SchemaError(f"table {table!r}: a symbolic link to nothing",
                                  path=candidate) from None
        except OSError as exc:
            raise SchemaError(f"table {table!r}: cannot open: {exc.strerror or exc}",
                              path=candidate) from None


def resolve_table_path(input_dir: Path, table: str, path: str | None) -> Path:
    """The file or directory holding ``table``; raises :class:`SchemaError` if there is none."""
    if path is not None:
        candidate = input_dir / path
        _unreachable(table, candidate)
        if not candidate.exists():
            raise SchemaError(f"table {table!r}: path {path!r} does not exist in {input_dir}")
        return candidate
    for candidate in (input_dir / f"{table}.parquet", input_dir / table):
        _unreachable(table, candidate)
        if candidate.exists():
            return candidate
    raise SchemaError(f"table {table!r}: missing: no file {table}.parquet and no directory "
                      f"{table}/ in {input_dir}")


def resolve_table_locations(input_dir: Path, table: str, path: str | None,
                            split_paths: tuple[str, ...] | None) -> Path | list[Path]:
    """Where ``table``'s rows are: one file or directory, or one per given split."""
    if split_paths is None:
        return resolve_table_path(input_dir, table, path)
    return [resolve_table_path(input_dir, table, p) for p in split_paths]


def _location_files(name: str, location: Path) -> list[Path]:
    if location.is_dir():
        files = parquet_parts(location)
        if not files:
            raise SchemaError(f"table {name!r}: directory {location} holds no .parquet files")
        return files
    if location.is_file():
        return [location]
    # a FIFO or device would block the read, or never end
    raise SchemaError(f"table {name!r}: {location} is neither a Parquet file nor a "
                      "directory of Parquet parts")


@dataclass
class TableSource:
    """The Parquet files of one table, opened (footers read and checked)."""

    name: str
    location: Path
    files: list[Path]
    schema: pa.Schema
    file_rows: list[int]
    # Rows of each location the table was opened from, in order (given splits: train, val,
    # test); one entry for a table with one location.
    location_rows: tuple[int, ...] = ()

    @property
    def num_rows(self) -> int:
        return sum(self.file_rows)

    @classmethod
    def open(cls, name: str, location: Path | list[Path]) -> TableSource:
        """The table at ``location``, or at several locations whose rows follow each other."""
        locations = location if isinstance(location, list) else [location]
        files, per_location = [], []
        for place in locations:
            found = _location_files(name, place)
            files.extend(found)
            per_location.append(len(found))
        schema: pa.Schema | None = None
        rows = []
        for f in files:
            meta = _open_file(name, f)
            try:
                file_schema = meta.schema.to_arrow_schema()
            except (pa.ArrowException, ValueError) as exc:  # a column name not UTF-8
                raise DataError(f"table {name!r}: not a readable Parquet schema: {exc}",
                                path=f) from None
            rows.append(meta.num_rows)
            if schema is None:
                schema = file_schema
                names = schema.names
                dup = {n for n, count in Counter(names).items() if count > 1}
                if dup:
                    raise SchemaError(f"table {name!r}: duplicate column name(s) {sorted(dup)} in {f}")
            elif not _same_columns(schema, file_schema):
                raise SchemaError(f"table {name!r}: part {f.name} has columns "
                                  f"{_describe(file_schema)}, but {files[0].name} has "
                                  f"{_describe(schema)}")
        assert schema is not None
        location_rows, k = [], 0
        for count in per_location:
            location_rows.append(sum(rows[k:k + count]))
            k += count
        return cls(name=name, location=locations[0], files=files, schema=schema, file_rows=rows,
                   location_rows=tuple(location_rows))

    def has_column(self, column: str) -> bool:
        return column in self.schema.names

    def column_type(self, column: str) -> pa.DataType:
        return self.schema.field(column).type

    def iter_column(self, column: str, batch_rows: int = DEFAULT_BATCH_ROWS) -> Iterator[pa.Array]:
        """The column's values in row order, as Arrow arrays of at most ``batch_rows``."""
        for batch in self.iter_batches([column], batch_rows):
            yield batch.column(0)

    def iter_batches(self, columns: list[str], batch_rows: int = DEFAULT_BATCH_ROWS,
                     prefetch: int = 2, dictionary: Iterable[str] = ()) -> Iterator[pa.RecordBatch]:
        """Record batches of ``columns`` in row order.

        Arrow decodes on its own threads; with ``prefetch > 0`` a reader thread decodes up to
        ``prefetch`` batches ahead (:class:`ReadAhead`), so decoding overlaps the caller's
        work on the current one. The string columns named in ``dictionary`` come
        dictionary-encoded (indices into distinct values), straight from Parquet's own
        dictionary pages where it has them: far cheaper than materialising every string for
        a column that repeats its values.
        """
        job = ReadJob(self, tuple(columns), tuple(dictionary))
        if prefetch <= 0:
            yield from job.batches(batch_rows)
            return
        with ReadAhead([job], batch_rows, budget=0, min_batches=prefetch) as ahead:
            yield from ahead.batches(0)


@dataclass(frozen=True)
class ReadJob:
    """Some columns of one table, to read in record batches."""

    source: TableSource
    columns: tuple[str, ...]
    dictionary: tuple[str, ...] = ()  # string columns to read dictionary-encoded

    def batches(self, batch_rows: int) -> Iterator[pa.RecordBatch]:
        """The columns' record batches in row order, part by part (none without columns)."""
        if not self.columns:
            return
        columns = self.columns
        what = (f"column {columns[0]!r}" if len(columns) == 1
                else f"columns {', '.join(repr(c) for c in columns)}")
        for f in self.source.files:
            try:
                yield from _file_batches(f, columns, batch_rows, self.dictionary)
            except (pa.ArrowException, OSError, ValueError) as exc:
                raise DataError(f"table {self.source.name!r}, {what}: corrupt Parquet data: "
                                f"{exc}", path=f) from None


def _file_batches(path: Path, columns: tuple[str, ...], batch_rows: int,
                  dictionary: tuple[str, ...]) -> Iterator[pa.RecordBatch]:
    """One Parquet file's record batches of ``columns``, memory-mapped: pages come from the
    page cache as they are decoded, instead of being copied into fresh buffers first (~0.5
    CPU-seconds less at 10 M rows), into :func:`_decode_pool`'s memory."""
    read_dictionary = list(dictionary) or None
    if _PoolParquetReader is None:  # see the import
        yield from pq.ParquetFile(path, memory_map=True, read_dictionary=read_dictionary
                                  ).iter_batches(batch_rows, columns=list(columns),
                                                 use_threads=True)
        return
    reader = _PoolParquetReader(memory_pool=_decode_pool())
    reader.open(str(path), use_memory_map=True, read_dictionary=read_dictionary)
    indices = [reader.column_name_idx(c) for c in columns]
    yield from reader.iter_batches(batch_rows, range(reader.num_row_groups),
                                   column_indices=indices, use_threads=True)


_END = object()


class ReadAhead:
    """The record batches of several read jobs, in order, decoded on one reader thread up to
    ``budget`` bytes (and at least ``min_batches`` batches) ahead of the consumer.

    Reading straight on into the next table keeps a core decoding across table boundaries,
    instead of stopping at each table's end until its last batch is processed. Until
    ``consumer_ready`` is set (when given), the reader may run ``startup_budget`` bytes ahead
    instead: a consumer that cannot start yet (its kernels still load) leaves a core to
    decode the batches it will want next. The consumer takes the jobs in order
    (:meth:`batches`); a reader error is raised there, at the batch where it happened.
    """

    def __init__(self, jobs: list[ReadJob], batch_rows: int, budget: int, min_batches: int = 2,
                 *, startup_budget: int = 0, consumer_ready: threading.Event | None = None):
        self._jobs = jobs
        self._batch_rows = batch_rows
        self._budget = budget
        self._startup_budget = max(budget, startup_budget)
        self._consumer_ready = consumer_ready
        self._min_batches = max(1, min_batches)
        self._cond = threading.Condition()
        # (job index, batch | _END | exception, bytes)
        self._items: deque[tuple[int, object, int]] = deque()
        self._bytes = 0
        self._stopped = False
        self._next = 0
        self._thread = threading.Thread(target=self._produce, name="dlkit-read", daemon=True)
        self._thread.start()

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _put(self, job: int, item: object, nbytes: int) -> bool:
        """Queue ``item`` once there is room; False when the consumer has stopped."""
        with self._cond:
            while (not self._stopped and len(self._items) >= self._min_batches
                   and self._bytes + nbytes > self._limit()):
                self._cond.wait()
            if self._stopped:
                return False
            self._items.append((job, item, nbytes))
            self._bytes += nbytes
            self._cond.notify_all()
            return True

    def _limit(self) -> int:
        ready = self._consumer_ready is None or self._consumer_ready.is_set()
        return self._budget if ready else self._startup_budget

    def _produce(self) -> None:
        job = 0
        try:
            for job, read in enumerate(self._jobs):
                for batch in read.batches(self._batch_rows):
                    if not self._put(job, batch, batch.nbytes):
                        return
                if not self._put(job, _END, 0):
                    return
        except BaseException as exc:  # handed to the consumer
            self._put(job, exc, 0)

    def batches(self, job: int) -> Iterator[pa.RecordBatch]:
        """Job ``job``'s batches; jobs are taken in order, each to its end."""
        if job != self._next:
            raise ValueError(f"read job {job} taken out of order (next: {self._next})")
        while True:
            with self._cond:
                while not self._items:
                    self._cond.wait()
                got, item, nbytes = self._items.popleft()
                self._bytes -= nbytes
                self._cond.notify_all()
            if got != job:
                raise AssertionError(f"read job {got}'s batch while job {job} was taken")
            if item is _END:
                self._next += 1
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        """Stop reading (batches not taken yet are dropped) and wait for the reader."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join()


def _open_file(table: str, f: Path) -> pq.FileMetaData:
    try:
        return pq.ParquetFile(f).metadata
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise DataError(f"table {table!r}: not a readable Parquet file: {exc}", path=f) from None


def _same_columns(a: pa.Schema, b: pa.Schema) -> bool:
    return a.names == b.names and all(x.type == y.type for x, y in zip(a, b, strict=True))


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)
