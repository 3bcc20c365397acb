"""What a ``Sampler`` was given to read: one database, a list of them (a mixture), or a
``dlkit-mixture.toml`` declaring a mixture, checked before anything is opened.

``SamplerSources.parse`` resolves the first argument and the weight keywords into the
databases to open (paths or already open databases), whether they are a mixture, and, for a
mixture file, the weights and the split seed it declares (docs/mixture.md §3, §4).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlkit.errors import InvalidArgumentError
from dlkit.sampler.database import DatabaseSource, SamplerDatabase


@dataclass(frozen=True)
class SamplerSources:
    """The databases of a sampler, in order. ``named_weights`` are a mixture file's training
    components and weights in the file's order (None otherwise); ``split_seed`` its split
    seed, which replaces the keyword's. ``owned``: the databases were opened here (a mixture
    file's, open since its check) and are the sampler's to close."""

    databases: tuple[DatabaseSource, ...]
    is_mixture: bool
    named_weights: tuple[tuple[str, int], ...] | None = None
    split_seed: int | None = None
    owned: bool = False

    @classmethod
    def parse(cls, db_path: Any, database_weights: Any, task_weights: Any) -> SamplerSources:
        """The sources of ``Sampler(db_path, ..., database_weights=, task_weights=)``; the
        weights are only checked against the kind of source here."""
        sources = cls._of(db_path)
        try:
            if not sources.is_mixture and database_weights is not None:
                raise InvalidArgumentError("database_weights needs a list of databases")
            if sources.is_mixture and task_weights is not None:
                raise InvalidArgumentError("task_weights is for one database; a mixture weighs "
                                           "its databases (database_weights)")
            if sources.named_weights is not None and database_weights is not None:
                raise InvalidArgumentError(f"{db_path}: a mixture file gives its own weights "
                                           "(leave database_weights out)")
        except BaseException:
            if sources.owned:
                for db in sources.databases:
                    db.close()  # type: ignore[union-attr]
            raise
        return sources

    @classmethod
    def _of(cls, db_path: Any) -> SamplerSources:
        if isinstance(db_path, (str, os.PathLike)) and Path(db_path).suffix == ".toml":
            from dlkit.sampler.mixture import check_mixture, load_mixture

            # the databases stay open from the check on: each is opened once
            opened: dict[Path, SamplerDatabase] = {}
            check = check_mixture(load_mixture(Path(db_path)), opened)
            paths = tuple(dict.fromkeys(Path(c.database) for c in check.components))
            return cls(tuple(opened[p] for p in paths), True,
                       tuple((c.name, c.weight) for c in check.training), check.split_seed,
                       owned=True)
        if isinstance(db_path, str) or not isinstance(db_path, Sequence):
            return cls((db_path,), False)
        databases = tuple(db_path)
        if not databases:
            raise InvalidArgumentError("a mixture needs at least one database")
        for source in databases:
            if not isinstance(source, (str, os.PathLike, SamplerDatabase)):
                raise InvalidArgumentError(f"a mixture lists databases (paths or open "
                                           f"databases), got {source!r}")
        return cls(databases, True)


def label(db: SamplerDatabase) -> str:
    """How messages and ``repr`` name an open database: its path (else its id)."""
    return str(getattr(db, "path", db.database_id))
