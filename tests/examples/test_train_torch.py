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
# the keys of a --record line, in both examples
RECORD_KEYS = ("step", "task_idx", "database_idx", "anchors", "params", "loss")


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


@pytest.mark.parametrize("variant, metric, loss", [("churn", "auc", "bce"),
                                                   ("majority", "accuracy", "cross_entropy"),
                                                   ("grand", "mae", "mse")])
def test_result_line_has_every_key(capsys, planted_db_factory, variant, metric, loss):
    db, task = planted_db_factory(variant, 0, 0.1)
    result = _train(capsys, db, task, "--steps", "3")
    assert set(REQUIRED) <= set(result)
    assert (result["framework"], result["world_size"], result["steps"]) == ("torch", 1, 3)
    assert (result["metric"], result["loss"]) == (metric, loss)  # the loss it trained with
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
    result = _train(capsys, db, task, "--steps", "5", "--record", str(whole))
    ckpt = tmp_path / "ckpt"
    _train(capsys, db, task, "--steps", "2", "--checkpoint-dir", str(ckpt), "--record",
           str(first))
    resumed = _train(capsys, db, task, "--steps", "5", "--checkpoint-dir", str(ckpt),
                     "--resume", "--record", str(rest))
    assert resumed["resumed_from"] == 2
    # the result line of the uninterrupted run: train_loss_first is step 0's loss, which the
    # resumed run has from the checkpoint
    for key in ("train_loss_first", "train_loss_last", "val_loss", "val_metric", "steps"):
        assert resumed[key] == result[key], key
    uninterrupted, pieced = _records(whole), _records(first) + _records(rest)
    assert all(list(r) == list(RECORD_KEYS) for r in uninterrupted)
    assert [r["step"] for r in pieced] == list(range(5))
    assert [r["anchors"] for r in pieced] == [r["anchors"] for r in uninterrupted]
    assert [r["task_idx"] for r in pieced] == [r["task_idx"] for r in uninterrupted]
    assert [r["params"] for r in pieced] == [r["params"] for r in uninterrupted]
    assert [r["loss"] for r in pieced] == [r["loss"] for r in uninterrupted]
    # the record holds the global batch, each of its anchors a train seed, in a new order
    assert all(len(r["anchors"]) == 8 and len(r["params"]) == 1 for r in uninterrupted)
    assert len({tuple(r["anchors"]) for r in uninterrupted}) == 5


def test_resume_with_dropout_draws_the_masks_of_the_uninterrupted_run(capsys, planted_db,
                                                                       tmp_path):
    db, task = planted_db
    whole, pieced, ckpt = tmp_path / "whole.jsonl", tmp_path / "pieced.jsonl", tmp_path / "ck"
    dropout = ["--dropout", "0.1"]
    _train(capsys, db, task, "--steps", "4", "--record", str(whole), *dropout)
    _train(capsys, db, task, "--steps", "2", "--checkpoint-dir", str(ckpt), "--record",
           str(pieced), *dropout)
    _train(capsys, db, task, "--steps", "4", "--checkpoint-dir", str(ckpt), "--resume",
           "--record", str(pieced), *dropout)
    uninterrupted, resumed = _records(whole), _records(pieced)
    assert [r["step"] for r in resumed] == [0, 1, 2, 3]
    assert [r["loss"] for r in resumed] == [r["loss"] for r in uninterrupted]
    assert [r["params"] for r in resumed] == [r["params"] for r in uninterrupted]
    # the masks are drawn: without dropout the same steps give other losses
    _train(capsys, db, task, "--steps", "4", "--record", str(whole))
    assert [r["loss"] for r in _records(whole)][1:] != [r["loss"] for r in uninterrupted][1:]


def test_a_resumed_run_cuts_the_record_to_its_checkpoint_and_a_fresh_run_starts_anew(
        capsys, planted_db, tmp_path):
    db, task = planted_db
    whole, record, ckpt = tmp_path / "whole.jsonl", tmp_path / "run.jsonl", tmp_path / "ck"
    path = ckpt / train_torch.CHECKPOINT_FILE
    _train(capsys, db, task, "--steps", "4", "--record", str(whole))
    _train(capsys, db, task, "--steps", "2", "--checkpoint-dir", str(ckpt), "--record",
           str(record))
    at_two = path.read_bytes()
    _train(capsys, db, task, "--steps", "3", "--checkpoint-dir", str(ckpt), "--resume",
           "--record", str(record))
    # as if killed after recording step 2 and starting step 3's line, before step 3's
    # checkpoint: the record runs ahead of the checkpoint
    path.write_bytes(at_two)
    with record.open("a") as out:
        out.write('{"step": 3, "task_idx": 0, "anch')
    _train(capsys, db, task, "--steps", "4", "--checkpoint-dir", str(ckpt), "--resume",
           "--record", str(record))
    assert record.read_text() == whole.read_text()  # steps 0-3 once each, as uninterrupted
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    _train(capsys, db, task, "--steps", "1", "--record", str(record))  # not resumed
    assert [r["step"] for r in _records(record)] == [0]


