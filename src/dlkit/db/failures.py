"""Failures of a database's checks, raised at the first or collected.

A :class:`Checks` either raises :class:`~dlkit.errors.DatabaseError` at the first failure
(``open_database``) or collects every :class:`Failure` (``check_database``); a failure that
makes further checks of the same part meaningless stops that part (:class:`Stop`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dlkit.errors import DatabaseError


@dataclass(frozen=True)
class Failure:
    """One failed check: the file it concerns, the check's name and what was found."""

    file: str
    check: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.check}: {self.message}"


class Stop(Exception):
    """Raised internally when a failure makes further checks of the same part meaningless."""


class Checks:
    def __init__(self, collect: bool, root: Path):
        self.collect = collect
        self.root = root
        self.failures: list[Failure] = []

    def fail(self, file: str, check: str, message: str, fatal: bool = False) -> None:
        failure = Failure(file, check, message)
        if not self.collect:
            raise DatabaseError(f"{check}: {message}", path=self.root / file)
        self.failures.append(failure)
        if fatal:
            raise Stop()
