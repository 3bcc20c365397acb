"""Constants and file layout of the database directory (format v1, docs/database_format.md)."""

from __future__ import annotations

import re
import struct
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from dlkit.core.codes import (  # the format's codes, named here too (in __all__)
    BOOLEAN,
    CATEGORICAL,
    NO_TIME,
    NUMERIC,
    STYPE_NAMES,
    TEXT,
    TIMESTAMP,
)

__all__ = ["BOOLEAN", "CATEGORICAL", "CATEGORICAL_EMBEDDINGS_FILE", "COLUMN_EMBEDDINGS_FILE",
           "FORMAT_NAME", "FORMAT_VERSION", "GRAPH_FILE", "GRAPH_HEADER", "GRAPH_HEADER_SIZE",
           "GRAPH_MAGIC", "GRAPH_SECTIONS", "INT_DTYPES", "MANIFEST_FILE", "MANIFEST_FORMAT",
           "MAX_INT32_EDGES", "MAX_INT32_ROWS", "METADATA_FILE", "NO_TIME", "NUMERIC",
           "ON_DANGLING", "SECTION_ALIGN", "STYPE_BY_NAME", "STYPE_NAMES", "TARGET_STYPES",
           "TASK_ARRAYS", "TEXT", "TEXT_DATA_FILE", "TEXT_EMBEDDINGS_FILE", "TEXT_OFFSETS_FILE",
           "TIMESTAMP", "VALUE_DTYPES", "bitmap_bytes", "column_valid_file", "column_values_file",
           "graph_header", "graph_id_dtype", "graph_layout", "graph_offset_dtype",
           "key_offsets_file", "key_values_file", "path_name_problem", "task_file"]

FORMAT_NAME = "dlkit-database"
FORMAT_VERSION = 3  # 2: graph.bin sections reordered and page aligned; 3: int32 ids/offsets
MANIFEST_FORMAT = "dlkit-database-manifest"

# What a build does with a dangling foreign key (metadata.json's options.on_dangling).
ON_DANGLING = ("drop", "error")

STYPE_BY_NAME = {name: i for i, name in enumerate(STYPE_NAMES)}
# Value dtype per stype (``values`` file of a column).
VALUE_DTYPES = (np.dtype("<f8"), np.dtype("u1"), np.dtype("<i8"), np.dtype("<i4"), np.dtype("<i8"))
# Stypes a task target may have (the decoder heads: numeric, boolean, timestamp, categorical).
TARGET_STYPES = (NUMERIC, BOOLEAN, TIMESTAMP, CATEGORICAL)

# Files at the top of the directory.
GRAPH_FILE = "graph.bin"
METADATA_FILE = "metadata.json"
MANIFEST_FILE = "manifest.json"
TEXT_EMBEDDINGS_FILE = "text_embeddings.bin"
COLUMN_EMBEDDINGS_FILE = "column_embeddings.bin"
CATEGORICAL_EMBEDDINGS_FILE = "categorical_embeddings.bin"
TEXT_OFFSETS_FILE = "texts.offsets"
TEXT_DATA_FILE = "texts.data"

TASK_ARRAYS = (  # (file stem, dtype) of every task, in this order
    ("anchor_row", np.dtype("<i8")),
    ("obs_time", np.dtype("<i8")),
    ("target", np.dtype("<f8")),
    ("target_valid", np.dtype("u1")),
)


def column_values_file(table: str, index: int) -> str:
    return f"tables/{table}/{index}.values"


def column_valid_file(table: str, index: int) -> str:
    return f"tables/{table}/{index}.valid"


def key_values_file(table: str) -> str:
    """Integer primary keys (int64) or string keys' UTF-8 bytes."""
    return f"tables/{table}/key.values"


def key_offsets_file(table: str) -> str:
    """String primary keys only: int64[num_rows + 1] offsets into ``key.values``."""
    return f"tables/{table}/key.offsets"


def task_file(task: str, stem: str) -> str:
    return f"tasks/{task}/{stem}.bin"


def bitmap_bytes(num_rows: int) -> int:
    return (num_rows + 7) // 8


# --- graph.bin ---------------------------------------------------------------------------

