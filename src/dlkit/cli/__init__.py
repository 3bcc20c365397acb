"""The ``dlkit`` command: a thin adapter that parses, calls the library and renders."""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point. ``dlkit --version`` answers before typer and rich load
    (a third of the start-up); everything else runs :func:`dlkit.cli.app.main`."""
    words = sys.argv[1:] if argv is None else list(argv)
    if words == ["--version"]:
        from dlkit import __version__

        try:
            print(f"dlkit {__version__}", flush=True)
        except BrokenPipeError:  # `dlkit --version | true`: as every command, 141
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(141)
        return
    _numba_without_scipy()
    from dlkit.cli.app import main as run

    run(words)


def _numba_without_scipy() -> None:
    """Keep SciPy out of this process (a command runs dlkit's kernels and nothing else).

    Numba imports ``scipy.linalg`` whenever SciPy is installed, as it first compiles or loads
    a kernel, only to learn whether ``np.dot`` and ``np.linalg`` may be compiled: a quarter
    of a second that no dlkit kernel uses (none calls BLAS or LAPACK). A ``None`` in
    ``sys.modules`` makes that import fail at once, and Numba goes on without linear algebra.
    Only the ``dlkit`` program does this: ``import dlkit`` in a user's process leaves SciPy
    and Numba as they are.
    """
    sys.modules.setdefault("scipy", None)  # type: ignore[arg-type]
