"""The one place that owns Numba compile options for every dlkit kernel.

``kernel`` compiles with ``nogil=True`` (producer threads run kernels in parallel with each
other and with the consumer), ``cache=True`` (compiled code is reused across processes) and
the numpy error model (no Python exception machinery in hot loops; callers validate inputs
before calling, so no kernel divides by zero or indexes out of bounds).

Compiled on first use. Importing a kernel module imports no numba: a ``Kernel`` holds its
Python function and makes numba's dispatcher the first time it is called compiled. Numba's
import (0.15 s) and its first compiled call in a process (0.2 s to set up the CPU target,
even when the machine code comes from the cache) are paid only by work that runs compiled.

Interpreted when that is cheaper. Within ``interpreted()``, kernels called on this thread run
as their plain Python functions (kernels they call too). A caller uses it for inputs so
small that interpreting them costs less than numba's set-up (``cheaper_interpreted``):
``dlkit verify`` or ``dlkit manifest`` of a small database never loads numba. Setting
``NUMBA_DISABLE_JIT=1`` interprets every kernel; ``make test-nojit`` runs the kernel tests
that way, and tests compare both ways on the inputs callers interpret, so the two semantics
are checked to agree.

The on-disk cache. Numba's own cache checks only the source file of the kernel it loads: a
kernel whose callee in another file changed would load its old machine code. So every kernel
is cached in a directory named by a hash of all kernel sources (every ``.py`` file of
``dlkit.core``, the only package that defines kernels) and of the Python and Numba versions:
any change to any kernel file starts a fresh directory. The directory lies under
``$XDG_CACHE_HOME/dlkit/numba`` (default ``~/.cache/dlkit/numba``), or under
``dlkit/core/__pycache__/numba`` when that is not writable; if neither is, kernels compile in every
process. ``DLKIT_NUMBA_CACHE=0`` turns the on-disk cache off. ``make clean`` removes both
places.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar, cast

import numpy as np

from dlkit.errors import InvalidArgumentError
from dlkit.interrupts import deferred_interrupts

F = TypeVar("F", bound=Callable[..., Any])

CACHE_SWITCH = "DLKIT_NUMBA_CACHE"
_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")
KERNEL_PACKAGE = Path(__file__).resolve().parent


def _jit_disabled(environ: Mapping[str, str] = os.environ) -> bool:
    """numba's own switch, read as numba reads it (an integer; anything else leaves the JIT
    on), without importing numba."""
    try:
        return bool(int(environ.get("NUMBA_DISABLE_JIT", "0") or "0"))
    except ValueError:
        return False


JIT_DISABLED = _jit_disabled()


def cache_switch(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether kernels use the on-disk cache: ``DLKIT_NUMBA_CACHE`` unset, or one of 1/0."""
    value = environ.get(CACHE_SWITCH, "1").strip().lower()
    if value not in _ON + _OFF:
        raise InvalidArgumentError(
            f"{CACHE_SWITCH}={environ[CACHE_SWITCH]!r}: expected 1 (cache compiled kernels "
            "on disk, the default) or 0 (compile in every process)")
    return value in _ON


def sources_key(package: Path = KERNEL_PACKAGE) -> str:
    """A hash of every Python file of ``package`` (a callee may sit in any of them: names and
    bytes) and of the Python and Numba versions."""
    digest = hashlib.sha256()
    digest.update(f"python {platform.python_version()} numba {metadata.version('numba')}\n"
                  .encode())
    for path in sorted(package.rglob("*.py")):
        data = path.read_bytes()
        digest.update(f"{path.relative_to(package).as_posix()} {len(data)}\n".encode())
        digest.update(data)
    return digest.hexdigest()[:20]


def user_cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_CACHE_HOME/dlkit/numba``, with the XDG default ``~/.cache``."""
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dlkit" / "numba"


def _writable(directory: Path) -> bool:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()
    except OSError:
        return False
    return True


def choose_cache_dir(key: str, roots: Iterable[Path]) -> Path | None:
    """The first of ``roots / key`` that can be written, or None when none can."""
    for root in roots:
        if _writable(root / key):
            return root / key
    return None


@functools.cache
def cache_dir() -> Path | None:
    """Where compiled kernels are cached in this process (None: compiled in every process)."""
    if not cache_switch() or JIT_DISABLED:
        return None
    roots = [user_cache_root(), KERNEL_PACKAGE / "__pycache__" / "numba"]
    return choose_cache_dir(sources_key(), roots)


def kernel_options() -> dict[str, Any]:
    """Numba's options for every kernel."""
    return {"nogil": True, "cache": cache_dir() is not None, "error_model": "numpy"}


_LOADING = threading.RLock()
_ON_LOAD: list[Callable[[], None]] = []
_KERNELS: list[Kernel] = []  # made before numba loaded: their dispatchers are made with it
_loaded: ModuleType | None = None


def on_numba_load(register: Callable[[], None]) -> None:
    """Run ``register`` (numba types, intrinsics, overloads a kernel needs to compile) once
    numba is imported for a compiled kernel: now, when it already is."""
    with _LOADING:
        if _loaded is None:
            _ON_LOAD.append(register)
        else:
            register()