GRAPH_MAGIC = b"DLKGRAPH"
# magic, version, header size, rows, edges, tables, bytes per row id in the id sections,
# bytes per offset in the offset sections
GRAPH_HEADER = struct.Struct("<8sIIQQQII16x")
GRAPH_HEADER_SIZE = 64
assert GRAPH_HEADER.size == GRAPH_HEADER_SIZE
# Sections start on page boundaries: an array that is page aligned in memory (the build's
# working arrays are) then goes to disk with O_DIRECT straight from memory, no staging copy.
SECTION_ALIGN = 4096
# Row ids (``parent_ids``, ``child_ids``) are int32 while every row id fits, int64 beyond,
# and so are edge offsets (``parent_offsets``, ``child_offsets``): half the bytes of the
# largest sections, to build, hash, write and map.
MAX_INT32_ROWS = 1 << 31
MAX_INT32_EDGES = (1 << 31) - 1
INT_DTYPES: dict[int, np.dtype] = {4: np.dtype("<i4"), 8: np.dtype("<i8")}
_ID = "ids"  # a section of row ids: the graph's id dtype
_OFFSET = "offsets"  # a section of edge offsets: the graph's offset dtype
# (name, dtype, length in elements as a function of (num_rows, num_edges)), in file order: the
# order in which the build finishes them, so the file's SHA-256 (one sequential pass) hashes
# the parent side, the row sections and the child offsets while the transpose still runs.
GRAPH_SECTIONS: tuple[tuple[str, str | np.dtype, Callable[[int, int], int]], ...] = (
    ("parent_offsets", _OFFSET, lambda v, e: v + 1),
    ("parent_ids", _ID, lambda v, e: e),
    ("row_times", np.dtype("<i8"), lambda v, e: v),
    ("row_table", np.dtype("<i4"), lambda v, e: v),
    ("child_offsets", _OFFSET, lambda v, e: v + 1),
    ("child_ids", _ID, lambda v, e: e),
    ("child_times", np.dtype("<i8"), lambda v, e: e),
)


def graph_id_dtype(num_rows: int) -> np.dtype:
    """The dtype a build gives the row ids of a graph of ``num_rows`` rows."""
    return INT_DTYPES[4] if num_rows <= MAX_INT32_ROWS else INT_DTYPES[8]


def graph_offset_dtype(max_edges: int) -> np.dtype:
    """The dtype a build gives the edge offsets of a graph of at most ``max_edges`` edges
    (a build decides before it has counted them: by the most its foreign keys could give)."""
    return INT_DTYPES[4] if max_edges <= MAX_INT32_EDGES else INT_DTYPES[8]


def _align(n: int) -> int:
    return (n + SECTION_ALIGN - 1) // SECTION_ALIGN * SECTION_ALIGN


def graph_layout(num_rows: int, num_edges: int, id_dtype: npt.DTypeLike | None = None,
                 offset_dtype: npt.DTypeLike | None = None) -> tuple[dict[str, tuple[int, np.dtype, int]], int]:
    """``({section: (byte offset, dtype, count)}, total file size)`` of ``graph.bin``, its row
    ids of ``id_dtype`` and edge offsets of ``offset_dtype`` (defaults: :func:`graph_id_dtype`,
    :func:`graph_offset_dtype` of ``num_edges``)."""
    kinds = {_ID: np.dtype(id_dtype) if id_dtype is not None else graph_id_dtype(num_rows),
             _OFFSET: (np.dtype(offset_dtype) if offset_dtype is not None
                       else graph_offset_dtype(num_edges))}
    layout: dict[str, tuple[int, np.dtype, int]] = {}
    pos = _align(GRAPH_HEADER_SIZE)
    for name, dtype, length in GRAPH_SECTIONS:
        dtype = kinds[dtype] if isinstance(dtype, str) else dtype
        count = length(num_rows, num_edges)
        layout[name] = (pos, dtype, count)
        pos = _align(pos + count * dtype.itemsize)
    return layout, pos


def graph_header(num_rows: int, num_edges: int, num_tables: int, id_dtype: npt.DTypeLike,
                 offset_dtype: npt.DTypeLike) -> bytes:
    return GRAPH_HEADER.pack(GRAPH_MAGIC, FORMAT_VERSION, GRAPH_HEADER_SIZE, num_rows, num_edges,
                             num_tables, np.dtype(id_dtype).itemsize,
                             np.dtype(offset_dtype).itemsize)


# --- names that become paths ---------------------------------------------------------------

_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")


def path_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a table or task directory name, or None when it can.

    Allowed: 1-128 characters from ``A-Z a-z 0-9 _ . -``, not starting with ``.`` or ``-``
    (so no ``..``, no separators, no hidden files), i.e. a name that stays one directory level
    inside the output directory on every platform.
    """
    if not isinstance(name, str) or not name:
        return "must be a non-empty string"
    if "/" in name or "\\" in name or name in (".", "..") or "\x00" in name:
        return "would escape the output directory (path separators and '.'/'..' are not allowed)"
    if not _SAFE_NAME.fullmatch(name):
        return ("is not a safe file name: use 1-128 characters from A-Z a-z 0-9 _ . -, "
                "not starting with '.' or '-'")
    return None
