"""What ``preprocess`` tells its caller: progress events while it runs, a report at the end."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any


class Progress:
    """Progress sink: ``begin`` a stage with a total (or None), ``advance``, ``end``. No-op."""

    def begin(self, stage: str, total: int | None, unit: str = "rows") -> None:
        pass

    def advance(self, amount: int) -> None:
        pass

    def end(self) -> None:
        pass

    def spilled(self, total_bytes: int) -> None:
        """Working arrays have spilled to scratch files: ``total_bytes`` so far."""


@dataclass
class StageReport:
    name: str
    seconds: float = 0.0
    rows: int = 0
    edges: int = 0
    columns: int = 0
    bytes: int = 0  # of the files this stage wrote (the database total is size_bytes)
    spilled: int = 0  # bytes of working arrays spilled to scratch files in this stage


@dataclass(frozen=True)
class TableReport:
    """One table as the build wrote it: rows, feature columns, edges out (its foreign keys'
    edges) and dangling keys."""

    name: str
    rows: int
    columns: int
    edges: int
    dangling: int


@dataclass
class PreprocessReport:
    output: str  # the database written
    database_id: str
    database_hash: str
    num_tables: int
    num_rows: int
    num_edges: int
    num_columns: int
    num_texts: int
    num_categories: int
    num_tasks: int
    size_bytes: int  # of the database's files, manifest.json included (as `dlkit info`)
    seconds: float
    stages: list[StageReport]
    tables: list[TableReport]
    dangling: dict[str, int]
    warnings: list[str] = field(default_factory=list)
    memory_budget: int = 0  # bytes the working arrays could hold in memory
    spilled_bytes: int = 0  # bytes of working arrays spilled to scratch files beyond it

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@contextmanager
def timed_stage(progress: Progress, report: StageReport, total: int | None,
                unit: str = "rows") -> Iterator[StageReport]:
    """Report a stage to ``progress`` and add its wall time to ``report.seconds``."""
    progress.begin(report.name, total, unit)
    started = time.perf_counter()
    try:
        yield report
    finally:
        report.seconds += time.perf_counter() - started
        progress.end()
