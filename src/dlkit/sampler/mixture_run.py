"""A mixture of databases in one ``Sampler``: its databases, components and weights, and the
tables its batches index (docs/mixture.md §4).

A *component* is one task of one database. Every task of every database listed is a
component; the components trained on are those whose database has a positive weight and
whose train split fills a global batch. Their integer weights, in list order, make the
mixture order of docs/mixture.md §2 (``dlkit.nextbatch.mixture``): with ``database_weights``
left out, each component weighs its train seeds; given, database ``d``'s share ``w_d / sum(w)``
is split among its components by their train seeds. A database of weight 0 is held out of
training (its splits are still evaluated: zero-shot).

The mixture's column and category embeddings are the databases' tables one after another
(``SharedTables``); a batch's ids are its database's ids plus the database's first row
there, so one table uploaded once serves every batch of the mixture.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from dlkit.errors import InvalidArgumentError
from dlkit.nextbatch.mixture import DEFAULT_TOTAL_WEIGHT, MixtureOrder, weights_from_counts
from dlkit.sampler.aggregates import column_embeddings
from dlkit.sampler.arguments import integer
from dlkit.sampler.arguments import weights as checked_weights
from dlkit.sampler.batch import MixtureMember
from dlkit.sampler.database import SamplerDatabase
from dlkit.sampler.schedule import SplitStream
from dlkit.sampler.tasks import TaskView
from dlkit.text import unknown_name

# Given database weights are turned into integer counts at this resolution before the
# largest-remainder rounding of weights_from_counts (float products are exact enough here
# and the same on every rank: the same IEEE operations on the same inputs).
_WEIGHT_RESOLUTION = 1 << 30


class DatabaseEntry(NamedTuple):
    """One database of a sampler, in list order: its id and its ``database_hash`` (hex)."""

    name: str
    hash: str


@dataclass(frozen=True)
class Component:
    """One task of one database: ``weight`` its integer weight in the mixture order (0: not
    trained on), ``database_idx`` and ``task_idx`` what its batches carry."""

    database_idx: int
    database: str
    task: str
    task_idx: int
    weight: int

    @property
    def name(self) -> str:
        """``DATABASE/TASK``, as the run manifest names the task's datasets."""
        return f"{self.database}/{self.task}"


class MixableCheck:
    """Databases added one at a time can share one mixture: distinct ids (their datasets are
    keyed by id) and one text space (the same embedder, settings and text width: the same
    words must be the same vectors). ``add`` returns the problem, or None; ``label`` names
    the database in it (its path)."""

    def __init__(self) -> None:
        self._ids: dict[str, str] = {}
        self._space: tuple[tuple[str, Any, int], str] | None = None

    def add(self, db: SamplerDatabase, label: str) -> str | None:
        embeddings = db.metadata.embeddings
        space = (embeddings.embedder, embeddings.config, embeddings.text_dim)
        if self._space is None:
            self._space = (space, label)
        elif space != self._space[0]:
            (embedder, config, _), first = self._space
            return (f"databases embedded by different models: {first} by {embedder} {config}, "
                    f"{label} by {space[0]} {space[1]} (the same words must be the same "
                    "vectors)")
        other = self._ids.get(db.database_id)
        if other is not None:
            return (f"database {label} is listed twice in the mixture" if other == label else
                    f"two databases have the id {db.database_id!r}: {other} and {label}")
        self._ids[db.database_id] = label
        return None


def check_mixable(databases: Sequence[SamplerDatabase], labels: Sequence[str]) -> None:
    """``MixableCheck`` of every database of a sampler's list, or an ``InvalidArgumentError``
    with the first problem."""
    check = MixableCheck()
    for db, label in zip(databases, labels, strict=True):
        problem = check.add(db, label)
        if problem is not None:
            raise InvalidArgumentError(problem)


def database_weights_for(names: Sequence[str], weights: Any) -> tuple[float, ...] | None:
    """One finite weight >= 0 per database (None: weigh components by their seeds)."""
    if weights is None:
        return None
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise InvalidArgumentError(f"database_weights must be a list of numbers, one per "
                                   f"database, got {weights!r}")
    return checked_weights("database", names, list(weights), "databases",
                           "nothing to train on")


