"""Wording shared by messages and reports."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 task``, ``3 tasks``, ``1,024 rows``: a count with its noun in the right number."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"
