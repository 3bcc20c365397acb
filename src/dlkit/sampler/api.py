"""``dlkit.Sampler``: relational batches for one rank of a distributed training job.

Construction opens the database, hash-splits every task's seeds, writes the run manifest in
memory and prepares two independent bounded channels (train and val). Producer
threads start on the first pull of their channel. Every batch is a pure function of the
configuration and its step number, so it is the same whatever ``num_threads`` and
``num_prefetch`` are, and ``state_dict`` / ``load_state_dict`` resume exactly.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from dlkit.db.metadata_records import DatabaseMetadata
from dlkit.encoding import check_state_checksum, with_checksum
from dlkit.errors import CheckpointError, InvalidArgumentError, SamplerShutdown
from dlkit.nextbatch import RunManifest
from dlkit.nextbatch.mixture import MixtureOrder
from dlkit.nextbatch.tokens import TrainOrder
from dlkit.prefetch import IteratorConfig, MultiIteratorPrefetcher, PrefetchConfig
from dlkit.sampler import knobs
from dlkit.sampler.aggregates import column_embeddings
from dlkit.sampler.arguments import integer
from dlkit.sampler.batch import (
    BatchBuilder,
    BuiltBatch,
    ChildPolicy,
    ContextExamplePolicy,
    check_batch_memory,
)
from dlkit.sampler.channel import BatchChannel, build_job
from dlkit.sampler.config import SamplerConfig
from dlkit.sampler.database import DatabaseSource, SamplerDatabase, open_db
from dlkit.sampler.evaluation import EvalPass, EvalTask
from dlkit.sampler.labels import LabelInfo
from dlkit.sampler.mixture_run import (
    Component,
    DatabaseEntry,
    SharedTables,
    check_mixable,
    database_index,
    database_weights_for,
    plan_mixture,
)
from dlkit.sampler.run_plan import RunPlan, initial_state
from dlkit.sampler.schedule import MixtureSchedule, SplitStream, TrainSchedule, ValSchedule
from dlkit.sampler.sources import SamplerSources, label
from dlkit.sampler.splits import DEFAULT_TRAIN_ORDER, Split, SplitRatios, TaskSplits
from dlkit.sampler.state import INT64_MAX, ChannelState

STATE_FORMAT = "dlkit-sampler-state-v1"
# the entries of a state from before its checksum (still loaded)
_UNCHECKSUMMED_KEYS = frozenset({"format", "config", "train", "val", "test"})
# Channels of pulled batches: train (shuffled, endless), val and test (in order, round and round).
CHANNELS = tuple(Split)
# What a Sampler's repr shows of its configuration, in this order.
_REPR_FIELDS = ("rank", "world_size", "split_ratios", "split_seed", "seed", "num_prefetch",
                "batch_size", "sequence_length", "max_rows", "bfs_child_width", "task_weights",
                "num_threads", "sampling_mode", "huge_pages", "local_rank", "local_world_size",
                "bfs_child_policy")


def _live(sampler: weakref.ref[Sampler]) -> Sampler:
    """The sampler a channel belongs to; once it is dropped, the channel has nothing left to
    schedule."""
    live = sampler()
    if live is None:
        raise SamplerShutdown("the sampler was dropped: no more batches")
    return live


class Sampler:
    """Relational batches (docs/batch_format.md) for rank ``rank`` of ``world_size``.

    ``batch_size`` is this rank's micro-batch; the global batch is ``batch_size *
    world_size`` and each rank takes its contiguous slice. ``rank`` and ``world_size``
    default to ``$RANK`` / ``$WORLD_SIZE`` (as torchrun sets them), else 0 and 1;
    ``local_rank`` (read-only) and ``local_world_size`` (keyword) to ``$LOCAL_RANK`` /
    ``$LOCAL_WORLD_SIZE``, else 0 and 1 (the ranks on this machine: pick the device by
    ``local_rank``; jax.distributed sets neither, so pass ``local_world_size``).
    ``num_prefetch`` bounds the batches built ahead per channel (0: build on demand);
    ``num_threads`` producer threads build consecutive steps. ``max_rows`` (keyword) is ``R``,
    the row budget of a sequence and the size of ``fk_adj``. ``bfs_child_policy`` (keyword)
    says which children a row with more than ``bfs_child_width`` visible ones keeps: a
    ``ChildPolicy`` or its name, ``"uniform"`` (default), ``"recent"`` or ``"quota"``
    (docs/batch_format.md); it is part of the state's fingerprint when not the default.
    ``context_examples`` (keyword, default 0: off) fills a sequence whose walk stops short
    with the neighbourhoods of up to that many other seeds of its task observed no later
    than it, chosen by ``context_example_policy`` (``"recent"``, the default, ``"random"``
    or ``"parent"``: the seed row's siblings first); their cells have
    ``is_context_example = 1`` (docs/batch_format.md, "Context examples"). Both are part of
    the fingerprint when not the default.
    ``sampling_mode`` (keyword) is
    the train order, a ``dlkit.nextbatch.tokens.TrainOrder`` or its name: ``"v3"`` (default;
    NextBatch_v3, a keyed shuffle of each epoch) or ``"v2"`` (NextBatch_v2's block-affine
    order, for runs that started with it); ``config.sampling_mode`` is the parsed order.
    ``huge_pages`` (keyword) copies the graph and the columns into huge-page memory, which
    builds batches faster for their size in RAM per process: True, False, or None
    (default) = when the kernel offers transparent huge pages and the copies take at most a
    quarter of the physical memory (``dlkit.sampler.hugepages``). Several local ranks share
    one copy per machine (``dlkit.sampler.shared``; automatically only where shared memory
    gets huge pages too, else they share the memory map's page cache);
    ``sampler.builder.memory_path`` says which path this rank took.

    A list of databases is a mixture for pretraining (docs/mixture.md §4): every task of
    every database is a component, each train step serves one component (a stratified,
    keyed draw by weight: ``database_weights``, one per database, 0 holds a database out,
    default by train seeds), every batch carries ``database_idx``, and its ids index the
    mixture's shared tables. ``databases``, ``components``, ``builders`` and ``manifests``
    describe it; ``label_info``, ``iter_eval``, ``eval_steps`` and ``database_metadata``
    take a ``database`` (index or id). A ``dlkit-mixture.toml`` path is a mixture as the
    file declares it (its tasks, weights, held-out components and ``split_seed``).
    """

    def __init__(self, db_path: DatabaseSource | Sequence[DatabaseSource],
                 rank: int | None = None, world_size: int | None = None,
                 split_ratios: SplitRatios | Sequence[float] | str = knobs.SPLIT_RATIOS,
                 split_seed: int = knobs.SPLIT_SEED, seed: int = knobs.SEED,
                 num_prefetch: int = knobs.NUM_PREFETCH, batch_size: int = knobs.BATCH_SIZE,
                 sequence_length: int = knobs.SEQUENCE_LENGTH,
                 bfs_child_width: int = knobs.BFS_CHILD_WIDTH,
                 task_weights: Sequence[float] | Mapping[str, float] | None = None,
                 num_threads: int = knobs.NUM_THREADS, *, max_rows: int = knobs.MAX_ROWS,
                 sampling_mode: TrainOrder | str = DEFAULT_TRAIN_ORDER, huge_pages: bool | None = None,
                 local_rank: int | None = None, local_world_size: int | None = None,
                 bfs_child_policy: ChildPolicy | str = ChildPolicy.UNIFORM,
                 context_examples: int = knobs.CONTEXT_EXAMPLES,
                 context_example_policy: ContextExamplePolicy | str = ContextExamplePolicy.RECENT,
                 database_weights: Sequence[float] | None = None):
        sources = SamplerSources.parse(db_path, database_weights, task_weights)
        self.is_mixture = sources.is_mixture
        if sources.split_seed is not None:
            split_seed = sources.split_seed  # a mixture file's
        self._dbs: list[SamplerDatabase] = []
        self._owned: list[SamplerDatabase] = []
        self._shut = True  # until set up: shutdown() then only closes what was opened
        try:
            for source in sources.databases:
                db, owns = open_db(source)
                self._dbs.append(db)
                if owns or sources.owned:
                    self._owned.append(db)
            tasks = [] if self.is_mixture else [task.name for task in self._dbs[0].tasks]
            self._setup(SamplerConfig.create(
                tasks, rank=rank, world_size=world_size,
                local_rank=local_rank, local_world_size=local_world_size,
                task_weights=task_weights, num_prefetch=num_prefetch, num_threads=num_threads,
                split_ratios=split_ratios, split_seed=split_seed, seed=seed,
                batch_size=batch_size, sequence_length=sequence_length, max_rows=max_rows,
                bfs_child_width=bfs_child_width, sampling_mode=sampling_mode,
                huge_pages=huge_pages, bfs_child_policy=bfs_child_policy,
                context_examples=context_examples,
                context_example_policy=context_example_policy), database_weights,
                sources.named_weights)
        except BaseException:
            self._release()
            raise

    def _setup(self, cfg: SamplerConfig, database_weights: Sequence[float] | None,
               named_weights: Sequence[tuple[str, int]] | None = None) -> None:
        dbs = self._dbs
        labels = [label(db) for db in dbs]
        weights_of_databases = None
        if self.is_mixture:
            check_mixable(dbs, labels)
            weights_of_databases = database_weights_for(labels, database_weights)
        plans = tuple(RunPlan(db, cfg.run) for db in dbs)  # a bad split fails before any copy
        self._tables = SharedTables.of(dbs) if self.is_mixture else None
        members = self._tables.members() if self._tables is not None else [None] * len(dbs)
        self.builders: tuple[BatchBuilder, ...] = tuple(
            BatchBuilder(db, cfg.batch_config, cfg.seed, local_copies=cfg.local_world_size,
                         member=member) for db, member in zip(dbs, members))
        # the settings as built: huge_pages resolved (None, automatic, becomes True or False)
        batch = replace(cfg.batch_config, huge_pages=self.builders[0].huge_pages)
        self.config = replace(cfg, settings=replace(cfg.settings, batch=batch))
        self._plans = plans
        self.manifests: tuple[RunManifest, ...] = tuple(plan.manifest for plan in plans)
        self.databases: tuple[DatabaseEntry, ...] = tuple(
            DatabaseEntry(db.database_id, db.database_hash.hex()) for db in dbs)
        self.components: tuple[Component, ...]
        self.train_streams: tuple[SplitStream, ...]
        self.mixture_order: MixtureOrder | None = None
        if self.is_mixture:
            trainable = [{s.task.name: s for s in plan.streams(Split.TRAIN, builder.tasks,
                                                               database=d)}
                         for d, (plan, builder) in enumerate(zip(plans, self.builders))]
            mixture = plan_mixture(self.databases, [b.tasks for b in self.builders], trainable,
                                   cfg.seed, cfg.global_batch_size, weights_of_databases,
                                   named_weights)
            self.components, self.train_streams = mixture.components, mixture.train_streams
            self.mixture_order = mixture.order
        else:
            task_weights = dict(zip(self.tasks, self.config.task_weights or ()))
            self.train_streams = plans[0].streams(Split.TRAIN, self.builders[0].tasks,
                                                  task_weights)
            trained = {s.task.name for s in self.train_streams}
            self.components = tuple(
                Component(0, self.databases[0].name, view.name, view.index,
                          int(view.name in trained)) for view in self.builders[0].tasks)
            self._train_weights = [task_weights[s.task.name] for s in self.train_streams]
        for stream in self.train_streams:  # a trained task's seed row must fit in S
            self.builders[stream.database].task(stream.task.index)
        # the batches built, queued and in use at once must fit in memory
        check_batch_memory(cfg.batch_size, cfg.batch_config.sequence_length,
                           cfg.batch_config.max_rows, cfg.num_prefetch + cfg.num_threads + 1)
        self._eval_streams: dict[Split, tuple[SplitStream, ...]] = {}
        # The channels reach the sampler weakly (no cycle): a sampler dropped without
        # shutdown() is freed at once, and its channels and prefetch engines with it.
        sampler = weakref.ref(self)
        self._channels = {Split.TRAIN: BatchChannel(
            Split.TRAIN.value, self.builders,
            lambda state: _live(sampler)._train_schedule(state),
            initial_state(Split.TRAIN, self.train_streams),
            self.config.num_prefetch, self.config.num_threads)}
        self._open_eval_channel(Split.VAL)  # test opens on first use: most runs never pull it
        self._lookup: TrainSchedule | MixtureSchedule | None = None  # train_batch's schedule
        self._lookup_lock = threading.Lock()
        self._shut = False

    def _open_eval_channel(self, split: Split) -> BatchChannel:
        """The val or test channel (skipped datasets warn now, as train's do at start)."""
        if split not in self._channels:
            streams = self._eval_streams[split] = tuple(
                stream for d, (plan, builder) in enumerate(zip(self._plans, self.builders))
                for stream in plan.streams(split, builder.fitting_tasks, database=d))
            sampler = weakref.ref(self)
            self._channels[split] = BatchChannel(
                split.value, self.builders,
                lambda state: _live(sampler)._eval_schedule(split, state),
                initial_state(split, streams),
                self.config.num_prefetch, self.config.num_threads)
        return self._channels[split]

    @property
    def val_streams(self) -> tuple[SplitStream, ...]:
        return self._eval_streams[Split.VAL]

    @property
    def tasks(self) -> tuple[str, ...]:
        """Task names in task-index order (``task_idx`` of a batch indexes this). Of a
        mixture, every component's ``DATABASE/TASK`` in list order: a batch's
        ``task_idx`` counts within its database, so find its component in ``components``
        by ``(database_idx, task_idx)``."""
        if self.is_mixture:
            return tuple(c.name for c in self.components)
        return tuple(view.name for view in self.builders[0].tasks)

    @property
    def builder(self) -> BatchBuilder:
        """The batch builder of the database (a mixture has one per database: ``builders``)."""
        if self.is_mixture:
            raise InvalidArgumentError("a mixture has one builder per database: use builders")
        return self.builders[0]

    @property
    def manifest(self) -> RunManifest:
        """The run manifest of the database (a mixture has one per database: ``manifests``)."""
        if self.is_mixture:
            raise InvalidArgumentError("a mixture has one run manifest per database: use "
                                       "manifests")
        return self.manifests[0]

    @property
    def splits(self) -> tuple[TaskSplits, ...]:
        """The hash splits of the database's tasks, in task order (of a mixture: ``plans``)."""
        if self.is_mixture:
            raise InvalidArgumentError("a mixture has splits per database: use "
                                       "database_splits(database)")
        return self._plans[0].splits

    def database_splits(self, database: int | str | None = None) -> tuple[TaskSplits, ...]:
        """The hash splits of ``database``'s tasks (an index or name; may be left out with
        one database)."""
        return self._plans[self._database(database)].splits

    def _database(self, database: int | str | None) -> int:
        """The position of ``database`` (an index or an id) in the list."""
        return database_index([entry.name for entry in self.databases], database)

    @property
    def local_rank(self) -> int:
        return self.config.local_rank

    def _train_schedule(self, state: ChannelState | None = None
                        ) -> TrainSchedule | MixtureSchedule:
        if not self.train_streams:
            raise InvalidArgumentError(
                f"no task has a full global batch ({self.config.global_batch_size}) of train "
                "seeds on this rank: lower batch_size or use a larger database")
        state = state or initial_state(Split.TRAIN, self.train_streams)
        if self.mixture_order is not None:
            return MixtureSchedule(self.train_streams, self.mixture_order, state.step,
                                   state.cursors)
        return self._plans[0].train_schedule(self.train_streams, self._train_weights, state)

    def _eval_schedule(self, split: Split, state: ChannelState | None = None) -> ValSchedule:
        streams = self._eval_streams[split]
        if not streams:
            raise InvalidArgumentError(f"no task has {split} seeds on this rank")
        return RunPlan.eval_schedule(streams, state or initial_state(split, streams))

    # --- batches ----------------------------------------------------------------------------

    def next_train_batch(self) -> dict[str, np.ndarray]:
        """The next train batch (blocks until it is ready); ``SamplerShutdown`` after shutdown."""
        return self._channel(Split.TRAIN).next_built().arrays

    def next_val_batch(self) -> dict[str, np.ndarray]:
        """The next val batch, from a channel independent of the train channel (val seeds in
        order, round and round; a rank-local stream: see ``iter_eval`` for a whole pass)."""
        return self._channel(Split.VAL).next_built().arrays

    def next_test_batch(self) -> dict[str, np.ndarray]:
        """The next test batch, from its own channel (like ``next_val_batch``)."""
        return self._channel(Split.TEST).next_built().arrays

    def next_built_batch(self, split: Split | str = Split.TRAIN) -> BuiltBatch:
        """The next batch of ``split`` ("train", "val" or "test") with what produced it (task,
        epoch, seeds, visited rows): for inspection and tests. It consumes from the same
        channel."""
        return self._channel(Split.parse(split)).next_built()

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        """Endless train batches (``next_train_batch`` each time): stop after the steps you
        want, e.g. ``itertools.islice(sampler, steps)``."""
        while True:
            yield self.next_train_batch()

    def train_batch(self, step: int) -> dict[str, np.ndarray]:
        """The train batch of step ``step`` (0-based), built on demand: the batch the train
        channel gives at that step, whatever was pulled before, for map-style loaders and
        inspection.

        Finding a step is O(1) with one trained task or a mixture (a closed form of the
        step). With several weighted tasks, each step's task is its own keyed draw, so a
        task's position at step ``k`` is how often it was drawn before ``k``: no formula
        gives that sum, so the draws are counted (about 20 ns a step, in constant memory)
        from the nearest step already made (the last one asked for or walked, or one of the counts
        kept along the way, at most 2^16 steps apart at first): ascending steps cost their
        distance, a step back costs at most the spacing of the kept counts. A step more than
        2^30 draws from every step found is refused (``InvalidArgumentError``): ask for
        nearer steps first."""
        self._check_open()
        step = integer(step, "step", 0, INT64_MAX, expected="an integer from 0 to 2^63-1")
        with self._lookup_lock:
            if self._lookup is None:
                self._lookup = self._train_schedule()
            job = self._lookup.job(step)
            self._lookup.forget_before(step)
        return build_job(self.builders, job).arrays

    def _channel(self, name: Split) -> BatchChannel:
        if self._shut:
            raise SamplerShutdown(f"the sampler was shut down: no more {name} batches")
        if name is Split.TRAIN:
            if not self.train_streams:
                self._train_schedule()  # raises the explanation
            return self._channels[name]
        channel = self._open_eval_channel(name)
        if not self._eval_streams[name]:
            self._eval_schedule(name)  # raises the explanation
        return channel

    @property
    def steps_per_epoch(self) -> int:
        """Full global train batches in one pass over every trained task's train seeds (train
        drops a partial last batch); with one task, the steps of one epoch."""
        gbs = self.config.global_batch_size
        return sum(int(s.positions.shape[0]) // gbs for s in self.train_streams)

    # --- evaluation -----------------------------------------------------------------------------

    def _eval_pass(self, split: Split | str, task: str | int | None,
                   database: int | str | None) -> EvalPass:
        self._check_open()
        index = Split.parse(split).code
        if database is None and self.is_mixture:
            if task is not None:
                raise InvalidArgumentError("name the task's database (database=index or id): "
                                           "tasks are per database in a mixture")
            databases = range(len(self.builders))
        else:
            first = self._database(database)
            databases = range(first, first + 1)
        tasks = []
        for d in databases:
            builder = self.builders[d]
            views = builder.fitting_tasks if task is None else (builder.task(task),)
            tasks += [EvalTask(view, self._plans[d].splits[view.index].positions[index], d)
                      for view in views]
        cfg = self.config
        return EvalPass(self.builders, tasks, cfg.batch_size, cfg.world)

    def eval_steps(self, split: Split | str = Split.VAL, task: str | int | None = None,
                   database: int | str | None = None) -> int:
        """How many batches ``iter_eval(split, task, database)`` yields (the same on every
        rank)."""
        return len(self._eval_pass(split, task, database))

    def iter_eval(self, split: Split | str = Split.VAL, task: str | int | None = None,
                  database: int | str | None = None) -> Iterator[dict[str, np.ndarray]]:
        """One pass over every seed of ``split`` ("val", "test" or "train") of every task (or
        of ``task``) of every database (or of ``database``, an index or id; a mixture's
        task needs its database), database after database, task after task: each seed
        exactly once across all ranks, in ``eval_steps`` batches of
        exactly ``batch_size`` sequences on every rank (a short tail is padded with copies of
        a real seed whose ``sequence_mask`` is 0), so per-batch collectives never wait for a
        rank and shapes never change. Independent of the pulled channels and their state;
        prefetched like them (``num_threads`` producers, ``num_prefetch`` ahead)."""
        eval_pass = self._eval_pass(split, task, database)  # bad arguments fail here
        return self._run_eval(eval_pass, Split.parse(split))

    def _run_eval(self, eval_pass: EvalPass, split: Split) -> Iterator[dict[str, np.ndarray]]:
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

    def label_info(self, task: str | int | None = None,
                   database: int | str | None = None) -> LabelInfo:
        """What ``task``'s labels are (type, z-score statistics, category names); ``task`` may
        be left out when the database has one task, ``database`` when there is one."""
        self._check_open()
        builder = self.builders[self._database(database)]
        if task is None:
            if len(builder.tasks) != 1:
                names = ", ".join(view.name for view in builder.tasks)
                raise InvalidArgumentError(f"the database has {len(builder.tasks)} tasks "
                                           f"({names}): name one")
            view = builder.tasks[0]
        else:
            view = builder.task(task)
        return builder.label_info(view)

    # --- tables and metadata ------------------------------------------------------------------

    def column_embeddings(self) -> np.ndarray:
        """``[C, D]`` float16 column-name embeddings (a copy, to upload once); with as-of
        aggregate cells, their embeddings follow the columns' (rows ``num_columns ..``). A
        mixture's are its databases' one after another (docs/mixture.md §4)."""
        self._check_open()
        if self._tables is not None:
            return self._tables.column_embeddings()
        return column_embeddings(self._dbs[0])

    def categorical_embeddings(self) -> np.ndarray:
        """``[Vc, D]`` float16 category embeddings (a copy, to upload once); a mixture's
        are its databases' one after another."""
        self._check_open()
        if self._tables is not None:
            return self._tables.categorical_embeddings()
        return np.array(self._dbs[0].categorical_embeddings(), dtype=np.float16)

    def database_metadata(self, database: int | str | None = None) -> DatabaseMetadata:
        """The database's ``metadata.json`` as its frozen records
        (``.embeddings.text_dim``, ``.tables``, ...; ``.to_json()`` gives the JSON object);
        ``database`` (an index or id) may be left out with one database."""
        self._check_open()
        return self._dbs[self._database(database)].metadata

    # --- checkpointing ------------------------------------------------------------------------

    def _fingerprint(self) -> dict[str, Any]:
        cfg = self.config
        if self.is_mixture:
            assert self.mixture_order is not None
            source: dict[str, Any] = {
                "databases": [list(entry) for entry in self.databases],
                "manifest_hashes": [m.manifest_hash.hex() for m in self.manifests],
                "mixture_hash": self.mixture_order.mixture_hash.hex()}
        else:
            source = {"manifest_hash": self.manifests[0].manifest_hash.hex()}
        return {**source,
                "global_batch_size": cfg.global_batch_size,
                "sequence_length": cfg.sequence_length, "max_rows": cfg.max_rows,
                "bfs_child_width": cfg.bfs_child_width,
                "task_weights": list(cfg.task_weights or ()),
                # only when not the default: states of earlier versions stay valid
                **({} if cfg.bfs_child_policy is ChildPolicy.UNIFORM
                   else {"bfs_child_policy": cfg.bfs_child_policy.value}),
                **({} if cfg.context_examples == knobs.CONTEXT_EXAMPLES
                   else {"context_examples": cfg.context_examples}),
                **({} if cfg.context_example_policy is ContextExamplePolicy.RECENT
                   else {"context_example_policy": cfg.context_example_policy.value})}

    def state_dict(self) -> dict[str, Any]:
        """Where both channels stand after the last batch *consumed* (JSON-serialisable).

        Valid on any rank and world size with the same global batch size: the global order
        does not depend on the world size. Its ``checksum`` (SHA-256 of the canonical JSON of
        the other entries) makes ``load_state_dict`` refuse a changed state.
        """
        self._check_open()
        return with_checksum({"format": STATE_FORMAT, "config": self._fingerprint(),
                              **{name.value: channel.state().to_json()
                                 for name, channel in self._channels.items()}})

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue exactly after the batches consumed when ``state`` was taken."""
        self._check_open()
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise CheckpointError(f"not a dlkit sampler state (expected format {STATE_FORMAT!r})")
        check_state_checksum(state, "sampler state", _UNCHECKSUMMED_KEYS)
        mine = self._fingerprint()
        theirs = state.get("config")
        if theirs != mine:
            if not isinstance(theirs, Mapping):  # missing or not a map: every entry differs
                raise CheckpointError("the state was taken from a different configuration: "
                                      "config is malformed")
            # An entry recorded only when not the default is compared with its default.
            defaults = {"bfs_child_policy": ChildPolicy.UNIFORM.value,
                        "context_examples": knobs.CONTEXT_EXAMPLES,
                        "context_example_policy": ContextExamplePolicy.RECENT.value}
            ours, other = {**defaults, **mine}, {**defaults, **theirs}
            diffs = [f"{k}: state has {other.get(k)!r}, sampler has {v!r}" for k, v in
                     ours.items() if other.get(k) != v]
            raise CheckpointError("the state was taken from a different configuration: "
                                  + "; ".join(diffs or ["config is malformed"]))
        restores = []
        for name in CHANNELS:
            if name is Split.TEST and state.get(name.value) is None:
                continue  # test was never pulled (or a state from before it): starts afresh
            part = ChannelState.from_json(name.value, state.get(name.value))
            channel = self._channels[Split.TRAIN] if name is Split.TRAIN else \
                self._open_eval_channel(name)
            streams = self.train_streams if name is Split.TRAIN else self._eval_streams[name]
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
            self._release()

    def _release(self) -> None:
        """Release the builders' copies and close the databases we opened."""
        try:
            for builder in getattr(self, "builders", ()):
                builder.release()
        finally:
            for db in self._owned:
                db.close()
            self._owned = []

    def __enter__(self) -> Sampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        config = self.config
        cfg = {name: getattr(config, name) for name in _REPR_FIELDS}
        cfg["split_ratios"] = str(config.split_ratios)
        cfg["sampling_mode"] = config.sampling_mode.short
        paths = [label(db) for db in self._dbs]
        where = f"[{', '.join(paths)}]" if self.is_mixture else paths[0]
        if self.is_mixture:
            cfg["component_weights"] = [c.weight for c in self.components]
        return f"Sampler({where}, " + ", ".join(f"{k}={v!r}" for k, v in cfg.items()) + ")"
