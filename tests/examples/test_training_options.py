"""The examples' loss and regularisation options (``--loss``, ``--pos-weight``,
``--weight-decay``, ``--dropout``) and input options (``--numeric-squash``,
``--absolute-time``, ``--anchor-features``): torch and JAX against plain-Python definitions
and each other (``--fk-attention`` is in test_attention.py; here it only runs)."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest

from tests.examples.launch import EXAMPLES

sys.path.insert(0, str(EXAMPLES))
import metrics  # noqa: E402
import options  # noqa: E402
import rt_jax  # noqa: E402
import rt_torch  # noqa: E402
import torch  # noqa: E402
import train_jax  # noqa: E402
import train_torch  # noqa: E402
import transforms  # noqa: E402

PREDICTIONS = [-2.5, -0.4, 0.0, 0.7, 3.0]
TARGETS = [0.5, -0.4, 1.0, 0.0, 0.2]
LOGITS = [-3.0, -0.2, 0.0, 1.5, 4.0]
FLAGS = [0.0, 1.0, 1.0, 0.0, 1.0]


def _regression_reference(loss: str) -> list[float]:
    out = []
    for p, y in zip(PREDICTIONS, TARGETS, strict=True):
        e = abs(p - y)
        out.append({"mse": e * e, "l1": e,
                    "huber": 0.5 * e * e if e < 1 else e - 0.5}[loss])
    return out


def _bce_reference(weight: float) -> list[float]:
    def sigmoid(z: float) -> float:
        return 1 / (1 + math.exp(-z))

    return [-(weight * y * math.log(sigmoid(z)) + (1 - y) * math.log(1 - sigmoid(z)))
            for z, y in zip(LOGITS, FLAGS, strict=True)]


@pytest.mark.parametrize("loss", options.LOSSES)
def test_regression_losses_match_their_definitions_in_numpy_torch_and_jax(loss):
    expected = _regression_reference(loss)
    p, y = np.array(PREDICTIONS, np.float32), np.array(TARGETS, np.float32)
    np.testing.assert_allclose(metrics.val_losses(p, y, metrics.NUMERIC, loss), expected,
                               rtol=1e-6)
    mine = rt_torch.regression_loss(torch.from_numpy(p), torch.from_numpy(y), loss)
    np.testing.assert_allclose(mine.numpy(), expected, rtol=1e-6)
    for stype in (metrics.NUMERIC, metrics.TIMESTAMP):
        theirs = rt_jax.per_sequence_loss(p[:, None], y, stype, loss)
        np.testing.assert_allclose(np.asarray(theirs), expected, rtol=1e-6)


@pytest.mark.parametrize("weight", [1.0, 3.5])
def test_positive_weight_scales_the_positive_term_in_numpy_torch_and_jax(weight):
    expected = _bce_reference(weight)
    z, y = np.array(LOGITS, np.float32), np.array(FLAGS, np.float32)
    np.testing.assert_allclose(metrics.val_losses(z, y, metrics.BOOLEAN, pos_weight=weight),
                               expected, rtol=1e-5)
    batch = {"labels": torch.from_numpy(y), "target_stype": torch.tensor([metrics.BOOLEAN]),
             "is_null": torch.zeros(5, 2, dtype=torch.uint8),
             "is_target": torch.zeros(5, 2, dtype=torch.uint8)}
    out = {"boolean": torch.from_numpy(z), "numeric": torch.zeros(5),
           "timestamp": torch.zeros(5), "categorical": torch.zeros(5, 0),
           # a null logit far below 0: the null term is ~0, the boolean term is left
           "null": torch.full((5,), -60.0)}
    mine = rt_torch.loss_per_sequence(out, batch, pos_weight=weight)
    np.testing.assert_allclose(mine.numpy(), expected, rtol=1e-5)
    theirs = rt_jax.per_sequence_loss(z[:, None], y, metrics.BOOLEAN, pos_weight=weight)
    np.testing.assert_allclose(np.asarray(theirs), expected, rtol=1e-5)


def test_the_baseline_is_the_best_constant_under_the_training_loss():
    train = np.array([0.0, 0.0, 1.0, 7.0], np.float32)  # mean 2, median 0.5
    assert metrics.baseline_outputs(train, metrics.NUMERIC, 0, "mse")[0] == pytest.approx(2.0)
    assert metrics.baseline_outputs(train, metrics.NUMERIC, 0, "l1")[0] == pytest.approx(0.5)
    flags = np.array([1, 0, 0, 0, 0], np.float32)  # 1 positive, 4 negatives
    # weighted mean w p / (w p + 1 - p): 0.2 unweighted, 0.5 with w = negatives / positives
    assert metrics.baseline_outputs(flags, metrics.BOOLEAN, 0)[0] == pytest.approx(math.log(0.25))
    assert metrics.baseline_outputs(flags, metrics.BOOLEAN, 0, pos_weight=4.0)[0] == \
        pytest.approx(0.0, abs=1e-12)
    # and it is the minimum: nudging the constant either way costs
    for loss in options.LOSSES:
        best = metrics.baseline_outputs(train, metrics.NUMERIC, 0, loss)[0]
        y = train.astype(np.float64)
        at = metrics.val_losses(np.full(4, best), y, metrics.NUMERIC, loss).mean()
        for step in (-0.3, 0.3):
            assert metrics.val_losses(np.full(4, best + step), y, metrics.NUMERIC,
                                      loss).mean() > at - 1e-12, (loss, step)


class _Info:
    def __init__(self, stype: int):
        self.stype = stype


class _Sampler:
    def __init__(self, stype: int):
        self.stype = stype

    def label_info(self, task: str) -> _Info:
        return _Info(self.stype)


def _args(*flags: str) -> options.TrainArgs:
    return options.parse_args("torch", ["--db", "d", "--task", "t", "--steps", "1", *flags])


def test_auto_positive_weight_is_negatives_over_positives_of_the_train_split(monkeypatch):
    labels = np.array([1, 0, 0, 1, 0, 0, 0, 0], np.float32)
    monkeypatch.setattr(metrics, "train_labels", lambda sampler, task, db=None: labels)
    assert metrics.positive_weight(_args("--pos-weight", "auto"),
                                   _Sampler(metrics.BOOLEAN)) == pytest.approx(3.0)
    assert metrics.positive_weight(_args("--pos-weight", "2.5"),
                                   _Sampler(metrics.BOOLEAN)) == pytest.approx(2.5)
    assert metrics.positive_weight(_args(), _Sampler(metrics.BOOLEAN)) == 1.0
    # not boolean, or one class only: no weighting
    assert metrics.positive_weight(_args("--pos-weight", "auto"),
                                   _Sampler(metrics.NUMERIC)) == 1.0
    monkeypatch.setattr(metrics, "train_labels", lambda sampler, task, db=None: labels * 0)
    assert metrics.positive_weight(_args("--pos-weight", "auto"),
                                   _Sampler(metrics.BOOLEAN)) == 1.0


def _cells() -> dict[str, np.ndarray]:
    """One sequence: a numeric cell far out, one near 0, a timestamp cell, padding."""
    times = np.zeros((1, 4, 15), np.float32)
    times[0, 2] = np.arange(1, 16, dtype=np.float32) / 10
    return {"numeric_values": np.array([[120.0, -0.5, 0.0, 0.0]], np.float32),
            "timestamp_values": times, "seq_row_ids": np.zeros((1, 4), np.uint16),
            "fk_adj": np.zeros((1, 8, 8), np.uint8)}


def test_numeric_squash_is_signed_log1p_and_leaves_zero_cells_zero():
    batch = _cells()
    out = transforms.prepare(batch, _args("--numeric-squash", "log"))
    expected = [math.log(121.0), -math.log(1.5), 0.0, 0.0]
    np.testing.assert_allclose(out["numeric_values"][0], expected, rtol=1e-6)
    assert out["numeric_values"].dtype == np.float32
    assert batch["numeric_values"][0, 0] == 120.0  # the input is not modified
    same = transforms.prepare(batch, _args())
    np.testing.assert_array_equal(same["numeric_values"], batch["numeric_values"])


def test_dropping_absolute_time_zeroes_only_the_last_timestamp_feature():
    batch = _cells()
    out = transforms.prepare(batch, _args("--absolute-time", "drop"))
    expected = batch["timestamp_values"].copy()
    expected[0, 2, 14] = 0.0
    np.testing.assert_array_equal(out["timestamp_values"], expected)
    assert batch["timestamp_values"][0, 2, 14] == pytest.approx(1.5)  # input unchanged
    np.testing.assert_array_equal(transforms.prepare(batch, _args())["timestamp_values"],
                                  batch["timestamp_values"])


def test_masking_the_anchor_makes_its_cells_but_the_target_null():
    """Row 0: a numeric, a categorical and the target cell; row 1: a numeric cell; then
    padding. Only row 0's non-target cells change, to null cells with every value 0."""
    s = 5
    batch = {"seq_row_ids": np.array([[0, 0, 0, 1, 0]], np.uint16),
             "is_padding": np.array([[0, 0, 0, 0, 1]], np.uint8),
             "is_target": np.array([[0, 0, 1, 0, 0]], np.uint8),
             "is_null": np.zeros((1, s), np.uint8),
             "numeric_values": np.array([[2.0, 0.0, 0.0, -1.0, 0.0]], np.float32),
             "timestamp_values": np.full((1, s, 15), 0.5, np.float32),
             "bool_values": np.array([[1, 0, 0, 1, 0]], np.uint8),
             "categorical_embed_ids": np.array([[0, 7, 0, 3, 0]], np.uint32),
             "text_embed_ids": np.array([[0, 0, 0, 2, 0]], np.uint32),
             "fk_adj": np.zeros((1, 8, 8), np.uint8)}
    out = transforms.prepare(batch, _args("--anchor-features", "mask"))
    np.testing.assert_array_equal(out["is_null"][0], [1, 1, 0, 0, 0])
    np.testing.assert_array_equal(out["numeric_values"][0], [0, 0, 0, -1, 0])
    np.testing.assert_array_equal(out["bool_values"][0], [0, 0, 0, 1, 0])
    np.testing.assert_array_equal(out["categorical_embed_ids"][0], [0, 0, 0, 3, 0])
    np.testing.assert_array_equal(out["text_embed_ids"][0], [0, 0, 0, 2, 0])
    np.testing.assert_array_equal(out["timestamp_values"][0, :, 0], [0, 0, 0.5, 0.5, 0.5])
    assert batch["is_null"].sum() == 0 and batch["numeric_values"][0, 0] == 2.0  # unchanged
    kept = transforms.prepare(batch, _args())
    np.testing.assert_array_equal(kept["is_null"], batch["is_null"])


