"""What the sampler reads of an open database, as typing Protocols.

``dlkit.db.open_database`` returns one (memory-mapped, docs/database_format.md "Reader API");
the tests' in-memory database is another. Only what the sampler reads is named here: a
member the sampler does not read may differ or be missing (the reader's ``row_of``, which
``dlkit show`` reads, is the ``InspectableDatabase`` below). The protocols are
runtime-checkable, so ``isinstance(db, SamplerDatabase)`` checks that every member exists.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from dlkit.db.metadata_records import DatabaseMetadata
from dlkit.db.task_rules import TaskRules


@runtime_checkable
class SamplerColumn(Protocol):
    """A non-key column: values by local row, validity, and its encoding's parameters; an
    optional ``known_after_us`` (default 0) hides a row's value until that long after the
    row's time (``dlkit.sampler.catalog``)."""

    @property
    def name(self) -> str: ...
    @property
    def column_id(self) -> int: ...
    @property
    def stype(self) -> int: ...
    @property
    def values(self) -> np.ndarray: ...
    @property
    def valid(self) -> np.ndarray: ...
    @property
    def mean(self) -> float | None: ...
    @property
    def std(self) -> float | None: ...
    @property
    def cat_emb_start(self) -> int: ...
    @property
    def cat_emb_count(self) -> int: ...


@runtime_checkable
class SamplerTable(Protocol):
    """A table: its rows ``[row_offset, row_offset + num_rows)`` of the graph."""

    @property
    def name(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def num_rows(self) -> int: ...
    @property
    def row_offset(self) -> int: ...
    @property
    def time_column(self) -> str | None: ...
    @property
    def columns(self) -> Sequence[SamplerColumn]: ...


@runtime_checkable
class SamplerGraph(Protocol):
    """The foreign-key graph as CSR arrays over global rows, and each row's time."""

    @property
    def parent_offsets(self) -> np.ndarray: ...
    @property
    def parent_ids(self) -> np.ndarray: ...
    @property
    def child_offsets(self) -> np.ndarray: ...
    @property
    def child_ids(self) -> np.ndarray: ...
    @property
    def child_times(self) -> np.ndarray: ...
    @property
    def row_times(self) -> np.ndarray: ...


@runtime_checkable
class SamplerTask(Protocol):
    """A task: its seeds (anchor rows of its table, ascending), when each is observed, the
    target column, and its rules about time and splits."""

    @property
    def name(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def table(self) -> str: ...
    @property
    def target_column(self) -> str: ...
    @property
    def target_stype(self) -> int: ...
    @property
    def anchor_row(self) -> np.ndarray: ...
    @property
    def obs_time(self) -> np.ndarray: ...
    @property
    def num_seeds(self) -> int: ...
    @property
    def rules(self) -> TaskRules: ...


@runtime_checkable
class SamplerDatabase(Protocol):
    """An open database, as the sampler reads it."""

    @property
    def path(self) -> str | os.PathLike[str]: ...
    @property
    def database_id(self) -> str: ...
    @property
    def database_hash(self) -> bytes: ...
    @property
    def metadata(self) -> DatabaseMetadata: ...
    @property
    def num_rows(self) -> int: ...
    @property
    def table_offsets(self) -> np.ndarray: ...
    @property
    def tables(self) -> Sequence[SamplerTable]: ...
    @property
    def graph(self) -> SamplerGraph: ...
    @property
    def tasks(self) -> Sequence[SamplerTask]: ...

    def table(self, name: str) -> SamplerTable: ...
    def text_embeddings(self) -> np.ndarray: ...
    def column_embeddings(self) -> np.ndarray: ...
    def categorical_embeddings(self) -> np.ndarray: ...
    def close(self) -> None: ...


@runtime_checkable
class InspectableDatabase(SamplerDatabase, Protocol):
    """A database whose sequences ``dlkit show`` can decode: global rows to (table, local
    row). Texts are shown by their ``text(text_id)`` where the database has it."""

    def row_of(self, global_row: int) -> tuple[SamplerTable, int]: ...


# What a sampler entry point takes: a database directory, or a database already open.
DatabaseSource = str | os.PathLike[str] | SamplerDatabase


def open_db(db_path: DatabaseSource) -> tuple[SamplerDatabase, bool]:
    """An open database and whether we opened it (``db_path`` may be an open database)."""
    if isinstance(db_path, SamplerDatabase):
        return db_path, False
    from dlkit.db import open_database  # the reader lives in a layer beside ours

    return open_database(Path(db_path)), True
