"""The batch as the models read it, changed here in numpy so both frameworks' models read the
same inputs: :func:`prepare` applies ``--context anchor-only`` (:func:`anchor_only`),
``--anchor-features mask`` (:func:`masked_anchor`), ``--numeric-squash log``
(:func:`squash_log`) and ``--absolute-time drop``, and cuts ``fk_adj`` to the rows in use
(:func:`crop_rows`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import options

ABSOLUTE_TIME_FEATURE = 14  # the z-scored time itself; 0..13 are calendar phases


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


def prepare(batch: Mapping[str, np.ndarray], args: options.TrainArgs) -> dict[str, np.ndarray]:
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