def test_jax_dropout_is_off_without_a_key_and_inverted_with_one():
    import jax

    x = np.ones((4, 1000), np.float32)
    np.testing.assert_array_equal(np.asarray(rt_jax._dropout(x, 0.5, None)), x)
    np.testing.assert_array_equal(
        np.asarray(rt_jax._dropout(x, 0.0, jax.random.PRNGKey(0))), x)
    y = np.asarray(rt_jax._dropout(x, 0.25, jax.random.PRNGKey(0)))
    kept = y[y != 0]
    np.testing.assert_allclose(kept, 1 / 0.75, rtol=1e-6)  # the kept values scaled up
    assert abs(float((y == 0).mean()) - 0.25) < 0.03
    np.testing.assert_array_equal(y, np.asarray(rt_jax._dropout(x, 0.25,
                                                                jax.random.PRNGKey(0))))


def test_torch_dropout_changes_training_outputs_only():
    torch.manual_seed(0)
    plain = rt_torch.Block(16, 4, 32)
    torch.manual_seed(0)
    dropped = rt_torch.Block(16, 4, 32, dropout=0.5)
    # dropout adds no parameter: the same seed gives the same weights
    for a, b in zip(plain.parameters(), dropped.parameters(), strict=True):
        assert torch.equal(a, b)
    h = torch.randn(1, 6, 16)
    structure = {"rows": torch.zeros(1, 6, dtype=torch.long),
                 "cols": torch.arange(6)[None], "valid": torch.ones(1, 6, dtype=torch.bool),
                 "by_row": torch.arange(6)[None], "by_col": torch.arange(6)[None],
                 "fk_adj": torch.zeros(1, 1, 1, dtype=torch.bool)}
    plain.eval()
    dropped.eval()
    with torch.no_grad():
        assert torch.equal(plain(h, structure), dropped(h, structure))
        dropped.train()
        assert not torch.equal(plain(h, structure), dropped(h, structure))


