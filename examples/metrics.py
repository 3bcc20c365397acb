"""Losses, metrics and the constant baseline, computed from a model's raw outputs in numpy
(:func:`val_losses`, :func:`metric_of`, :func:`baseline_predictions`), so both frameworks
report the same numbers for the same outputs; and the result line (:func:`result`,
:func:`emit`).

Model outputs, per sequence, in the label's units (docs/batch_format.md, ``labels``):
numeric and timestamp targets a prediction of the z-scored value ``[N]``; boolean targets a
logit ``[N]``; categorical targets logits over the target column's classes ``[N, C]``.
The losses are the ones the models train with: squared error, binary cross-entropy with
logits, cross-entropy. The metric is AUC for a boolean target, accuracy for a categorical
one, and the mean absolute error in the column's own units (``std * |prediction - label|``)
for numeric and timestamp targets.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import options

# dlkit's semantic types (the batch's semantic_types and target_stype), in its order
NUMERIC, BOOLEAN, TIMESTAMP, CATEGORICAL, TEXT = range(5)
NUM_STYPES = 5
METRIC_NAMES = {NUMERIC: "mae", BOOLEAN: "auc", TIMESTAMP: "mae", CATEGORICAL: "accuracy"}
# the loss a boolean or categorical target trains with (a numeric or timestamp one: --loss)
CLASSIFICATION_LOSSES = {BOOLEAN: "bce", CATEGORICAL: "cross_entropy"}


# --- losses, metrics, baseline ----------------------------------------------------------------


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def training_loss(stype: int, loss: str) -> str:
    """The name of the loss a target of ``stype`` trains with under ``--loss`` ``loss``."""
    return CLASSIFICATION_LOSSES.get(stype, loss)


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
    """The task's metric of ``predictions``; nan (null on the result line) unless every
    prediction is finite: a diverged model's NaN scores would otherwise rank as ties, or
    argmax to class 0, and score like a model."""
    p = np.asarray(predictions, dtype=np.float64)
    if not np.isfinite(p).all():
        return float("nan")
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
    zero of the clipped errors' sum under ``huber``), the logit of their mean with the
    positives counted ``pos_weight`` times (boolean), the log of their class frequencies with
    one added count per class (categorical; no class gets probability 0)."""
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


def positive_weight(args: options.TrainArgs, sampler: Any) -> float:
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


# --- timing, the result line -----------------------------------------------------------------


def percentile_ms(seconds: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(seconds, np.float64), q) * 1e3) if len(seconds) else \
        float("nan")


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
        "step_ms": step_ms, "loss": training_loss(stype, loss),
        "pos_weight": float(pos_weight),
    }
    out.update(extra)
    return out


def emit(record: Mapping[str, Any]) -> None:
    """The result line: one JSON object, the last line on stdout (nan becomes null)."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
             for k, v in record.items()}
    print(json.dumps(clean), flush=True)
