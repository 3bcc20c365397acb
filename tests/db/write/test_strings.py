"""A string column in the build's working arrays: appended batch by batch, grown by
doubling, in memory or spilled, always Arrow's large-string layout of what was appended."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from dlkit.db.write.convert import to_string_buffers
from dlkit.db.write.scratch import Arrays
from dlkit.db.write.strings import StringColumn


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.text(max_size=3000), max_size=40), max_size=6),
       st.integers(0, 5), st.sampled_from([0, 1 << 30]))
def test_appended_batches_read_back_as_one_column(tmp_path_factory, batches, skip, budget):
    arrays = Arrays(tmp_path_factory.mktemp("scratch"), budget)
    column = StringColumn(arrays, strings=3)  # too few: the offsets grow too
    for batch in batches:
        # a slice of a larger array: its offsets do not start at 0
        sliced = pa.array(["x" * 9] * skip + batch, pa.string()).slice(skip)
        data, offsets, _valid, _held = to_string_buffers(sliced)
        column.extend(data, offsets)
    everything = [text for batch in batches for text in batch]
    assert column.count == len(everything)
    assert column.offsets[0] == 0 and column.nbytes == column.data.shape[0]
    assert [column.string(i).decode() for i in range(column.count)] == everything
    rebuilt = pa.LargeStringArray.from_buffers(column.count, pa.py_buffer(column.offsets),
                                               pa.py_buffer(column.data))
    assert rebuilt.to_pylist() == everything