@pytest.mark.parametrize("flags, message", [
    (["--pos-weight", "x"], "not a number"), (["--pos-weight", "0"], "must be a finite"),
    (["--dropout", "1"], "[0, 1)"), (["--weight-decay", "-1"], ">= 0"),
    (["--loss", "l3"], "invalid choice"), (["--numeric-squash", "tanh"], "invalid choice"),
    (["--absolute-time", "shift"], "invalid choice"),
    (["--anchor-features", "drop"], "invalid choice"),
    (["--fk-attention", "mean"], "invalid choice"), (["--readout", "pool"], "invalid choice")])
def test_bad_values_are_refused(flags, message):
    with pytest.raises(options.common.UsageError) as info:
        _args(*flags)
    assert message in str(info.value) and str(info.value).endswith("(see train_torch.py --help)")
    assert (info.value.code, "\n" in str(info.value)) == ("USAGE", False)


def test_every_option_is_part_of_the_fingerprint():
    base = options.fingerprint(_args(), "torch")
    assert (base["loss"], base["pos_weight"], base["weight_decay"], base["dropout"],
            base["numeric_squash"], base["absolute_time"]) == ("mse", "1", 1e-4, 0.0, "none",
                                                               "keep")
    for flags in (["--loss", "l1"], ["--pos-weight", "auto"], ["--weight-decay", "0.01"],
                  ["--dropout", "0.1"], ["--numeric-squash", "log"],
                  ["--absolute-time", "drop"], ["--anchor-features", "mask"],
                  ["--fk-attention", "cells"], ["--readout", "target"]):
        assert options.fingerprint(_args(*flags), "torch") != base, flags


