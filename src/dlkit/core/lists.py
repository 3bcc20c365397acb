"""Typed lists of read-only column arrays, made by cached kernels.

The column catalog hands the kernels each dtype's columns as a ``numba.typed.List``. Built
from Python (``List.empty_list`` and ``append``), such a list compiles its helpers afresh in
every process, about two seconds of every sampler's start; made here, by kernels compiled
once and cached like every other, it costs nothing after the first run.
"""

from __future__ import annotations

import numba
import numpy as np
from numba.typed import List

from dlkit.core.jit import kernel

_F64 = numba.types.Array(numba.float64, 1, "C", readonly=True)
_U8 = numba.types.Array(numba.uint8, 1, "C", readonly=True)
_I64 = numba.types.Array(numba.int64, 1, "C", readonly=True)
_I32 = numba.types.Array(numba.int32, 1, "C", readonly=True)


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
