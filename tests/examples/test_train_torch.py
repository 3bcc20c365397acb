"""examples/train_torch.py in one process (the torchrun tests are in test_torchrun.py): the
result line, the anchor-only ablation, exact resume from a checkpoint, and the numpy helpers
of examples/transforms.py and examples/metrics.py checked against plain definitions."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from tests.examples.launch import EXAMPLES

sys.path.insert(0, str(EXAMPLES))
import common  # noqa: E402
import metrics  # noqa: E402
import options  # noqa: E402
import train_torch  # noqa: E402
import transforms  # noqa: E402

import dlkit  # noqa: E402

REQUIRED = ("framework", "world_size", "steps", "val_loss", "val_metric", "metric",
            "baseline_val_loss", "wait_p99_ms", "step_ms")
TINY = ["--batch-size", "8", "--sequence-length", "64"]


@pytest.fixture(autouse=True)
def _single_process(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


def _train(capsys, db, task, *flags: str) -> dict:
    assert train_torch.main(["--db", str(db), "--task", task, *TINY, *flags]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    return json.loads(lines[-1])


def _records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _val_seeds(db, task) -> int:
    with dlkit.Sampler(db, batch_size=8, sequence_length=64, max_rows=64) as sampler:
        return len(sampler.splits[sampler.label_info(task).task_index].of("val"))


@pytest.mark.parametrize("variant, metric", [("churn", "auc"), ("majority", "accuracy"),
                                             ("grand", "mae")])
def test_result_line_has_every_key(capsys, planted_db_factory, variant, metric):
    db, task = planted_db_factory(variant, 0, 0.1)
    result = _train(capsys, db, task, "--steps", "3")
    assert set(REQUIRED) <= set(result)
    assert (result["framework"], result["world_size"], result["steps"]) == ("torch", 1, 3)
    assert result["metric"] == metric
    assert result["val_count"] == _val_seeds(db, task)  # every val seed once
    for key in ("val_loss", "baseline_val_loss", "step_ms", "wait_p99_ms"):
        assert np.isfinite(result[key]) and result[key] >= 0, key


def test_anchor_only_runs_and_reports_its_context(capsys, planted_db):
    db, task = planted_db
    result = _train(capsys, db, task, "--steps", "2", "--context", "anchor-only")
    assert result["context"] == "anchor-only" and result["steps"] == 2


def test_resume_continues_with_the_same_batches_and_parameters(capsys, planted_db, tmp_path):
    db, task = planted_db
    whole, first, rest = tmp_path / "whole.jsonl", tmp_path / "first.jsonl", tmp_path / "rest.jsonl"
    _train(capsys, db, task, "--steps", "5", "--record", str(whole))
    ckpt = tmp_path / "ckpt"
    _train(capsys, db, task, "--steps", "2", "--checkpoint-dir", str(ckpt), "--record",
           str(first))
    resumed = _train(capsys, db, task, "--steps", "5", "--checkpoint-dir", str(ckpt),
                     "--resume", "--record", str(rest))
    assert resumed["resumed_from"] == 2
    uninterrupted, pieced = _records(whole), _records(first) + _records(rest)
    assert [r["step"] for r in pieced] == list(range(5))
    assert [r["anchors"] for r in pieced] == [r["anchors"] for r in uninterrupted]
    assert [r["task_idx"] for r in pieced] == [r["task_idx"] for r in uninterrupted]
    assert [r["params"] for r in pieced] == [r["params"] for r in uninterrupted]
    assert [r["loss"] for r in pieced] == [r["loss"] for r in uninterrupted]
    # the record holds the global batch, each of its anchors a train seed, in a new order
    assert all(len(r["anchors"]) == 8 and len(r["params"]) == 1 for r in uninterrupted)
    assert len({tuple(r["anchors"]) for r in uninterrupted}) == 5


def test_resume_refuses_other_settings(capsys, planted_db, tmp_path):
    db, task = planted_db
    ckpt = tmp_path / "ckpt"
    _train(capsys, db, task, "--steps", "1", "--checkpoint-dir", str(ckpt))
    with pytest.raises(common.UsageError, match="lr"):
        train_torch.main(["--db", str(db), "--task", task, *TINY, "--steps", "2",
                          "--checkpoint-dir", str(ckpt), "--resume", "--lr", "0.01"])


def _corruptions(data: bytes):
    """Single-bit flips (every bit of the first and last 256 bytes, 400 seeded random ones),
    truncations (every length in the first and last 256 bytes, then every 97th) and zeroed
    4 KiB blocks of ``data``."""
    rng = np.random.default_rng(28)
    n = len(data)
    ends = [*range(min(256, n)), *range(max(0, n - 256), n)]
    flips = [(i, b) for i in ends for b in range(8)]
    flips += [(int(i), int(b)) for i, b in zip(rng.integers(0, n, 400), rng.integers(0, 8, 400))]
    for i, bit in flips:
        changed = bytearray(data)
        changed[i] ^= 1 << bit
        yield bytes(changed)
    for length in sorted({*ends, *range(0, n, 97)}):
        yield data[:length]
    for start in range(0, n, 4096):
        zeroed = data[:start] + bytes(min(4096, n - start)) + data[start + 4096:]
        if zeroed != data:
            yield zeroed


def test_a_changed_checkpoint_is_refused_whole_before_any_weight_is_loaded(
        capsys, planted_db, tmp_path, monkeypatch):
    db, task = planted_db
    ckpt = tmp_path / "ckpt"
    _train(capsys, db, task, "--steps", "1", "--checkpoint-dir", str(ckpt))
    path = ckpt / train_torch.CHECKPOINT_FILE
    good = path.read_bytes()
    fingerprint = options.fingerprint(options.parse_args(
        "torch", ["--db", str(db), "--task", task, *TINY, "--steps", "1"]), "torch")
    assert train_torch.load_checkpoint(path, fingerprint)["step"] == 1

    def no_load(*args, **kwargs):
        raise AssertionError("torch.load was called on a corrupted checkpoint")

    monkeypatch.setattr(train_torch.torch, "load", no_load)
    cases = 0
    for data in _corruptions(good):
        path.write_bytes(data)
        cases += 1
        with pytest.raises(dlkit.errors.CheckpointError) as info:
            train_torch.load_checkpoint(path, fingerprint)
        assert str(info.value).startswith(f"{path}: ") and "\n" not in str(info.value)
    assert cases > 5000
    monkeypatch.undo()
    # the whole example: one line with the code, no traceback
    changed = bytearray(good)
    changed[len(good) // 2] ^= 4
    path.write_bytes(bytes(changed))
    status = common.run(lambda: train_torch.main(
        ["--db", str(db), "--task", task, *TINY, "--steps", "2", "--checkpoint-dir", str(ckpt),
         "--resume"]))
    err = capsys.readouterr().err
    assert status != 0
    assert err == (f"error CHECKPOINT_INVALID: {path}: checksum mismatch: the file was changed "
                   "or corrupted after it was written\n")


# --- examples/transforms.py, examples/metrics.py -----------------------------------------------


def test_anchor_only_keeps_exactly_the_anchor_rows_cells(planted_db):
    db, task = planted_db
    with dlkit.Sampler(db, batch_size=8, sequence_length=64, max_rows=64) as sampler:
        batch = sampler.next_train_batch()
    cut = transforms.anchor_only(batch)
    for b in range(8):
        real = batch["is_padding"][b] == 0
        anchor = real & (batch["seq_row_ids"][b] == 0)
        n = int(anchor.sum())
        assert anchor[:n].all() and n < int(real.sum())  # row 0 first, other rows follow
        assert (cut["is_padding"][b] == ~anchor).all()
        for key in ("column_ids", "numeric_values", "categorical_embed_ids", "is_target",
                    "timestamp_values", "semantic_types", "bool_values", "is_null"):
            np.testing.assert_array_equal(cut[key][b][:n], batch[key][b][:n], err_msg=key)
            assert not cut[key][b][n:].any(), key
        assert cut["is_target"][b].sum() == 1
        order = cut["col_perm"][b]
        assert sorted(order.tolist()) == list(range(64))
        assert (np.diff(cut["column_ids"][b][order[:n]]) >= 0).all()
        assert (order[n:] == np.arange(n, 64)).all()
    assert not cut["fk_adj"].any()
    np.testing.assert_array_equal(cut["labels"], batch["labels"])
    assert batch["fk_adj"].any()  # the input itself was not modified


def test_auc_matches_pairwise_definition():
    rng = np.random.default_rng(0)
    scores = np.round(rng.normal(size=200), 1)  # ties included
    labels = rng.random(200) < 0.4
    pos, neg = scores[labels], scores[~labels]
    pairs = (pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean()
    assert metrics.auc(scores, labels) == pytest.approx(pairs, abs=1e-12)


def test_losses_and_baseline_match_their_definitions():
    y = np.array([0.0, 1.0, 1.0, 0.0])
    z = np.array([-2.0, 0.5, 3.0, 8.0])
    p = 1 / (1 + np.exp(-z))
    bce = -(y * np.log(p) + (1 - y) * np.log1p(-p))
    np.testing.assert_allclose(metrics.val_losses(z, y, metrics.BOOLEAN), bce, rtol=1e-6)
    logits = np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 5.0]])
    ce = [np.log(np.exp(logits[0]).sum()) - 1.0, np.log(np.exp(logits[1]).sum()) - 0.0]
    np.testing.assert_allclose(metrics.val_losses(logits, np.array([0, 0]), metrics.CATEGORICAL),
                               ce)
    train = np.array([0, 0, 1, 2, 2, 2])
    base = metrics.baseline_outputs(train, metrics.CATEGORICAL, 4)
    np.testing.assert_allclose(np.exp(base[0]), [3 / 10, 2 / 10, 4 / 10, 1 / 10])
    assert metrics.baseline_outputs(np.array([1.0, 0.0, 0.0, 0.0]), metrics.BOOLEAN, 0)[0] == \
        pytest.approx(np.log(0.25 / 0.75))
    assert metrics.baseline_outputs(np.array([1.0, 2.0, 6.0]), metrics.NUMERIC, 0)[0] == 3.0
    assert metrics.metric_of(np.array([1.0, 3.0]), np.array([2.0, 2.0]), metrics.NUMERIC,
                             std=10.0) == pytest.approx(10.0)
