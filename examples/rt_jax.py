"""The JAX example's compact Relational Transformer (``train_jax.py`` trains it), functions of
a parameter tree.

The model reads the batch's structure (docs/batch_format.md): a token per cell (a value
encoder per semantic type, plus the column's name embedding from the resident table, plus
null/target flags), then layers whose attention heads each see one relation: cells of the same
row and of the same column (windows of the sorted cell orders), the row's foreign-key parents
and its children (attention between rows over ``fk_adj``): the torch example's attention,
the same math (``relation_attention``; tests/examples/test_attention.py compares them).
The target cell's final state reads every real cell once more (``_readout``, unless
``--readout target``) and feeds one decoder head for the task's target type. It is the
torch example's model made smaller: one attention per layer (a head per relation) where torch
has four, and the loss of the task's type only (seeds never have a null target).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
from metrics import BOOLEAN, CATEGORICAL, NUM_STYPES

# Attention relations, one group of heads each (same row, FK parents, FK children, same column)
RELATIONS = ("row", "parents", "children", "column")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    d_model: int
    heads_per_relation: int
    layers: int
    table_dim: int  # width of the column and category embedding tables
    text_dim: int
    out_dim: int    # 1 (numeric, boolean, timestamp) or the number of classes
    stype: int      # the task's target type
    block: int = 32  # attention window block of the row and column relations
    numeric_encoding: str = "shared"  # or "column": a value direction per column too
    column_gain: float = 1.0  # factor on the terms made from the column's embedding
    dropout: float = 0.0  # on each layer's attention and feed-forward outputs (training only)
    fk_attention: str = "rows"  # or "cells": the parent / child heads read cells, not means
    readout: str = "attention"  # the target cell reads every cell; "target": it does not
    loss: str = "mse"  # of a numeric or timestamp target (--loss)
    pos_weight: float = 1.0  # of a positive boolean label (--pos-weight, resolved)

    @property
    def heads(self) -> int:
        return self.heads_per_relation * len(RELATIONS)


def _dense(key: jax.Array, fan_in: int, fan_out: int) -> jax.Array:
    return jax.random.normal(key, (fan_in, fan_out), jnp.float32) / math.sqrt(fan_in)


def init_params(key: jax.Array, cfg: ModelConfig) -> dict[str, Any]:
    keys = iter(jax.random.split(key, 16 + 8 * cfg.layers))
    d = cfg.d_model

    def small(*shape: int) -> jax.Array:
        return 0.02 * jax.random.normal(next(keys), shape, jnp.float32)

    def dense(fan_in: int, fan_out: int, scale: float = 1.0) -> jax.Array:
        return _dense(next(keys), fan_in, fan_out) * scale

    residual = 1 / math.sqrt(2 * cfg.layers)  # keeps the residual stream's scale with depth
    encoders = {"numeric": small(d), "boolean": small(d), "timestamp": dense(15, d),
                "categorical": dense(cfg.table_dim, d), "text": dense(cfg.text_dim, d),
                "column": dense(cfg.table_dim, d), "stype": small(NUM_STYPES, d),
                "null": small(d), "target": small(d)}
    if cfg.numeric_encoding == "column":  # value x a direction from the column's embedding
        encoders["numeric_column"] = dense(cfg.table_dim, d)
    layers = [{"attn_norm": jnp.ones(d), "qkv": dense(d, 3 * d), "proj": dense(d, d, residual),
               "mlp_norm": jnp.ones(d), "up": dense(d, 4 * d), "up_b": jnp.zeros(4 * d),
               "down": dense(4 * d, d, residual), "down_b": jnp.zeros(d)}
              for _ in range(cfg.layers)]
    extra = {}
    if cfg.readout == "attention":  # the target cell reads every cell, then a feed-forward
        extra["readout"] = {"norm": jnp.ones(d), "q": dense(d, d), "kv": dense(d, 2 * d),
                            "proj": dense(d, d, residual), "mlp_norm": jnp.ones(d),
                            "up": dense(d, 4 * d), "up_b": jnp.zeros(4 * d),
                            "down": dense(4 * d, d, residual), "down_b": jnp.zeros(d)}
    head = {"norm": jnp.ones(d), "hidden": dense(d, d), "hidden_b": jnp.zeros(d),
            "out": dense(d, cfg.out_dim, 0.1), "out_b": jnp.zeros(cfg.out_dim)}
    return {"enc": encoders, "layers": layers, "head": head, **extra}


def _rms_norm(x: jax.Array, scale: jax.Array) -> jax.Array:
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * scale


def encode_cells(params: dict[str, Any], batch: dict[str, jax.Array],
                 tables: dict[str, jax.Array], column_gain: float = 1.0) -> jax.Array:
    """``[B, S, d]`` cell tokens: the value's encoder for its type (zero for null, target and
    padding cells, whose values are 0 anyway) plus the column, type and flag embeddings; the
    terms made from the column embedding times ``column_gain``."""
    p = params["enc"]
    stype = batch["semantic_types"].astype(jnp.int32)
    is_null = batch["is_null"].astype(jnp.float32)
    is_target = batch["is_target"].astype(jnp.float32)
    present = (1 - is_null) * (1 - is_target) * (1 - batch["is_padding"].astype(jnp.float32))
    if tables["categorical_embeddings"].shape[0]:
        categories = tables["categorical_embeddings"][batch["categorical_embed_ids"]]
    else:  # no categorical column in the database: nothing to look up
        categories = jnp.zeros(stype.shape + tables["categorical_embeddings"].shape[1:])
    if batch["text_batch_embeddings"].shape[0]:
        texts = batch["text_batch_embeddings"][batch["text_embed_ids"]]
    else:
        texts = jnp.zeros(stype.shape + batch["text_batch_embeddings"].shape[1:])
    columns = tables["column_embeddings"][batch["column_ids"]].astype(jnp.float32)
    numeric = batch["numeric_values"][..., None] * p["numeric"]
    if "numeric_column" in p:
        numeric = numeric + batch["numeric_values"][..., None] * (
            columns @ p["numeric_column"] * column_gain)
    values = jnp.stack([
        numeric,
        (2.0 * batch["bool_values"].astype(jnp.float32) - 1.0)[..., None] * p["boolean"],
        batch["timestamp_values"] @ p["timestamp"],
        categories.astype(jnp.float32) @ p["categorical"],
        texts.astype(jnp.float32) @ p["text"],
    ], axis=-2)  # [B, S, 5, d]
    which = jax.nn.one_hot(stype, NUM_STYPES) * present[..., None]
    columns = columns @ p["column"]
    if column_gain != 1.0:
        columns = columns * column_gain
    return (jnp.einsum("bsk,bskd->bsd", which, values) + columns + p["stype"][stype]
            + is_null[..., None] * p["null"] + is_target[..., None] * p["target"])


def relation_masks(batch: dict[str, jax.Array]) -> jax.Array:
    """``[B, 4, S, S]`` bool: may cell ``i`` attend to cell ``j`` in each relation. Padding is
    never a key; every cell sees itself (so no softmax row is empty)."""
    rows = batch["seq_row_ids"].astype(jnp.int32)
    cols = batch["column_ids"]
    fk = batch["fk_adj"].astype(bool)  # [B, R, R]: fk[b, i, j] = row j is a parent of row i
    # parents[b, i, j] = fk[b, row(i), row(j)]
    by_row = jnp.take_along_axis(fk, rows[:, :, None], axis=1)           # [B, S, R]
    parents = jnp.take_along_axis(by_row, jnp.broadcast_to(rows[:, None, :], by_row.shape[:2]
                                                           + rows.shape[1:]), axis=2)
    same_row = rows[:, :, None] == rows[:, None, :]
    same_col = cols[:, :, None] == cols[:, None, :]
    masks = jnp.stack([same_row, parents, jnp.swapaxes(parents, 1, 2), same_col], axis=1)
    key_ok = (batch["is_padding"] == 0)[:, None, None, :]
    eye = jnp.eye(rows.shape[1], dtype=bool)[None, None]
    return (masks & key_ok) | eye


MASK_FILL = -1e9


def batch_structure(batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """What the attention reads of a batch: each cell's row and column, validity, the two
    sorted cell orders (``out_perm``: by row, ``col_perm``: by column) and ``fk_adj``."""
    return {"rows": batch["seq_row_ids"].astype(jnp.int32),
            "cols": batch["column_ids"].astype(jnp.int32),
            "valid": batch["is_padding"] == 0, "by_row": batch["out_perm"].astype(jnp.int32),
            "by_col": batch["col_perm"].astype(jnp.int32), "fk_adj": batch["fk_adj"] != 0}


def _neighbour_blocks(t: jax.Array, axis: int) -> jax.Array:
    """Blocks ``n - 1, n, n + 1`` of ``t`` (blocks along ``axis``, their entries along
    ``axis + 1``) side by side along ``axis + 1``; missing blocks are zeros."""
    pad = [(0, 0)] * t.ndim
    pad[axis] = (1, 1)
    padded = jnp.pad(t, pad)
    n = t.shape[axis]
    parts = [jax.lax.slice_in_dim(padded, i, i + n, axis=axis) for i in range(3)]
    return jnp.concatenate(parts, axis=axis + 1)


def window_attention(q: jax.Array, k: jax.Array, v: jax.Array, order: jax.Array,
                     group: jax.Array, valid: jax.Array, block: int) -> jax.Array:
    """Attention among cells of the same ``group`` [B, S] through ``order`` (the torch
    example's ``window_attention``: the sorted cells in blocks of ``block``, each attending
    to its own block and the two beside it where the group matches and the key is not
    padding, itself always). ``q``, ``k``, ``v``: [B, S, H, dh]."""
    b, s, h, dh = q.shape
    n = -(-s // block)
    extra = n * block - s
    if extra:
        q, k, v = (jnp.pad(t, ((0, 0), (0, extra), (0, 0), (0, 0))) for t in (q, k, v))
        order = jnp.concatenate([order, jnp.broadcast_to(
            jnp.arange(s, s + extra, dtype=order.dtype), (b, extra))], axis=1)
        group = jnp.pad(group, ((0, 0), (0, extra)))
        valid = jnp.pad(valid, ((0, 0), (0, extra)))
    qs, ks, vs = (jnp.take_along_axis(t, order[:, :, None, None], axis=1)
                  .reshape(b, n, block, h, dh) for t in (q, k, v))
    gs = jnp.take_along_axis(group, order, axis=1).reshape(b, n, block)
    ok = jnp.take_along_axis(valid, order, axis=1).reshape(b, n, block)
    kw, vw = _neighbour_blocks(ks, 1), _neighbour_blocks(vs, 1)  # [B, n, 3 block, H, dh]
    gw, okw = _neighbour_blocks(gs, 1), _neighbour_blocks(ok, 1)  # [B, n, 3 block]
    allowed = (gs[..., :, None] == gw[..., None, :]) & ok[..., :, None] & okw[..., None, :]
    eye = jnp.zeros((block, 3 * block), bool).at[jnp.arange(block),
                                                  block + jnp.arange(block)].set(True)
    allowed = (allowed | eye)[:, :, None]  # [B, n, 1, block, 3 block]
    scores = jnp.where(allowed, jnp.einsum("bnqhd,bnkhd->bnhqk", qs, kw), MASK_FILL)
    y = jnp.einsum("bnhqk,bnkhd->bnqhd", jax.nn.softmax(scores, axis=-1), vw)
    inverse = jnp.argsort(order, axis=1)
    return jnp.take_along_axis(y.reshape(b, n * block, h, dh), inverse[:, :, None, None],
                               axis=1)[:, :s]


def row_attention(q: jax.Array, k: jax.Array, v: jax.Array, rows: jax.Array,
                  valid: jax.Array, links: jax.Array) -> jax.Array:
    """Attention between rows along ``links`` [B, R, R] (the torch example's
    ``row_attention``: rows' q, k, v are the means of their cells', each row also reads
    itself, each cell receives its row's result, padding cells their own value).
    ``q``, ``k``, ``v``: [B, S, H, dh]."""
    b, s, h, dh = q.shape
    r = links.shape[1]
    segment = jnp.where(valid, rows, r)

    def pool_one(t: jax.Array, seg: jax.Array) -> jax.Array:
        return jax.ops.segment_sum(t, seg, num_segments=r + 1)[:r]

    count = jax.vmap(pool_one)(valid.astype(jnp.float32), segment)  # [B, R]
    scale = 1.0 / jnp.maximum(count, 1.0)[:, :, None, None]
    qr, kr, vr = (jax.vmap(pool_one)(t, segment) * scale for t in (q, k, v))  # [B, R, H, dh]
    real = count > 0
    allowed = (links & real[:, None, :]) | jnp.eye(r, dtype=bool)
    scores = jnp.where(allowed[:, None], jnp.einsum("bihd,bjhd->bhij", qr, kr), MASK_FILL)
    yr = jnp.einsum("bhij,bjhd->bihd", jax.nn.softmax(scores, axis=-1), vr)
    y = jnp.take_along_axis(yr, jnp.minimum(rows, r - 1)[:, :, None, None], axis=1)
    return jnp.where(valid[:, :, None, None], y, v)


def link_attention(q: jax.Array, k: jax.Array, v: jax.Array, rows: jax.Array,
                   valid: jax.Array, links: jax.Array) -> jax.Array:
    """Attention from each cell to every cell of the rows its row reads along ``links``
    [B, R, R], and to itself (the torch example's ``link_attention``,
    ``--fk-attention cells``). [B, S, H, dh]; cost O(S^2)."""
    s = q.shape[1]
    r = links.shape[1]
    safe = jnp.minimum(rows, r - 1)
    linked = jax.vmap(lambda link, row: link[row[:, None], row[None, :]])(links, safe)
    allowed = (linked & valid[:, :, None] & valid[:, None, :]) | jnp.eye(s, dtype=bool)
    scores = jnp.where(allowed[:, None], jnp.einsum("bqhd,bkhd->bhqk", q, k), MASK_FILL)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)


def relation_attention(q: jax.Array, k: jax.Array, v: jax.Array,
                       structure: dict[str, jax.Array], block: int,
                       fk_cells: bool = False) -> jax.Array:
    """Heads take ``RELATIONS`` in turn: the same row and the same column by
    ``window_attention`` over ``out_perm`` / ``col_perm``, the foreign-key parents and
    children by ``row_attention`` over ``fk_adj`` and its transpose (``link_attention``
    with ``fk_cells``). [B, S, H, dh]."""
    per = q.shape[2] // len(RELATIONS)
    parts = []
    for r, name in enumerate(RELATIONS):
        qh, kh, vh = (t[:, :, r * per:(r + 1) * per] for t in (q, k, v))
        if name == "row":
            parts.append(window_attention(qh, kh, vh, structure["by_row"], structure["rows"],
                                          structure["valid"], block))
        elif name == "column":
            parts.append(window_attention(qh, kh, vh, structure["by_col"], structure["cols"],
                                          structure["valid"], block))
        else:
            links = structure["fk_adj"] if name == "parents" else \
                jnp.swapaxes(structure["fk_adj"], 1, 2)
            attend = link_attention if fk_cells else row_attention
            parts.append(attend(qh, kh, vh, structure["rows"], structure["valid"], links))
    return jnp.concatenate(parts, axis=2)


def _attention(p: dict[str, Any], x: jax.Array, structure: dict[str, jax.Array],
               cfg: ModelConfig) -> jax.Array:
    b, s, d = x.shape
    q, k, v = (t.reshape(b, s, cfg.heads, d // cfg.heads)
               for t in jnp.split(x @ p["qkv"], 3, axis=-1))
    q = q / math.sqrt(d // cfg.heads)
    out = relation_attention(q, k, v, structure, cfg.block, cfg.fk_attention == "cells")
    return out.reshape(b, s, d) @ p["proj"]


def _readout(p: dict[str, Any], target: jax.Array, x: jax.Array, valid: jax.Array,
             heads: int) -> jax.Array:
    """``--readout attention``: the target state ``[B, d]`` attends to every real cell of
    ``x`` ``[B, S, d]`` (``heads`` heads), then a feed-forward layer, both residual."""
    b, s, d = x.shape
    dh = d // heads
    q = (_rms_norm(target, p["norm"]) @ p["q"]).reshape(b, heads, dh) / math.sqrt(dh)
    k, v = (t.reshape(b, s, heads, dh) for t in jnp.split(x @ p["kv"], 2, axis=-1))
    scores = jnp.einsum("bhd,bshd->bhs", q, k)
    scores = jnp.where(valid[:, None, :], scores, -1e9)
    read = jnp.einsum("bhs,bshd->bhd", jax.nn.softmax(scores, axis=-1), v).reshape(b, d)
    target = target + read @ p["proj"]
    hidden = jax.nn.gelu(_rms_norm(target, p["mlp_norm"]) @ p["up"] + p["up_b"])
    return target + hidden @ p["down"] + p["down_b"]


def _dropout(x: jax.Array, rate: float, key: jax.Array | None) -> jax.Array:
    """Inverted dropout (kept values scaled by ``1 / (1 - rate)``); none without a key."""
    if key is None or rate == 0.0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def forward(params: dict[str, Any], batch: dict[str, jax.Array], tables: dict[str, jax.Array],
            cfg: ModelConfig, dropout_key: jax.Array | None = None) -> jax.Array:
    """``[B, out_dim]`` raw outputs for each sequence's target cell; ``dropout_key`` (train
    steps) turns ``cfg.dropout`` on."""
    x = encode_cells(params, batch, tables, cfg.column_gain)
    structure = batch_structure(batch)
    keys = [None] * (2 * len(params["layers"])) if dropout_key is None else \
        list(jax.random.split(dropout_key, 2 * len(params["layers"])))
    for i, layer in enumerate(params["layers"]):
        attended = _attention(layer, _rms_norm(x, layer["attn_norm"]), structure, cfg)
        x = x + _dropout(attended, cfg.dropout, keys[2 * i])
        hidden = jax.nn.gelu(_rms_norm(x, layer["mlp_norm"]) @ layer["up"] + layer["up_b"])
        x = x + _dropout(hidden @ layer["down"] + layer["down_b"], cfg.dropout, keys[2 * i + 1])
    target = jnp.einsum("bs,bsd->bd", batch["is_target"].astype(jnp.float32), x)
    if "readout" in params:
        target = _readout(params["readout"], target, x, structure["valid"], cfg.heads)
    head = params["head"]
    hidden = jax.nn.gelu(_rms_norm(target, head["norm"]) @ head["hidden"] + head["hidden_b"])
    return hidden @ head["out"] + head["out_b"]


def per_sequence_loss(outputs: jax.Array, labels: jax.Array, stype: int, loss: str = "mse",
                      pos_weight: float = 1.0) -> jax.Array:
    """``[B]``: ``loss`` in z units (numeric, timestamp: squared error, absolute error or
    smooth L1), binary cross-entropy on the logit with the positives weighted ``pos_weight``
    (boolean), cross-entropy (categorical). Seeds always have a target, so the null-target
    term of the design's loss is zero here and left out."""
    if stype == BOOLEAN:
        logit = outputs[:, 0]
        # softplus(z) - y z, with the positive term w y softplus(-z) = w y (softplus(z) - z)
        return (1 - labels) * jax.nn.softplus(logit) + pos_weight * labels * jax.nn.softplus(
            -logit)
    if stype == CATEGORICAL:
        picked = jnp.take_along_axis(outputs, labels.astype(jnp.int32)[:, None], axis=1)[:, 0]
        return jax.nn.logsumexp(outputs, axis=1) - picked
    error = outputs[:, 0] - labels
    if loss == "l1":
        return jnp.abs(error)
    if loss == "huber":
        return jnp.where(jnp.abs(error) < 1, 0.5 * error**2, jnp.abs(error) - 0.5)
    return error**2


def masked_mean(values: jax.Array, mask: jax.Array) -> jax.Array:
    mask = mask.astype(jnp.float32)
    return jnp.sum(values * mask) / jnp.maximum(jnp.sum(mask), 1.0)
