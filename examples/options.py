"""The command line of the training examples: ``train_torch.py`` and ``train_jax.py`` take
the same flags (:func:`parse_args`), ``pretrain.py`` the same but the database, the task and
the steps (:func:`add_training_flags`, :func:`train_args`), all parsed into one
:class:`TrainArgs`. Also what follows from the flags alone: the settings a checkpoint must
share with the run resuming it (:func:`fingerprint`), the learning rate of a step
(:func:`learning_rate`) and a rank's share of the global batch (:func:`local_batch_size`).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, NoReturn

import common

CONTEXTS = ("full", "anchor-only")
CHILD_POLICIES = ("uniform", "recent", "quota")
SCHEDULES = ("constant", "cosine", "linear")
NUMERIC_ENCODINGS = ("shared", "column")
LOSSES = ("mse", "l1", "huber")
NUMERIC_SQUASHES = ("none", "log")
ABSOLUTE_TIMES = ("keep", "drop")
ANCHOR_FEATURES = ("keep", "mask")
FK_ATTENTIONS = ("rows", "cells")


def _int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value
    return parse


positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)


def _float_where(holds: Callable[[float], bool], wanted: str) -> Callable[[str], float]:
    """A parser of a number for which ``holds``; otherwise "must be ``wanted``"."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not holds(value):
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text}")
        return value
    return parse


_positive_float = _float_where(lambda v: math.isfinite(v) and v > 0, "a finite number > 0")
_non_negative_float = _float_where(lambda v: math.isfinite(v) and v >= 0,
                                   "a finite number >= 0")
_unit_float = _float_where(lambda v: 0 <= v <= 1, "in [0, 1]")


def _dropout(text: str) -> float:
    value = _non_negative_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def _pos_weight(text: str) -> str:
    """``auto`` or a positive number, kept as text (``auto`` is resolved on the train split)."""
    if text != "auto":
        _positive_float(text)
    return text


@dataclass(frozen=True)
class TrainArgs:
    """The flags of both training examples (``--help`` describes each)."""

    db: str
    task: str
    steps: int
    seed: int
    batch_size: int
    sequence_length: int
    context: str
    checkpoint_dir: str | None
    resume: bool
    record: str | None
    lr: float
    warmup: int
    d_model: int
    layers: int
    checkpoint_every: int
    num_threads: int
    split_seed: int
    max_rows: int = 0            # 0: the sequence length
    bfs_child_width: int = 16
    bfs_child_policy: str = "uniform"
    attention_block: int = 32
    schedule: str = "cosine"
    decay_steps: int = 1000
    min_lr_ratio: float = 0.1
    numeric_encoding: str = "shared"
    column_gain: float = 1.0
    loss: str = "mse"            # numeric and timestamp targets
    pos_weight: str = "1"        # boolean targets: a positive number, or "auto"
    weight_decay: float = 1e-4
    dropout: float = 0.0
    numeric_squash: str = "none"
    absolute_time: str = "keep"
    anchor_features: str = "keep"
    fk_attention: str = "rows"
    readout: str = "attention"

    @property
    def rows(self) -> int:
        """The sampler's ``max_rows``: ``--max-rows``, or the sequence length."""
        return self.max_rows or self.sequence_length


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are ``dlkit``'s one line, ``error USAGE: ...`` (exit 2),
    not argparse's usage text and second line."""

    def error(self, message: str) -> NoReturn:
        raise common.UsageError(f"{message} (see {self.prog} --help)")


def parse_args(framework: str, argv: Sequence[str] | None = None) -> TrainArgs:
    parser = Parser(
        prog=f"train_{framework}.py",
        description=f"Train a compact Relational Transformer on dlkit batches ({framework}). "
                    "Logs go to stderr; the last stdout line is one JSON object (rank 0).")
    parser.add_argument("--db", required=True, help="database directory (dlkit preprocess)")
    parser.add_argument("--task", required=True, help="task to train and validate")
    parser.add_argument("--steps", required=True, type=positive_int, help="train steps")
    add_training_flags(parser)
    ns = parser.parse_args(argv)
    if ns.resume and not ns.checkpoint_dir:
        parser.error("--resume needs --checkpoint-dir")
    return train_args(ns, db=ns.db, task=ns.task, steps=ns.steps)


def train_args(ns: argparse.Namespace, *, db: str, task: str, steps: int) -> TrainArgs:
    """The ``TrainArgs`` of the flags :func:`add_training_flags` parsed into ``ns``."""
    given = {f.name: getattr(ns, f.name) for f in fields(TrainArgs)
             if f.name not in ("db", "task", "steps")}
    return TrainArgs(db=db, task=task, steps=steps, **given)


