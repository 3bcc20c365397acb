"""What the training examples share, whatever the framework: numpy only.

``train_torch.py`` and ``train_jax.py`` import this module (it sits beside them). It holds

* the command line (:func:`parse_args`; both scripts take the same flags),
* the ``--context anchor-only`` ablation (:func:`anchor_only`, applied by :func:`prepare`),
* losses and metrics computed from a model's raw outputs in numpy (:func:`val_losses`,
  :func:`metric_of`), so both frameworks report the same numbers for the same outputs, and
  the constant-prediction baseline (:func:`baseline_predictions`),
* the ``--record`` writer (:class:`Recorder`), logging to stderr, the result line on stdout
  (:func:`result`, :func:`emit`) and the error boundary (:func:`run`).

Model outputs, per sequence, in the label's units (docs/batch_format.md, ``labels``):
numeric and timestamp targets a prediction of the z-scored value ``[N]``; boolean targets a
logit ``[N]``; categorical targets logits over the target column's classes ``[N, C]``.
The losses are the ones the models train with: squared error, binary cross-entropy with
logits, cross-entropy. The metric is AUC for a boolean target, accuracy for a categorical
one, and the mean absolute error in the column's own units (``std * |prediction - label|``)
for numeric and timestamp targets.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

NUMERIC, BOOLEAN, TIMESTAMP, CATEGORICAL = 0, 1, 2, 3
METRIC_NAMES = {NUMERIC: "mae", BOOLEAN: "auc", TIMESTAMP: "mae", CATEGORICAL: "accuracy"}
CONTEXTS = ("full", "anchor-only")
CHILD_POLICIES = ("uniform", "recent", "quota")
SCHEDULES = ("constant", "cosine", "linear")
NUMERIC_ENCODINGS = ("shared", "column")
LOSSES = ("mse", "l1", "huber")
NUMERIC_SQUASHES = ("none", "log")
ABSOLUTE_TIMES = ("keep", "drop")
ANCHOR_FEATURES = ("keep", "mask")
FK_ATTENTIONS = ("rows", "cells")
ABSOLUTE_TIME_FEATURE = 14  # the z-scored time itself; 0..13 are calendar phases


class UsageError(Exception):
    """A bad flag, environment variable or checkpoint: one line on stderr, exit code 2."""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(main: Callable[[], int]) -> int:
    """Call ``main``; a ``UsageError`` or a ``dlkit`` error is one line and a non-zero exit."""
    try:
        return main()
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        from dlkit.errors import DlkitError

        if isinstance(exc, DlkitError):  # the code and exit status `dlkit` itself gives
            from dlkit.cli.app import exit_code_for

            print(f"error {exc.code}: {exc}", file=sys.stderr)
            return exit_code_for(exc)
        raise


# --- checkpoint files -----------------------------------------------------------------------

# A checkpoint file is its payload (torch.save's or np.savez's bytes), then this marker, then
# the SHA-256 of the payload: any byte changed, cut or added refuses the file whole, before
# anything in it is unpickled or loaded.
CHECKSUM_MARKER = b"\ndlkit-example-checkpoint-sha256\n"
_TRAILER = len(CHECKSUM_MARKER) + 32


def sealed(payload: bytes) -> bytes:
    """``payload`` with its checksum trailer: the bytes a checkpoint file holds."""
    return payload + CHECKSUM_MARKER + hashlib.sha256(payload).digest()


def unsealed(path: Path) -> bytes:
    """The payload of the checkpoint file ``path`` once its checksum matches, or a
    ``CheckpointError`` (``CHECKPOINT_INVALID``) naming the file."""
    from dlkit.errors import CheckpointError

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"cannot read: {exc.strerror or exc}", path=path) from None
    if len(data) < _TRAILER or data[-_TRAILER:-32] != CHECKSUM_MARKER:
        raise CheckpointError("no checksum trailer: truncated, or not a checkpoint written by "
                              "this example", path=path)
    payload = data[:-_TRAILER]
    if hashlib.sha256(payload).digest() != data[-32:]:
        raise CheckpointError("checksum mismatch: the file was changed or corrupted after it "
                              "was written", path=path)
    return payload


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (torch.load's run to a dozen)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --- command line ---------------------------------------------------------------------------


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


_positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


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


def _unit_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


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

    @property
    def rows(self) -> int:
        """The sampler's ``max_rows``: ``--max-rows``, or the sequence length."""
        return self.max_rows or self.sequence_length


