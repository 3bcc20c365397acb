"""The examples' sparse relation attention: against the dense masked definition, torch
against JAX on the same inputs, and the learning-rate schedule against its formula."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from tests.examples.launch import EXAMPLES

sys.path.insert(0, str(EXAMPLES))
import options  # noqa: E402
import rt_jax  # noqa: E402
import rt_torch  # noqa: E402
import torch  # noqa: E402
import train_jax  # noqa: E402
import transforms  # noqa: E402

RELATIONS = rt_torch.RELATIONS


@pytest.fixture(scope="module", params=["uniform", "quota"])
def batch(request, planted_db):
    import dlkit

    db, task = planted_db
    with dlkit.Sampler(db, batch_size=4, sequence_length=80, max_rows=80,
                       task_weights={task: 1.0}, num_prefetch=0,
                       bfs_child_policy=request.param) as sampler:
        return transforms.crop_rows(sampler.next_train_batch())


def _qkv(batch, heads=4, dh=3, seed=0):
    b, s = batch["seq_row_ids"].shape
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(b, heads, s, dh)).astype(np.float32) for _ in range(3)]


def _dense_attention(q, k, v, mask):
    """softmax over the allowed keys, [B, H, S, dh] (plain numpy)."""
    scores = np.einsum("bhqd,bhkd->bhqk", q, k).astype(np.float64)
    scores = np.where(mask, scores, -np.inf)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    return np.einsum("bhqk,bhkd->bhqd", w / w.sum(-1, keepdims=True), v)


def _torch_batch(batch):
    return {k: torch.as_tensor(np.asarray(v).astype(np.int64) if v.dtype == np.uint16 else v)
            for k, v in batch.items() if k in ("seq_row_ids", "column_ids", "is_padding",
                                               "fk_adj", "out_perm", "col_perm")}


def _row_reference(q, k, v, batch, name):
    """Row attention in plain loops: rows' q/k/v the means of their cells', a row reads
    itself and its parents (children), a cell gets its row's result, padding its value."""
    rows, pad, fk = batch["seq_row_ids"], batch["is_padding"], batch["fk_adj"]
    out = v.astype(np.float64).copy()
    b_n, h_n, s, _ = q.shape
    for b in range(b_n):
        members: dict[int, list[int]] = {}
        for p in range(s):
            if not pad[b, p]:
                members.setdefault(int(rows[b, p]), []).append(p)
        for h in range(h_n):
            pooled = {r: (q[b, h, c].mean(0), k[b, h, c].mean(0), v[b, h, c].mean(0))
                      for r, c in members.items()}
            for r in pooled:
                if name == "parents":
                    seen = [j for j in pooled if j == r or fk[b, r, j]]
                else:
                    seen = [j for j in pooled if j == r or fk[b, j, r]]
                scores = np.array([pooled[r][0] @ pooled[j][1] for j in seen], np.float64)
                w = np.exp(scores - scores.max())
                result = sum(wi * pooled[j][2] for wi, j in zip(w / w.sum(), seen))
                for p in members[r]:
                    out[b, h, p] = result
    return out


@pytest.mark.parametrize("relation", RELATIONS)
def test_torch_relation_attention_matches_its_definition(batch, relation):
    """Row and column heads: the dense masked attention of the relation (every group of the
    batch fits the window, so the window is exact); parents and children: the row-level
    definition, in loops. Each relation exercises more than the diagonal."""
    q, k, v = _qkv(batch)
    structure = rt_torch.batch_structure(_torch_batch(batch))
    got = rt_torch.relation_attention(*(torch.from_numpy(t) for t in (q, k, v)),
                                      structure, block=64).numpy()
    r = RELATIONS.index(relation)
    head = slice(r, r + 1)
    if relation in ("row", "column"):
        masks = rt_torch.relation_masks(_torch_batch(batch)).numpy()
        off_diagonal = masks[:, r] & ~np.eye(masks.shape[-1], dtype=bool)
        assert off_diagonal.any()
        want = _dense_attention(q[:, head], k[:, head], v[:, head], masks[:, r:r + 1])
    else:
        assert batch["fk_adj"].any()
        want = _row_reference(q[:, head], k[:, head], v[:, head], batch, relation)
    np.testing.assert_allclose(got[:, head], want, rtol=2e-4, atol=2e-5)


def test_a_small_window_sees_its_neighbours_only(batch):
    """With block 2 a large column group is cut to a window: results differ from the dense
    attention, and each cell's output is a convex mix of values within 4 sorted places of
    it (checked by making every value its sorted position)."""
    q, k, _ = _qkv(batch, heads=1)
    b, _, s, _ = q.shape
    order = batch["col_perm"].astype(np.int64)
    position = np.empty((b, s), np.float32)
    position[np.arange(b)[:, None], order] = np.arange(s, dtype=np.float32)
    v = np.broadcast_to(position[:, None, :, None], q.shape).copy()
    tb = _torch_batch(batch)
    got = rt_torch.window_attention(
        torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), tb["col_perm"],
        tb["column_ids"], tb["is_padding"] == 0, block=2).numpy()
    assert np.all(np.abs(got[:, 0, :, 0] - position) <= 4 + 1e-4)
    masks = rt_torch.relation_masks(tb).numpy()[:, 3:4]
    dense = _dense_attention(q, k, v, masks)
    assert not np.allclose(got, dense, atol=1e-3)


