"""The one place that owns Numba compile options for every dlkit kernel.

``kernel`` compiles with ``nogil=True`` (producer threads run kernels in parallel with each
other and with the consumer), ``cache=True`` (compiled code is reused across processes) and
the numpy error model (no Python exception machinery in hot loops; callers validate inputs
before calling, so no kernel divides by zero or indexes out of bounds).

Setting ``NUMBA_DISABLE_JIT=1`` runs every kernel as plain Python, which the test suite uses
for coverage.

Numba's cache checks only the source file of the kernel it loads: a kernel whose callee in
another file changed still loads its old machine code. After changing a kernel, ``make clean``
drops every compiled kernel (installed packages are safe: an upgrade rewrites every file).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numba

F = TypeVar("F", bound=Callable[..., Any])

KERNEL_OPTIONS: dict[str, Any] = {"nogil": True, "cache": True, "error_model": "numpy"}


def kernel(fn: F) -> F:
    """Compile ``fn`` as a dlkit kernel (arrays and scalars in, arrays/scalars out, no I/O)."""
    return numba.njit(**KERNEL_OPTIONS)(fn)  # type: ignore[return-value]