def parse_args(framework: str, argv: Sequence[str] | None = None) -> TrainArgs:
    parser = argparse.ArgumentParser(
        prog=f"train_{framework}.py",
        description=f"Train a compact Relational Transformer on dlkit batches ({framework}). "
                    "Logs go to stderr; the last stdout line is one JSON object (rank 0).")
    parser.add_argument("--db", required=True, help="database directory (dlkit preprocess)")
    parser.add_argument("--task", required=True, help="task to train and validate")
    parser.add_argument("--steps", required=True, type=_positive_int, help="train steps")
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
    parser.add_argument("--batch-size", type=_positive_int, default=32,
                        help="GLOBAL batch: each of the world-size ranks takes "
                             "batch-size / world-size sequences (default 32)")
    parser.add_argument("--sequence-length", type=_positive_int, default=512,
                        help="cells per sequence (default 512)")
    parser.add_argument("--context", choices=CONTEXTS, default="full",
                        help="anchor-only: keep only the anchor row's cells (an ablation)")
    parser.add_argument("--checkpoint-dir", default=None,
                        help="write a checkpoint here every --checkpoint-every steps and at "
                             "the end")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the checkpoint in --checkpoint-dir")
    parser.add_argument("--record", default=None, metavar="PATH",
                        help="append one JSON line per train step (rank 0): step, task_idx, "
                             "the global batch's anchors, each rank's parameter digest, loss")
    parser.add_argument("--lr", type=_positive_float, default=3e-3,
                        help="peak learning rate (default 3e-3)")
    parser.add_argument("--warmup", type=_non_negative_int, default=20,
                        help="linear warm-up steps (default 20)")
    parser.add_argument("--d-model", type=_positive_int, default=64, help="width (default 64)")
    parser.add_argument("--layers", type=_positive_int, default=2, help="layers (default 2)")
    parser.add_argument("--checkpoint-every", type=_positive_int, default=100,
                        help="steps between checkpoints (default 100)")
    parser.add_argument("--num-threads", type=_positive_int, default=1,
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
    parser.add_argument("--attention-block", type=_positive_int, default=32,
                        help="block of the row and column attention windows: a cell sees the "
                             "cells of its row / column within its block of the sorted cell "
                             "order and the two beside it (default 32)")
    parser.add_argument("--schedule", choices=SCHEDULES, default="cosine",
                        help="learning rate after the warm-up: constant, or a cosine / linear "
                             "decay to --min-lr-ratio x --lr at step --decay-steps (default "
                             "cosine)")
    parser.add_argument("--decay-steps", type=_positive_int, default=1000,
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
            "anchor_features": args.anchor_features, "fk_attention": args.fk_attention}


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


def world_from_env() -> tuple[int, int]:
    """(rank, world size) from torchrun's $RANK / $WORLD_SIZE, else (0, 1)."""
    try:
        rank = int(os.environ.get("RANK") or 0)
        world = int(os.environ.get("WORLD_SIZE") or 1)
    except ValueError:
        raise UsageError(f"$RANK / $WORLD_SIZE must be integers, got "
                         f"{os.environ.get('RANK')!r} / {os.environ.get('WORLD_SIZE')!r}") \
            from None
    if world < 1 or not 0 <= rank < world:
        raise UsageError(f"$RANK {rank} is not in [0, $WORLD_SIZE {world})")
    return rank, world


def local_batch_size(args: TrainArgs, world_size: int) -> int:
    """This rank's share of the global ``--batch-size``."""
    if args.batch_size % world_size:
        raise UsageError(f"--batch-size {args.batch_size} is not a multiple of the world size "
                         f"{world_size}")
    return args.batch_size // world_size


# --- the anchor-only ablation -----------------------------------------------------------------

# Keys whose every cell of a padding position is 0 (docs/batch_format.md §5).
_CELL_VALUE_KEYS = ("semantic_types", "column_ids", "seq_row_ids", "numeric_values",
                    "timestamp_values", "bool_values", "categorical_embed_ids", "text_embed_ids",
                    "is_null", "is_target", "is_context_example")


def anchor_only(batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The batch cut to the anchor row's own cells (sequence row 0): every other cell becomes
    padding (``is_padding`` 1, its values 0, as the sampler pads), ``fk_adj`` is all zero (row
    0 is alone) and the permutations are recomputed by their rules (§6), so a model reads the
    result exactly like a batch whose sequences held only the anchor row. Labels and the
    other per-sequence keys are unchanged. A new dict; the input is not modified."""
    out = dict(batch)
    keep = (batch["seq_row_ids"] == 0) & (batch["is_padding"] == 0)
    drop = ~keep
    for key in _CELL_VALUE_KEYS:
        array = batch[key].copy()
        array[drop] = 0
        out[key] = array
    out["is_padding"] = drop.astype(batch["is_padding"].dtype)
    out["fk_adj"] = np.zeros_like(batch["fk_adj"])
    # The anchor row's cells are the first positions of every sequence (rows are contiguous
    # and row 0 comes first), so out_perm and in_perm (no parent in the sequence: all rows
    # sort last, stably) are the identity; col_perm sorts the kept cells by column id.
    positions = np.arange(keep.shape[1], dtype=np.int64)
    identity = np.broadcast_to(positions, keep.shape)
    out["out_perm"] = identity.astype(batch["out_perm"].dtype)
    out["in_perm"] = identity.astype(batch["in_perm"].dtype)
    key = np.where(keep, batch["column_ids"].astype(np.int64), np.iinfo(np.int64).max)
    out["col_perm"] = np.argsort(key, axis=1, kind="stable").astype(batch["col_perm"].dtype)
    # text_batch_embeddings keeps its rows: the ids left point into it unchanged.
    return out


def prepare(batch: Mapping[str, np.ndarray], args: TrainArgs) -> dict[str, np.ndarray]:
    """The batch as the model should see it under ``--context``, ``--numeric-squash`` and
    ``--absolute-time``, ``fk_adj`` cut to the rows in use (:func:`crop_rows`). Done here,
    in numpy, so both frameworks' models read the same inputs."""
    out = anchor_only(batch) if args.context == "anchor-only" else dict(batch)
    if args.anchor_features == "mask":
        out = masked_anchor(out)
    if args.numeric_squash == "log":
        out["numeric_values"] = squash_log(np.asarray(out["numeric_values"]))
    if args.absolute_time == "drop":
        times = np.array(out["timestamp_values"], copy=True)
        times[..., ABSOLUTE_TIME_FEATURE] = 0
        out["timestamp_values"] = times
    return crop_rows(out)


def masked_anchor(batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The batch with every cell of the anchor row (sequence row 0) but the target made a null
    cell: ``is_null`` 1 and its values 0 (docs/batch_format.md: a null cell's values are 0),
    its column, type and position kept. A new dict; the input is not modified."""
    out = dict(batch)
    masked = (np.asarray(batch["seq_row_ids"]) == 0) & (np.asarray(batch["is_padding"]) == 0) \
        & (np.asarray(batch["is_target"]) == 0)
    for key in ("numeric_values", "timestamp_values", "bool_values", "categorical_embed_ids",
                "text_embed_ids"):
        array = np.array(batch[key], copy=True)
        array[masked] = 0
        out[key] = array
    is_null = np.array(batch["is_null"], copy=True)
    is_null[masked] = 1
    out["is_null"] = is_null
    return out


def squash_log(values: np.ndarray) -> np.ndarray:
    """``sign(v) log(1 + |v|)``, in the values' dtype: the identity's slope at 0, and a
    value 100 z units out becomes 4.6 (0 stays 0, so padding and null cells stay 0)."""
    return (np.sign(values) * np.log1p(np.abs(values))).astype(values.dtype)


def crop_rows(batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``fk_adj`` [B, R, R] cut to [B, R', R'], ``R'`` the smallest power of two (at least 8,
    at most R) above every sequence row in use: the row attention costs R'^2, and a few
    distinct shapes keep JAX's compilations few. Only rows without a cell (none of
    any cell's relations) are cut."""
    out = dict(batch)
    r = batch["fk_adj"].shape[1]
    used = int(batch["seq_row_ids"].max()) + 1 if batch["seq_row_ids"].size else 1
    keep = 8
    while keep < used:
        keep *= 2
    keep = min(keep, r)
    out["fk_adj"] = np.ascontiguousarray(batch["fk_adj"][:, :keep, :keep])
    return out


# --- losses, metrics, baseline ----------------------------------------------------------------


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def val_losses(predictions: np.ndarray, labels: np.ndarray, stype: int, loss: str = "mse",
               pos_weight: float = 1.0) -> np.ndarray:
    """Per-sequence loss (float64) of outputs ``predictions`` against ``labels``: the one the
    models train with under ``--loss`` (numeric, timestamp) and ``--pos-weight`` (boolean)."""
    p = np.asarray(predictions, dtype=np.float64)
    if stype in (NUMERIC, TIMESTAMP):
        error = p.reshape(-1) - np.asarray(labels, np.float64)
        if loss == "l1":
            return np.abs(error)
        if loss == "huber":  # 0.5 e^2 within 1, |e| - 0.5 beyond (torch's smooth_l1_loss)
            return np.where(np.abs(error) < 1, 0.5 * error**2, np.abs(error) - 0.5)
        return error**2
    if stype == BOOLEAN:
        # w y softplus(-z) + (1 - y) softplus(z): cross-entropy with the positives weighted
        z, y = p.reshape(-1), np.asarray(labels, np.float64)
        softplus = np.maximum(z, 0) + np.log1p(np.exp(-np.abs(z)))  # softplus(z)
        return pos_weight * y * (softplus - z) + (1 - y) * softplus
    if stype == CATEGORICAL:
        return -_log_softmax(p)[np.arange(p.shape[0]), np.asarray(labels, np.int64)]
    raise ValueError(f"no loss for semantic type {stype}")


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (ties count one half); nan when a class is missing."""
    scores = np.asarray(scores, np.float64).reshape(-1)
    positive = np.asarray(labels).reshape(-1) > 0.5
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores), np.float64)
    sorted_scores = scores[order]
    # average ranks over runs of equal scores
    start = 0
    while start < len(scores):
        end = start
        while end + 1 < len(scores) and sorted_scores[end + 1] == sorted_scores[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2 + 1
        start = end + 1
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def metric_of(predictions: np.ndarray, labels: np.ndarray, stype: int, std: float) -> float:
    p = np.asarray(predictions, dtype=np.float64)
    if stype == BOOLEAN:
        return auc(p, labels)
    if stype == CATEGORICAL:
        return float(np.mean(p.argmax(axis=1) == np.asarray(labels, np.int64)))
    return float(np.mean(np.abs(p.reshape(-1) - np.asarray(labels, np.float64))) * std)



def train_labels(sampler: Any, task: str, db: Any = None) -> np.ndarray:
    """Labels of every train seed of ``task`` (in batch units), read from the database's task
    arrays and the sampler's hash split: the same on every rank, without building batches.
    ``db`` is the database (path or open); by default the one the sampler reads."""
    info = sampler.label_info(task)
    positions = sampler.splits[info.task_index].of("train")
    if db is None:
        data = sampler.builder.db.task(info.task)
    elif hasattr(db, "task"):
        data = db.task(info.task)
    else:
        from dlkit.db import open_database

        with open_database(db) as opened:
            return _labels_from(np.asarray(opened.task(info.task).target)[positions], info)
    return _labels_from(np.asarray(data.target)[positions], info)


def _labels_from(values: np.ndarray, info: Any) -> np.ndarray:
    if info.stype in (NUMERIC, TIMESTAMP):
        return ((values.astype(np.float64) - info.mean) / info.std).astype(np.float32)
    if info.stype == CATEGORICAL:
        return values.astype(np.int64)
    return values.astype(np.float32)


def baseline_outputs(train: np.ndarray, stype: int, num_classes: int, loss: str = "mse",
                     pos_weight: float = 1.0) -> np.ndarray:
    """The constant output of the best label-blind model fitted on the train labels under
    the training loss: their mean (numeric, timestamp; their median under ``l1``, the
    zero of the clipped errors' sum under ``huber``), the logit of their mean with the positives counted
    ``pos_weight`` times (boolean), the log of their class frequencies with one added count
    per class (categorical; no class gets probability 0)."""
    if stype in (NUMERIC, TIMESTAMP):
        values = train.astype(np.float64)
        if loss == "l1":
            return np.array([np.median(values)])
        if loss == "huber":
            return np.array([huber_location(values)])
        return np.array([np.mean(values)])
    if stype == BOOLEAN:
        p = float(np.mean(train.astype(np.float64)))
        p = float(np.clip(pos_weight * p / (pos_weight * p + 1 - p), 1e-6, 1 - 1e-6))
        return np.array([math.log(p / (1 - p))])
    counts = np.bincount(train.astype(np.int64), minlength=num_classes).astype(np.float64)
    return np.log((counts + 1) / (counts.sum() + num_classes))[None, :]


def huber_location(values: np.ndarray) -> float:
    """The constant ``c`` minimising the smooth-L1 loss (threshold 1) over ``values``: the zero
    of ``sum(clip(c - v, -1, 1))``, non-decreasing in ``c``, found by bisection."""
    lo, hi = float(np.min(values)), float(np.max(values))
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if np.sum(np.clip(mid - values, -1.0, 1.0)) < 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def baseline_predictions(sampler: Any, task: str, n: int, db: Any = None, loss: str = "mse",
                         pos_weight: float = 1.0) -> np.ndarray:
    """``n`` copies of the constant baseline output of ``task`` (see ``baseline_outputs``)."""
    info = sampler.label_info(task)
    out = baseline_outputs(train_labels(sampler, task, db), info.stype, info.num_classes,
                           loss, pos_weight)
    if info.stype == CATEGORICAL:
        return np.repeat(out, n, axis=0)
    return np.repeat(out, n)


# --- timing, recording, the result line -------------------------------------------------------


def positive_weight(args: TrainArgs, sampler: Any) -> float:
    """``--pos-weight`` as a number: ``auto`` is negatives / positives of the task's train
    split (1 when the task is not boolean, or a class is missing)."""
    if args.pos_weight != "auto":
        return float(args.pos_weight)
    if sampler.label_info(args.task).stype != BOOLEAN:
        return 1.0
    labels = train_labels(sampler, args.task)
    positives = float(np.sum(labels > 0.5))
    negatives = float(labels.size) - positives
    return negatives / positives if positives and negatives else 1.0


def percentile_ms(seconds: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(seconds, np.float64), q) * 1e3) if len(seconds) else \
        float("nan")


class Recorder:
    """``--record``: one JSON object per line, appended and flushed as each step ends (a
    resumed run appends to the same file)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close)

    def write(self, record: Mapping[str, Any]) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def result(*, framework: str, world_size: int, steps: int, info: Any,
           predictions: np.ndarray, labels: np.ndarray, baseline: np.ndarray,
           waits: Sequence[float], step_times: Sequence[float], losses: Sequence[float],
           loss: str = "mse", pos_weight: float = 1.0, **extra: Any) -> dict[str, Any]:
    """The result object: validation over the whole val split (``predictions`` and
    ``labels`` of every val seed once) under the training loss, the baseline's loss on the
    same seeds, the consumer's wait for a batch and the step time (both in ms, the first step
    excluded by the caller)."""
    stype = int(info.stype)
    val = val_losses(predictions, labels, stype, loss, pos_weight)
    base = val_losses(baseline, labels, stype, loss, pos_weight)
    tail = max(1, len(losses) // 10)
    step_ms = float(np.mean(step_times) * 1e3) if len(step_times) else float("nan")
    out = {
        "framework": framework, "world_size": int(world_size), "steps": int(steps),
        "task": info.task, "target": info.stype_name, "val_count": int(len(val)),
        "val_loss": float(val.mean()), "metric": METRIC_NAMES[stype],
        "val_metric": metric_of(predictions, labels, stype, float(info.std)),
        "baseline_val_loss": float(base.mean()),
        "baseline_val_metric": metric_of(baseline, labels, stype, float(info.std)),
        "train_loss_first": float(np.mean(losses[:tail])) if len(losses) else float("nan"),
        "train_loss_last": float(np.mean(losses[-tail:])) if len(losses) else float("nan"),
        "wait_p50_ms": percentile_ms(waits, 50), "wait_p99_ms": percentile_ms(waits, 99),
        "step_ms": step_ms, "loss": loss, "pos_weight": float(pos_weight),
    }
    out.update(extra)
    return out


def emit(record: Mapping[str, Any]) -> None:
    """The result line: one JSON object, the last line on stdout (nan becomes null)."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
             for k, v in record.items()}
    print(json.dumps(clean), flush=True)
