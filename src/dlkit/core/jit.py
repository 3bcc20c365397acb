"""The one place that owns Numba compile options for every dlkit kernel.

``kernel`` compiles with ``nogil=True`` (producer threads run kernels in parallel with each
other and with the consumer), ``cache=True`` (compiled code is reused across processes) and
the numpy error model (no Python exception machinery in hot loops; callers validate inputs
before calling, so no kernel divides by zero or indexes out of bounds).

Setting ``NUMBA_DISABLE_JIT=1`` runs every kernel as plain Python; ``make test-nojit`` runs
the kernel tests that way, so the kernels' Python semantics are checked and measurable by
coverage tools.

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

import hashlib
import os
import platform
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numba

from dlkit.errors import InvalidArgumentError

F = TypeVar("F", bound=Callable[..., Any])

CACHE_SWITCH = "DLKIT_NUMBA_CACHE"
_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")
KERNEL_PACKAGE = Path(__file__).resolve().parent


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
    digest.update(f"python {platform.python_version()} numba {numba.__version__}\n".encode())
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


def _configure() -> tuple[dict[str, Any], Path | None]:
    directory = None
    if cache_switch() and not numba.config.DISABLE_JIT:
        roots = [user_cache_root(), KERNEL_PACKAGE / "__pycache__" / "numba"]
        directory = choose_cache_dir(sources_key(), roots)
    return {"nogil": True, "cache": directory is not None, "error_model": "numpy"}, directory


KERNEL_OPTIONS, CACHE_DIR = _configure()
_DECORATING = threading.Lock()


def kernel(fn: F) -> F:
    """Compile ``fn`` as a dlkit kernel (arrays and scalars in, arrays/scalars out, no I/O)."""
    # Numba reads its CACHE_DIR when the dispatcher is made (the cache locator keeps the path),
    # so setting it around the decoration sends dlkit's kernels, and only them, there.
    with _DECORATING:
        previous = numba.config.CACHE_DIR
        if CACHE_DIR is not None:
            numba.config.CACHE_DIR = str(CACHE_DIR)
        try:
            return numba.njit(**KERNEL_OPTIONS)(fn)  # type: ignore[no-any-return]
        finally:
            numba.config.CACHE_DIR = previous
