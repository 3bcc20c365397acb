"""``dlkit.Sampler``: relational batches for one rank of a distributed training job.

Construction opens the database, hash-splits every task's seeds, writes the run manifest in
memory and prepares two independent bounded channels (train and val, design §2e). Producer
threads start on the first pull of their channel. Every batch is a pure function of the
configuration and its step number, so it is the same whatever ``num_threads`` and
``num_prefetch`` are, and ``state_dict`` / ``load_state_dict`` resume exactly.
"""

from __future__ import annotations

import copy
import math
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlkit.errors import CheckpointError, InvalidArgumentError, SamplerShutdown
from dlkit.nextbatch import Cursor, RunManifest, Stage
from dlkit.prefetch import IteratorConfig, MultiIteratorPrefetcher, PrefetchConfig
from dlkit.sampler.batch import BatchBuilder, BatchConfig, BuiltBatch
from dlkit.sampler.evaluation import EvalPass, EvalTask
from dlkit.sampler.labels import LabelInfo
from dlkit.sampler.pipeline import BatchChannel
from dlkit.sampler.schedule import SplitStream, TrainSchedule, ValSchedule, open_streams
from dlkit.sampler.splits import (
    DEFAULT_SAMPLING_MODE,
    SplitRatios,
    TaskSplits,
    build_run_manifest,
    check_seed,
    compute_splits,
    dataset_key,
    split_index,
    train_sampling_mode,
)

STATE_FORMAT = "dlkit-sampler-state-v1"
# Channels of pulled batches: train (shuffled, endless), val and test (in order, round and round).
CHANNELS = ("train", "val", "test")


