"""The typer application and its one error boundary.

Each command module registers itself on ``app``; this module maps every ``DlkitError`` to one
red line and an exit code. A traceback is shown only with ``--debug`` (or ``DLKIT_DEBUG=1``).
"""

from __future__ import annotations

import os
import select
import sys

import typer
from typer.core import TyperCommand, TyperGroup

from dlkit import errors
from dlkit.cli import help_layout
from dlkit.cli.console import print_error, print_note
from dlkit.cli.pipes import READER_GONE_EXIT
from dlkit.interrupts import sigterm_as_interrupt

try:  # typer >= 0.16 carries its own copy of click
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - older typer depends on click itself
    from click import exceptions as click_exceptions  # type: ignore[no-redef,import-not-found,unused-ignore]


# A command whose standard output's reader left before the end (`dlkit sample | head`)
# stops there, quietly, with the status of a process killed by SIGPIPE: the output is cut
# short and whatever the command would have done after it (a checkpoint, say) is not done.


class _ReaderGone(Exception):
    """Standard output's reader left."""


class _Interrupted(Exception):
    """Ctrl-C or SIGTERM stopped a command (``command`` names it). Carried past click's own
    handler, which would exit 130 in silence."""

    def __init__(self, command: str):
        super().__init__(command)
        self.command = command


