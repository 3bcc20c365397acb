"""Text ids: numbered by first appearance (batch by batch, row by row, then column by column),
whether the distinct texts stay in memory or spill to scratch files."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlkit.db.format import TEXT_DATA_FILE, TEXT_OFFSETS_FILE
from dlkit.db.write.embed import EMBED_CHUNK, load_embedder
from dlkit.db.write.hashing import Hasher
from dlkit.db.write.scratch import Arrays
from dlkit.db.write.texts import TextIndex, TextStore
from dlkit.errors import DataError

# short and long (over the eight bytes a table slot holds), shared prefixes, non-ASCII
_VOCABULARY = st.one_of(st.sampled_from(["", "a", "ab", "abcdefgh", "abcdefghi", "é", "日本"]),
                        st.text(max_size=20))


def _reference(batches: list[list[list[str | None]]]) -> tuple[list[list[list[int]]], list[str]]:
    """Ids by a dict, walking cells in the order that numbers them."""
    ids: dict[str, int] = {}
    out = []
    for columns in batches:
        for row in zip(*columns, strict=True):
            for value in row:
                if value is not None and value not in ids:
                    ids[value] = len(ids)
        out.append([[ids[v] if v is not None else 0 for v in column] for column in columns])
    return out, list(ids)


def _arrow(values: list[str | None], kind: int) -> pa.Array:
    if kind == 0:
        return pa.array(values, pa.string())
    if kind == 1:
        return pa.array(values, pa.large_string())
    return pa.array(values, pa.string()).dictionary_encode()


@st.composite
def text_batches(draw):
    """1-4 batches of 1-3 text columns (each of a random Arrow layout) of 0-60 rows."""
    num_columns = draw(st.integers(1, 3))
    kinds = [draw(st.integers(0, 2)) for _ in range(num_columns)]
    batches = []
    for _ in range(draw(st.integers(1, 4))):
        rows = draw(st.integers(0, 60))
        value = st.one_of(st.none(), _VOCABULARY)
        batches.append([draw(st.lists(value, min_size=rows, max_size=rows))
                        for _ in range(num_columns)])
    return batches, kinds


@settings(max_examples=60, deadline=None)
@given(text_batches(), st.sampled_from([0, 1 << 30]))
def test_ids_are_first_appearances_in_row_major_order(tmp_path_factory, batches_kinds, budget):
    batches, kinds = batches_kinds
    expected, texts = _reference(batches)
    index = TextIndex(Arrays(tmp_path_factory.mktemp("scratch"), budget))
    for columns, want in zip(batches, expected, strict=True):
        encoded = index.encode_row_major([_arrow(c, k) for c, k in zip(columns, kinds)],
                                         ["t.c"] * len(columns))
        for column, (values, valid), ids in zip(columns, encoded, want, strict=True):
            assert valid.tolist() == [v is not None for v in column]
            assert values.tolist() == ids
    assert index.count == len(texts)
    stored = [index.texts.string(i).decode() for i in range(index.count)]
    assert stored == texts


def test_many_distinct_texts_grow_the_index_past_a_spilled_table(tmp_path):
    arrays = Arrays(tmp_path, budget=0)  # every array over a page spills
    index = TextIndex(arrays)
    for batch in range(5):
        values = [f"text {batch * 3000 + i}" for i in range(3000)]
        values[7] = "text 1"  # seen before from the second batch on
        (ids, valid), = index.encode_row_major([pa.array(values)], ["t.c"])
        assert ids[7] == 1
        assert [index.texts.string(int(i)).decode() for i in ids[:50]] == values[:50]
    assert index.count == 5 * 2999  # every batch but "text 1" is new
    assert arrays.spilled > 0 and arrays.used == 0


def test_a_text_that_is_not_utf8_is_a_data_error(tmp_path):
    bad = pa.array([b"ok", b"\xff\xfe"], pa.binary()).cast(pa.string(), safe=False)
    with pytest.raises(DataError, match="t.c: a string is not valid UTF-8"):
        TextIndex(Arrays(tmp_path, 1 << 30)).encode_row_major([bad], ["t.c"])


def test_a_null_in_a_dictionary_is_a_null_cell_not_an_empty_text(tmp_path):
    cells = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0, 2], pa.int32()),
                                           pa.array(["a", None, ""]))
    index = TextIndex(Arrays(tmp_path, 1 << 30))
    (ids, valid), = index.encode_row_major([cells], ["t.c"])
    assert valid.tolist() == [True, False, True, True]
    assert ids.tolist() == [0, 0, 0, 1]
    assert [index.texts.string(i) for i in range(index.count)] == [b"a", b""]


def test_the_store_writes_every_text_and_gives_its_arrays_back_when_closed(tmp_path):
    arrays = Arrays(tmp_path / "scratch", budget=1 << 30)
    hasher = Hasher(tmp_path / "db", direct=False)
    store = TextStore(hasher, load_embedder(None), arrays)
    values = [f"a text of some length, number {i}" for i in range(3 * EMBED_CHUNK)]
    store.encode_row_major([pa.array(values)], ["t.c"])
    store.encode_row_major([pa.array(values[::-1] + ["one more"])], ["t.c"])
    assert arrays.used > 0
    store.close()
    hasher.digests()  # waits until every write is on disk
    hasher.close()
    assert store.count == len(values) + 1
    assert arrays.used == 0  # the graph stage that follows gets the whole budget
    data = (tmp_path / "db" / TEXT_DATA_FILE).read_bytes()
    offsets = np.fromfile(tmp_path / "db" / TEXT_OFFSETS_FILE, dtype="<i8")
    written = [data[a:b].decode() for a, b in zip(offsets[:-1], offsets[1:])]
    assert written == values + ["one more"]