ALL_OPTIONS = ["--loss", "huber", "--pos-weight", "auto", "--weight-decay", "0.01",
               "--dropout", "0.1", "--numeric-squash", "log", "--absolute-time", "drop",
               "--anchor-features", "mask", "--fk-attention", "cells",
               "--readout", "attention"]


@pytest.mark.parametrize("variant", ["churn", "grand"])
def test_both_examples_train_and_report_with_every_option(capfd, monkeypatch,
                                                          planted_db_factory, variant):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    db, task = planted_db_factory(variant, 0, 0.1)
    flags = ["--db", str(db), "--task", task, "--batch-size", "8", "--sequence-length", "64",
             "--steps", "3", *ALL_OPTIONS]
    results = []
    for example in (train_torch, train_jax):
        assert example.main(flags) == 0
        results.append(json.loads(capfd.readouterr().out.strip().splitlines()[-1]))
    for result in results:  # the loss each trained with: --loss only for a numeric target
        assert result["loss"] == {"churn": "bce", "grand": "huber"}[variant]
        assert np.isfinite(result["val_loss"]) and np.isfinite(result["baseline_val_loss"])
    # the same resolved weight in both: negatives / positives for the boolean task (not 1
    # on this fixture), 1 for the numeric one
    assert results[0]["pos_weight"] == results[1]["pos_weight"]
    assert (results[0]["pos_weight"] != 1.0) == (variant == "churn")
