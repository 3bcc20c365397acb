"""Typed lists of read-only column arrays, made by cached kernels.

The column catalog hands the kernels each dtype's columns as a ``numba.typed.List``. Built
from Python (``List.empty_list`` and ``append``), such a list compiles its helpers afresh in
every process, about two seconds of every sampler's start; made here, by kernels compiled
once and cached like every other, it costs nothing after the first run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlkit.core.jit import kernel, load_numba, on_numba_load

# numba's typed list and the array types the kernels below make lists of, bound when numba
# loads (importing this module loads nothing)
List: Any = None
_F64: Any = None
_U8: Any = None
_I64: Any = None
_I32: Any = None


def _bind_types() -> None:
    global List, _F64, _U8, _I64, _I32
    import numba
    from numba.typed import List

    def readonly(dtype: Any) -> Any:
        return numba.types.Array(dtype, 1, "C", readonly=True)

    _F64, _U8 = readonly(numba.float64), readonly(numba.uint8)
    _I64, _I32 = readonly(numba.int64), readonly(numba.int32)


on_numba_load(_bind_types)


@kernel
def empty_f64_list():
    return List.empty_list(_F64)


@kernel
def empty_u8_list():
    return List.empty_list(_U8)


@kernel
def empty_i64_list():
    return List.empty_list(_I64)


@kernel
def empty_i32_list():
    return List.empty_list(_I32)


@kernel
def append_array(arrays, array):
    arrays.append(array)


EMPTY_LISTS = {np.dtype(np.float64): empty_f64_list, np.dtype(np.uint8): empty_u8_list,
               np.dtype(np.int64): empty_i64_list, np.dtype(np.int32): empty_i32_list}


def empty_list(dtype: Any) -> Any:
    """An empty typed list for read-only 1-D arrays of ``dtype`` (numba's type: loads numba,
    even when kernels run interpreted)."""
    load_numba()
    return EMPTY_LISTS[np.dtype(dtype)]()
