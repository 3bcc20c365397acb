"""A collection of databases preprocessed on a job array: one database per source, each shard
of the array building its own share, resumable and safe when two runs meet.

A *source* is a directory of Parquet tables with its ``dlkit.toml``, as ``dlkit preprocess``
takes. A collection is either a directory whose sub-directories are the sources (hidden ones
left out) or a text file listing source directories, one per line (blank lines and ``#``
comments ignored; relative paths are read from the list's directory). Each source is built
into ``OUT_DIR/<its directory name>``; two sources of one name are refused before anything is
built.

Shards: the sources sorted by name are dealt round-robin, source ``k`` to shard
``k mod num_shards``: each shard gets the same number of sources, give or take one, and the N
shards of an array together build every source exactly once. ``--skip-existing`` leaves a
source whose database already exists alone (a database appears only complete, renamed into
place: one that exists was built whole), so an array re-run after a failure or a time limit
builds only what is missing. Two runs that reach the same source at once (a retried task
beside its first attempt, two arrays over one output) cannot both build it: the first holds
the lock beside the output; the other reports the source as busy (or as built by another run,
when it finished first) and goes on.

A source that fails (a bad schema, a dangling key under ``on_dangling="error"``) is reported
with its one-line error and the run goes on with the next source; the run fails at the end
when any source failed.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlkit.errors import DlkitError, InvalidArgumentError, OutputError

if TYPE_CHECKING:
    from dlkit.db.write.report import PreprocessReport

LIST_COMMENT = "#"
MANIFEST_FILE = "manifest.json"


class Outcome(enum.Enum):
    BUILT = "built"
    SKIPPED = "skipped"  # its database existed (built before, or by another run just now)
    BUSY = "busy"  # another run is building it right now
    FAILED = "failed"


@dataclass(frozen=True)
class Source:
    name: str
    path: Path


@dataclass(frozen=True)
class SourceResult:
    name: str
    source: str
    output: str
    outcome: Outcome
    seconds: float
    database_hash: str | None = None
    error_code: str | None = None
    error: str | None = None
    warnings: tuple[str, ...] = ()  # the build's, as `dlkit preprocess` prints them

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "output": self.output,
                "outcome": self.outcome.value, "seconds": round(self.seconds, 3),
                "database_hash": self.database_hash, "error_code": self.error_code,
                "error": self.error, "warnings": list(self.warnings)}


@dataclass(frozen=True)
class CollectionReport:
    output: str  # the directory of the databases
    shard: int
    num_shards: int
    num_sources: int  # in the whole collection, every shard's
    results: tuple[SourceResult, ...] = field(default_factory=tuple)
    seconds: float = 0.0

    def count(self, outcome: Outcome) -> int:
        return sum(r.outcome is outcome for r in self.results)

    @property
    def failures(self) -> tuple[SourceResult, ...]:
        return tuple(r for r in self.results if r.outcome is Outcome.FAILED)

    def to_json(self) -> dict[str, Any]:
        return {"output": self.output, "shard": self.shard, "num_shards": self.num_shards,
                "num_sources": self.num_sources, "seconds": round(self.seconds, 3),
                **{o.value: self.count(o) for o in Outcome},
                "sources": [r.to_json() for r in self.results]}


def read_sources(collection: str | os.PathLike[str]) -> tuple[Source, ...]:
    """The sources of ``collection`` (a directory of source directories, or a list file),
    sorted by name."""
    path = Path(collection)
    if path.is_dir():
        try:
            entries = sorted(p for p in path.iterdir() if not p.name.startswith("."))
        except OSError as exc:
            raise InvalidArgumentError(f"cannot list the collection: {exc.strerror or exc}",
                                       path=path) from exc
        sources = [Source(p.name, p) for p in entries if p.is_dir()]
    elif path.is_file():
        from dlkit.files import read_regular

        try:
            text = read_regular(path).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidArgumentError(f"cannot read the list of sources: {exc}",
                                       path=path) from exc
        sources = []
        for line in text.splitlines():
            entry = line.split(LIST_COMMENT, 1)[0].strip()
            if entry:
                directory = Path(entry) if os.path.isabs(entry) else path.parent / entry
                sources.append(Source(Path(entry).name, directory))
    else:
        raise InvalidArgumentError("no such directory or list of sources", path=path)
    by_name: dict[str, Source] = {}
    for source in sources:
        if not source.name or source.name in (".", ".."):
            raise InvalidArgumentError(f"a source needs a directory name: {str(source.path)!r}",
                                       path=path)
        if source.name in by_name:
            raise InvalidArgumentError(
                f"two sources named {source.name!r} would build one database: "
                f"{str(by_name[source.name].path)!r} and {str(source.path)!r}", path=path)
        by_name[source.name] = source
    if not by_name:
        raise InvalidArgumentError("the collection holds no source directory", path=path)
    return tuple(by_name[name] for name in sorted(by_name))


def check_shard(shard: int, num_shards: int) -> None:
    if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
        raise InvalidArgumentError(f"num_shards must be a positive integer, got {num_shards!r}")
    if isinstance(shard, bool) or not isinstance(shard, int) or not 0 <= shard < num_shards:
        raise InvalidArgumentError(
            f"shard must be an integer in [0, {num_shards}), got {shard!r}")


def shard_of(sources: Sequence[Source], shard: int, num_shards: int) -> tuple[Source, ...]:
    """Shard ``shard``'s share of ``sources`` (sorted by name): every ``num_shards``-th."""
    check_shard(shard, num_shards)
    return tuple(sources[shard::num_shards])