def test_resuming_past_steps_is_an_error_and_at_steps_reports_the_checkpoint(
        capsys, planted_db, tmp_path):
    db, task = planted_db
    ckpt = tmp_path / "ck"
    path = ckpt / train_torch.CHECKPOINT_FILE
    trained = _train(capsys, db, task, "--steps", "3", "--checkpoint-dir", str(ckpt))
    flags = ["--db", str(db), "--task", task, *TINY, "--checkpoint-dir", str(ckpt), "--resume"]
    assert _run_example(*flags, "--steps", "2") == (
        2, f"error INVALID_ARGUMENT: --steps 2 is behind the checkpoint: {path} was taken after "
           "step 3; resume with --steps 3 or more")
    again = _train(capsys, db, task, "--checkpoint-dir", str(ckpt), "--resume", "--steps", "3")
    assert (again["steps"], again["resumed_from"]) == (3, 3)
    for key in ("val_loss", "val_metric", "train_loss_first", "train_loss_last"):
        assert again[key] == trained[key], key


def test_a_diverged_run_reports_no_metric_and_records_null_losses(capsys, planted_db,
                                                                  tmp_path):
    db, task = planted_db
    record = tmp_path / "run.jsonl"
    result = _train(capsys, db, task, "--steps", "3", "--lr", "1e30", "--warmup", "1",
                    "--record", str(record))
    assert result["val_loss"] is None and result["val_metric"] is None
    assert result["baseline_val_metric"] == 0.5  # the constant still scores

    def no_constants(name: str):
        raise AssertionError(f"{name} in the record: not JSON")

    losses = [json.loads(line, parse_constant=no_constants)["loss"]
              for line in record.read_text().splitlines()]
    assert losses[0] is not None and None in losses


def test_dropout_seeds_are_a_function_of_seed_step_and_rank():
    seeds = {train_torch.dropout_seed(s, k, r) for s in (0, 1) for k in (0, 1, 7)
             for r in (0, 1)}
    assert len(seeds) == 12 and all(0 <= v < 2**63 for v in seeds)
    assert train_torch.dropout_seed(3, 5, 1) == train_torch.dropout_seed(3, 5, 1)


def _run_example(*argv: str) -> tuple[int, str]:
    """``common.run`` of train_torch.main (the scripts' entry point): (status, stderr)."""
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = common.run(lambda: train_torch.main(list(argv)))
    return status, err.getvalue().splitlines()[-1]


def test_resume_refuses_other_settings_as_an_invalid_checkpoint(capsys, planted_db, tmp_path):
    db, task = planted_db
    ckpt = tmp_path / "ckpt"
    _train(capsys, db, task, "--steps", "1", "--checkpoint-dir", str(ckpt))
    status, err = _run_example("--db", str(db), "--task", task, *TINY, "--steps", "2",
                               "--checkpoint-dir", str(ckpt), "--resume", "--lr", "0.01")
    path = ckpt / train_torch.CHECKPOINT_FILE
    assert (status, err) == (5, f"error CHECKPOINT_INVALID: {path}: taken with other settings "
                                "(lr: checkpoint 0.003, now 0.01)")


def test_example_errors_are_one_line_with_the_code_and_exit_status_of_dlkit(planted_db,
                                                                             tmp_path):
    db, task = planted_db
    missing = tmp_path / "none" / train_torch.CHECKPOINT_FILE
    assert _run_example("--db", str(db), "--task", task, "--steps", "1", "--checkpoint-dir",
                        str(missing.parent), "--resume") == (
        5, f"error CHECKPOINT_INVALID: {missing}: no such file: --resume continues from the "
           "checkpoint in --checkpoint-dir")
    assert _run_example("--db", str(db), "--task", task, "--steps", "0") == (
        2, "error USAGE: argument --steps: must be >= 1, got 0 (see train_torch.py --help)")
    assert _run_example("--db", str(db), "--task", task, "--steps", "1", "--resume") == (
        2, "error USAGE: --resume needs --checkpoint-dir (see train_torch.py --help)")


# Stops the example with a signal while it writes its second checkpoint (its temporary
# file open): the scripts' own entry point, in a process of its own.
_SIGNALLED = """
import os, signal, sys
sys.path.insert(0, sys.argv[1])
import common, train_torch
signal.signal(signal.SIGINT, signal.default_int_handler)  # as on a terminal, even if ignored
sealed, calls = common.sealed, []
def sealed_then_signal(payload):
    calls.append(payload)
    if len(calls) == 2:
        os.kill(os.getpid(), getattr(signal, sys.argv[2]))
    return sealed(payload)
common.sealed = sealed_then_signal
sys.argv[0] = train_torch.__file__  # the script's name in its messages
sys.exit(common.run(lambda: train_torch.main(sys.argv[3:])))
"""


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_a_signal_during_a_checkpoint_leaves_the_last_one_whole_and_says_so(
        planted_db, tmp_path, signal_name):
    import subprocess

    from tests.examples.launch import PYTHON, clean_env

    db, task = planted_db
    ckpt = tmp_path / "ckpt"
    proc = subprocess.run([str(PYTHON), "-c", _SIGNALLED, str(train_torch.Path(
        train_torch.__file__).parent), signal_name, "--db", str(db), "--task", task, *TINY,
        "--steps", "3", "--checkpoint-every", "1", "--checkpoint-dir", str(ckpt)],
        env=clean_env(), capture_output=True, text=True, timeout=600)
    path = ckpt / train_torch.CHECKPOINT_FILE
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert proc.stderr.splitlines()[-1] == (
        f"error INTERRUPTED: train_torch.py was interrupted; it left no temporary file; its "
        f"last checkpoint: {path} (--resume continues from it)")
    assert [p.name for p in ckpt.iterdir()] == [path.name]  # no temporary file, no lock
    fingerprint = options.fingerprint(options.parse_args(
        "torch", ["--db", str(db), "--task", task, *TINY, "--steps", "3"]), "torch")
    assert train_torch.load_checkpoint(path, fingerprint)["step"] == 1


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