def _positive(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidArgumentError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _from_env(value: int | None, variable: str, default: int, name: str) -> int:
    if value is not None:
        return _positive(value, name, 0)
    text = os.environ.get(variable)
    if text is None or text == "":
        return default
    try:
        return _positive(int(text), f"{name} (from ${variable})", 0)
    except ValueError:
        raise InvalidArgumentError(f"${variable} must be an integer, got {text!r}") from None


@dataclass(frozen=True)
class SamplerConfig:
    """Everything that decides the batches (and the prefetch knobs that do not)."""

    rank: int
    world_size: int
    split_ratios: SplitRatios
    split_seed: int
    seed: int
    num_prefetch: int
    batch_size: int
    sequence_length: int
    max_rows: int
    bfs_child_width: int
    task_weights: tuple[float, ...] | None
    num_threads: int
    sampling_mode: str = DEFAULT_SAMPLING_MODE
    huge_pages: bool | None = None
    local_rank: int = 0
    local_world_size: int = 1

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise InvalidArgumentError(f"world_size must be >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise InvalidArgumentError(f"rank {self.rank} is not in [0, world_size "
                                       f"{self.world_size})")
        if not 1 <= self.local_world_size <= self.world_size:
            raise InvalidArgumentError(f"local_world_size {self.local_world_size} is not in "
                                       f"[1, world_size {self.world_size}]")
        if not 0 <= self.local_rank < self.local_world_size:
            raise InvalidArgumentError(f"local_rank {self.local_rank} is not in [0, "
                                       f"local_world_size {self.local_world_size})")
        train_sampling_mode(self.sampling_mode)

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.world_size

    @property
    def batch_config(self) -> BatchConfig:
        return BatchConfig(self.sequence_length, self.max_rows, self.bfs_child_width,
                           self.huge_pages)


def open_db(db_path: Any) -> tuple[Any, bool]:
    """An open database and whether we opened it (``db_path`` may be an open database)."""
    if hasattr(db_path, "graph") and hasattr(db_path, "tables"):
        return db_path, False
    from dlkit.db import open_database  # the reader lives in a layer beside ours

    return open_database(Path(db_path)), True


def task_weights_for(builder: BatchBuilder, weights: Any) -> tuple[float, ...]:
    """One non-negative finite weight per task (uniform by default)."""
    names = [t.name for t in builder.tasks]
    if weights is None:
        return tuple(1.0 for _ in names)
    if isinstance(weights, Mapping):
        unknown = sorted(set(weights) - set(names))
        if unknown:
            raise InvalidArgumentError(f"task_weights name unknown task(s) {unknown} "
                                       f"(tasks: {', '.join(names)})")
        values = [weights.get(name, 0.0) for name in names]
    else:
        values = list(weights)
        if len(values) != len(names):
            raise InvalidArgumentError(f"task_weights has {len(values)} values for "
                                       f"{len(names)} tasks ({', '.join(names)})")
    out = []
    for name, v in zip(names, values):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or v < 0:
            raise InvalidArgumentError(f"task weight of {name!r} must be a finite number >= 0, "
                                       f"got {v!r}")
        out.append(float(v))
    if not any(out):
        raise InvalidArgumentError("task_weights are all zero: no task could be sampled")
    return tuple(out)


class Sampler:
    """Relational batches (design §3a/§3b) for rank ``rank`` of ``world_size``.

    ``batch_size`` is this rank's micro-batch; the global batch is ``batch_size *
    world_size`` and each rank takes its contiguous slice. ``rank`` and ``world_size``
    default to ``$RANK`` / ``$WORLD_SIZE`` (as torchrun sets them), else 0 and 1;
    ``local_rank`` (read-only) and ``local_world_size`` (keyword) to ``$LOCAL_RANK`` /
    ``$LOCAL_WORLD_SIZE``, else 0 and 1 (the ranks on this machine: pick the device by
    ``local_rank``; jax.distributed sets neither, so pass ``local_world_size``).
    ``num_prefetch`` bounds the batches built ahead per channel (0: build on demand);
    ``num_threads`` producer threads build consecutive steps. ``max_rows`` (keyword) is ``R``,
    the row budget of a sequence and the size of ``fk_adj``. ``sampling_mode`` (keyword) is
    the train order: ``"v3"`` (default; NextBatch_v3, a keyed shuffle of each epoch) or
    ``"v2"`` (NextBatch_v2's block-affine order, for runs that started with it).
    ``huge_pages`` (keyword) copies the graph and the columns into huge-page memory, which
    builds batches faster for their size in RAM per process: True, False, or None
    (default) = when the kernel offers transparent huge pages and the copies take at most a
    quarter of the physical memory (``dlkit.sampler.hugepages``). Several local ranks share
    one copy per machine (``dlkit.sampler.shared``; automatically only where shared memory
    gets huge pages too, else they share the memory map's page cache);
    ``sampler.builder.memory_path`` says which path this rank took.
    """

    def __init__(self, db_path: Any, rank: int | None = None, world_size: int | None = None,
                 split_ratios: SplitRatios | Sequence[float] | str = (0.8, 0.1, 0.1),
                 split_seed: int = 0, seed: int = 0, num_prefetch: int = 3,
                 batch_size: int = 32, sequence_length: int = 1024, bfs_child_width: int = 16,
                 task_weights: Sequence[float] | Mapping[str, float] | None = None,
                 num_threads: int = 1, *, max_rows: int = 256,
                 sampling_mode: str = DEFAULT_SAMPLING_MODE, huge_pages: bool | None = None,
                 local_rank: int | None = None, local_world_size: int | None = None):
        self._db, self._owns_db = open_db(db_path)
        try:
            self._setup(rank, world_size, split_ratios, split_seed, seed, num_prefetch,
                        batch_size, sequence_length, bfs_child_width, task_weights,
                        num_threads, max_rows, sampling_mode, huge_pages, local_rank,
                        local_world_size)
        except BaseException:
            if self._owns_db:
                self._db.close()
            raise

    def _setup(self, rank: Any, world_size: Any, split_ratios: Any, split_seed: Any, seed: Any,
               num_prefetch: Any, batch_size: Any, sequence_length: Any, bfs_child_width: Any,
               task_weights: Any, num_threads: Any, max_rows: Any,
               sampling_mode: Any, huge_pages: Any, local_rank: Any,
               local_world_size: Any) -> None:
        batch_config = BatchConfig(sequence_length, max_rows, bfs_child_width, huge_pages)
        local_world_size = _from_env(local_world_size, "LOCAL_WORLD_SIZE", 1, "local_world_size")
        builder = BatchBuilder(self._db, batch_config, check_seed(seed, "seed"),
                               local_copies=local_world_size)
        self.config = SamplerConfig(
            rank=_from_env(rank, "RANK", 0, "rank"),
            world_size=_from_env(world_size, "WORLD_SIZE", 1, "world_size"),
            split_ratios=SplitRatios.parse(split_ratios),
            split_seed=check_seed(split_seed, "split_seed"),
            seed=int(seed),
            num_prefetch=_positive(num_prefetch, "num_prefetch", 0),
            batch_size=_positive(batch_size, "batch_size"),
            sequence_length=sequence_length,
            max_rows=max_rows,
            bfs_child_width=bfs_child_width,
            task_weights=task_weights_for(builder, task_weights),
            num_threads=_positive(num_threads, "num_threads"),
            sampling_mode=sampling_mode,
            huge_pages=builder.huge_pages,
            local_rank=_from_env(local_rank, "LOCAL_RANK", 0, "local_rank"),
            local_world_size=local_world_size,
        )
        cfg = self.config
        self.builder = builder
        self.splits: tuple[TaskSplits, ...] = compute_splits(builder.tasks, cfg.split_seed,
                                                             cfg.split_ratios)
        self.manifest: RunManifest = build_run_manifest(
            self._db.database_id, self._db.database_hash, self.splits, seed=cfg.seed,
            global_batch_size=cfg.global_batch_size, split_seed=cfg.split_seed,
            ratios=cfg.split_ratios, sampling_mode=cfg.sampling_mode)
        weights = dict(zip((t.name for t in builder.tasks), cfg.task_weights))
        train = open_streams(self.manifest, self._datasets("train", weights), cfg.world_size,
                             cfg.rank, Stage.TRAIN)
        self.train_streams: tuple[SplitStream, ...] = tuple(train)
        self._train_weights = [weights[s.task.name] for s in train]
        self._eval_streams: dict[str, tuple[SplitStream, ...]] = {}
        self._channels = {"train": BatchChannel("train", builder, self._train_schedule,
                                                self._initial_state(train), cfg.num_prefetch,
                                                cfg.num_threads)}
        self._open_eval_channel("val")  # test opens on first use: most runs never pull it
        self._lookup: TrainSchedule | None = None  # train_batch's schedule
        self._lookup_lock = threading.Lock()
        self._shut = False

    def _open_eval_channel(self, split: str) -> BatchChannel:
        """The val or test channel (skipped datasets warn now, as train's do at start)."""
        if split not in self._channels:
            cfg = self.config
            streams = self._eval_streams[split] = tuple(open_streams(
                self.manifest, self._datasets(split, None), cfg.world_size, cfg.rank,
                Stage.EVAL))
            self._channels[split] = BatchChannel(
                split, self.builder, self._eval_schedule(split),
                {**self._initial_state(streams), "current": streams[0].key if streams else None},
                cfg.num_prefetch, cfg.num_threads)
        return self._channels[split]

    @property
    def val_streams(self) -> tuple[SplitStream, ...]:
        return self._eval_streams["val"]

    @property
    def tasks(self) -> tuple[str, ...]:
        """Task names in task-index order (``task_idx`` of a batch indexes this)."""
        return tuple(view.name for view in self.builder.tasks)

    @property
    def local_rank(self) -> int:
        return self.config.local_rank

    def _datasets(self, split: str, weights: dict[str, float] | None) -> list[Any]:
        out = []
        for view, task_splits in zip(self.builder.tasks, self.splits):
            if weights is not None and weights[view.name] == 0:
                continue  # weight 0: the user excluded the task from training
            out.append((dataset_key(self._db.database_id, view.name, split), view,
                        task_splits.of(split)))
        return out

    @staticmethod
    def _initial_state(streams: Sequence[SplitStream]) -> dict[str, Any]:
        return {"step": 0, "cursors": {s.key: Cursor() for s in streams}}

    def _train_schedule(self, state: dict[str, Any] | None) -> TrainSchedule:
        if not self.train_streams:
            raise InvalidArgumentError(
                f"no task has a full global batch ({self.config.global_batch_size}) of train "
                "seeds on this rank: lower batch_size or use a larger database")
        if state is None:
            return TrainSchedule(self.train_streams, self._train_weights, self.config.seed)
        return TrainSchedule(self.train_streams, self._train_weights, self.config.seed,
                             state["step"], _cursors(state))

    def _eval_schedule(self, split: str) -> Any:
        def make(state: dict[str, Any] | None) -> ValSchedule:
            streams = self._eval_streams[split]
            if not streams:
                raise InvalidArgumentError(f"no task has {split} seeds on this rank")
            if state is None:
                return ValSchedule(streams)
            return ValSchedule(streams, state["step"], state["current"], _cursors(state))
        return make

    # --- batches ----------------------------------------------------------------------------

    def next_train_batch(self) -> dict[str, np.ndarray]:
        """The next train batch (blocks until it is ready); ``SamplerShutdown`` after shutdown."""
        return self._channel("train").next_built().arrays

    def next_val_batch(self) -> dict[str, np.ndarray]:
        """The next val batch, from a channel independent of the train channel (val seeds in
        order, round and round; a rank-local stream: see ``iter_eval`` for a whole pass)."""
        return self._channel("val").next_built().arrays

    def next_test_batch(self) -> dict[str, np.ndarray]:
        """The next test batch, from its own channel (like ``next_val_batch``)."""
        return self._channel("test").next_built().arrays

    def next_built_batch(self, split: str = "train") -> BuiltBatch:
        """The next batch of ``split`` ("train", "val" or "test") with what produced it (task,
        epoch, seeds, visited rows): for inspection and tests. It consumes from the same
        channel."""
        if split not in CHANNELS:
            raise InvalidArgumentError(f"split must be train, val or test, got {split!r}")
        return self._channel(split).next_built()

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        """Endless train batches (``next_train_batch`` each time): stop after the steps you
        want, e.g. ``itertools.islice(sampler, steps)``."""
        while True:
            yield self.next_train_batch()

    def train_batch(self, step: int) -> dict[str, np.ndarray]:
        """The train batch of step ``step`` (0-based), built on demand: the batch the train
        channel gives at that step, whatever was pulled before, for map-style loaders and
        inspection. Finding a step walks the schedule from the last step asked for (from 0
        when going back), so ascending steps cost O(1) each."""
        self._check_open()
        step = _positive(step, "step", 0)
        if not self.train_streams:
            self._train_schedule(None)  # raises the explanation
        with self._lookup_lock:
            schedule = self._lookup
            if schedule is None or step < schedule.next_step:
                schedule = self._lookup = self._train_schedule(None)
            job = schedule.job(step)
            schedule.forget_before(step)
        built = self.builder.build(job.stream.task, job.stream.seed_indices(job.cursor),
                                   job.cursor.epoch)
        return built.arrays

    def _channel(self, name: str) -> BatchChannel:
        if self._shut:
            raise SamplerShutdown(f"the sampler was shut down: no more {name} batches")
        if name == "train":
            if not self.train_streams:
                self._train_schedule(None)  # raises the explanation
            return self._channels[name]
        channel = self._open_eval_channel(name)
        if not self._eval_streams[name]:
            self._eval_schedule(name)(None)
        return channel

    @property
    def steps_per_epoch(self) -> int:
        """Full global train batches in one pass over every trained task's train seeds (train
        drops a partial last batch); with one task, the steps of one epoch."""
        gbs = self.config.global_batch_size
        return sum(int(s.positions.shape[0]) // gbs for s in self.train_streams)

    # --- evaluation -----------------------------------------------------------------------------

    def _eval_pass(self, split: str, task: str | int | None) -> EvalPass:
        self._check_open()
        index = split_index(split)
        views = self.builder.tasks if task is None else (self.builder.task(task),)
        tasks = [EvalTask(view, self.splits[view.index].positions[index]) for view in views]
        cfg = self.config
        return EvalPass(self.builder, tasks, cfg.batch_size, cfg.world_size, cfg.rank)

    def eval_steps(self, split: str = "val", task: str | int | None = None) -> int:
        """How many batches ``iter_eval(split, task)`` yields (the same on every rank)."""
        return len(self._eval_pass(split, task))

    def iter_eval(self, split: str = "val",
                  task: str | int | None = None) -> Iterator[dict[str, np.ndarray]]:
        """One pass over every seed of ``split`` ("val", "test" or "train") of every task (or
        of ``task``): each seed exactly once across all ranks, in ``eval_steps`` batches of
        exactly ``batch_size`` sequences on every rank (a short tail is padded with copies of
        a real seed whose ``sequence_mask`` is 0), so per-batch collectives never wait for a
        rank and shapes never change. Independent of the pulled channels and their state;
        prefetched like them (``num_threads`` producers, ``num_prefetch`` ahead)."""
        eval_pass = self._eval_pass(split, task)  # bad arguments fail here, not at first use
        return self._run_eval(eval_pass, split)

    def _run_eval(self, eval_pass: EvalPass, split: str) -> Iterator[dict[str, np.ndarray]]:
        cfg = self.config
        if cfg.num_prefetch == 0 or len(eval_pass) == 0:
            for step in range(len(eval_pass)):
                yield eval_pass.build(step).arrays
            return
        prefetcher = MultiIteratorPrefetcher(
            IteratorConfig(produce=eval_pass.build, start=0, stop=len(eval_pass)),
            PrefetchConfig(num_workers=cfg.num_threads,
                           buffer_size=max(1, math.ceil(cfg.num_prefetch / cfg.num_threads))),
            name=f"dlkit-eval-{split}")
        try:
            for built in prefetcher:
                yield built.arrays
        finally:
            prefetcher.close()

    def label_info(self, task: str | int | None = None) -> LabelInfo:
        """What ``task``'s labels are (type, z-score statistics, category names); ``task`` may
        be left out when the database has one task."""
        self._check_open()
        if task is None:
            if len(self.builder.tasks) != 1:
                raise InvalidArgumentError(f"the database has {len(self.builder.tasks)} tasks "
                                           f"({', '.join(self.tasks)}): name one")
            view = self.builder.tasks[0]
        else:
            view = self.builder.task(task)
        return self.builder.label_info(view)

    # --- tables and metadata ------------------------------------------------------------------

    def column_embeddings(self) -> np.ndarray:
        """``[C, D]`` float16 column-name embeddings (a copy, to upload once)."""
        self._check_open()
        return np.array(self._db.column_embeddings(), dtype=np.float16)

    def categorical_embeddings(self) -> np.ndarray:
        """``[Vc, D]`` float16 category embeddings (a copy, to upload once)."""
        self._check_open()
        return np.array(self._db.categorical_embeddings(), dtype=np.float16)

    def database_metadata(self) -> dict[str, Any]:
        """The database's ``metadata.json`` content (a deep copy)."""
        self._check_open()
        return copy.deepcopy(dict(self._db.metadata))

    # --- checkpointing ------------------------------------------------------------------------

    def _fingerprint(self) -> dict[str, Any]:
        cfg = self.config
        return {"manifest_hash": self.manifest.manifest_hash.hex(),
                "global_batch_size": cfg.global_batch_size,
                "sequence_length": cfg.sequence_length, "max_rows": cfg.max_rows,
                "bfs_child_width": cfg.bfs_child_width,
                "task_weights": list(cfg.task_weights or ())}

    def state_dict(self) -> dict[str, Any]:
        """Where both channels stand after the last batch *consumed* (JSON-serialisable).

        Valid on any rank and world size with the same global batch size: the global order
        does not depend on the world size.
        """
        self._check_open()
        return {"format": STATE_FORMAT, "config": self._fingerprint(),
                **{name: channel.state() for name, channel in self._channels.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue exactly after the batches consumed when ``state`` was taken."""
        self._check_open()
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise CheckpointError(f"not a dlkit sampler state (expected format {STATE_FORMAT!r})")
        mine = self._fingerprint()
        theirs = state.get("config")
        if theirs != mine:
            diffs = [f"{k}: state has {theirs.get(k)!r}, sampler has {v!r}" for k, v in
                     mine.items() if not isinstance(theirs, Mapping) or theirs.get(k) != v]
            raise CheckpointError("the state was taken from a different configuration: "
                                  + "; ".join(diffs or ["config is malformed"]))
        restores = []
        for name in CHANNELS:
            part = state.get(name)
            if name == "test" and part is None:
                continue  # test was never pulled (or a state from before it): starts afresh
            _check_channel_state(part, name, with_current=name != "train")
            channel = self._channels["train"] if name == "train" else \
                self._open_eval_channel(name)
            streams = self.train_streams if name == "train" else self._eval_streams[name]
            if streams:
                channel.make_schedule(part)  # validates before any channel changes
                restores.append((channel, part))
        for channel, part in restores:
            channel.restore(part)

    # --- lifetime -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._shut:
            raise SamplerShutdown("the sampler was shut down")

    def shutdown(self) -> None:
        """Stop and join every producer thread, release the in-memory copies and close the
        database (idempotent)."""
        if getattr(self, "_shut", True):
            return
        self._shut = True
        try:
            for channel in self._channels.values():
                channel.close()
        finally:
            self.builder.release()
            if self._owns_db:
                self._db.close()

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        cfg = asdict(self.config)
        cfg["split_ratios"] = str(self.config.split_ratios)
        return f"Sampler({self._db.path!s}, " + ", ".join(f"{k}={v!r}" for k, v in
                                                         cfg.items()) + ")"


def _cursors(state: Mapping[str, Any]) -> dict[str, Cursor]:
    return {key: Cursor(int(v["epoch"]), int(v["global_index"]))
            for key, v in state["cursors"].items()}


def _check_channel_state(part: Any, name: str, with_current: bool) -> None:
    def bad(why: str) -> CheckpointError:
        return CheckpointError(f"sampler state {name!r}: {why}")

    if not isinstance(part, Mapping):
        raise bad("missing or not a mapping")
    step = part.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise bad(f"step must be an integer >= 0, got {step!r}")
    cursors = part.get("cursors")
    if not isinstance(cursors, Mapping):
        raise bad("cursors must be a mapping of dataset key to cursor")
    for key, value in cursors.items():
        if not isinstance(value, Mapping) or set(value) != {"epoch", "global_index"} or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value.values()):
            raise bad(f"cursor of {key!r} must be {{epoch, global_index}} integers >= 0")
    if with_current:
        current = part.get("current")
        if current is not None and not isinstance(current, str):
            raise bad(f"current must be a dataset key or null, got {current!r}")
