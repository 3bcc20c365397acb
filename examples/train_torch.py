#!/usr/bin/env python3
"""Train a compact Relational Transformer on dlkit batches with PyTorch.

One process::

    python examples/train_torch.py --db out/planted/db --task churn --steps 300

Several (DistributedDataParallel over gloo; torchrun sets RANK / WORLD_SIZE / MASTER_ADDR)::

    torchrun --standalone --nproc-per-node 2 examples/train_torch.py --db ... --steps 300

``--batch-size`` is the global batch: each rank's ``dlkit.Sampler`` takes its contiguous
slice (``batch_size = global / world_size``), so the global batches, and a checkpoint's
continuation, are the same on any world size.

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
* the target cell's final state feeds one decoder head per target type, and the loss is the
  null-aware dispatch: ``null_loss + (1 - target_is_null) * type_loss`` with ``type_loss``
  picked from the four heads' losses by the batch's ``target_stype``.
"""

from __future__ import annotations

import gc
import hashlib
import io
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (examples/common.py: flags, ablation, metrics, result line)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import dlkit  # noqa: E402
from dlkit.atomic import atomic_write_bytes  # noqa: E402
from dlkit.torch import to_torch, upload_tables  # noqa: E402

CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_FORMAT = "dlkit-example-torch-v1"
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


# --- model ----------------------------------------------------------------------------------


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
    if out["categorical"].shape[1] > 0 and stype == common.CATEGORICAL:
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
    """The head of the target's type, as examples/common.py expects it."""
    name = {common.NUMERIC: "numeric", common.BOOLEAN: "boolean", common.TIMESTAMP: "timestamp",
            common.CATEGORICAL: "categorical"}[stype]
    return out[name]


# --- distributed helpers ----------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    rank: int
    size: int

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's ``tensor`` (same shape on all), concatenated in rank order on dim 0."""
        if not self.distributed:
            return tensor
        sent = tensor.to(torch.uint8) if tensor.dtype == torch.bool else tensor.contiguous()
        parts = [torch.empty_like(sent) for _ in range(self.size)]
        dist.all_gather(parts, sent)
        return torch.cat(parts).to(tensor.dtype)

    def mean(self, value: float) -> float:
        if not self.distributed:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t[0]) / self.size


def start_world() -> World:
    rank, size = common.world_from_env()
    if size > 1:
        dist.init_process_group("gloo", rank=rank, world_size=size)
    return World(rank, size)


def stop_world(world: World, completed: bool) -> None:
    """Leave the process group, and be sure it is gone before the interpreter shuts down.

    After a completed run every rank first waits for all: on two nodes, ranks that tore their
    connections down while a slower node's ranks still used theirs made those abort. The
    group itself must then die here, not at exit: DistributedDataParallel keeps a reference
    in a reference cycle, so ``destroy_process_group`` alone left the group (and its worker
    threads, still releasing the tensors of finished collectives) alive until the last
    garbage collection of interpreter shutdown; a worker that then needed the GIL was killed
    mid-destructor and the process aborted ("terminate called without an active exception",
    caught under gdb in ``ProcessGroupGloo::runLoop``, about 1 run in 20 on 2 processes).
    Collecting first makes ``destroy_process_group`` drop the last reference, and the
    group's destructor joins its threads while the interpreter is whole."""
    if world.distributed:
        if completed:
            dist.barrier()
        gc.collect()
        dist.destroy_process_group()
        gc.collect()


