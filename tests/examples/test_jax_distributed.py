"""examples/train_jax.py on two CPU processes joined by ``jax.distributed.initialize``.

Each process is started by the test with the script's variables (``JAX_COORDINATOR_ADDRESS``
on 127.0.0.1, ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``), as a cluster scheduler would; the
gloo CPU collectives carry the gradients. The checks are the multi-process contract
(``tests/examples/multiprocess.py``); here every socket, the coordinator's included, must
listen on loopback only.
"""

from __future__ import annotations

from pathlib import Path

from tests.examples.launch import EXAMPLES, PYTHON, clean_env, free_port
from tests.examples.multiprocess import MultiProcessContract


class TestJaxDistributed(MultiProcessContract):
    framework = "jax"
    seed = 3

    def commands(self, processes: int, flags: list[str],
                 root: Path) -> list[tuple[list[str], dict]]:
        # JAX's persistent compilation cache, shared by the launches of the session: a launch
        # compiles only what no earlier launch of its world size did (about half its time)
        env = clean_env(JAX_PLATFORMS="cpu", JAX_COMPILATION_CACHE_DIR=str(root / "jax-cache"),
                        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                        JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
        argv = [str(PYTHON), str(EXAMPLES / "train_jax.py"), *flags]
        if processes == 1:
            return [(argv, env)]
        address = f"127.0.0.1:{free_port()}"
        return [(argv, {**env, "JAX_COORDINATOR_ADDRESS": address,
                        "JAX_NUM_PROCESSES": str(processes), "JAX_PROCESS_ID": str(pid)})
                for pid in range(processes)]
