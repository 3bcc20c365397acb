"""The torch example's compact Relational Transformer (``train_torch.py`` trains it,
``pretrain.py`` shares it across databases).

The model follows the batch's structure (docs/batch_format.md), not a flat sequence:

* a token per cell: a value encoder per semantic type (linear maps of numbers, booleans and
  the 15 timestamp features; the frozen categorical and text embeddings through learned
  projections), a learned vector for null cells and one for the hidden target cell, plus the
  column's name embedding (the frozen column table through a learned projection);
* layers whose attention heads each see one relation, at a cost linear in S (no S x S
  mask): the same row and the same column through the sorted cell orders ``out_perm`` /
  ``col_perm`` (blocks of ``--attention-block`` cells, each attending to itself and its two
  neighbours where the row / column matches: ``window_attention``), the rows this row
  points to (foreign-key parents, from ``fk_adj``) and the rows pointing to it (children)
  between rows (``row_attention``: a row's q, k, v the means of its cells', the result
  given to each of its cells). Every position attends at least to itself; padding only to
  itself and nothing attends to padding. Attention is QK-normalised in float32
  (``q / max(|q|, 1e-6)``, a ``-1e9`` fill); ``relation_masks`` is the dense definition the
  tests compare with;
* the target cell's final state reads every real cell once more (``Readout``, unless
  ``--readout target``) and feeds one decoder head per target type, and the loss is the
  null-aware dispatch: ``null_loss + (1 - target_is_null) * type_loss`` with ``type_loss``
  picked from the four heads' losses by the batch's ``target_stype``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import metrics
import torch
import torch.nn.functional as F
from torch import nn

NUM_TYPES = 5  # numeric, boolean, timestamp, categorical, text
MASK_FILL = -1e9


@dataclass(frozen=True)
class ModelConfig:
    d_model: int
    layers: int
    heads: int
    table_dim: int    # width of the column and categorical embedding tables
    text_dim: int     # width of text_batch_embeddings
    num_classes: int  # classes of a categorical target (0 for other targets)
    block: int = 32   # attention window block of the row and column relations
    numeric_encoding: str = "shared"  # or "column": a value direction per column too
    column_gain: float = 1.0  # factor on the terms made from the column's embedding
    dropout: float = 0.0  # on each layer's attention and feed-forward outputs (training only)
    fk_attention: str = "rows"  # or "cells": the parent / child heads read cells, not means
    readout: str = "attention"  # the target cell reads every cell; "target": it does not


RELATIONS = ("row", "parents", "children", "column")


class RelationAttention(nn.Module):
    """Multi-head attention whose heads each see one relation (``RELATIONS``, in turn),
    QK-normalised in float32: ``q / max(|q|, 1e-6)``, a learned temperature per head; the
    relations are computed by :func:`relation_attention` at a cost linear in ``S``."""

    def __init__(self, d: int, heads: int, block: int, fk_cells: bool = False):
        super().__init__()
        self.heads = heads
        self.block = block
        self.fk_cells = fk_cells
        self.qkv = nn.Linear(d, 3 * d, bias=False)  # no bias: padding gives zero q/k, made safe
        self.out = nn.Linear(d, d, bias=False)
        # q and k are unit vectors, so the logits need a temperature (learned, per head)
        self.log_scale = nn.Parameter(torch.full((heads, 1, 1), math.log(8.0)))

    def forward(self, x: torch.Tensor, structure: dict[str, torch.Tensor]) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = q.float(), k.float()
        q = q / q.norm(dim=-1, keepdim=True).clamp_min(1e-6) * self.log_scale.exp()
        k = k / k.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        y = relation_attention(q, k, v.float(), structure, self.block, self.fk_cells)
        return self.out(y.to(x.dtype).transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    """Pre-norm residual relation attention, then a feed-forward layer; ``dropout`` on each
    one's output before it joins the residual stream."""

    def __init__(self, d: int, heads: int, block: int, dropout: float = 0.0,
                 fk_cells: bool = False):
        super().__init__()
        self.attn_norm = nn.RMSNorm(d)
        self.attn = RelationAttention(d, heads, block, fk_cells)
        self.ff_norm = nn.RMSNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.drop = nn.Dropout(dropout)  # no parameters: the model's weights do not move

    def forward(self, h: torch.Tensor, structure: dict[str, torch.Tensor]) -> torch.Tensor:
        h = h + self.drop(self.attn(self.attn_norm(h), structure))
        return h + self.drop(self.ff(self.ff_norm(h)))


