"""A mixture of databases for pretraining: the ``dlkit-mixture.toml`` file, and its check
against the databases it names.

.. code-block:: toml

    [mixture]
    weights = "seeds"          # seeds (train seeds per component), tasks (1 each), given
    total_weight = 1024        # the block W aimed at when weights = "seeds"
    split_seed = 0             # the hash splits' seed, as the Sampler's split_seed

    [[component]]
    database = "dbs/rel-f1"    # relative to this file's directory
    task = "driver-dnf"

    [[component]]
    database = "dbs/rel-amazon"
    tasks = ["user-churn", "item-churn"]   # one component per task
    weight = 3                 # with weights = "given"
    train = false              # held out of training: evaluated only (zero-shot)

A component is one task of one database, named ``DATABASE_ID/TASK`` (as the run manifest's
datasets). Every database of a mixture must be embedded by the same model with the same
configuration: the same words must be the same vectors wherever they come from. Checking a
mixture opens its databases one at a time (each closed before the next), so file descriptors
and maps stay bounded however many it names. The order of the training components' steps is
``docs/mixture.md``'s; their weights are derived here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlkit.errors import DlkitError, InputFormatError, InvalidArgumentError
from dlkit.nextbatch.mixture import (
    DEFAULT_TOTAL_WEIGHT,
    MAX_BLOCK,
    mixture_hash,
    weights_from_counts,
)
from dlkit.sampler.mixture_run import MixableCheck
from dlkit.sampler.split import SPLITS as SPLITS
from dlkit.text import unknown_name

if TYPE_CHECKING:
    from dlkit.sampler.database import SamplerDatabase

MIXTURE_FILE = "dlkit-mixture.toml"


class MixtureError(InputFormatError):
    """A mixture file that cannot be used as written."""

    code = "MIXTURE_INVALID"


class Weighting(enum.Enum):
    SEEDS = "seeds"  # proportional to each training component's train seeds
    TASKS = "tasks"  # every training component alike
    GIVEN = "given"  # as the file says, per component


@dataclass(frozen=True)
class ComponentSpec:
    database: Path
    task: str
    weight: int | None  # given weights only
    train: bool


@dataclass(frozen=True)
class MixtureSpec:
    source: str  # the file, for messages
    weighting: Weighting
    total_weight: int
    split_seed: int
    components: tuple[ComponentSpec, ...]


def _fail(source: str, message: str) -> MixtureError:
    return MixtureError(message, path=source)


def _integer(table: dict[str, Any], key: str, default: int, low: int, high: int,
             source: str) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _fail(source, f"{key} must be an integer in [{low}, {high}], got {value!r}")
    return value


def parse_mixture(text: str, *, source: str = MIXTURE_FILE, base: Path = Path(".")
                  ) -> MixtureSpec:
    """The mixture ``text`` declares; database paths are read relative to ``base``."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _fail(source, f"not valid TOML: {exc}") from None
    unknown = sorted(set(doc) - {"mixture", "component"})
    if unknown:
        raise _fail(source, f"unknown table {unknown[0]!r} (a mixture has [mixture] and "
                            "[[component]])")
    head = doc.get("mixture", {})
    if not isinstance(head, dict):
        raise _fail(source, "[mixture] must be a table")
    extra = sorted(set(head) - {"weights", "total_weight", "split_seed"})
    if extra:
        raise _fail(source, f"unknown key {extra[0]!r} in [mixture]")
    try:
        weighting = Weighting(head.get("weights", Weighting.SEEDS.value))
    except ValueError:
        raise _fail(source, f"weights must be one of {[w.value for w in Weighting]}, got "
                            f"{head.get('weights')!r}") from None
    total = _integer(head, "total_weight", DEFAULT_TOTAL_WEIGHT, 1, MAX_BLOCK, source)
    split_seed = _integer(head, "split_seed", 0, 0, 2**63 - 1, source)
    entries = doc.get("component", [])
    if not isinstance(entries, list) or not entries:
        raise _fail(source, "a mixture needs at least one [[component]]")
    components = []
    for number, entry in enumerate(entries, 1):
        where = f"component {number}"
        if not isinstance(entry, dict):
            raise _fail(source, f"{where} must be a table")
        extra = sorted(set(entry) - {"database", "task", "tasks", "weight", "train"})
        if extra:
            raise _fail(source, f"{where}: unknown key {extra[0]!r}")
        database = entry.get("database")
        if not isinstance(database, str) or not database:
            raise _fail(source, f"{where}: database must be a path")
        if ("task" in entry) == ("tasks" in entry):
            raise _fail(source, f"{where}: give task or tasks (one of them)")
        tasks = [entry["task"]] if "task" in entry else entry["tasks"]
        if (not isinstance(tasks, list) or not tasks
                or not all(isinstance(t, str) and t for t in tasks)):
            raise _fail(source, f"{where}: tasks must be a non-empty list of task names")
        train = entry.get("train", True)
        if not isinstance(train, bool):
            raise _fail(source, f"{where}: train must be true or false, got {train!r}")
        weight = entry.get("weight")
        if weighting is Weighting.GIVEN and train:
            if "weight" not in entry:
                raise _fail(source, f"{where}: weights = \"given\" needs a weight for every "
                                    "training component (or train = false)")
            weight = _integer(entry, "weight", 0, 1, MAX_BLOCK, f"{source} ({where})")
        elif weight is not None:
            raise _fail(source, f"{where}: weight is read only with weights = \"given\", and "
                                "only for a training component")
        for task in tasks:
            components.append(ComponentSpec(base / database, task, weight, train))
    return MixtureSpec(source, weighting, total, split_seed, tuple(components))