def load_numba() -> ModuleType:
    """numba, imported with everything registered that dlkit's kernels compile against, and
    every kernel's dispatcher made.

    All at once, under one lock, before any kernel compiles: compiling a kernel types the
    kernels it calls (numba holds its compiler lock then), so none of them may still need a
    dispatcher made, and that lock, at that moment."""
    global _loaded
    if _loaded is None:
        with _LOADING:
            if _loaded is None:
                import numba
                from numba.core import types
                from numba.extending import typeof_impl

                # A kernel calling a kernel reads a Kernel from its module's globals: numba
                # types it as the dispatcher it stands for.
                typeof_impl.register(Kernel)(
                    lambda value, context: types.Dispatcher(value.dispatcher))
                for register in _ON_LOAD:
                    register()
                for made in _KERNELS:
                    made._dispatcher = _dispatcher_of(numba, made.py_func)
                _KERNELS.clear()
                _loaded = numba
    return _loaded


def _dispatcher_of(numba: ModuleType, fn: Callable[..., Any]) -> Any:
    """numba's dispatcher of ``fn`` with dlkit's options (call holding ``_LOADING``)."""
    where = cache_dir()
    # Numba reads its CACHE_DIR when the dispatcher is made (the cache locator keeps the
    # path), so setting it around the making sends dlkit's kernels, and only them, there.
    previous = numba.config.CACHE_DIR
    if where is not None:
        numba.config.CACHE_DIR = str(where)
    try:
        return numba.njit(**kernel_options())(fn)
    finally:
        numba.config.CACHE_DIR = previous


class _Mode(threading.local):
    interpreted = False


_MODE = _Mode()


@contextlib.contextmanager
def interpreted(when: bool = True) -> Iterator[None]:
    """Kernels called on this thread inside run as plain Python, when ``when``.

    For inputs small enough that interpreting them beats numba's set-up. NumPy's floating
    point warnings are silenced inside, as compiled kernels are silent (integer wraparound is
    intended in the hashing kernels, non-finite values are checked for, not warned of).
    """
    if not when or _MODE.interpreted:
        yield
        return
    _MODE.interpreted = True
    try:
        with np.errstate(all="ignore"):
            yield
    finally:
        _MODE.interpreted = False


_interpreted_share = 0.0  # of numba's set-up, spent interpreting in this process so far


def cheaper_interpreted(size: int, below: int) -> bool:
    """Whether work of ``size`` runs sooner interpreted. ``below`` (in the caller's unit) is
    the work whose interpreting costs what numba's set-up does, measured.

    Rent or buy: work is interpreted while the interpreted work so far in this process, in
    shares of numba's set-up, stays under one; after that (or once a kernel has run compiled)
    it runs compiled. A process thus never spends more than about numba's set-up on
    interpreting: many small pieces of work (the databases of a mixture) add up.
    """
    global _interpreted_share
    if _loaded is not None or size >= below:
        return False
    share = size / below
    with _LOADING:
        if _interpreted_share + share >= 1.0:
            return False
        _interpreted_share += share
    return True


def is_interpreted() -> bool:
    """Whether kernels called on this thread now run as plain Python."""
    return JIT_DISABLED or _MODE.interpreted


class Kernel:
    """A dlkit kernel: its Python function (``py_func``) and, made on first compiled call,
    numba's dispatcher (``dispatcher``)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.py_func = fn
        self._dispatcher: Any = None
        self._warm = False  # called compiled before
        functools.update_wrapper(self, fn)
        with _LOADING:
            if _loaded is None:
                _KERNELS.append(self)
            else:  # a kernel module imported after numba loaded
                self._dispatcher = _dispatcher_of(_loaded, fn)

    @property
    def dispatcher(self) -> Any:
        if self._dispatcher is None:
            load_numba()  # makes every kernel's dispatcher
        return self._dispatcher

    def __call__(self, *args: Any) -> Any:
        if _MODE.interpreted or JIT_DISABLED:
            return self.py_func(*args)
        dispatcher = self._dispatcher or self.dispatcher
        if not self._warm:
            # The first call compiles (or loads) it and its callees: a signal landing inside
            # numba's compiler is lost or leaves it broken ("no compiled object yet"), so it
            # waits until the compiled code is in place; the run itself is not held.
            with deferred_interrupts():
                try:
                    dispatcher.compile(tuple(dispatcher.typeof_pyval(a) for a in args))
                except Exception:  # noqa: BLE001, S110 - the call below raises it as numba words it
                    pass
                self._warm = True
        return dispatcher(*args)

    def __repr__(self) -> str:
        return f"<dlkit kernel {self.py_func.__module__}.{self.py_func.__qualname__}>"

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        # by name, as a function pickles: the other process imports the module's own kernel
        return _kernel_named, (self.py_func.__module__, self.py_func.__qualname__)


def _kernel_named(module: str, name: str) -> Kernel:
    import importlib

    found: Kernel = getattr(importlib.import_module(module), name)
    return found


def kernel(fn: F) -> F:
    """Make ``fn`` a dlkit kernel (arrays and scalars in, arrays/scalars out, no I/O)."""
    return cast(F, Kernel(fn))