def relation_masks(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The relations' dense cell-to-cell masks [B, 4, S, S] (``RELATIONS`` order; the diagonal
    always in, padding only on it): the definition the sparse attention is tested against, not
    used in training (it costs S^2 per sequence)."""
    rows = batch["seq_row_ids"].long()
    cols = batch["column_ids"].long()
    real = batch["is_padding"] == 0
    both = real[:, :, None] & real[:, None, :]
    b, s = rows.shape
    # fk_adj[b, i, j] = 1: row j is a foreign-key parent of row i. Cell p may read cell q
    # of a parent row when fk_adj[row(p), row(q)]; of a child row when fk_adj[row(q), row(p)].
    adj = batch["fk_adj"].bool()
    parents = adj[torch.arange(b)[:, None, None], rows[:, :, None], rows[:, None, :]]
    masks = torch.stack([rows[:, :, None] == rows[:, None, :], parents, parents.transpose(1, 2),
                         cols[:, :, None] == cols[:, None, :]], dim=1)
    return masks & both[:, None] | torch.eye(s, dtype=torch.bool)


def batch_structure(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What the attention reads of a batch: each cell's row and column, validity, the two
    sorted cell orders (``out_perm``: by row, ``col_perm``: by column) and ``fk_adj``."""
    return {"rows": batch["seq_row_ids"].long(), "cols": batch["column_ids"].long(),
            "valid": batch["is_padding"] == 0, "by_row": batch["out_perm"].long(),
            "by_col": batch["col_perm"].long(), "fk_adj": batch["fk_adj"].bool()}