def parameter_digest(model: nn.Module) -> torch.Tensor:
    """SHA-256 of this rank's parameters (float32, in ``parameters()`` order) as 32 int64s."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().float().contiguous().numpy().tobytes())
    return torch.tensor(list(h.digest()), dtype=torch.int64)


# --- checkpoints --------------------------------------------------------------------------------


def save_checkpoint(path: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                    sampler_state: dict[str, Any], fingerprint: dict[str, Any]) -> None:
    buffer = io.BytesIO()
    torch.save({"format": CHECKPOINT_FORMAT, "fingerprint": fingerprint, "step": step,
                "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "sampler": sampler_state}, buffer)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, common.sealed(buffer.getvalue()))


def load_checkpoint(path: Path, fingerprint: dict[str, Any]) -> dict[str, Any]:
    if not path.is_file():
        raise common.UsageError(f"--resume: no checkpoint {path}")
    payload = common.unsealed(path)  # checked whole before torch.load sees a byte
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as exc:  # checksummed, yet unreadable (another torch?): one line
        raise common.UsageError(f"{path}: not a readable checkpoint "
                                f"({common.first_line(exc)})") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise common.UsageError(f"{path}: not a {CHECKPOINT_FORMAT} checkpoint")
    theirs = state.get("fingerprint", {})
    diffs = [f"{k}: checkpoint {theirs.get(k)!r}, now {v!r}" for k, v in fingerprint.items()
             if theirs.get(k) != v]
    if diffs:
        raise common.UsageError(f"{path}: taken with other settings ({'; '.join(diffs)})")
    return state


# --- training -----------------------------------------------------------------------------------


def learning_rate(args: common.TrainArgs, step: int) -> float:
    """``common.learning_rate``: warm-up, then the --schedule decay (a function of the step
    alone, so a resumed run takes the steps of an uninterrupted one)."""
    return common.learning_rate(args, step)


def main(argv: list[str] | None = None) -> int:
    args = common.parse_args("torch", argv)
    world = start_world()
    completed = False
    try:
        status = train(args, world)
        completed = True
        return status
    finally:
        stop_world(world, completed)


def set_threads(args: common.TrainArgs, world: World) -> None:
    """Torch's threads: the cores of this machine, shared by its ranks, less one per rank
    for each of dlkit's producer threads."""
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE") or world.size)
    cores = (os.cpu_count() or 1) // local_world
    torch.set_num_threads(max(1, cores - args.num_threads))


def train(args: common.TrainArgs, world: World) -> int:
    set_threads(args, world)
    torch.manual_seed(args.seed)
    batch_size = common.local_batch_size(args, world.size)
    sampler = dlkit.Sampler(args.db, rank=world.rank, world_size=world.size,
                            split_seed=args.split_seed, seed=args.seed, batch_size=batch_size,
                            sequence_length=args.sequence_length,
                            max_rows=args.rows, bfs_child_width=args.bfs_child_width,
                            bfs_child_policy=args.bfs_child_policy,
                            task_weights={args.task: 1.0},
                            num_threads=args.num_threads, num_prefetch=4)
    with sampler:
        return run_training(args, world, sampler)


def lookup_tables(sampler: dlkit.Sampler) -> dict[str, torch.Tensor]:
    """The frozen column and categorical embedding tables the batches' ids index, uploaded
    once (not parameters)."""
    resident = upload_tables(sampler)
    tables = {"column": resident["column_embeddings"].float(),
              "categorical": resident["categorical_embeddings"].float()}
    if tables["categorical"].shape[0] == 0:  # no categorical column: one unused row
        tables["categorical"] = torch.zeros(1, tables["column"].shape[1])
    return tables


def model_config(args: common.TrainArgs, tables: dict[str, torch.Tensor], text_dim: int,
                 num_classes: int) -> ModelConfig:
    return ModelConfig(d_model=args.d_model, layers=args.layers, heads=4,
                       table_dim=tables["column"].shape[1], text_dim=text_dim,
                       num_classes=num_classes, block=args.attention_block,
                       numeric_encoding=args.numeric_encoding, column_gain=args.column_gain,
                       dropout=args.dropout, fk_attention=args.fk_attention)


@dataclass
class Progress:
    """What the train steps of one run measured (rank 0 logs and reports them)."""

    losses: list[float]
    waits: list[float]       # seconds blocked for a batch, the first step left out
    step_times: list[float]  # seconds per step, the first step left out