def load_mixture(path: str | Path) -> MixtureSpec:
    from dlkit.files import read_regular

    path = Path(path)
    try:
        text = read_regular(path).decode("utf-8")
    except FileNotFoundError:
        raise _fail(str(path), "no such mixture file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(str(path), f"cannot read the mixture file: {exc}") from None
    return parse_mixture(text, source=str(path), base=path.parent)


@dataclass(frozen=True)
class ComponentCheck:
    name: str  # DATABASE_ID/TASK
    database: str
    database_hash: str
    task: str
    train: bool
    seeds_per_split: dict[str, int]  # as `dlkit info` names it
    weight: int  # 0 when held out of training
    # False: a task of a listed database the file does not name (held out, as the Sampler
    # holds it: evaluable, never trained on)
    named: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "database": self.database,
                "database_hash": self.database_hash, "task": self.task, "train": self.train,
                "named": self.named, "seeds_per_split": dict(self.seeds_per_split), "weight": self.weight}


@dataclass(frozen=True)
class MixtureCheck:
    source: str
    weighting: Weighting
    split_seed: int
    embedder: str
    components: tuple[ComponentCheck, ...]

    @property
    def training(self) -> tuple[ComponentCheck, ...]:
        return tuple(c for c in self.components if c.train)

    @property
    def block_size(self) -> int:
        return sum(c.weight for c in self.training)

    @property
    def mixture_hash(self) -> str:
        return mixture_hash([c.name for c in self.training], [c.weight for c in self.training]
                            ).hex()

    def to_json(self) -> dict[str, Any]:
        return {"mixture": self.source, "weights": self.weighting.value,
                "split_seed": self.split_seed, "embedder": self.embedder,
                "mixture_hash": self.mixture_hash, "block_size": self.block_size,
                "components": [c.to_json() for c in self.components]}


def _seeds_per_split(db: SamplerDatabase, split_seed: int) -> dict[str, dict[str, int]]:
    """Seeds per split of every task of ``db``: one run manifest, one hash split per task."""
    from dlkit.sampler.run_manifest import make_run_manifest

    manifest = make_run_manifest(db, seed=0, global_batch_size=1, split_seed=split_seed)
    return {task.name: {split: manifest.datasets[f"{db.database_id}/{task.name}/{split}"]
                        .cardinality for split in SPLITS} for task in db.tasks}