def component_weights(train_seeds: Sequence[Sequence[int]],
                      database_weights: Sequence[float] | None,
                      total: int = DEFAULT_TOTAL_WEIGHT) -> list[list[int]]:
    """Integer weights of every component, per database (``train_seeds[d][t]``: task ``t`` of
    database ``d``'s train seeds, 0 where it cannot be trained on); 0 for a component not
    trained on. See the module doc for the rule."""
    counts: list[int] = []
    largest = max(database_weights) if database_weights is not None else 0.0
    for d, seeds in enumerate(train_seeds):
        if database_weights is None:
            counts.extend(seeds)
            continue
        whole = sum(seeds)
        for n in seeds:
            # scaled by the largest weight, so every share is at most 1 (no overflow, however
            # large the weights); a positive share too small to count still counts 1
            share = database_weights[d] / largest * n / whole if whole else 0.0
            counts.append(max(int(share * _WEIGHT_RESOLUTION), 1) if share > 0 else 0)
    trained = [i for i, count in enumerate(counts) if count > 0]
    if not trained:
        raise InvalidArgumentError("no task of the mixture has a full global batch of train "
                                   "seeds in a database of positive weight: nothing to train on")
    weights = [0] * len(counts)
    for i, weight in zip(trained, weights_from_counts([counts[i] for i in trained], total)):
        weights[i] = weight
    out, at = [], 0
    for seeds in train_seeds:
        out.append(weights[at:at + len(seeds)])
        at += len(seeds)
    return out


@dataclass(frozen=True)
class SharedTables:
    """The mixture's column and category embeddings: each database's rows one after
    another (``docs/mixture.md`` §4), and each database's first row in each."""

    columns: tuple[np.ndarray, ...]
    categories: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, databases: Sequence[SamplerDatabase]) -> SharedTables:
        return cls(tuple(column_embeddings(db) for db in databases),
                   tuple(np.asarray(db.categorical_embeddings()) for db in databases))

    def members(self) -> list[MixtureMember]:
        """Every database's place: its position and its first rows in the two tables."""
        column_starts = np.cumsum([0] + [t.shape[0] for t in self.columns]).tolist()
        category_starts = np.cumsum([0] + [t.shape[0] for t in self.categories]).tolist()
        return [MixtureMember(d, column_starts[d], category_starts[d])
                for d in range(len(self.columns))]

    def column_embeddings(self) -> np.ndarray:
        return np.concatenate(self.columns).astype(np.float16)

    def categorical_embeddings(self) -> np.ndarray:
        return np.concatenate(self.categories).astype(np.float16)


@dataclass(frozen=True)
class MixturePlan:
    """A mixture's components (every task of every database, in list order), the train
    streams of those trained on, in the order's component order, and that order."""

    components: tuple[Component, ...]
    train_streams: tuple[SplitStream, ...]
    order: MixtureOrder


def plan_mixture(databases: Sequence[DatabaseEntry], views: Sequence[Sequence[TaskView]],
                 trainable: Sequence[Mapping[str, SplitStream]], seed: int,
                 global_batch_size: int, database_weights: Sequence[float] | None = None,
                 named_weights: Sequence[tuple[str, int]] | None = None) -> MixturePlan:
    """The plan of a mixture whose database ``d`` has tasks ``views[d]``, of which those in
    ``trainable[d]`` (by name) fill a global batch of train seeds. Weights come from
    ``database_weights`` (``component_weights``) or, for a mixture file, ``named_weights``
    (its training components and weights, taken as they are, in the file's order)."""
    seeds = [[int(trainable[d][view.name].positions.shape[0]) if view.name in trainable[d]
              else 0 for view in tasks] for d, tasks in enumerate(views)]
    if named_weights is None:
        weights = component_weights(seeds, database_weights)
    else:
        place = {f"{databases[d].name}/{view.name}": (d, t)
                 for d, tasks in enumerate(views) for t, view in enumerate(tasks)}
        weights = [[0] * len(tasks) for tasks in views]
        for name, weight in named_weights:
            d, t = place[name]
            if not seeds[d][t]:
                raise InvalidArgumentError(
                    f"{name} has fewer train seeds than a global batch ({global_batch_size}): "
                    "hold it out (train = false) or lower the batch size")
            weights[d][t] = weight
    components = tuple(Component(d, databases[d].name, view.name, view.index, weights[d][t])
                       for d, tasks in enumerate(views) for t, view in enumerate(tasks))
    trained = [c for c in components if c.weight]
    if named_weights is not None:  # the file's order, not the databases'
        by_name = {c.name: c for c in trained}
        trained = [by_name[name] for name, _ in named_weights]
    return MixturePlan(components, tuple(trainable[c.database_idx][c.task] for c in trained),
                       MixtureOrder.from_seed([c.name for c in trained],
                                              [c.weight for c in trained], seed))


def database_index(names: Sequence[str], database: int | str | None) -> int:
    """The position of ``database`` (an index or an id; None with one database) among the
    databases named ``names``."""
    if database is None:
        if len(names) != 1:
            raise InvalidArgumentError(f"the mixture has {len(names)} databases: name one "
                                       "(database=index or id)")
        return 0
    if isinstance(database, str):
        if database not in names:
            raise InvalidArgumentError(unknown_name("database", database, list(names),
                                                    "the mixture"))
        return list(names).index(database)
    index = integer(database, "database", 0)
    if index >= len(names):
        raise InvalidArgumentError(f"database {index} is out of range: the sampler has "
                                   f"{len(names)}")
    return index
