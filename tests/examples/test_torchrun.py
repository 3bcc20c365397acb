"""examples/train_torch.py under ``torchrun --standalone --nproc-per-node 2``: DDP over gloo.

The 2-process launches go through torchrun itself (rendezvous on localhost, gloo on ``lo``);
1-process launches are plain ``python train_torch.py``. The checks are the multi-process
contract (``tests/examples/multiprocess.py``). The workers' sockets listen on loopback only;
torchrun's own rendezvous store (a c10d ``TCPStore`` in the launcher process) listens on the
wildcard address, because torch 2.13 gives that store no bind address, and it is reached
through loopback only (every connection is checked).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.examples.launch import (
    EXAMPLES,
    PYTHON,
    TORCHRUN,
    Outcome,
    Runs,
    clean_env,
    free_port,
    result_of,
)
from tests.examples.multiprocess import LOOPBACK, TIMEOUT_S, MultiProcessContract


class TestTorchrun(MultiProcessContract):
    framework = "torch"
    seed = 5

    def commands(self, processes: int, flags: list[str],
                 root: Path) -> list[tuple[list[str], dict]]:
        script = str(EXAMPLES / "train_torch.py")
        env = clean_env(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
        if processes == 1:
            return [([str(PYTHON), script, *flags], env)]
        return [([str(TORCHRUN), "--standalone", "--nproc-per-node", str(processes),
                  "--max-restarts", "0", script, *flags], env)]

    def wildcard_listeners_allowed(self, outcome: Outcome) -> set[int]:
        return {outcome.pids[0]}  # the torchrun launcher: its TCPStore (see above)


# --- two nodes: examples/pretrain.py on a mixture ------------------------------------------------

STEPS, CHECKPOINT_AT, GLOBAL_BATCH, SEQUENCE_LENGTH = 6, 3, 8, 64


NODES = 2


def two_node_commands(processes: int, flags: list[str]) -> list[tuple[list[str], dict]]:
    """examples/pretrain.py as ``processes`` processes on two nodes (``processes / 2`` each):
    one torchrun launcher per node, as on a cluster, with a static rendezvous at 127.0.0.1
    (node 0's launcher hosts its store); one process is plain ``python pretrain.py``."""
    script = str(EXAMPLES / "pretrain.py")
    env = clean_env(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    if processes == 1:
        return [([str(PYTHON), script, *flags], env)]
    port = str(free_port())
    assert processes % NODES == 0
    return [([str(TORCHRUN), "--nnodes", str(NODES), "--node-rank", str(node),
              "--master-addr", "127.0.0.1", "--master-port", port, "--nproc-per-node",
              str(processes // NODES), "--max-restarts", "0", script, *flags], env)
            for node in range(NODES)]


class TestTwoNodesPretrain:
    """Two torchrun launchers (``--nnodes 2``, two processes each: 2x2) pretrain on the
    mixture to step 3, one process resumes to step 6, beside an uninterrupted one-process
    run: every step's global batch (its anchors and database) is the one-process run's,
    which is two in-test mixture sampler ranks side by side; all four ranks hold the same
    parameters; the resumed run ends where the uninterrupted one does, to float32
    rounding."""

    @pytest.fixture(scope="class")
    @classmethod
    def runs(cls, mixture_dbs, tmp_path_factory) -> Runs:
        root = tmp_path_factory.mktemp("torch-two-nodes")
        flags = ["--db", *map(str, mixture_dbs), "--held-out", mixture_dbs[-1].name,
                 "--finetune-steps", "2", "--batch-size", str(GLOBAL_BATCH),
                 "--sequence-length", str(SEQUENCE_LENGTH), "--d-model", "32",
                 "--checkpoint-every", str(CHECKPOINT_AT)]
        runs = Runs(root, flags, two_node_commands, TIMEOUT_S, steps_flag="--pretrain-steps")
        runs.launch("one", 1, STEPS)
        runs.launch("two_then_one", 2 * NODES, CHECKPOINT_AT)
        runs.launch("two_then_one", 1, STEPS, resume=True)
        return runs

    def test_the_reference_is_two_sampler_ranks_side_by_side(self, runs, mixture_dbs):
        import dlkit

        weights = [1.0] * (len(mixture_dbs) - 1) + [0.0]
        ranks = [dlkit.Sampler([str(d) for d in mixture_dbs], database_weights=weights,
                               batch_size=GLOBAL_BATCH // 2, world_size=2, rank=r,
                               sequence_length=SEQUENCE_LENGTH, max_rows=SEQUENCE_LENGTH,
                               num_prefetch=0) for r in (0, 1)]
        try:
            expected = []
            for _ in range(STEPS):
                halves = [s.next_train_batch() for s in ranks]
                assert halves[0]["database_idx"][0] == halves[1]["database_idx"][0]
                expected.append((int(halves[0]["database_idx"][0]),
                                 np.concatenate([h["anchor_rows"] for h in halves]).tolist()))
        finally:
            for sampler in ranks:
                sampler.shutdown()
        ref = runs.records("one")
        assert [(r["database_idx"], r["anchors"]) for r in ref] == expected
        assert len({d for d, _ in expected}) >= 2  # the steps served several databases

    def test_two_nodes_train_on_the_one_process_global_batches(self, runs):
        ref = runs.records("one")
        pieced = runs.records("two_then_one")
        assert [r["step"] for r in pieced] == list(range(STEPS))
        assert [(r["database_idx"], r["anchors"]) for r in pieced] == \
            [(r["database_idx"], r["anchors"]) for r in ref]
        assert [len(r["params"]) for r in pieced] == [2 * NODES] * CHECKPOINT_AT + [1] * (
            STEPS - CHECKPOINT_AT)
        for r in pieced[:CHECKPOINT_AT]:
            assert all(p == r["params"][0] for p in r["params"]), f"step {r['step']}"
        np.testing.assert_allclose([r["loss"] for r in pieced], [r["loss"] for r in ref],
                                   rtol=1e-4)

    def test_the_resumed_run_reports_what_the_uninterrupted_one_does(self, runs):
        one = result_of(runs.outcomes["one"][-1])
        resumed = result_of(runs.outcomes["two_then_one"][-1])
        first = result_of(runs.outcomes["two_then_one"][0])
        assert (first["world_size"], resumed["world_size"], resumed["resumed_from"]) == \
            (2 * NODES, 1, CHECKPOINT_AT)
        for key in ("zero_shot_loss", "fine_tuned_loss", "scratch_loss", "baseline_loss"):
            np.testing.assert_allclose(resumed[key], one[key], rtol=1e-3, err_msg=key)
        assert resumed["val_count"] == one["val_count"] == first["val_count"]

    def test_sockets_stay_on_loopback_and_no_process_survives(self, runs):
        launches = [o for outcomes in runs.outcomes.values() for o in outcomes]
        for outcome in launches:
            assert outcome.survivors == [] and not outcome.timed_out
        (two,) = [o for o in launches if o.world_size == 2 * NODES]
        # node 0's launcher hosts the rendezvous store (on the wildcard address: see above)
        store = {(ip, port) for ip, port, pid in two.listening if pid == two.pids[0]}
        others = {(ip, port) for ip, port, pid in two.listening
                  if pid != two.pids[0] and (ip, port) not in store}
        assert store and others, two.listening
        assert {ip for ip, _ in others} <= LOOPBACK, two.listening
        assert two.peers and two.peers <= LOOPBACK, two.peers
