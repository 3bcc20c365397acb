"""Memory access helpers for kernels: software prefetch and unaligned word loads.

``prefetch(array, index)`` hints that ``array[index]`` is read soon.

Random reads into a memory-mapped database cost hundreds of nanoseconds each, and a graph walk
makes them one after another (an offset, then the ids it points at, then their times). Kernels
that interleave independent work (the sequences of a batch) prefetch the next lines one
sequence needs and go on with another, so the misses overlap instead of adding up.

A prefetch never faults and never changes a result: it compiles to LLVM's ``llvm.prefetch``
(read, high locality, data cache). The index is not bounds-checked (a prefetch past the end is
harmless); callers still only pass indices they are about to read. Without the JIT
(``NUMBA_DISABLE_JIT=1``) ``prefetch`` is a plain no-op function.

``load_u64_le(data, start)`` reads bytes ``data[start:start + 8]`` of a uint8 array as one
little-endian word, in one unaligned load. Written as eight byte loads, shifts and ors, numba
keeps every byte's negative-index check and the compiler cannot merge them: hashing 8-byte
strings took 12 ns each instead of 4. Not bounds-checked: the caller guarantees
``start + 8 <= len(data)``. dlkit runs on little-endian machines only (its files are
little-endian, as every platform numba supports is).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from dlkit.core.jit import on_numba_load

if sys.byteorder != "little":  # pragma: no cover
    raise ImportError("dlkit needs a little-endian machine")

_READ = 0
_KEEP_IN_ALL_LEVELS = 3
_DATA_CACHE = 1


def prefetch(array: Any, index: Any) -> None:
    """Hint that ``array[index]`` (1-D) will be read soon; a no-op without the JIT."""


def load_u64_le(data: Any, start: Any) -> Any:
    """Bytes ``data[start:start + 8]`` (uint8 array) as a little-endian uint64."""
    return np.uint64(int.from_bytes(bytes(data[start:start + 8]), "little"))


def _register_compiled() -> None:
    """The compiled forms of ``prefetch`` and ``load_u64_le`` (made when numba loads)."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic, overload

    def element_pointer(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        """The address of ``array[index]`` for an intrinsic called as ``(array, index)``,
        with neither a negative-index wrap nor a bounds check."""
        array_type, index_type = sig.args
        view = context.make_array(array_type)(context, builder, args[0])
        position = context.cast(builder, args[1], index_type, types.intp)
        return cgutils.get_item_pointer2(
            context, builder, data=view.data, shape=cgutils.unpack_tuple(builder, view.shape),
            strides=cgutils.unpack_tuple(builder, view.strides), layout=array_type.layout,
            inds=[position], wraparound=False, boundscheck=False)

    @intrinsic
    def prefetch_intrinsic(typingctx: Any, array: Any, index: Any) -> Any:
        if not isinstance(array, types.Array) or array.ndim != 1 or \
                not isinstance(index, types.Integer):
            return None
        signature = types.void(array, index)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            pointer = element_pointer(context, builder, sig, args)
            byte_pointer = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            function = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]),
                "llvm.prefetch.p0")
            builder.call(function, [builder.bitcast(pointer, byte_pointer), i32(_READ),
                                    i32(_KEEP_IN_ALL_LEVELS), i32(_DATA_CACHE)])
            return context.get_dummy_value()

        return signature, codegen

    @overload(prefetch)
    def prefetch_overload(array: Any, index: Any) -> Any:
        def implementation(array: Any, index: Any) -> None:
            prefetch_intrinsic(array, index)

        return implementation

    @intrinsic
    def load_u64_intrinsic(typingctx: Any, data: Any, start: Any) -> Any:
        if not isinstance(data, types.Array) or data.ndim != 1 or \
                data.dtype != types.uint8 or not isinstance(start, types.Integer):
            return None
        signature = types.uint64(data, start)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            pointer = element_pointer(context, builder, sig, args)
            word_pointer = builder.bitcast(pointer, ir.IntType(64).as_pointer())
            return builder.load(word_pointer, align=1)

        return signature, codegen

    @overload(load_u64_le)
    def load_u64_overload(data: Any, start: Any) -> Any:
        def implementation(data: Any, start: Any) -> Any:
            return load_u64_intrinsic(data, start)

        return implementation


on_numba_load(_register_compiled)
