"""The multi-process contract both training examples are held to, as one test class.

A subclass names the framework and how to launch it on N processes (``commands``); the class
runs the tiny planted database for 6 steps of a global batch of 8, with a checkpoint at step
3, as four runs (each process count a real launch):

* ``one``: 1 process, steps 0-5, the uninterrupted reference;
* ``one_then_one``: 1 process to step 3, then 1 process resumes (steps 3-5);
* ``one_then_two``: the same checkpoint, resumed on 2 processes;
* ``two_then_one``: 2 processes to step 3, then 1 process resumes.

and checks, from the ``--record`` files (rank 0 appends per step the global batch's anchors
gathered from every rank, every rank's parameter digest and the loss) and the result lines:
the reference trains on the global batches of in-test ``dlkit.Sampler`` ranks; 2 processes
train on the 1-process global batches with identical parameters on both; a resume on any
world size continues the reference's global batches (and on the same world size its exact
parameters); validation covers the val split once; one result line, from rank 0; every
socket on loopback; no process survives its launch.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.examples.launch import Outcome, Runs, result_of

STEPS, CHECKPOINT_AT, GLOBAL_BATCH, SEQUENCE_LENGTH = 6, 3, 8, 64
TIMEOUT_S = 300
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}
WORLD = {"one": 1, "two": 2}


def _anchors(records: list[dict]) -> list[list[int]]:
    return [r["anchors"] for r in records]


def sampler_global_batches(db, task: str, seed: int,
                           steps: int) -> tuple[list[list[int]], tuple[set[int], int]]:
    """The anchors of the first ``steps`` global batches, from two in-test sampler ranks put
    side by side, and the task's ``(train anchor rows, task index)``."""
    import dlkit

    ranks = [dlkit.Sampler(db, seed=seed, batch_size=GLOBAL_BATCH // 2, world_size=2, rank=r,
                           sequence_length=SEQUENCE_LENGTH, max_rows=SEQUENCE_LENGTH,
                           task_weights={task: 1.0}, num_prefetch=0) for r in (0, 1)]
    try:
        batches = [np.concatenate([s.next_train_batch()["anchor_rows"] for s in ranks]).tolist()
                   for _ in range(steps)]
        info = ranks[0].label_info(task)
        view = ranks[0].builder.task(task)
        train_rows = set(view.anchor_row[ranks[0].splits[info.task_index].of("train")].tolist())
    finally:
        for sampler in ranks:
            sampler.shutdown()
    return batches, (train_rows, info.task_index)