def _stdout_reader_gone() -> bool:
    """Whether standard output is a pipe or socket whose reading end is closed."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll, or no stdout
        return False


def _check_output_read() -> None:
    """A command that ends with its output unread in a pipe whose reader left (``dlkit show
    | head -1``, an output smaller than the pipe's buffer) exits 141, as a larger one does."""
    from dlkit.cli.pipes import wait_until_read

    try:
        sys.stdout.flush()
    except BrokenPipeError as exc:
        raise _ReaderGone from exc
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # no descriptor (a test's capture): no pipe
        return
    if not wait_until_read(fd):
        raise _ReaderGone


def _interrupt_in_c_call(error: SystemError) -> bool:
    """Whether ``error`` is CPython's report of an interrupt that landed in Python code a C
    function called (the handler runs there, the C caller returns a result anyway, and
    CPython raises "... returned a result with an exception set" caused by the interrupt).

    One level deep when the signal lands in numba's dispatcher; two when it lands in the
    ``_numba_unpickle`` a compiled kernel calls for a constant (``<function _numba_unpickle>
    returned ...`` caused by the interrupt, itself the cause of the dispatcher's): follow the
    causes through every such SystemError."""
    cause: BaseException | None = error
    while isinstance(cause, SystemError):
        cause = cause.__cause__
    return isinstance(cause, KeyboardInterrupt)


def _command_name(ctx) -> str:
    return " ".join(["dlkit", *filter(None, [ctx.invoked_subcommand])])


try:  # typer 0.2x: values converted without Pydantic where plain (dlkit.cli.coercion)
    from dlkit.cli.coercion import install as _install_coercion
except ImportError:  # pragma: no cover - a typer without that seam converts as it always did
    _install_coercion = None  # type: ignore[assignment]


def _tidy_options(command) -> None:
    """Two fixes to typer's options, for ``command`` and every command under it.

    A flag (``--overwrite``, ``--json``) shows no value type in help: typer prints ``<bool>``
    beside it, which reads as ``--overwrite true``, a usage error. Every value is converted
    by :mod:`dlkit.cli.coercion` first (Pydantic only where typer must decide). And a
    group's ``--help``
    reads "not given" (``None``) as ``False`` itself: typer would coerce that ``None``
    through Pydantic, whose import alone costs more than the rest of `dlkit sample --help`.
    """
    for param in command.params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
        if _install_coercion is not None:
            _install_coercion(param)
    get_help_option = command.get_help_option  # made on demand, the same object each time

    def help_option(ctx):
        option = get_help_option(ctx)
        if option is not None and "process_value" not in vars(option):
            option.metavar = ""
            process = option.process_value

            def process_value(ctx, value):
                return process(ctx, False if value is None else value)

            option.process_value = process_value
        return option

    command.get_help_option = help_option
    for sub in getattr(command, "commands", {}).values():
        _tidy_options(sub)


class _Group(TyperGroup):
    """The root command group. A ``BrokenPipeError`` leaving a command becomes
    :class:`_ReaderGone` when stdout's reader left, an ``OutputError`` otherwise (a plug-in's
    pipe, say), before click's own handler, which would exit 1 on either."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _tidy_options(self)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise _Interrupted(_command_name(ctx)) from exc
        except SystemError as exc:
            if _interrupt_in_c_call(exc):
                raise _Interrupted(_command_name(ctx)) from exc
            raise
        except BrokenPipeError as exc:
            if _stdout_reader_gone():
                raise _ReaderGone from exc
            raise errors.OutputError(f"input/output error: {exc.strerror or exc}",
                                     path=exc.filename) from exc


help_layout.install(TyperCommand, TyperGroup)  # piped help: no option name cut short

app = typer.Typer(
    name="dlkit",
    cls=_Group,
    help=(
        "dlkit turns relational data into fast, exactly reproducible training input.\n\n"
        "Index sampling (NextBatch_v2 and v3): `sample`, `replay`, `verify-golden`.\n\n"
        "Performance: `bench` (the prefetch engine against a sequential loop).\n\n"
        "Relational database: `preprocess`, `preprocess-many`, `verify`, `schema infer`, "
        "`import relbench`, `import sql`.\n\n"
        "Relational sampling: `manifest`, `batches`, `show`, `mixture check`.\n\n"
        "Seeing the data: `info`, `schema diagram`, `view`, `curves`."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)

# Exit codes, one place. 1 is any other dlkit error; 2 a usage error (click's or ours).
EXIT_CODES: tuple[tuple[type[errors.DlkitError], int], ...] = (
    (errors.VerificationError, 3),
    (errors.NextBatchError, 4),
    (errors.InputFormatError, 5),
    (errors.InvalidArgumentError, 2),
    (errors.OutputError, 6),
)
INTERRUPTED_EXIT = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C ended
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


# Every command (or command group) and the module that defines it. Importing a module
# registers its commands on ``app`` (``@app.command()`` or ``app.add_typer``); only the module
# of the command being run is imported, so `dlkit sample --help` loads neither NumPy's nor the
# other commands' imports. To add a command, write its module and add ONE line here, e.g.
#     "info": "dlkit.cli.info",
# A command module imports at its top only what its --help needs (typer, rich, dlkit.cli.*,
# dlkit.errors); what runs the command (numpy, pyarrow, kernels) is imported inside it.
# tests/cli/test_startup.py checks every command's --help loads no Numba.
COMMAND_MODULES: dict[str, str] = {
    "sample": "dlkit.cli.sample",
    "replay": "dlkit.cli.sample",
    "verify-golden": "dlkit.cli.sample",
    "bench": "dlkit.cli.bench",
    "preprocess": "dlkit.cli.db",
    "preprocess-many": "dlkit.cli.db",
    "verify": "dlkit.cli.db",
    "schema": "dlkit.cli.db",
    "import": "dlkit.cli.imports",
    "manifest": "dlkit.cli.relational",
    "mixture": "dlkit.cli.mixture",
    "batches": "dlkit.cli.relational",
    "show": "dlkit.cli.relational",
    "info": "dlkit.cli.view",
    "view": "dlkit.cli.view",
    "curves": "dlkit.cli.view",
}


def _register_commands(command: str | None = None) -> None:
    """Import the module of ``command``, or every command module when it names none of them
    (``dlkit --help``, a mistyped command: click lists them all)."""
    import importlib

    module = COMMAND_MODULES.get(command or "")
    for name in [module] if module else dict.fromkeys(COMMAND_MODULES.values()):
        importlib.import_module(name)


# Flags renamed in 0.2.0, kept as hidden aliases through 0.2.x: (command, old, new). The old
# spelling still works, with a note on stderr; it is in no --help. CHANGELOG.md lists them.
RENAMED_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("sample", "-s", "--stage"),
    ("bench", "-s", "--stage"),
    ("preprocess", "-s", "--schema"),
)


def _apply_aliases(argv: list[str]) -> tuple[list[str], list[str]]:
    """``argv`` with renamed flags spelled the new way, and a note for each one used. Short
    flags only, as a separate word or with the value attached (``-strain``)."""
    words = list(argv)
    at = next((i for i, w in enumerate(words) if not w.startswith("-")), len(words))
    command = words[at] if at < len(words) else None
    renames = {old: new for name, old, new in RENAMED_FLAGS if name == command}
    out, notes = words[:at + 1], []
    for position, word in enumerate(words[at + 1:], at + 1):
        if word == "--":  # everything after it is an argument, as click reads it
            out.extend(words[position:])
            break
        old = next((o for o in renames if word == o
                    or (word.startswith(o) and not word.startswith("--"))), None)
        if old is None:
            out.append(word)
            continue
        new = renames[old]
        out.append(new if word == old else f"{new}={word[len(old):]}")
        notes.append(f"{old} is the old spelling of {new} (dlkit 0.1); it works through "
                     f"0.2.x: use {new}")
    return out, notes


def _command_word(words: list[str]) -> str | None:
    """The command ``words`` run: the first word that is not an option of the root."""
    return next((w for w in words if not w.startswith("-")), None)


def _usage_error(exc: click_exceptions.UsageError) -> errors.DlkitError:
    """Click's usage error as ours: one line, ``error USAGE: ...``, exit 2."""
    message = " ".join(exc.format_message().split())
    command = exc.ctx.command_path if exc.ctx is not None else "dlkit"
    return errors.InvalidArgumentError(f"{message} (see '{command} --help')", code="USAGE")


def _print_help_for(exc: click_exceptions.UsageError) -> int:
    """``dlkit`` or ``dlkit schema`` alone: the help on stdout, exit 2 (as before)."""
    print(exc.format_message())
    return 2


def _forget_unhandled_interrupt() -> None:
    """Keep ``python -m dlkit`` from dying by SIGINT after an interrupt it handled.

    CPython flags a KeyboardInterrupt as unhandled whenever one leaves code run by ``exec`` of
    a string (dataclasses and numba make functions that way, so a signal can land there), and
    ``python -m`` checks that flag once the program has exited: set, it kills the process with
    SIGINT instead of returning our exit code. Each ``exec`` of a string clears the flag
    first, so a harmless one does.
    """
    exec("pass")  # noqa: S102 - a constant string: see above


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point; never lets a traceback out unless debugging.

    Click runs outside its standalone mode, so its usage errors reach this boundary and are
    printed like every other error (one line, exit 2), and an interrupt is reported in one
    line: what was stopped, and that its temporary output is gone, or, when the signal came
    after the output was complete, that it is complete (exit 0).
    """
    from dlkit.interrupts import recording_commits, recording_parts

    words = sys.argv[1:] if argv is None else list(argv)
    named = next((w for w in words if not w.startswith("-")), None)
    command = "dlkit" if named is None else f"dlkit {named}"
    with recording_commits() as committed, recording_parts() as parts:
        try:
            try:
                with sigterm_as_interrupt():
                    words, notes = _apply_aliases(words)
                    _register_commands(_command_word(words))
                    for note in dict.fromkeys(notes):
                        print_note(note)
                    status = app(args=words, prog_name="dlkit", standalone_mode=False)
                    if status == INTERRUPTED_EXIT:  # click's own catch, while parsing
                        raise _Interrupted(command)
                    _check_output_read()
            except click_exceptions.NoArgsIsHelpError as exc:
                sys.exit(_print_help_for(exc))
            except click_exceptions.UsageError as exc:
                raise _usage_error(exc) from exc
            except typer.Abort:  # click's prompt interrupted (no command prompts)
                raise _Interrupted("dlkit") from None
            except click_exceptions.ClickException as exc:
                raise errors.InvalidArgumentError(exc.format_message(), code="USAGE") from exc
            except (_ReaderGone, _Interrupted, errors.DlkitError):
                raise
            except KeyboardInterrupt as exc:  # before any command ran
                raise _Interrupted(command) from exc
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
        except _Interrupted as exc:
            if _debug["enabled"]:
                import traceback

                traceback.print_exc()
            _forget_unhandled_interrupt()
            if parts:  # some parts of a many-part output (preprocess-many's databases)
                listed = ", ".join(parts[:3]) + (f" and {len(parts) - 3} more"
                                                 if len(parts) > 3 else "")
                print_error(errors.DlkitError(
                    f"{exc.command} was interrupted; complete before it: {listed}; the rest "
                    "was not made", code="INTERRUPTED"))
                sys.exit(INTERRUPTED_EXIT)
            if committed:
                print_note(f"{exc.command} was interrupted after its output was complete: "
                           + ", ".join(committed))
                sys.exit(0)
            print_error(errors.DlkitError(
                f"{exc.command} was interrupted; it wrote no file and left no temporary file",
                code="INTERRUPTED"))
            sys.exit(INTERRUPTED_EXIT)
        except _ReaderGone:
            # The interpreter's last flush of stdout would fail again: point it at nothing.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            sys.exit(READER_GONE_EXIT)
    if isinstance(status, int) and status:  # click's Exit (--help, --version return 0)
        sys.exit(status)