def _neighbour_blocks(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Blocks ``n - 1, n, n + 1`` of ``t`` (blocks along ``dim``, their entries along
    ``dim + 1``) side by side along ``dim + 1``; missing blocks are zeros."""
    pad = [0, 0] * (t.dim() - dim - 1) + [1, 1]
    padded = F.pad(t, pad)
    n = t.shape[dim]
    return torch.cat([padded.narrow(dim, 0, n), padded.narrow(dim, 1, n),
                      padded.narrow(dim, 2, n)], dim=dim + 1)


def window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, order: torch.Tensor,
                     group: torch.Tensor, valid: torch.Tensor, block: int) -> torch.Tensor:
    """Attention among cells of the same ``group`` [B, S], read through ``order`` [B, S] (a
    permutation sorting the cells by group, padding last): the sorted cells are cut into
    blocks of ``block`` and each attends to its own block and the two beside it, where the
    group matches and the key is not padding (itself always). Exact for groups of at most
    ``block + 1`` cells; a larger group is seen through a window of at least ``block`` cells
    each side. ``q``, ``k``, ``v``: [B, H, S, dh]; cost O(S * 3 * block)."""
    b, h, s, dh = q.shape
    n = -(-s // block)
    extra = n * block - s
    if extra:
        q, k, v = (F.pad(t, (0, 0, 0, extra)) for t in (q, k, v))
        order = torch.cat([order, torch.arange(s, s + extra).expand(b, extra)], dim=1)
        group, valid = F.pad(group, (0, extra)), F.pad(valid, (0, extra))
    index = order[:, None, :, None].expand(b, h, n * block, dh)
    qs, ks, vs = (t.gather(2, index).view(b, h, n, block, dh) for t in (q, k, v))
    gs = group.gather(1, order).view(b, n, block)
    ok = valid.gather(1, order).view(b, n, block)
    kw, vw = _neighbour_blocks(ks, 2), _neighbour_blocks(vs, 2)  # [B, H, n, 3 block, dh]
    gw, okw = _neighbour_blocks(gs, 1), _neighbour_blocks(ok, 1)  # [B, n, 3 block]
    allowed = (gs[..., :, None] == gw[..., None, :]) & ok[..., :, None] & okw[..., None, :]
    eye = torch.zeros(block, 3 * block, dtype=torch.bool)
    eye[torch.arange(block), block + torch.arange(block)] = True
    allowed = (allowed | eye)[:, None]  # [B, 1, n, block, 3 block]
    scores = torch.einsum("bhnqd,bhnkd->bhnqk", qs, kw).masked_fill(~allowed, MASK_FILL)
    y = torch.einsum("bhnqk,bhnkd->bhnqd", scores.softmax(-1), vw).reshape(b, h, n * block, dh)
    out = torch.empty_like(y).scatter_(2, index, y)
    return out[:, :, :s]


def row_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rows: torch.Tensor,
                  valid: torch.Tensor, links: torch.Tensor) -> torch.Tensor:
    """Attention between rows along ``links`` [B, R, R] (``links[b, i, j]``: row ``i`` reads
    row ``j``; every row also reads itself): a row's query, key and value are the means of
    its cells', and each cell receives its row's result (padding cells their own value).
    ``q``, ``k``, ``v``: [B, H, S, dh]; cost O(S + R^2) (``fk_adj`` is R x R already)."""
    b, h, s, dh = q.shape
    r = links.shape[1]
    segment = torch.where(valid, rows, r)  # padding cells pool into a dropped extra row
    index = segment[:, None, :, None].expand(b, h, s, dh)
    count = torch.zeros(b, r + 1).scatter_add_(1, segment, valid.float())[:, :r]

    def pool(t: torch.Tensor) -> torch.Tensor:
        total = t.new_zeros(b, h, r + 1, dh).scatter_add_(2, index, t)[:, :, :r]
        return total / count.clamp_min(1.0)[:, None, :, None]

    qr, kr, vr = pool(q), pool(k), pool(v)
    real = count > 0
    allowed = (links & real[:, None, :]) | torch.eye(r, dtype=torch.bool)
    scores = torch.einsum("bhid,bhjd->bhij", qr, kr).masked_fill(~allowed[:, None], MASK_FILL)
    yr = torch.einsum("bhij,bhjd->bhid", scores.softmax(-1), vr)
    y = yr.gather(2, rows.clamp_max(r - 1)[:, None, :, None].expand(b, h, s, dh))
    return torch.where(valid[:, None, :, None], y, v)


def link_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rows: torch.Tensor,
                   valid: torch.Tensor, links: torch.Tensor) -> torch.Tensor:
    """Attention from each cell to every cell of the rows its row reads along ``links``
    [B, R, R] (``links[b, i, j]``: row ``i`` reads row ``j``), and to itself: the dense
    parents / children relation of :func:`relation_masks`, a parent's cells kept apart
    instead of pooled (``--fk-attention cells``). [B, H, S, dh]; cost O(S^2)."""
    b, _, s, _ = q.shape
    r = links.shape[1]
    safe = rows.clamp_max(r - 1)
    linked = links[torch.arange(b)[:, None, None], safe[:, :, None], safe[:, None, :]]
    allowed = linked & valid[:, :, None] & valid[:, None, :] | torch.eye(s, dtype=torch.bool)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k).masked_fill(~allowed[:, None], MASK_FILL)
    return torch.einsum("bhqk,bhkd->bhqd", scores.softmax(-1), v)


def relation_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       structure: dict[str, torch.Tensor], block: int,
                       fk_cells: bool = False) -> torch.Tensor:
    """Heads take ``RELATIONS`` in turn (H / 4 heads each): the same row and the same column
    by :func:`window_attention` over ``out_perm`` / ``col_perm``; the foreign-key parents and
    children by :func:`row_attention` over ``fk_adj`` and its transpose (by
    :func:`link_attention` with ``fk_cells``). [B, H, S, dh]."""
    per = q.shape[1] // len(RELATIONS)
    parts = []
    for r, name in enumerate(RELATIONS):
        qh, kh, vh = (t[:, r * per:(r + 1) * per] for t in (q, k, v))
        if name == "row":
            parts.append(window_attention(qh, kh, vh, structure["by_row"], structure["rows"],
                                          structure["valid"], block))
        elif name == "column":
            parts.append(window_attention(qh, kh, vh, structure["by_col"], structure["cols"],
                                          structure["valid"], block))
        else:
            links = structure["fk_adj"] if name == "parents" else \
                structure["fk_adj"].transpose(1, 2)
            attend = link_attention if fk_cells else row_attention
            parts.append(attend(qh, kh, vh, structure["rows"], structure["valid"], links))
    return torch.cat(parts, dim=1)


class Readout(nn.Module):
    """The target cell's state reads every real cell of its sequence (multi-head,
    QK-normalised), then a feed-forward layer, both residual: a linked row's one cell (a
    career total among 60) reaches the target whole instead of through its row's mean."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm = nn.RMSNorm(d)
        self.q = nn.Linear(d, d, bias=False)
        self.kv = nn.Linear(d, 2 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.log_scale = nn.Parameter(torch.full((heads, 1), math.log(8.0)))
        self.ff_norm = nn.RMSNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, target: torch.Tensor, h: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        b, s, d = h.shape
        dh = d // self.heads
        q = self.q(self.norm(target)).view(b, self.heads, dh).float()
        k, v = self.kv(h).view(b, s, 2, self.heads, dh).permute(2, 0, 3, 1, 4).float()
        q = q / q.norm(dim=-1, keepdim=True).clamp_min(1e-6) * self.log_scale.exp()
        k = k / k.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        scores = torch.einsum("bhd,bhsd->bhs", q, k).masked_fill(~valid[:, None], MASK_FILL)
        y = torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), v).reshape(b, d)
        target = target + self.out(y.to(target.dtype))
        return target + self.ff(self.ff_norm(target))


class RelationalTransformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d = cfg.d_model
        self.cfg = cfg
        self.numeric = nn.Linear(1, d)
        self.boolean = nn.Linear(1, d)
        self.timestamp = nn.Linear(15, d)
        self.categorical = nn.Linear(cfg.table_dim, d)
        self.text = nn.Linear(cfg.text_dim, d)
        self.column = nn.Linear(cfg.table_dim, d)
        self.type_embedding = nn.Embedding(NUM_TYPES, d)
        self.null_embedding = nn.Embedding(NUM_TYPES, d)
        self.target_embedding = nn.Parameter(torch.randn(d) * 0.02)
        self.blocks = nn.ModuleList(Block(d, cfg.heads, cfg.block, cfg.dropout,
                                          cfg.fk_attention == "cells")
                                    for _ in range(cfg.layers))
        self.final_norm = nn.RMSNorm(d)
        self.heads = nn.Linear(d, 4)  # numeric, boolean logit, timestamp, null logit
        # Class logits from a plain linear map: scoring the state against the (projected)
        # class-name embeddings learned far slower, as "segment is books" and "segment is
        # toys" embed close together.
        self.classes = nn.Linear(d, cfg.num_classes) if cfg.num_classes else None
        # --numeric-encoding column: value x (a direction projected from the column's
        # embedding) beside value x the shared one. Made last, only then, so the shared
        # model's initial weights do not move.
        self.numeric_column = nn.Linear(cfg.table_dim, d, bias=False) \
            if cfg.numeric_encoding == "column" else None
        self.readout = Readout(d, cfg.heads) if cfg.readout == "attention" else None

    def encode(self, batch: dict[str, torch.Tensor],
               tables: dict[str, torch.Tensor]) -> torch.Tensor:
        stypes = batch["semantic_types"].long()
        text_table = batch["text_batch_embeddings"].float()
        if text_table.shape[0] == 0:  # no text in this batch: every text id is 0 anyway
            text_table = torch.zeros(1, self.cfg.text_dim)
        # Project the (small) tables once, then look rows up: cheaper than projecting cells.
        numeric = self.numeric(batch["numeric_values"][..., None])
        if self.numeric_column is not None:
            direction = self.numeric_column(tables["column"])[batch["column_ids"].long()]
            direction = direction * self.cfg.column_gain
            numeric = numeric + batch["numeric_values"][..., None] * direction
        values = torch.stack([
            numeric,
            self.boolean(batch["bool_values"].float()[..., None]),
            self.timestamp(batch["timestamp_values"]),
            self.categorical(tables["categorical"])[batch["categorical_embed_ids"].long()],
            self.text(text_table)[batch["text_embed_ids"].long()],
        ], dim=2)  # [B, S, 5, d]: every encoder on every cell, the cell's type picks one
        value = values.gather(2, stypes[:, :, None, None].expand(-1, -1, 1, values.shape[-1]))
        value = value[:, :, 0]
        value = torch.where(batch["is_null"].bool()[..., None], self.null_embedding(stypes), value)
        value = torch.where(batch["is_target"].bool()[..., None], self.target_embedding, value)
        column = self.column(tables["column"])[batch["column_ids"].long()]
        if self.cfg.column_gain != 1.0:
            column = column * self.cfg.column_gain
        # Padding is not zeroed: exact-zero states give NaN gradients through the norms, and
        # the masks already keep padding out of every real cell's attention.
        return value + column + self.type_embedding(stypes)

    def forward(self, batch: dict[str, torch.Tensor],
                tables: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        h = self.encode(batch, tables)
        structure = batch_structure(batch)
        for block in self.blocks:
            h = block(h, structure)
        h = self.final_norm(h)
        target = (h * batch["is_target"].float()[..., None]).sum(1)  # one target cell per row
        if self.readout is not None:
            target = self.readout(target, h, structure["valid"])
        scalar = self.heads(target)
        return {"state": target, "numeric": scalar[:, 0], "boolean": scalar[:, 1],
                "timestamp": scalar[:, 2], "null": scalar[:, 3],
                "categorical": self.classes(target) if self.classes is not None
                else target.new_zeros(target.shape[0], 0)}


def regression_loss(prediction: torch.Tensor, y: torch.Tensor, loss: str) -> torch.Tensor:
    """Per-sequence ``--loss`` of a numeric or timestamp prediction (z units)."""
    if loss == "l1":
        return (prediction - y).abs()
    if loss == "huber":
        return F.smooth_l1_loss(prediction, y, reduction="none", beta=1.0)
    return (prediction - y) ** 2


def loss_per_sequence(out: dict[str, torch.Tensor], batch: dict[str, torch.Tensor],
                      loss: str = "mse", pos_weight: float = 1.0) -> torch.Tensor:
    """Null-aware loss dispatch: every head's loss is computed, the batch's type selects one.
    ``loss``: the numeric and timestamp heads' (``--loss``); ``pos_weight``: the weight of a
    positive boolean label (``--pos-weight``)."""
    labels = batch["labels"]
    stype = int(batch["target_stype"][0])
    y = labels.float()
    num_loss = regression_loss(out["numeric"], y, loss)
    weight = None if pos_weight == 1.0 else torch.tensor(pos_weight)
    bool_loss = F.binary_cross_entropy_with_logits(out["boolean"], y.clamp(0, 1),
                                                   reduction="none", pos_weight=weight)
    ts_loss = regression_loss(out["timestamp"], y, loss)
    if out["categorical"].shape[1] > 0 and stype == metrics.CATEGORICAL:
        cat_loss = F.cross_entropy(out["categorical"], labels.long(), reduction="none")
    else:  # not a categorical batch: zeros the selector ignores
        cat_loss = torch.zeros_like(num_loss)
    type_losses = torch.stack([num_loss, bool_loss, ts_loss, cat_loss])  # [4, B]
    selector = F.one_hot(batch["target_stype"].long(), 4).float()         # [1, 4]
    type_loss = (selector @ type_losses)[0]
    target_null = (batch["is_null"] * batch["is_target"]).sum(1).float()  # 0: seeds have labels
    null_loss = F.binary_cross_entropy_with_logits(out["null"], target_null, reduction="none")
    return null_loss + (1 - target_null) * type_loss


def outputs_for_metrics(out: dict[str, torch.Tensor], stype: int) -> torch.Tensor:
    """The head of the target's type, as examples/metrics.py expects it."""
    name = {metrics.NUMERIC: "numeric", metrics.BOOLEAN: "boolean",
            metrics.TIMESTAMP: "timestamp", metrics.CATEGORICAL: "categorical"}[stype]
    return out[name]
