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

from tests.examples.launch import EXAMPLES, PYTHON, TORCHRUN, Outcome, clean_env
from tests.examples.multiprocess import MultiProcessContract


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