def check_mixture(spec: MixtureSpec, keep: dict[Path, Any] | None = None) -> MixtureCheck:
    """Open each database of ``spec`` in turn: its tasks exist, one embedding model made them
    all, no component is named twice, every training component has train seeds; then the
    weights. Raises :class:`MixtureError` naming the file and the problem.

    Each database is closed once checked; with ``keep``, it is kept open there instead (by
    path), for a Sampler of the mixture to use (on an error, every one is closed).
    """
    try:
        return _check_mixture(spec, keep)
    except BaseException:
        for db in (keep or {}).values():
            db.close()
        if keep is not None:
            keep.clear()
        raise


def _check_mixture(spec: MixtureSpec, keep: dict[Path, Any] | None) -> MixtureCheck:
    from dlkit.db import open_database

    by_path: dict[Path, list[ComponentSpec]] = {}
    for component in spec.components:
        by_path.setdefault(component.database, []).append(component)
    checked: dict[tuple[Path, str], ComponentCheck] = {}
    unnamed: list[ComponentCheck] = []
    mixable = MixableCheck()
    embedder = ""
    for path, specs in by_path.items():
        try:
            db = open_database(path)
        except DlkitError as exc:
            raise _fail(spec.source, f"database {str(path)!r}: {exc}") from None
        if keep is not None:
            keep[path] = db
        with contextlib.nullcontext() if keep is not None else db:
            problem = mixable.add(db, repr(str(path)))
            if problem is not None:
                raise _fail(spec.source, problem)
            embedder = db.metadata.embeddings.embedder
            names = [t.name for t in db.tasks]
            seeds_of: dict[str, dict[str, int]] | None = None  # split once, when first needed
            for component in specs:
                if component.task not in names:
                    raise _fail(spec.source, unknown_name("task", component.task, names,
                                                          repr(str(path))))
                if (path, component.task) in checked:
                    raise _fail(spec.source, f"component {db.database_id}/{component.task} "
                                             "is named twice")
                if seeds_of is None:
                    seeds_of = _seeds_per_split(db, spec.split_seed)
                seeds = seeds_of[component.task]
                if component.train and seeds["train"] == 0:
                    raise _fail(spec.source, f"{db.database_id}/{component.task} has no train "
                                             "seeds: hold it out (train = false) or drop it")
                checked[path, component.task] = ComponentCheck(
                    f"{db.database_id}/{component.task}", str(path), db.database_hash.hex(),
                    component.task, component.train, seeds, component.weight or 0)
            named = {component.task for component in specs}
            for task in (t for t in names if t not in named):
                if seeds_of is None:
                    seeds_of = _seeds_per_split(db, spec.split_seed)
                unnamed.append(ComponentCheck(
                    f"{db.database_id}/{task}", str(path), db.database_hash.hex(), task, False,
                    seeds_of[task], 0, named=False))
    found = tuple(checked[c.database, c.task] for c in spec.components) + tuple(unnamed)
    training = [c for c in found if c.train]
    if not training:
        raise _fail(spec.source, "no component is trained on (every one has train = false)")
    weights = _weights(spec.weighting, training, spec.total_weight)
    weight_of = dict(zip([c.name for c in training], weights, strict=True))
    components = tuple(
        dataclasses.replace(c, weight=weight_of.get(c.name, 0)) for c in found)
    return MixtureCheck(spec.source, spec.weighting, spec.split_seed, embedder, components)


def _weights(weighting: Weighting, training: list[ComponentCheck], total: int
             ) -> tuple[int, ...]:
    if weighting is Weighting.GIVEN:
        weights = tuple(c.weight for c in training)
    elif weighting is Weighting.TASKS:
        weights = (1,) * len(training)
    else:
        weights = weights_from_counts([c.seeds_per_split["train"] for c in training], total)
    if sum(weights) > MAX_BLOCK:
        raise InvalidArgumentError(f"the weights sum to {sum(weights)}; at most {MAX_BLOCK}")
    return weights

