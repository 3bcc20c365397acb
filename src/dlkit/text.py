"""Wording shared by messages and reports."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 task``, ``3 tasks``, ``1,024 rows``: a count with its noun in the right number."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def did_you_mean(name: object, known: Iterable[str]) -> str:
    """``; did you mean 'review_rating'?`` when one of ``known`` is close to ``name``
    (difflib's ratio of at least 0.6), else nothing."""
    close = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def unknown_name(kind: str, name: object, known: Sequence[str], where: str) -> str:
    """The one wording of a name that ``where`` lacks, for tasks, tables and columns alike:
    ``no task 'hall' in the database (tasks: a, b); did you mean 'halls'?``."""
    listed = ", ".join(map(str, known)) or "none"
    return f"no {kind} {name!r} in {where} ({kind}s: {listed}){did_you_mean(name, known)}"


def human_bytes(n: int) -> str:
    """``n`` bytes in binary units, as ``ls -h`` counts them: ``512 B``, ``1.5 KiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
