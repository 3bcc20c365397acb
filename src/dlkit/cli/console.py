"""Shared rich consoles: results on stdout, progress and errors on stderr."""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from dlkit.errors import DlkitError

if TYPE_CHECKING:  # imported by progress(): --help and usage errors need none of it
    from rich.progress import Progress


UNBOUNDED_WIDTH = 1 << 15  # columns of a console that is not a terminal


class _Console(Console):
    """A rich console for a command's output.

    Off a terminal (a pipe, a log) it does not wrap printed lines at 80 columns in the middle
    of a phrase, and a table is as wide as its cells. When the reader of stdout leaves (``dlkit show |
    head -1``) it raises ``BrokenPipeError`` for the CLI's boundary (rich's own handler exits
    1 at once); when stderr's does, the command goes on without its messages, so its exit
    code still tells how it went.
    """

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.soft_wrap = not self.is_terminal
        if not self.is_terminal and "COLUMNS" not in os.environ:
            # Nor are tables fitted to 80 columns (cut to `samples…`, a value split over two
            # lines): each takes the width its cells need. COLUMNS=N sets a width.
            self.width = UNBOUNDED_WIDTH

    def on_broken_pipe(self) -> None:
        self.quiet = True
        if not self.stderr:
            raise BrokenPipeError


console = _Console()
err_console = _Console(stderr=True)


def plain(value: Any) -> str:
    """``value`` as text that rich prints as it is: user data (paths, names, keys, messages
    quoting cell values) may hold ``[...]``, which rich would otherwise read as markup."""
    return escape(str(value))


def print_error(error: DlkitError) -> None:
    """One line on stderr: ``error CODE: file: problem``."""
    err_console.print(f"[bold red]error[/] [red]{error.code}[/]: {plain(error)}",
                      highlight=False, soft_wrap=True)


def print_warning(text: object) -> None:
    """One line on stderr for a warning: not a summary, so ``--quiet`` and ``--json`` keep it."""
    err_console.print(f"[yellow]warning[/]: {plain(text)}", highlight=False)


@contextlib.contextmanager
def sampler_warnings() -> Iterator[None]:
    """The sampler's warnings raised inside the block, each as one ``warning: ...`` line on
    stderr (not Python's file:line and source line), once however many times it was raised
    (every Sampler a command opens on a database warns again; the library's own category is
    never filtered out), printed even when the block then fails or is interrupted."""
    from dlkit.sampler.schedule import SamplerWarning  # imported by the commands that sample

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SamplerWarning)
        try:
            yield
        finally:
            for text in dict.fromkeys(str(w.message) for w in caught):
                print_warning(text)


def print_note(text: str) -> None:
    """One line on stderr for something the user should know that is not an error."""
    err_console.print(f"[yellow]note[/]: {plain(text)}", highlight=False, soft_wrap=True)


def print_json(payload: Any) -> None:
    """Machine-readable output for ``--json``: plain JSON on stdout, nothing else."""
    print(json.dumps(payload, indent=2, sort_keys=True))


def progress(transient: bool = True, enabled: bool = True) -> Progress:
    """A progress display on stderr, so stdout stays clean for data (none unless
    ``enabled``)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=transient,
        # Off a terminal (CI logs, pipes) a live bar only adds blank lines.
        disable=not enabled or not err_console.is_terminal,
    )
