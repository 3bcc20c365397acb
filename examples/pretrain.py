#!/usr/bin/env python3
"""Pretrain the example Relational Transformer on a mixture of databases, one held out, and
measure what transfers to the held-out one.

::

    python fixtures/make_planted_mixture.py out/mix/src --family churn --family grand
    dlkit preprocess-many out/mix/src out/mix/db
    python examples/pretrain.py --db out/mix/db/* --held-out churn-club \\
        --pretrain-steps 300 --finetune-steps 60

Four runs of the model of ``train_torch.py``, with its flags (``--batch-size``,
``--sequence-length``, ``--lr``, ``--d-model``, ...):

1. **pretrain**: ``--pretrain-steps`` steps on a ``dlkit.Sampler`` over every ``--db``, each
   database weighed equally (its share split among its tasks by their train seeds), the
   held-out one with weight 0; each step one (database, task) component's batch;
2. **zero-shot**: the pretrained model on the held-out task's val split as it is;
3. **fine-tuned**: the pretrained model, then ``--finetune-steps`` steps on the held-out
   task alone (a fresh optimizer, the learning-rate schedule from step 0);
4. **scratch**: the same initial weights as the pretraining started from, the same
   ``--finetune-steps`` steps on the same batches of the held-out task alone.

The model is shared by every database: its cell encoders read the frozen column and category
embedding tables (the same words are the same vectors in every database of a mixture), and
its scalar heads are per target type (numeric and timestamp targets are z-scored per task,
booleans a logit), so a task it never trained on has a head already; a categorical task gets
a class head of its own, per (database, task): untrained, a held-out categorical task's
zero-shot metric is chance.

The last stdout line is one JSON object: ``held_out``, ``task``, ``target``, ``metric``,
``val_count``, then ``zero_shot``, ``fine_tuned``, ``scratch`` and ``baseline`` (the
constant prediction fitted on the train labels), each the metric on the held-out task's val
split, the same four as ``*_loss``, ``pretrain_loss_first`` / ``pretrain_loss_last``, and
``pretrained``: every trained component's val metric after pretraining. No timings, so two
runs with the same flags print the same line. ``--checkpoint-dir`` / ``--resume`` checkpoint
the pretraining as ``train_torch.py`` checkpoints its training; ``--record`` records its
steps (with ``database_idx``).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import metrics  # noqa: E402
import options  # noqa: E402
import rt_torch  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import train_torch as tt  # noqa: E402
from torch import nn  # noqa: E402

import dlkit  # noqa: E402
from dlkit.errors import InvalidArgumentError  # noqa: E402
from dlkit.text import unknown_name  # noqa: E402

CHECKPOINT_FILE = "pretrain.pt"


@dataclass(frozen=True)
class PretrainArgs:
    """The flags: the databases, which one is held out, the steps of each phase, and
    ``train`` (the model and sampler flags of ``train_torch.py``; its ``db`` and ``task`` the
    held-out database and task, its ``steps`` the pretraining's)."""

    databases: tuple[str, ...]
    held_out: int       # position in ``databases``
    finetune_steps: int
    train: options.TrainArgs


def parse_args(argv: Sequence[str] | None = None) -> PretrainArgs:
    parser = options.Parser(
        prog="pretrain.py",
        description="Pretrain the example Relational Transformer on a mixture of databases "
                    "with one held out, then compare zero-shot, fine-tuned and from-scratch "
                    "metrics on it. Logs go to stderr; the last stdout line is one JSON "
                    "object.")
    parser.add_argument("--db", required=True, nargs="+", action="extend",
                        help="database directories (dlkit preprocess), the held-out one "
                             "among them")
    parser.add_argument("--held-out", required=True, metavar="DB",
                        help="the database held out of pretraining: one of --db, or its "
                             "directory's name")
    parser.add_argument("--task", default=None,
                        help="the held-out database's task (default: its only one)")
    parser.add_argument("--pretrain-steps", required=True, type=options.positive_int,
                        help="train steps on the mixture")
    parser.add_argument("--finetune-steps", required=True, type=options.positive_int,
                        help="train steps on the held-out task, fine-tuning and from scratch")
    options.add_training_flags(parser)
    ns = parser.parse_args(argv)
    if ns.resume and not ns.checkpoint_dir:
        parser.error("--resume needs --checkpoint-dir")
    if ns.context != "full":
        parser.error("--context anchor-only is an ablation of train_torch.py, not pretrain.py")
    databases = tuple(ns.db)
    resolved = [Path(d).resolve() for d in databases]
    if len(set(resolved)) != len(resolved):
        parser.error("a database is given twice in --db")
    matches = [i for i, (given, path) in enumerate(zip(databases, resolved))
               if ns.held_out in (given, path.name) or Path(ns.held_out).resolve() == path]
    if len(matches) != 1:
        parser.error(f"--held-out {ns.held_out!r} is not one of --db "
                     f"({', '.join(p.name for p in resolved)})")
    if len(databases) < 2:
        parser.error("--db needs the held-out database and at least one to pretrain on")
    held_out = matches[0]
    return PretrainArgs(databases, held_out, ns.finetune_steps, options.train_args(
        ns, db=databases[held_out], task=ns.task or "", steps=ns.pretrain_steps))


class PretrainModel(nn.Module):
    """``rt_torch.RelationalTransformer`` (its scalar heads per target type) shared by
    every database and task, and a class head per categorical component (``class_heads``:
    its key -> its classes). ``route`` maps a batch's (``database_idx``, ``task_idx``) to
    its class head: set it for the sampler the batches come from."""

    def __init__(self, cfg: rt_torch.ModelConfig, class_heads: dict[str, int]):
        super().__init__()
        self.trunk = rt_torch.RelationalTransformer(cfg)
        self.classes = nn.ModuleDict({key: nn.Linear(cfg.d_model, n)
                                      for key, n in class_heads.items()})
        self.route: dict[tuple[int, int], str] = {}

    def forward(self, batch: dict[str, torch.Tensor],
                tables: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = self.trunk(batch, tables)
        database = int(batch["database_idx"][0]) if "database_idx" in batch else 0
        key = self.route.get((database, int(batch["task_idx"][0])))
        if key is not None:
            out["categorical"] = self.classes[key](out["state"])
        return out


def sampler_of(args: options.TrainArgs, world: tt.World, source: Any,
               **selection: Any) -> dlkit.Sampler:
    """A sampler with the example's settings over ``source`` (a path or a list of them)."""
    return dlkit.Sampler(source, rank=world.rank, world_size=world.size,
                         split_seed=args.split_seed, seed=args.seed,
                         batch_size=options.local_batch_size(args, world.size),
                         sequence_length=args.sequence_length, max_rows=args.rows,
                         bfs_child_width=args.bfs_child_width,
                         bfs_child_policy=args.bfs_child_policy,
                         num_threads=args.num_threads, num_prefetch=4, **selection)


def head_key(component: Any) -> str:
    """A class head's key: ModuleDict keys cannot hold '.', database ids and tasks may."""
    return f"{component.database_idx}:{component.task_idx}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return tt.in_world(lambda world: pretrain(args, world))


@dataclass(frozen=True)
class Score:
    """A model's metric and mean loss on the held-out task's val split."""

    metric: float
    loss: float


def pretrain(p: PretrainArgs, world: tt.World) -> int:
    args = p.train
    tt.set_threads(args, world)
    weights = [0.0 if i == p.held_out else 1.0 for i in range(len(p.databases))]
    with sampler_of(args, world, list(p.databases), database_weights=weights) as mixture:
        names = [entry.name for entry in mixture.databases]
        held = names[p.held_out]
        tasks = [c.task for c in mixture.components if c.database_idx == p.held_out]
        if not args.task and len(tasks) != 1:
            raise common.UsageError(f"the held-out database {held} has {len(tasks)} tasks "
                                    f"({', '.join(tasks)}): name one with --task")
        task = args.task or tasks[0]
        if task not in tasks:  # the wording and exit code of every dlkit command
            raise InvalidArgumentError(unknown_name("task", task, tasks,
                                                    f"the held-out database {held}"))
        info = mixture.label_info(task, database=p.held_out)
        class_heads = {}
        for c in mixture.components:
            component = mixture.label_info(c.task, database=c.database_idx)
            if component.stype == metrics.CATEGORICAL:
                class_heads[head_key(c)] = component.num_classes
        tables = tt.lookup_tables(mixture)
        cfg = tt.model_config(args, tables,
                              mixture.database_metadata(p.held_out).embeddings.text_dim, 0)
        torch.manual_seed(args.seed)
        model = PretrainModel(cfg, class_heads)
        initial = copy.deepcopy(model.state_dict())
        model.route = {(c.database_idx, c.task_idx): head_key(c) for c in mixture.components
                       if head_key(c) in class_heads}
        fingerprint = {**options.fingerprint(args, "torch-pretrain"), "model": asdict(cfg),
                       "databases": [list(entry) for entry in mixture.databases],
                       "held_out": held, "task": task}
        losses, resumed_from = run_pretraining(args, world, mixture, model, tables,
                                               fingerprint)
        trained = [c for c in mixture.components if c.weight > 0]
        # a pass over every pretraining task's val split: minutes over many databases
        common.log(f"scoring the pretrained model on the val splits of {len(trained)} tasks")
        pretrained = {c.name: score(model, tables, mixture, args, world, c.task,
                                    database=c.database_idx)[0].metric for c in trained}
        common.log("the held-out task: zero-shot, fine-tuned, and trained from scratch")
    # the held-out task alone: a sampler of its database, whose batches index its own tables
    # (the same vectors as the mixture's rows: one embedder made both)
    route = {(0, t): key for (d, t), key in model.route.items() if d == p.held_out}

    def fresh(state: dict[str, torch.Tensor]) -> PretrainModel:
        copy_ = PretrainModel(cfg, class_heads)
        copy_.load_state_dict(state)
        copy_.route = route
        return copy_

    with sampler_of(args, world, p.databases[p.held_out], task_weights={task: 1.0}) as alone:
        held_tables = tt.lookup_tables(alone)
        zero_shot, labels = score(fresh(model.state_dict()), held_tables, alone, args, world,
                                  task)
        outputs = metrics.baseline_predictions(alone, task, len(labels))
        baseline = Score(metrics.metric_of(outputs, labels, int(info.stype), float(info.std)),
                         float(metrics.val_losses(outputs, labels, int(info.stype)).mean()))
        start = alone.state_dict()
        fine_tuned = finetune(args, world, alone, fresh(model.state_dict()), held_tables,
                              p.finetune_steps, task, "fine-tune step")
        alone.load_state_dict(start)  # the same batches again
        scratch = finetune(args, world, alone, fresh(initial), held_tables, p.finetune_steps,
                           task, "scratch step")
    if world.rank == 0:
        metrics.emit({
            "framework": "torch", "world_size": world.size, "databases": names,
            "held_out": held, "task": task, "target": info.stype_name,
            "metric": metrics.METRIC_NAMES[int(info.stype)], "val_count": int(len(labels)),
            "pretrain_steps": args.steps, "finetune_steps": p.finetune_steps,
            "zero_shot": zero_shot.metric, "fine_tuned": fine_tuned.metric,
            "scratch": scratch.metric, "baseline": baseline.metric,
            "zero_shot_loss": zero_shot.loss, "fine_tuned_loss": fine_tuned.loss,
            "scratch_loss": scratch.loss, "baseline_loss": baseline.loss,
            "pretrain_loss_first": _mean(losses, first=True),
            "pretrain_loss_last": _mean(losses, first=False),
            "pretrained": pretrained, "seed": args.seed, "resumed_from": resumed_from})
    if world.distributed:
        dist.barrier()
    return 0


def run_pretraining(args: options.TrainArgs, world: tt.World, mixture: dlkit.Sampler,
                    model: PretrainModel, tables: dict[str, torch.Tensor],
                    fingerprint: dict[str, Any]) -> tuple[list[float], int | None]:
    """``--pretrain-steps`` steps on the mixture, checkpointed and resumed as train_torch.py
    checkpoints its training: (every step's loss, a resumed run's first from its checkpoint;
    the step resumed from)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr,
                                  weight_decay=args.weight_decay)
    checkpoint = Path(args.checkpoint_dir) / CHECKPOINT_FILE if args.checkpoint_dir else None
    step, losses = 0, []
    if args.resume:
        assert checkpoint is not None  # parse_args refuses --resume without a directory
        step, losses = tt.resume(checkpoint, fingerprint, model, optimizer, mixture, args.steps,
                                 "--pretrain-steps")
    recorder = (common.Recorder(args.record, step if args.resume else None)
                if args.record and world.rank == 0 else None)
    try:
        progress = tt.train_steps(args, world, mixture, model, ddp(model, world), optimizer,
                                  tables, step, args.steps, checkpoint=checkpoint,
                                  fingerprint=fingerprint, recorder=recorder,
                                  label="pretrain step", losses_before=losses)
    finally:
        if recorder is not None:
            recorder.close()
    return progress.losses, step if args.resume else None


def ddp(model: PretrainModel, world: tt.World) -> nn.Module:
    """``model``, or its DDP wrapper when distributed (a step leaves the class heads of the
    other components unused)."""
    if not world.distributed:
        return model
    return nn.parallel.DistributedDataParallel(model, find_unused_parameters=bool(model.classes))


def finetune(args: options.TrainArgs, world: tt.World, sampler: dlkit.Sampler,
             model: PretrainModel, tables: dict[str, torch.Tensor], steps: int, task: str,
             label: str) -> Score:
    """``steps`` steps of ``model`` on ``sampler`` (a fresh optimizer, the schedule from step
    0), then its score on ``task``'s val split."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr,
                                  weight_decay=args.weight_decay)
    tt.train_steps(args, world, sampler, model, ddp(model, world), optimizer, tables, 0, steps,
                   label=label)
    return score(model, tables, sampler, args, world, task)[0]


def score(model: nn.Module, tables: dict[str, torch.Tensor], sampler: dlkit.Sampler,
          args: options.TrainArgs, world: tt.World, task: str,
          **where: Any) -> tuple[Score, np.ndarray]:
    """``model``'s score on ``task``'s val split, and the split's labels."""
    info = sampler.label_info(task, **where)
    stype = int(info.stype)
    outputs, labels = tt.evaluate(model, tables, sampler, args, world, stype, task, **where)
    return Score(metrics.metric_of(outputs, labels, stype, float(info.std)),
                 float(metrics.val_losses(outputs, labels, stype).mean())), labels


def _mean(losses: list[float], first: bool) -> float:
    """The mean of the first (or last) tenth of the steps' losses."""
    tail = max(1, len(losses) // 10)
    part = losses[:tail] if first else losses[-tail:]
    return float(np.mean(part)) if part else float("nan")


if __name__ == "__main__":
    sys.exit(common.run(main))