def test_torch_and_jax_compute_the_same_attention(batch):
    """The same q, k, v and batch: the same outputs for every relation and a block that cuts
    (torch [B, H, S, dh], JAX [B, S, H, dh])."""
    import jax.numpy as jnp

    q, k, v = _qkv(batch, heads=8, dh=4, seed=1)
    for block in (3, 16):
        mine = rt_torch.relation_attention(
            *(torch.from_numpy(t) for t in (q, k, v)),
            rt_torch.batch_structure(_torch_batch(batch)), block).numpy()
        theirs = np.asarray(rt_jax.relation_attention(
            *(jnp.asarray(t.transpose(0, 2, 1, 3)) for t in (q, k, v)),
            rt_jax.batch_structure({k: jnp.asarray(v) for k, v in batch.items()
                                    if k in ("seq_row_ids", "column_ids", "is_padding",
                                                "fk_adj", "out_perm", "col_perm")}), block))
        np.testing.assert_allclose(mine, theirs.transpose(0, 2, 1, 3), rtol=1e-4, atol=1e-5)


def test_crop_rows_keeps_every_link_between_rows_with_cells(batch):
    full = batch["fk_adj"]
    r = full.shape[1]
    used = int(batch["seq_row_ids"].max()) + 1
    assert r == min(80, max(8, 1 << (used - 1).bit_length()))
    assert not full[:, used:, :].any() and not full[:, :, used:].any()


@pytest.mark.parametrize("schedule", options.SCHEDULES)
def test_learning_rate_schedule(schedule):
    """Warm-up to --lr, then the decay's formula to the floor at --decay-steps, then flat;
    the JAX example's optax schedule gives the same numbers."""
    args = options.parse_args("torch", ["--db", "d", "--task", "t", "--steps", "1", "--lr",
                                        "0.01", "--warmup", "10", "--schedule", schedule,
                                        "--decay-steps", "110", "--min-lr-ratio", "0.2"])
    lr = [options.learning_rate(args, step) for step in range(200)]
    assert lr[0] == pytest.approx(0.001) and lr[9] == pytest.approx(0.01)
    if schedule == "constant":
        assert all(x == pytest.approx(0.01) for x in lr[9:])
    else:
        t = 0.5
        shape = 0.5 * (1 + math.cos(math.pi * t)) if schedule == "cosine" else 1 - t
        assert lr[60] == pytest.approx(0.01 * (0.2 + 0.8 * shape))
        assert all(a >= b for a, b in zip(lr[10:], lr[11:]))
        assert all(x == pytest.approx(0.002) for x in lr[110:])
    jax_lr = train_jax.lr_schedule(args)
    np.testing.assert_allclose([float(jax_lr(step)) for step in range(0, 200, 7)], lr[::7],
                               rtol=1e-5)


def test_sampler_knobs_are_flags_and_part_of_the_fingerprint():
    base = ["--db", "d", "--task", "t", "--steps", "1", "--sequence-length", "256"]
    args = options.parse_args("torch", base)
    assert (args.rows, args.bfs_child_width, args.bfs_child_policy, args.attention_block,
            args.schedule) == (256, 16, "uniform", 32, "cosine")
    other = options.parse_args("jax", base + ["--max-rows", "64", "--bfs-child-width", "4",
                                              "--bfs-child-policy", "quota",
                                              "--attention-block", "8"])
    assert (other.rows, other.bfs_child_width, other.bfs_child_policy,
            other.attention_block) == (64, 4, "quota", 8)
    mine, theirs = options.fingerprint(args, "torch"), options.fingerprint(other, "torch")
    assert {k for k in mine if mine[k] != theirs[k]} == {"max_rows", "bfs_child_width",
                                                         "bfs_child_policy", "attention_block"}
    with pytest.raises(options.common.UsageError):
        options.parse_args("torch", base + ["--bfs-child-policy", "newest"])


