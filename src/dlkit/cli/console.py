"""Shared rich consoles: results on stdout, progress and errors on stderr."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

console = Console()
err_console = Console(stderr=True)


def plain(value: Any) -> str:
    """``value`` as text that rich prints as it is: user data (paths, names, keys, messages
    quoting cell values) may hold ``[...]``, which rich would otherwise read as markup."""
    return escape(str(value))


def print_json(payload: Any) -> None:
    """Machine-readable output for ``--json``: plain JSON on stdout, nothing else."""
    print(json.dumps(payload, indent=2, sort_keys=True))


def progress(transient: bool = True) -> Progress:
    """A progress display on stderr, so stdout stays clean for data."""
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=transient,
        # Off a terminal (CI logs, pipes) a live bar only adds blank lines.
        disable=not err_console.is_terminal,
    )
