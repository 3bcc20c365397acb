"""The typer application and its one error boundary.

Each command module registers itself on ``app``; this module maps every ``DlkitError`` to one
red line and an exit code. A traceback is shown only with ``--debug`` (or ``DLKIT_DEBUG=1``).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
from collections.abc import Iterator

import typer
from typer.core import TyperGroup

from dlkit import errors
from dlkit.cli.console import print_error


# A command whose standard output's reader left before the end (`dlkit sample | head`)
# stops there, quietly, with the status of a process killed by SIGPIPE: the output is cut
# short and whatever the command would have done after it (a checkpoint, say) is not done.
READER_GONE_EXIT = 128 + signal.SIGPIPE


class _ReaderGone(Exception):
    """Standard output's reader left."""


def _stdout_reader_gone() -> bool:
    """Whether standard output is a pipe or socket whose reading end is closed."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll, or no stdout
        return False


class _Group(TyperGroup):
    """The root command group. A ``BrokenPipeError`` leaving a command becomes
    :class:`_ReaderGone` when stdout's reader left, an ``OutputError`` otherwise (a plug-in's
    pipe, say), before click's own handler, which would exit 1 on either."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            if _stdout_reader_gone():
                raise _ReaderGone from exc
            raise errors.OutputError(f"input/output error: {exc.strerror or exc}",
                                     path=exc.filename) from exc


app = typer.Typer(
    name="dlkit",
    cls=_Group,
    help=(
        "dlkit turns relational data into fast, exactly reproducible training input.\n\n"
        "Index sampling (NextBatch_v2 and v3): `sample`, `replay`, `verify-golden`.\n\n"
        "Performance: `bench` (the prefetch engine against a sequential loop).\n\n"
        "Relational database: `preprocess`, `verify`, `schema infer`.\n\n"
        "Relational sampling: `manifest`, `batches`, `show`."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)

# Exit codes, one place. 1 is any other dlkit error; 2 is click's own usage error code.
EXIT_CODES: tuple[tuple[type[errors.DlkitError], int], ...] = (
    (errors.VerificationError, 3),
    (errors.NextBatchError, 4),
    (errors.InputFormatError, 5),
    (errors.InvalidArgumentError, 2),
    (errors.OutputError, 6),
)
_debug = {"enabled": os.environ.get("DLKIT_DEBUG", "") not in ("", "0")}


def _print_version(value: bool) -> None:
    if value:
        from dlkit import __version__

        print(f"dlkit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(
        False, "--debug",
        help="Show the full Python traceback when a command fails (before the command: "
             "`dlkit --debug sample ...`)."),
    version: bool = typer.Option(  # noqa: ARG001 - handled by its callback
        False, "--version", callback=_print_version, is_eager=True,
        help="Print dlkit's version and exit."),
) -> None:
    """dlkit: deterministic, world-size-independent training input from relational data."""
    if debug:
        _debug["enabled"] = True


def exit_code_for(error: errors.DlkitError) -> int:
    for cls, code in EXIT_CODES:
        if isinstance(error, cls):
            return code
    return 1


def _register_commands() -> None:
    # Importing a command module registers its commands on ``app``.
    from dlkit.cli import bench, db, sample  # noqa: F401
    from dlkit.cli import relational  # noqa: F401


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, a scheduler's time limit) unwinds like Ctrl-C, so a command's
    temporary output is removed on the way out instead of left beside the target."""

    def interrupt(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread (an embedding program's): leave it alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point; never lets a traceback out unless debugging.

    typer runs in standalone mode, so usage errors, ``--help`` and Ctrl-C are handled (and
    exit) the way click always does; only dlkit's own errors reach this boundary.
    """
    _register_commands()
    try:
        try:
            with _sigterm_as_interrupt():
                app(args=argv, prog_name="dlkit")
        except (_ReaderGone, errors.DlkitError):
            raise
        except OSError as exc:  # I/O no command reported itself (stdout on a full disk)
            raise errors.OutputError(f"input/output error: {exc.strerror or exc}",
                                     path=exc.filename) from exc
        except MemoryError as exc:  # numpy's names the allocation: "Unable to allocate 512 GiB"
            raise errors.OutOfMemoryError(f"out of memory: {exc or 'an allocation failed'}"
                                          ) from exc
    except errors.DlkitError as exc:
        if _debug["enabled"]:
            import traceback

            traceback.print_exc()
        print_error(exc)
        sys.exit(exit_code_for(exc))
    except _ReaderGone:
        # The interpreter's last flush of stdout would fail again: point it at nothing.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(READER_GONE_EXIT)