def add_training_flags(parser: argparse.ArgumentParser) -> None:
    """Every flag of ``TrainArgs`` but the database, the task and the steps."""
    parser.add_argument("--seed", type=_non_negative_int, default=0,
                        help="sampling seed and model initialisation (default 0)")
    parser.add_argument("--batch-size", type=positive_int, default=32,
                        help="GLOBAL batch: each of the world-size ranks takes "
                             "batch-size / world-size sequences (default 32)")
    parser.add_argument("--sequence-length", type=positive_int, default=512,
                        help="cells per sequence (default 512)")
    parser.add_argument("--context", choices=CONTEXTS, default="full",
                        help="anchor-only: keep only the anchor row's cells (an ablation)")
    parser.add_argument("--checkpoint-dir", default=None,
                        help="write a checkpoint here every --checkpoint-every steps and at "
                             "the end")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the checkpoint in --checkpoint-dir")
    parser.add_argument("--record", default=None, metavar="PATH",
                        help="write one JSON line per train step (rank 0): step, task_idx, "
                             "database_idx, the global batch's anchors, each rank's parameter "
                             "digest, loss (null if not finite); a fresh run replaces the "
                             "file, --resume cuts it to the checkpoint's steps")
    parser.add_argument("--lr", type=_positive_float, default=3e-3,
                        help="peak learning rate (default 3e-3)")
    parser.add_argument("--warmup", type=_non_negative_int, default=20,
                        help="linear warm-up steps (default 20)")
    parser.add_argument("--d-model", type=positive_int, default=64, help="width (default 64)")
    parser.add_argument("--layers", type=positive_int, default=2, help="layers (default 2)")
    parser.add_argument("--checkpoint-every", type=positive_int, default=100,
                        help="steps between checkpoints (default 100)")
    parser.add_argument("--num-threads", type=positive_int, default=1,
                        help="dlkit producer threads per process (default 1)")
    parser.add_argument("--split-seed", type=_non_negative_int, default=0,
                        help="seed of the train/val/test hash split (default 0)")
    parser.add_argument("--max-rows", type=_non_negative_int, default=0,
                        help="rows per sequence (the sampler's max_rows; default 0: the "
                             "sequence length)")
    parser.add_argument("--bfs-child-width", type=_non_negative_int, default=16,
                        help="children kept per visited row (default 16)")
    parser.add_argument("--bfs-child-policy", choices=CHILD_POLICIES, default="uniform",
                        help="which children a row over the width keeps: uniform (default), "
                             "recent (the latest), quota (each child table its share)")
    parser.add_argument("--attention-block", type=positive_int, default=32,
                        help="block of the row and column attention windows: a cell sees the "
                             "cells of its row / column within its block of the sorted cell "
                             "order and the two beside it (default 32)")
    parser.add_argument("--schedule", choices=SCHEDULES, default="cosine",
                        help="learning rate after the warm-up: constant, or a cosine / linear "
                             "decay to --min-lr-ratio x --lr at step --decay-steps (default "
                             "cosine)")
    parser.add_argument("--decay-steps", type=positive_int, default=1000,
                        help="step at which the decay reaches its floor (default 1000; a "
                             "function of the step alone, not of --steps, so a resumed run "
                             "takes the steps of an uninterrupted one)")
    parser.add_argument("--min-lr-ratio", type=_unit_float, default=0.1,
                        help="the decay's floor as a fraction of --lr (default 0.1)")
    parser.add_argument("--numeric-encoding", choices=NUMERIC_ENCODINGS, default="shared",
                        help="a numeric cell's value token: shared (value x one learned "
                             "vector, default) or column (plus value x a vector projected from "
                             "the column's embedding, so a row's mean keeps its columns apart)")
    parser.add_argument("--column-gain", type=_positive_float, default=1.0,
                        help="factor on the terms made from the column's embedding (its "
                             "token and, with --numeric-encoding column, its value direction; "
                             "default 1)")
    parser.add_argument("--loss", choices=LOSSES, default="mse",
                        help="loss of a numeric or timestamp target (z units): mse (squared "
                             "error, default), l1 (absolute error: fits the median, the MAE's "
                             "best constant) or huber (smooth L1, quadratic within 1 z unit)")
    parser.add_argument("--pos-weight", type=_pos_weight, default="1",
                        help="weight of a positive label in a boolean target's cross-entropy: "
                             "a number, or auto (negatives / positives of the train split); "
                             "default 1")
    parser.add_argument("--weight-decay", type=_non_negative_float, default=1e-4,
                        help="AdamW's decoupled weight decay (default 1e-4)")
    parser.add_argument("--dropout", type=_dropout, default=0.0,
                        help="dropout on each layer's attention and feed-forward outputs "
                             "(train steps only; default 0)")
    parser.add_argument("--numeric-squash", choices=NUMERIC_SQUASHES, default="none",
                        help="log: a numeric cell's z-scored value v enters the model as "
                             "sign(v) log(1 + |v|), so one heavy-tailed value (an aggregate "
                             "sum far out) does not swamp its token; default none")
    parser.add_argument("--absolute-time", choices=ABSOLUTE_TIMES, default="keep",
                        help="drop: zero the last timestamp feature (the z-scored time "
                             "itself) of every cell, keeping the calendar phases; a temporal "
                             "split puts every validation time past every train time, where "
                             "a network extrapolates it; default keep")
    parser.add_argument("--anchor-features", choices=ANCHOR_FEATURES, default="keep",
                        help="mask: every cell of the anchor row but the target becomes a "
                             "null cell (its column kept, its value gone), so the model "
                             "predicts from the context alone (an ablation); default keep")
    parser.add_argument("--readout", choices=("target", "attention"), default="attention",
                        help="how the prediction reads the sequence: attention (the target "
                             "cell's final state then attends to every cell, default) or "
                             "target (that state alone, the model of earlier versions)")
    parser.add_argument("--fk-attention", choices=FK_ATTENTIONS, default="rows",
                        help="the parent and child heads: rows (a row's cells pooled to their "
                             "mean, row to row, default: cost linear in S) or cells (each cell "
                             "attends to every cell of the rows its row links to: a parent's "
                             "columns reach the target apart; cost S^2 per sequence)")


