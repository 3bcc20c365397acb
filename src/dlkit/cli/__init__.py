"""The ``dlkit`` command: a thin adapter that parses, calls the library and renders."""

from __future__ import annotations

import io
import os
import sys


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point. ``dlkit --version`` answers before typer and rich load
    (a third of the start-up), help comes from :mod:`dlkit.cli.help_cache` when it was
    rendered before; everything else runs :func:`dlkit.cli.app.main`."""
    words = sys.argv[1:] if argv is None else list(argv)
    if words == ["--version"]:
        from dlkit import __version__

        sys.exit(_emit(f"dlkit {__version__}\n".encode(), 0))
    if not words or words[-1] in ("-h", "--help"):
        from dlkit.cli import help_cache

        if help_cache.is_help_request(words):
            sys.exit(_emit(*help_cache.answer(_run, words)))
    _run(words)


def _run(words: list[str]) -> None:
    _numba_without_scipy()
    from dlkit.cli.app import main as run

    run(words)


def _emit(text: bytes, status: int) -> int:
    """Write ``text`` to standard output: ``status``, or 141 when the reader left before
    taking all of it (`dlkit --help | head -1`), as every command exits."""
    from dlkit.cli.pipes import READER_GONE_EXIT, wait_until_read

    try:
        sys.stdout.buffer.write(text)
        sys.stdout.flush()
        gone = not wait_until_read(sys.stdout.fileno())
    except BrokenPipeError:
        gone = True
    except (AttributeError, ValueError, io.UnsupportedOperation):  # no descriptor: a capture
        gone = False
    if gone:  # the interpreter's last flush would fail again: point it at nothing
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return READER_GONE_EXIT
    return status


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
