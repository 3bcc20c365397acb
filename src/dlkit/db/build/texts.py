"""Global text ids: the text dictionary files and the text embeddings, appended live."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyarrow as pa

from dlkit.db import format as fmt
from dlkit.db.build.columns import apply_mapping, map_dictionary
from dlkit.db.build.embed import EMBED_CHUNK, embed_texts
from dlkit.db.build.hashing import Hasher


class TextStore:
    """Global text ids, the text dictionary files and the text embeddings, appended live."""

    def __init__(self, hasher: Hasher, embedder: Any):
        self.ids: dict[str, int] = {}
        self.embedder = embedder
        self.pending: list[str] = []
        self.data = hasher.open(fmt.TEXT_DATA_FILE)
        self.offsets = hasher.open(fmt.TEXT_OFFSETS_FILE)
        self.embeddings = hasher.open(fmt.TEXT_EMBEDDINGS_FILE)
        self.offsets.write(np.zeros(1, dtype="<i8"))
        self.total_bytes = 0
        self.embed_seconds = 0.0

    def encode_row_major(self, arrays: list[pa.Array],
                         wheres: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Text ids for the text columns of one batch (``wheres`` names them for errors); new
        texts are numbered by their first cell in row-major order (row, then column), so ids
        do not depend on batch size."""
        parts = []
        first_cell: dict[str, tuple[int, int]] = {}
        for c, (arr, at) in enumerate(zip(arrays, wheres, strict=True)):
            indices, dictionary, valid, mapping, new = map_dictionary(arr, self.ids, np.int64, at)
            if new:
                rows = np.flatnonzero(valid)
                uniq, first = np.unique(indices[rows], return_index=True)
                first_row = dict(zip(uniq.tolist(), rows[first].tolist()))
                for j in new:
                    key = (first_row[j], c)
                    value = dictionary[j]
                    if value not in first_cell or key < first_cell[value]:
                        first_cell[value] = key
            parts.append((indices, dictionary, valid, mapping))
        for value, _ in sorted(first_cell.items(), key=lambda kv: kv[1]):
            self.ids[value] = len(self.ids)
            self.pending.append(value)
        out = []
        for indices, dictionary, valid, mapping in parts:
            for k in np.flatnonzero(mapping == -2):
                mapping[k] = self.ids[dictionary[k]]
            out.append(apply_mapping(indices, mapping, valid, null=0))
        if len(self.pending) >= EMBED_CHUNK:
            self.flush()
        return out

    def flush(self) -> None:
        if not self.pending:
            return
        started = time.perf_counter()
        array = pa.array(self.pending, type=pa.large_string())
        self.pending = []
        n = len(array)
        rel = np.frombuffer(array.buffers()[1], dtype=np.int64)[: n + 1]
        buf = array.buffers()[2]
        if buf is not None and rel[-1]:
            self.data.write(memoryview(buf)[: int(rel[-1])])
        self.offsets.write((rel[1:] + self.total_bytes).astype("<i8"))
        self.total_bytes += int(rel[-1])
        for start in range(0, n, EMBED_CHUNK):
            self.embeddings.write(embed_texts(self.embedder, array.slice(start, EMBED_CHUNK)))
        self.embed_seconds += time.perf_counter() - started

    def close(self) -> None:
        self.flush()
        for f in (self.data, self.offsets, self.embeddings):
            f.close()