class MultiProcessContract:
    """Subclass as ``Test...`` with ``framework``, ``seed`` and ``commands``."""

    framework: str
    seed: int

    def commands(self, processes: int, flags: list[str],
                 root: Path) -> list[tuple[list[str], dict]]:
        """The commands (argv, environment) of one launch on ``processes`` processes;
        ``root`` is a directory the launches of the class share."""
        raise NotImplementedError

    def wildcard_listeners_allowed(self, outcome: Outcome) -> set[int]:
        """Pids that may listen on the wildcard address (none by default)."""
        return set()

    @pytest.fixture(scope="class")
    @classmethod
    def runs(cls, planted_db, tmp_path_factory) -> Runs:
        db, task = planted_db
        root = tmp_path_factory.mktemp(f"{cls.framework}-multiprocess")
        flags = ["--db", str(db), "--task", task, "--batch-size", str(GLOBAL_BATCH),
                 "--sequence-length", str(SEQUENCE_LENGTH), "--seed", str(cls.seed),
                 "--checkpoint-every", str(CHECKPOINT_AT)]
        launcher = cls()
        runs = Runs(root, flags, lambda n, f: launcher.commands(n, f, root), TIMEOUT_S)
        runs.launch("one", 1, STEPS)
        runs.launch("one_then_one", 1, CHECKPOINT_AT)
        runs.fork("one_then_one", "one_then_two")
        runs.launch("one_then_one", 1, STEPS, resume=True)
        runs.launch("one_then_two", 2, STEPS, resume=True)
        runs.launch("two_then_one", 2, CHECKPOINT_AT)
        runs.launch("two_then_one", 1, STEPS, resume=True)
        return runs

    def test_reference_trains_on_the_sampler_global_batches(self, runs, planted_db):
        """The 1-process run's anchors are the global batches of two sampler ranks side by
        side, distinct train seeds of the task."""
        db, task = planted_db
        ref = runs.records("one")
        assert [r["step"] for r in ref] == list(range(STEPS))
        expected, (train_rows, task_index) = sampler_global_batches(db, task, self.seed, STEPS)
        assert _anchors(ref) == expected
        flat = [a for step in _anchors(ref) for a in step]
        assert len(flat) == STEPS * GLOBAL_BATCH and len(set(flat)) == len(flat)
        assert set(flat) <= train_rows
        assert all(r["task_idx"] == task_index for r in ref)

    def test_anchors_gathered_from_two_ranks_equal_the_one_process_global_batch(self, runs):
        ref = _anchors(runs.records("one"))
        assert _anchors(runs.records("two_then_one")[:CHECKPOINT_AT]) == ref[:CHECKPOINT_AT]
        assert _anchors(runs.records("one_then_two")[CHECKPOINT_AT:]) == ref[CHECKPOINT_AT:]

    def test_both_ranks_hold_identical_parameters_at_every_step(self, runs):
        two_process = runs.records("two_then_one")[:CHECKPOINT_AT] + \
            runs.records("one_then_two")[CHECKPOINT_AT:]
        assert len(two_process) == STEPS
        for r in two_process:
            assert len(r["params"]) == 2 and len(r["params"][0]) == 64, r
            assert r["params"][0] == r["params"][1], f"step {r['step']}: {r['params']}"
        # the digests follow training: every step changes them
        assert len({r["params"][0] for r in two_process}) == STEPS

    @pytest.mark.parametrize("name", ["one_then_one", "one_then_two", "two_then_one"])
    def test_resume_continues_the_global_batches_of_the_uninterrupted_run(self, runs, name):
        records = runs.records(name)
        assert [r["step"] for r in records] == list(range(STEPS))
        assert _anchors(records) == _anchors(runs.records("one"))
        before, after = name.split("_then_")
        assert [len(r["params"]) for r in records] == \
            [WORLD[before]] * CHECKPOINT_AT + [WORLD[after]] * (STEPS - CHECKPOINT_AT)

    def test_resume_on_the_same_world_size_is_bit_exact(self, runs):
        """Parameters, optimizer state and step travel in the checkpoint: 1 process resumed
        at step 3 holds, step for step, the parameters of the uninterrupted run."""
        ref = runs.records("one")
        resumed = runs.records("one_then_one")
        assert [r["params"] for r in resumed] == [r["params"] for r in ref]
        assert [r["loss"] for r in resumed] == [r["loss"] for r in ref]

    @pytest.mark.parametrize("name", ["one_then_two", "two_then_one"])
    def test_resume_on_another_world_size_keeps_the_training_state(self, runs, name):
        """Across world sizes gradients are summed in another order (not bit-exact), but the
        losses follow the reference's to float32 rounding; a restart from scratch, or a lost
        optimizer state, would be off by far more."""
        ref = [r["loss"] for r in runs.records("one")]
        np.testing.assert_allclose([r["loss"] for r in runs.records(name)], ref, rtol=1e-4)
        assert ref[CHECKPOINT_AT] != pytest.approx(ref[0], rel=1e-3)  # training moved it

    def test_one_result_line_from_rank_zero(self, runs):
        for outcomes in runs.outcomes.values():
            for outcome in outcomes:
                result = result_of(outcome)  # the last stdout line of the first command
                assert result["framework"] == self.framework
                assert result["world_size"] == outcome.world_size
                assert result["steps"] in (CHECKPOINT_AT, STEPS)
                assert np.isfinite(result["val_loss"])
                assert np.isfinite(result["baseline_val_loss"])
                lines = [line for f in outcome.finished for line in f.stdout.splitlines()]
                assert sum(_is_json_object(line) for line in lines) == 1, lines

    def test_validation_covers_the_val_split_on_any_world_size(self, runs, planted_db):
        import dlkit

        db, task = planted_db
        with dlkit.Sampler(db, task_weights={task: 1.0}, num_prefetch=0) as sampler:
            info = sampler.label_info(task)
            val_seeds = len(sampler.splits[info.task_index].of("val"))
        final = {name: result_of(runs.outcomes[name][-1]) for name in runs.outcomes}
        assert {r["val_count"] for r in final.values()} == {val_seeds}
        assert {r["world_size"] for r in final.values()} == {1, 2}
        # the same parameters give the same validation: exactly on 1 process, to rounding
        # on 2 (the gathered outputs were computed in another order)
        assert final["one_then_one"]["val_loss"] == final["one"]["val_loss"]
        np.testing.assert_allclose(final["one_then_two"]["val_loss"],
                                   final["one"]["val_loss"], rtol=1e-4)

    def test_sockets_stay_on_loopback_and_no_process_survives(self, runs):
        launches = [o for outcomes in runs.outcomes.values() for o in outcomes]
        multi = [o for o in launches if o.world_size == 2]
        assert len(multi) >= 2
        for outcome in multi:
            allowed = self.wildcard_listeners_allowed(outcome)
            # A child seen between its fork and its exec still holds its parent's sockets: the
            # same address and port as an allowed listener is that listener, not another one
            # (two sockets cannot listen on one address and port here).
            theirs = {(ip, port) for ip, port, pid in outcome.listening if pid in allowed}
            checked = {(ip, port) for ip, port, pid in outcome.listening
                       if pid not in allowed and (ip, port) not in theirs}
            assert checked, "no listening socket seen: the check saw nothing"
            assert {ip for ip, _ in checked} <= LOOPBACK, outcome.listening
            assert outcome.peers and outcome.peers <= LOOPBACK, outcome.peers
        for outcome in launches:
            assert outcome.survivors == [] and not outcome.timed_out


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False