def train_steps(args: common.TrainArgs, world: World, sampler: dlkit.Sampler, model: nn.Module,
                net: nn.Module, optimizer: torch.optim.Optimizer,
                tables: dict[str, torch.Tensor], start: int, stop: int, *,
                checkpoint: Path | None = None, fingerprint: dict[str, Any] | None = None,
                recorder: common.Recorder | None = None, label: str = "step",
                pos_weight: float = 1.0) -> Progress:
    """Train steps ``start .. stop - 1`` on ``sampler``'s train stream (``net``: ``model``,
    or its DDP wrapper), the learning rate of each a function of its step; with
    ``checkpoint``, write one every ``--checkpoint-every`` steps and at ``stop``."""
    progress = Progress([], [], [])
    log_every = max(1, stop // 10)
    model.train()
    step = start
    while step < stop:
        started = time.perf_counter()
        arrays = sampler.next_train_batch()
        waited = time.perf_counter() - started
        batch = to_torch(common.prepare(arrays, args))
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(args, step)
        loss = loss_per_sequence(net(batch, tables), batch, args.loss, pos_weight).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss_value = world.mean(float(loss.detach()))
        if step > start:  # the first step warms caches up
            progress.waits.append(waited)
            progress.step_times.append(time.perf_counter() - started)
        progress.losses.append(loss_value)
        if args.record:
            anchors = world.gather(batch["anchor_rows"].long())
            digests = world.gather(parameter_digest(model)[None])
            if recorder is not None:
                recorder.write({"step": step, "task_idx": int(batch["task_idx"][0]),
                                **({"database_idx": int(batch["database_idx"][0])}
                                   if "database_idx" in batch else {}),
                                "anchors": anchors.tolist(),
                                "params": [bytes(d.tolist()).hex() for d in digests],
                                "loss": loss_value})
        step += 1
        if world.rank == 0 and (step % log_every == 0 or step == stop):
            common.log(f"{label} {step}/{stop} loss {loss_value:.4f}")
        if checkpoint is not None and (step % args.checkpoint_every == 0 or step == stop):
            assert fingerprint is not None
            sampler_state = sampler.state_dict()
            if world.rank == 0:
                save_checkpoint(checkpoint, step, model, optimizer, sampler_state, fingerprint)
    return progress


def run_training(args: common.TrainArgs, world: World, sampler: dlkit.Sampler) -> int:
    info = sampler.label_info(args.task)
    tables = lookup_tables(sampler)
    cfg = model_config(args, tables, sampler.database_metadata().embeddings.text_dim,
                       info.num_classes if info.stype == common.CATEGORICAL else 0)
    model = RelationalTransformer(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr,
                                  weight_decay=args.weight_decay)
    pos_weight = common.positive_weight(args, sampler)
    fingerprint = {**common.fingerprint(args, "torch"), "model": asdict(cfg)}
    checkpoint = Path(args.checkpoint_dir) / CHECKPOINT_FILE if args.checkpoint_dir else None
    step = 0
    if args.resume:
        assert checkpoint is not None  # parse_args refuses --resume without a directory
        step = resume(checkpoint, fingerprint, model, optimizer, sampler)
    net = nn.parallel.DistributedDataParallel(model) if world.distributed else model

    recorder = common.Recorder(args.record) if args.record and world.rank == 0 else None
    progress = train_steps(args, world, sampler, model, net, optimizer, tables, step,
                           args.steps, checkpoint=checkpoint, fingerprint=fingerprint,
                           recorder=recorder, pos_weight=pos_weight)
    if recorder is not None:
        recorder.close()

    predictions, labels = evaluate(model, tables, sampler, args, world, info.stype)
    if world.rank == 0:
        common.emit(common.result(
            framework="torch", world_size=world.size, steps=args.steps, info=info,
            predictions=predictions, labels=labels,
            baseline=common.baseline_predictions(sampler, args.task, len(labels),
                                                 loss=args.loss, pos_weight=pos_weight),
            waits=progress.waits, step_times=progress.step_times, losses=progress.losses,
            loss=args.loss, pos_weight=pos_weight,
            context=args.context, seed=args.seed, resumed_from=step if args.resume else None))
    if world.distributed:
        dist.barrier()
    return 0


def resume(checkpoint: Path, fingerprint: dict[str, Any], model: nn.Module,
           optimizer: torch.optim.Optimizer, sampler: dlkit.Sampler) -> int:
    """Load ``checkpoint`` (taken with ``fingerprint``) into the model, the optimizer and the
    sampler: the step it was taken after."""
    state = load_checkpoint(checkpoint, fingerprint)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    sampler.load_state_dict(state["sampler"])
    step = int(state["step"])
    common.log(f"resumed at step {step} from {checkpoint}")
    return step


@torch.no_grad()
def evaluate(model: nn.Module, tables: dict[str, torch.Tensor], sampler: dlkit.Sampler,
             args: common.TrainArgs, world: World, stype: int, task: str | None = None,
             **where: Any) -> tuple[np.ndarray, np.ndarray]:
    """Outputs and labels of every val seed of ``task`` (default ``--task``; ``where``: the
    sampler's ``database=`` of a mixture), each once across the ranks, on every rank."""
    model.eval()
    outputs, labels = [], []
    for arrays in sampler.iter_eval("val", task=task or args.task, **where):
        batch = to_torch(common.prepare(arrays, args))
        out = outputs_for_metrics(model(batch, tables), stype)
        keep = world.gather(batch["sequence_mask"].bool())
        outputs.append(world.gather(out)[keep])
        labels.append(world.gather(batch["labels"])[keep])
    model.train()
    return torch.cat(outputs).numpy(), torch.cat(labels).numpy()


if __name__ == "__main__":
    sys.exit(common.run(main))