def is_database(path: Path) -> bool:
    return (path / MANIFEST_FILE).is_file()


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def _build_one(source: Source, output: Path, *, skip_existing: bool,
               build: Callable[[Path, Path], PreprocessReport]) -> SourceResult:
    started = time.perf_counter()

    def result(outcome: Outcome, **fields: Any) -> SourceResult:
        return SourceResult(source.name, str(source.path), str(output), outcome,
                            time.perf_counter() - started, **fields)

    if skip_existing and is_database(output):
        return result(Outcome.SKIPPED)
    try:
        report = build(source.path, output)
    except OutputError as exc:
        if exc.code == "BUSY":
            return result(Outcome.BUSY, error_code=exc.code, error=_one_line(exc))
        if skip_existing and is_database(output):  # another run committed it first
            return result(Outcome.SKIPPED)
        return result(Outcome.FAILED, error_code=exc.code, error=_one_line(exc))
    except DlkitError as exc:
        return result(Outcome.FAILED, error_code=exc.code, error=_one_line(exc))
    return result(Outcome.BUILT, database_hash=report.database_hash,
                  warnings=tuple(report.warnings))


def preprocess_many(collection: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
                    shard: int = 0, num_shards: int = 1, skip_existing: bool = False,
                    on_start: Callable[[int], None] | None = None,
                    on_source: Callable[[SourceResult], None] | None = None,
                    **preprocess_options: Any) -> CollectionReport:
    """Build shard ``shard`` of ``num_shards`` of ``collection`` into ``out_dir`` (see the
    module doc); ``preprocess_options`` go to :func:`dlkit.db.preprocess` for every source.
    ``on_start`` hears how many sources the shard holds, ``on_source`` of each one as it is
    done (a progress bar)."""
    from dlkit.db.write.writer import preprocess

    if skip_existing and preprocess_options.get("overwrite"):
        raise InvalidArgumentError("skip_existing and overwrite contradict each other: "
                                   "choose one")
    started = time.perf_counter()
    sources = read_sources(collection)
    mine = shard_of(sources, shard, num_shards)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise OutputError("the output directory is a file", path=out)

    def build(source: Path, output: Path) -> PreprocessReport:
        return preprocess(source, output, **preprocess_options)

    if on_start is not None:
        on_start(len(mine))
    results = []
    for source in mine:
        results.append(_build_one(source, out / source.name, skip_existing=skip_existing,
                                  build=build))
        if on_source is not None:
            on_source(results[-1])
    return CollectionReport(str(out), shard, num_shards, len(sources), tuple(results),
                            time.perf_counter() - started)