@pytest.mark.parametrize("relation", ["parents", "children"])
def test_cell_level_link_attention_is_the_dense_relation(batch, relation):
    """``--fk-attention cells``: the parent and child heads are the dense masked attention of
    ``relation_masks`` (every cell of a linked row, and the cell itself), in torch and JAX."""
    import jax.numpy as jnp

    q, k, v = _qkv(batch, heads=8, dh=4, seed=2)
    tb = _torch_batch(batch)
    masks = rt_torch.relation_masks(tb).numpy()
    r = RELATIONS.index(relation)
    assert (masks[:, r] & ~np.eye(masks.shape[-1], dtype=bool)).any()
    mine = rt_torch.relation_attention(*(torch.from_numpy(t) for t in (q, k, v)),
                                       rt_torch.batch_structure(tb), 16,
                                       fk_cells=True).numpy()
    per = q.shape[1] // len(RELATIONS)
    head = slice(r * per, (r + 1) * per)
    want = _dense_attention(q[:, head], k[:, head], v[:, head], masks[:, r:r + 1])
    np.testing.assert_allclose(mine[:, head], want, rtol=2e-4, atol=2e-5)
    theirs = np.asarray(rt_jax.relation_attention(
        *(jnp.asarray(t.transpose(0, 2, 1, 3)) for t in (q, k, v)),
        rt_jax.batch_structure({k: jnp.asarray(v) for k, v in batch.items()
                                if k in ("seq_row_ids", "column_ids", "is_padding",
                                            "fk_adj", "out_perm", "col_perm")}), 16,
        fk_cells=True))
    np.testing.assert_allclose(mine, theirs.transpose(0, 2, 1, 3), rtol=1e-4, atol=1e-5)


def _readout_inputs(seed=0, b=3, s=7, d=8):
    rng = np.random.default_rng(seed)
    valid = np.ones((b, s), bool)
    valid[0, 5:] = False  # padding at the end of one sequence
    valid[2, 1] = False   # and a padding slot inside another
    return (rng.normal(size=(b, d)).astype(np.float32), rng.normal(size=(b, s, d)).astype(np.float32),
            valid)


def _readouts():
    """(name, readout(target, cells, valid) -> numpy) of torch's and JAX's ``--readout
    attention`` with fixed random weights."""
    import jax
    import jax.numpy as jnp

    torch.manual_seed(0)
    module = rt_torch.Readout(8, 2)
    cfg = rt_jax.ModelConfig(d_model=8, heads_per_relation=1, layers=1, table_dim=4, text_dim=4,
                             out_dim=1, stype=0, readout="attention")
    params = rt_jax.init_params(jax.random.PRNGKey(0), cfg)["readout"]

    def run_torch(target, cells, valid):
        with torch.no_grad():
            return module(torch.from_numpy(target), torch.from_numpy(cells),
                          torch.from_numpy(valid)).numpy()

    def run_jax(target, cells, valid):
        return np.asarray(rt_jax._readout(params, jnp.asarray(target), jnp.asarray(cells),
                                          jnp.asarray(valid), 2))

    return [("torch", run_torch), ("jax", run_jax)]


def test_the_readout_reads_every_real_cell_and_no_padding():
    target, cells, valid = _readout_inputs()
    for name, readout in _readouts():
        base = readout(target, cells, valid)
        moved = cells.copy()
        moved[~valid] += 100.0  # padding states may be anything
        np.testing.assert_allclose(readout(target, moved, valid), base, rtol=1e-5, atol=1e-5,
                                   err_msg=name)
        for b, p in zip(*np.nonzero(valid)):
            nudged = cells.copy()
            nudged[b, p] += 1.0
            out = readout(target, nudged, valid)
            assert not np.allclose(out[b], base[b], atol=1e-6), (name, b, p)
            others = np.arange(len(base)) != b
            np.testing.assert_allclose(out[others], base[others], rtol=1e-5, atol=1e-5)


def test_the_torch_readout_is_its_formula():
    """Against numpy: the normalised target's query attends (QK-normalised, a temperature per
    head) over the real cells' keys; the values' mix, projected, joins the target, then the
    feed-forward layer on its normalised sum."""
    target, cells, valid = _readout_inputs(seed=3)
    torch.manual_seed(1)
    module = rt_torch.Readout(8, 2)
    with torch.no_grad():
        got = module(torch.from_numpy(target), torch.from_numpy(cells),
                     torch.from_numpy(valid)).numpy()
    w = {k: v.detach().numpy().astype(np.float64) for k, v in module.state_dict().items()}

    def rms(x, scale):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + torch.finfo(torch.float32).eps) * scale

    b, s, d = cells.shape
    q = (rms(target, w["norm.weight"]) @ w["q.weight"].T).reshape(b, 2, 4)
    kv = (cells @ w["kv.weight"].T).reshape(b, s, 2, 2, 4)
    k, v = kv[:, :, 0], kv[:, :, 1]  # [B, S, H, dh]
    q = q / np.linalg.norm(q, axis=-1, keepdims=True) * np.exp(w["log_scale"])[None]
    k = k / np.linalg.norm(k, axis=-1, keepdims=True)
    scores = np.where(valid[:, None, :], np.einsum("bhd,bshd->bhs", q, k), -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    read = np.einsum("bhs,bshd->bhd", weights, v).reshape(b, d)
    mid = target + read @ w["out.weight"].T
    hidden = rms(mid, w["ff_norm.weight"]) @ w["ff.0.weight"].T + w["ff.0.bias"]
    gelu = 0.5 * hidden * (1 + np.vectorize(math.erf)(hidden / math.sqrt(2)))
    np.testing.assert_allclose(got, mid + gelu @ w["ff.2.weight"].T + w["ff.2.bias"],
                               rtol=1e-4, atol=1e-5)