def fingerprint(args: TrainArgs, framework: str) -> dict[str, Any]:
    """The settings a checkpoint must share with the run resuming it (not --steps, the
    checkpoint directory or the record: those may change between the two runs)."""
    return {"framework": framework, "task": args.task, "seed": args.seed,
            "batch_size": args.batch_size, "sequence_length": args.sequence_length,
            "context": args.context, "lr": args.lr, "warmup": args.warmup,
            "d_model": args.d_model, "layers": args.layers, "split_seed": args.split_seed,
            "max_rows": args.rows, "bfs_child_width": args.bfs_child_width,
            "bfs_child_policy": args.bfs_child_policy, "attention_block": args.attention_block,
            "schedule": args.schedule, "decay_steps": args.decay_steps,
            "min_lr_ratio": args.min_lr_ratio, "numeric_encoding": args.numeric_encoding,
            "column_gain": args.column_gain, "loss": args.loss, "pos_weight": args.pos_weight,
            "weight_decay": args.weight_decay, "dropout": args.dropout,
            "numeric_squash": args.numeric_squash, "absolute_time": args.absolute_time,
            "anchor_features": args.anchor_features, "fk_attention": args.fk_attention,
            "readout": args.readout}


def learning_rate(args: TrainArgs, step: int) -> float:
    """The learning rate of train step ``step`` (0-based), a function of the step alone (not
    of --steps), so a run stopped at k and resumed to K takes exactly the steps of one run to
    K: a linear warm-up over ``--warmup`` steps to ``--lr``, then ``--schedule`` — constant,
    or a cosine / linear decay reaching ``--min-lr-ratio x --lr`` at ``--decay-steps`` and
    staying there. With the gradient clipping both examples apply (global norm 1), the decay
    keeps a rare positive class from pushing a late step back to the base rate."""
    warm = min(1.0, (step + 1) / max(1, args.warmup))
    if args.schedule == "constant" or step < args.warmup:
        return args.lr * warm
    span = max(1, args.decay_steps - args.warmup)
    t = min(1.0, (step - args.warmup) / span)
    shape = 0.5 * (1 + math.cos(math.pi * t)) if args.schedule == "cosine" else 1 - t
    return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * shape)


def local_batch_size(args: TrainArgs, world_size: int) -> int:
    """This rank's share of the global ``--batch-size``."""
    if args.batch_size % world_size:
        raise common.UsageError(f"--batch-size {args.batch_size} is not a multiple of the "
                                f"world size {world_size}")
    return args.batch_size // world_size
