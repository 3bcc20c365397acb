"""examples/train_jax.py in one process (the multi-process tests are in
test_jax_distributed.py): the attention masks against a plain loop over a real batch, exact
int64 gathers, checkpoint round trips, a short run of every target type, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from dlkit.errors import CheckpointError
from tests.examples.launch import EXAMPLES, PYTHON, clean_env
from tests.examples.test_train_torch import RECORD_KEYS

sys.path.insert(0, str(EXAMPLES))
import common  # noqa: E402  (examples/common.py)
import options  # noqa: E402
import rt_jax  # noqa: E402
import train_jax  # noqa: E402
import transforms  # noqa: E402


@pytest.fixture(autouse=True)
def _single_process(monkeypatch):
    for name in ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_COORDINATOR_ADDRESS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def batch(planted_db):
    import dlkit

    db, task = planted_db
    with dlkit.Sampler(db, batch_size=4, sequence_length=64, max_rows=64,
                       task_weights={task: 1.0}, num_prefetch=0) as sampler:
        return sampler.next_train_batch()


def naive_masks(batch) -> np.ndarray:
    rows, cols = batch["seq_row_ids"], batch["column_ids"]
    pad, fk = batch["is_padding"], batch["fk_adj"]
    b, s = rows.shape
    out = np.zeros((b, 4, s, s), bool)
    for n in range(b):
        for i in range(s):
            for j in range(s):
                if i == j:
                    out[n, :, i, j] = True
                    continue
                if pad[n, j]:
                    continue
                ri, rj = rows[n, i], rows[n, j]
                out[n, 0, i, j] = ri == rj
                out[n, 1, i, j] = fk[n, ri, rj] == 1   # j's row is a parent of i's row
                out[n, 2, i, j] = fk[n, rj, ri] == 1   # j's row is a child of i's row
                out[n, 3, i, j] = cols[n, i] == cols[n, j]
    return out


def test_relation_masks_match_a_plain_loop(batch):
    import jax.numpy as jnp

    got = np.asarray(rt_jax.relation_masks({k: jnp.asarray(v) for k, v in batch.items()
                                                if k in ("seq_row_ids", "column_ids",
                                                         "is_padding", "fk_adj")}))
    want = naive_masks(batch)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    # the batch exercises every relation (a mask of only the diagonal would pass vacuously)
    off_diagonal = want & ~np.eye(want.shape[-1], dtype=bool)
    assert all(off_diagonal[:, r].any() for r in range(4))


def test_anchor_only_leaves_no_foreign_key_relation(batch):
    import jax.numpy as jnp

    cut = transforms.anchor_only(batch)
    masks = np.asarray(rt_jax.relation_masks({k: jnp.asarray(v) for k, v in cut.items()
                                              if k in ("seq_row_ids", "column_ids",
                                                          "is_padding", "fk_adj")}))
    off_diagonal = masks & ~np.eye(masks.shape[-1], dtype=bool)
    assert not off_diagonal[:, 1:3].any()          # no parents, no children
    assert off_diagonal[:, 0].any()                # the anchor row's cells still see each other


def test_int64_gather_is_exact_beyond_int32():
    values = np.array([0, 1, -1, 2**31, 2**40 + 7, -(2**62), 2**63 - 1], np.int64)
    np.testing.assert_array_equal(train_jax.gather_int64(values), values)


def _args(tmp_path, **overrides) -> options.TrainArgs:
    argv = ["--db", str(tmp_path), "--task", "t", "--steps", "1"]
    return options.parse_args("jax", argv) if not overrides else \
        options.parse_args("jax", argv + [f"--{k.replace('_', '-')}={v}"
                                          for k, v in overrides.items()])


def test_checkpoint_round_trip_and_refusals(tmp_path):
    import jax
    import jax.numpy as jnp
    import optax

    procs = train_jax.start_processes()
    params = {"w": jnp.arange(6.0).reshape(2, 3), "b": [jnp.ones(3), jnp.zeros(())]}
    optimizer = optax.adamw(1e-3)
    _, opt_state = optimizer.update(params, optimizer.init(params), params)  # moments != 0
    fingerprint = options.fingerprint(_args(tmp_path), "jax")
    path = tmp_path / "ckpt" / train_jax.CHECKPOINT_FILE
    sampler_state = {"format": "x", "train": {"step": 7}}
    train_jax.save_checkpoint(path, 7, params, opt_state, sampler_state, fingerprint)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left

    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    restored = train_jax.load_checkpoint(path, zeros, optimizer.init(zeros), fingerprint, procs)
    assert (restored.step, restored.sampler, restored.losses) == (7, sampler_state, [])
    for want, got in zip(jax.tree_util.tree_leaves((params, opt_state)),
                         jax.tree_util.tree_leaves((restored.params, restored.opt_state))):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert np.asarray(got).dtype == np.asarray(want).dtype

    other = options.fingerprint(_args(tmp_path, seed=9), "jax")
    with pytest.raises(CheckpointError, match="seed: checkpoint 0, now 9"):
        train_jax.load_checkpoint(path, zeros, optimizer.init(zeros), other, procs)
    wrong_shape = {"w": jnp.zeros((3, 2)), "b": [jnp.ones(3), jnp.zeros(())]}
    with pytest.raises(CheckpointError, match="params leaf"):
        train_jax.load_checkpoint(path, wrong_shape, optimizer.init(wrong_shape), fingerprint,
                                  procs)
    with pytest.raises(CheckpointError, match="no such file"):
        train_jax.load_checkpoint(tmp_path / "missing.npz", zeros, optimizer.init(zeros),
                                  fingerprint, procs)
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="no checksum trailer"):
        train_jax.load_checkpoint(garbage, zeros, optimizer.init(zeros), fingerprint, procs)
    garbage.write_bytes(common.sealed(b"not a zip"))  # checksummed, yet no npz
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        train_jax.load_checkpoint(garbage, zeros, optimizer.init(zeros), fingerprint, procs)
    data = bytearray(path.read_bytes())
    for at in (0, len(data) // 2, len(data) - 40, len(data) - 1):  # payload, marker, digest
        changed = bytearray(data)
        changed[at] ^= 0x10
        path.write_bytes(bytes(changed))
        with pytest.raises(CheckpointError, match="checksum"):
            train_jax.load_checkpoint(path, zeros, optimizer.init(zeros), fingerprint, procs)


@pytest.mark.parametrize("env, message", [
    ({"JAX_NUM_PROCESSES": "2"}, "$JAX_COORDINATOR_ADDRESS must be host:port when $JAX_NUM_PROCESSES > 1"),
    ({"JAX_NUM_PROCESSES": "two"}, "$JAX_NUM_PROCESSES must be an integer, got 'two'"),
    ({"JAX_NUM_PROCESSES": "2", "JAX_COORDINATOR_ADDRESS": "127.0.0.1:1",
      "JAX_PROCESS_ID": "2"}, "$JAX_PROCESS_ID must be in [0, 2), got '2'"),
])
def test_bad_process_variables_are_one_line_errors(tmp_path, env, message):
    proc = subprocess.run([str(PYTHON), str(EXAMPLES / "train_jax.py"), "--db", str(tmp_path),
                           "--task", "t", "--steps", "1"], env=clean_env(**env),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip() == f"error USAGE: {message}"


REQUIRED = ("framework", "world_size", "steps", "val_loss", "val_metric", "metric",
            "baseline_val_loss", "wait_p99_ms", "step_ms")


def _train(capfd, db, task, *flags: str) -> dict:
    # capfd: the script writes its result line on file descriptor 1 (it points fd 1 at
    # stderr while training, so native libraries cannot write there)
    assert train_jax.main(["--db", str(db), "--task", task, "--batch-size", "8",
                           "--sequence-length", "64", *flags]) == 0
    out = capfd.readouterr().out.strip().splitlines()
    assert len(out) == 1, out  # nothing but the result line
    return json.loads(out[0])


@pytest.mark.parametrize("variant, metric", [("churn", "auc"), ("majority", "accuracy"),
                                             ("grand", "mae"), ("mix", "mae")])
def test_every_target_type_trains_and_reports(capfd, planted_db_factory, variant, metric):
    """boolean, categorical, numeric, and numeric with text cells (the per-batch text table)."""
    import dlkit

    db, task = planted_db_factory(variant, 0, 0.1)
    result = _train(capfd, db, task, "--steps", "3")
    assert set(REQUIRED) <= set(result)
    assert (result["framework"], result["world_size"], result["steps"]) == ("jax", 1, 3)
    assert result["metric"] == metric and result["context"] == "full"
    with dlkit.Sampler(db, batch_size=8, sequence_length=64, max_rows=64) as sampler:
        val_seeds = len(sampler.splits[sampler.label_info(task).task_index].of("val"))
    assert result["val_count"] == val_seeds  # every val seed once
    for key in ("val_loss", "baseline_val_loss", "step_ms", "wait_p99_ms"):
        assert np.isfinite(result[key]) and result[key] >= 0, key


def test_anchor_only_runs_and_reports_its_context(capfd, planted_db):
    db, task = planted_db
    result = _train(capfd, db, task, "--steps", "2", "--context", "anchor-only")
    assert result["context"] == "anchor-only" and result["steps"] == 2


def test_a_resumed_run_records_and_reports_what_an_uninterrupted_one_does(capfd, planted_db,
                                                                           tmp_path):
    """The record of a run stopped at step 2 and resumed to 4 is the uninterrupted run's, line
    for line, with the keys of the torch example's; and so are the result's train losses (the
    first steps' losses come with the checkpoint)."""
    db, task = planted_db
    whole, pieced, ckpt = tmp_path / "whole.jsonl", tmp_path / "pieced.jsonl", tmp_path / "ck"
    uninterrupted = _train(capfd, db, task, "--steps", "4", "--record", str(whole))
    _train(capfd, db, task, "--steps", "2", "--checkpoint-dir", str(ckpt), "--record",
           str(pieced))
    resumed = _train(capfd, db, task, "--steps", "4", "--checkpoint-dir", str(ckpt),
                     "--resume", "--record", str(pieced))
    assert pieced.read_text() == whole.read_text()
    records = [json.loads(line) for line in whole.read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert all(list(r) == list(RECORD_KEYS) for r in records)
    assert resumed["resumed_from"] == 2
    for key in ("train_loss_first", "train_loss_last", "val_loss", "val_metric"):
        assert resumed[key] == uninterrupted[key], key
