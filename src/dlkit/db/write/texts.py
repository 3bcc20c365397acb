"""Global text ids: the text dictionary files and the text embeddings, appended live.

The distinct texts seen so far and their hash index live in the build's working arrays
(:class:`Arrays`), so a database with more distinct texts than memory holds spills them
instead of growing past the budget: each batch costs a lookup of its distinct values, and
only the texts new to the database are copied in.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from dlkit.core import keys as kk
from dlkit.db import format as fmt
from dlkit.db.write.columns import apply_mapping, first_rows
from dlkit.db.write.convert import check_utf8, dictionary_arrow, to_string_buffers
from dlkit.db.write.embed import EMBED_CHUNK, Embedder, embed_texts
from dlkit.db.write.hashing import Hasher
from dlkit.db.write.scratch import Arrays
from dlkit.db.write.strings import StringColumn


class _Unseen(NamedTuple):
    """The entries of one column's batch dictionary not in the index yet."""

    ids: np.ndarray  # the ids of every entry of the dictionary, filled in for these
    entries: np.ndarray  # their positions in the dictionary
    first_rows: np.ndarray  # the first row of the batch using each
    column: int  # the column's position among the batch's text columns
    texts: pa.Array
    hashes: np.ndarray


class TextIndex:
    """The distinct texts seen so far, numbered in the order they first appear: table by
    table, row by row, then column by column within a row (so ids do not depend on batch
    size); ``texts`` holds them in id order."""

    def __init__(self, arrays: Arrays):
        self.arrays = arrays
        self.texts = StringColumn(arrays)
        self.table = self._new_table(0)

    @property
    def count(self) -> int:
        return self.texts.count

    def encode_row_major(self, arrays: list[pa.Array],
                         wheres: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Text ids (and validity) of the text columns of one batch; ``wheres`` names the
        columns for errors."""
        columns, new = [], []
        for c, (arr, at) in enumerate(zip(arrays, wheres, strict=True)):
            indices, dictionary, valid = dictionary_arrow(arr)
            data, offsets, entry_valid, values = to_string_buffers(dictionary)
            check_utf8(values, at)
            first = first_rows(indices, valid, len(values), at)
            first[~entry_valid] = -1  # a null in the dictionary: its rows are nulls
            hashes = np.empty(len(values), dtype=np.int64)
            kk.hash_strings(data, offsets, hashes)
            ids = np.empty(len(values), dtype=np.int64)
            kk.hash_lookup_strings(hashes, first >= 0, data, offsets, self.table,
                                   self.texts.data_buffer, np.int64(0), ids)
            unseen = np.flatnonzero((ids < 0) & (first >= 0))
            if unseen.size:
                new.append(_Unseen(ids, unseen, first[unseen], c, values.take(pa.array(unseen)),
                                   hashes[unseen]))
            columns.append((indices, valid, ids))
        if new:
            self._intern(new)
        return [apply_mapping(indices, ids, valid, null=0) for indices, valid, ids in columns]

    def _intern(self, new: list[_Unseen]) -> None:
        """Number the batch's texts not seen before, each where it first appears (by row,
        then column), and fill in their ids."""
        texts = pa.concat_arrays([part.texts for part in new])
        hashes = np.concatenate([part.hashes for part in new])
        columns = np.concatenate([np.full(part.entries.size, part.column) for part in new])
        order = np.lexsort((columns, np.concatenate([part.first_rows for part in new])))
        data, offsets, _valid, _held = to_string_buffers(texts)
        self.texts.reserve(len(texts), int(offsets[-1] - offsets[0]))
        if self.table.shape[0] < kk.table_size(self.count + len(texts)):
            grown = self._new_table(self.count + len(texts))
            kk.rehash_strings(self.table, grown)
            self.table = grown
        interned = np.empty(len(texts), dtype=np.int64)
        self.texts.count = int(kk.intern_strings(
            order, hashes, data, offsets, self.table, self.texts.data_buffer,
            self.texts.offsets_buffer, np.int64(self.count), interned))
        start = 0
        for part in new:
            part.ids[part.entries] = interned[start:start + part.entries.size]
            start += part.entries.size

    def _new_table(self, count: int) -> np.ndarray:
        """An empty hash index with room for ``count`` texts (see ``kk.STRING_SLOT``)."""
        table = self.arrays.empty(np.int64, (kk.table_size(count), kk.STRING_SLOT))
        kk.clear_string_table(table)
        return table


class TextStore:
    """Global text ids (a :class:`TextIndex`), the text dictionary files and the text
    embeddings, appended live."""

    def __init__(self, hasher: Hasher, embedder: Embedder, arrays: Arrays):
        self.index: TextIndex | None = TextIndex(arrays)
        self.embedder = embedder
        self.written = 0  # texts already in the files
        self.data = hasher.open(fmt.TEXT_DATA_FILE)
        self.offsets = hasher.open(fmt.TEXT_OFFSETS_FILE)
        self.embeddings = hasher.open(fmt.TEXT_EMBEDDINGS_FILE)
        self.offsets.write(np.zeros(1, dtype="<i8"))
        self.embed_seconds = 0.0

    @property
    def count(self) -> int:
        """The texts numbered so far (once closed, every one of them written)."""
        return self.written if self.index is None else self.index.count

    def encode_row_major(self, arrays: list[pa.Array],
                         wheres: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`TextIndex.encode_row_major`; the new texts go to the files in chunks."""
        assert self.index is not None, "texts encoded after close"
        encoded = self.index.encode_row_major(arrays, wheres)
        if self.count - self.written >= EMBED_CHUNK:
            self.flush()
        return encoded

    def flush(self) -> None:
        """Write the texts numbered since the last flush, and their embeddings."""
        start, end = self.written, self.count
        if start == end:
            return
        started = time.perf_counter()
        assert self.index is not None, "flushed after close"
        texts = self.index.texts
        offsets = texts.offsets[start:end + 1]
        first, last = int(offsets[0]), int(offsets[-1])
        data = texts.data_buffer[first:last]  # never written again: appends go after it
        if last > first:
            self.data.write(data)
        self.offsets.write(offsets[1:].astype("<i8"))  # from 0 in the store as in the file
        array = pa.LargeStringArray.from_buffers(
            end - start, pa.py_buffer(offsets - first), pa.py_buffer(data))
        for chunk in range(0, end - start, EMBED_CHUNK):
            self.embeddings.write(embed_texts(self.embedder, array.slice(chunk, EMBED_CHUNK)))
        self.written = end
        self.embed_seconds += time.perf_counter() - started

    def close(self) -> None:
        """Write the rest and free the index: its arrays go back to the budget (the graph
        stage's)."""
        self.flush()
        for f in (self.data, self.offsets, self.embeddings):
            f.close()
        self.index = None
