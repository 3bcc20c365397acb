"""The kernel records compile in nopython mode, fields by name, typed lists included."""

from __future__ import annotations

import numba
import numpy as np
from numba.core import types

from dlkit.core.jit import kernel
from dlkit.core.lists import append_array, empty_list
from dlkit.core.records import ColumnLists, Columns, Graph, Stream, Visit


def _list_of(*arrays: np.ndarray):
    typed = empty_list(arrays[0].dtype)
    for array in arrays:
        view = array.view()
        view.setflags(write=False)
        append_array(typed, view)
    return typed


def _lists() -> ColumnLists:
    return ColumnLists(f64_cols=_list_of(np.asarray([1.5, 2.5]), np.asarray([7.0])),
                       u8_cols=_list_of(np.asarray([3], np.uint8)),
                       i64_cols=_list_of(np.asarray([40, 41, 42], np.int64)),
                       i32_cols=_list_of(np.asarray([-5], np.int32)))


@kernel
def _read_columns(columns, column_lists, c):
    """Reads fields of both records by name; writes through a record built in the kernel."""
    slot = columns.value_slot[c]
    visit = Visit(np.zeros(2, np.int64), np.zeros(2, np.int64), np.zeros(2, np.int64),
                  np.zeros(2, np.int8), np.zeros(3, np.int64))
    visit.rows[1] = column_lists.i64_cols[0][2]
    return (column_lists.f64_cols[slot][0] * columns.mean[c], len(column_lists.f64_cols),
            column_lists.u8_cols[0][0], column_lists.i32_cols[0][0], visit.rows[1])


def _columns() -> Columns:
    ones = np.ones(2, np.int64)
    return Columns(stype=np.zeros(2, np.int8), column_id=np.arange(2, dtype=np.int32),
                   sort_rank=ones, value_slot=np.asarray([1, 0], np.int64), valid_slot=ones,
                   mean=np.asarray([2.0, 4.0]), std=np.ones(2), cat_start=ones,
                   label_lag=ones)


def test_records_with_typed_lists_compile_and_read_by_name():
    columns, lists = _columns(), _lists()
    assert _read_columns(columns, lists, 0) == (14.0, 2, 3, -5, 42)
    assert _read_columns(columns, lists, 1) == (6.0, 2, 3, -5, 42)


def test_the_column_lists_type_is_numbas_and_cached():
    """The cached type is what numba's own tuple typing gives; lists of other item types get
    another type (and would compile another kernel), other lists of the same item type the
    same one."""
    lists = _lists()
    generic = types.BaseTuple.from_types([numba.typeof(v) for v in lists], ColumnLists)
    first = numba.typeof(lists)
    assert first == generic and isinstance(first, types.NamedTuple)
    assert numba.typeof(_lists()) is first
    other = _list_of(np.zeros(5), np.zeros(1), np.zeros(2))
    assert numba.typeof(lists._replace(f64_cols=other)) is first
    writable = numba.typed.List([np.ones(2)])  # of writable arrays
    assert numba.typeof(lists._replace(f64_cols=writable)) != first


def test_records_of_arrays_are_typed_by_field():
    """A read-only and a writable graph are two types (the kernels write neither)."""
    arrays = [np.zeros(3, np.int64) for _ in range(8)]
    graph = Graph(*arrays)
    assert numba.typeof(graph) == types.NamedUniTuple(numba.typeof(arrays[0]), 8, Graph)
    frozen = [a.view() for a in arrays]
    for a in frozen:
        a.setflags(write=False)
    assert numba.typeof(Graph(*frozen)) != numba.typeof(graph)
    stream = Stream(k0=np.uint64(1), k1=np.uint64(2), anchor=3)
    assert numba.typeof(stream) == types.NamedTuple((types.uint64, types.uint64, types.int64),
                                                    Stream)
