"""Start real training processes for a test, bounded in time, and leave none behind.

``Launch`` starts each command in a new session (its own process group), with its output in
files (a pipe nobody reads could block a worker). ``wait()`` polls the commands until all have
exited or the deadline passes, noting every descendant it sees on the way (torchrun starts its
workers in sessions of their own, so killing its group would miss them). Our process is made a
*child subreaper* (Linux ``prctl``), so a descendant whose parent dies is re-parented to us
instead of to init and is still found. ``kill()`` (also on leaving the ``with`` block) ends
whatever of it is still alive: SIGKILL to every group and every noted process, then reaps.

``wait()`` reports ``survivors``: descendants still running after every started command had
exited (on success there must be none: a worker a launcher forgot), ``timed_out``,
``listening``: every TCP listening socket a descendant was seen holding while it ran, as
``(ip, port, pid)``, and ``peers``: every remote address of their connected TCP sockets.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

PR_SET_CHILD_SUBREAPER = 36
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
PYTHON = Path(sys.executable)             # the test's own interpreter (the venv's)
TORCHRUN = PYTHON.parent / "torchrun"     # the launcher installed beside it


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 just now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Finished:
    argv: list[str]
    returncode: int  # negative: killed by that signal (a deadline or a failed peer)
    stdout: str
    stderr: str

    def describe(self) -> str:
        return (f"$ {' '.join(self.argv)}\nexit {self.returncode}\n--- stdout\n"
                f"{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-6000:]}")


@dataclass
class Outcome:
    finished: list[Finished]
    timed_out: bool
    survivors: list[str] = field(default_factory=list)  # "pid name" still alive at the end
    listening: set[tuple[str, int, int]] = field(default_factory=set)
    peers: set[str] = field(default_factory=set)
    pids: list[int] = field(default_factory=list)  # of the started commands, in order
    seconds: float = 0.0
    world_size: int = 1  # the processes of the training job (Runs.launch sets it)

    @property
    def ok(self) -> bool:
        return not self.timed_out and not self.survivors and \
            all(f.returncode == 0 for f in self.finished)

    def describe(self) -> str:
        head = (f"{self.seconds:.1f} s; timed out: {self.timed_out}; survivors: "
                f"{self.survivors}\n")
        return head + "\n".join(f.describe() for f in self.finished)


class Launch:
    """Commands started together (e.g. the processes of one job); use as a context manager."""

    def __init__(self, workdir: Path, timeout: float):
        become_subreaper()
        self.workdir = workdir
        self.deadline = time.monotonic() + timeout
        self.procs: list[tuple[list[str], subprocess.Popen, Path, Path]] = []
        self.seen: dict[int, psutil.Process] = {}
        self.listening: set[tuple[str, int, int]] = set()
        self.peers: set[str] = set()
        self.started = time.monotonic()
        self.before = {p.pid for p in psutil.Process().children()}

    def start(self, argv: list[str], env: dict[str, str], name: str) -> None:
        out = self.workdir / f"{name}.stdout"
        err = self.workdir / f"{name}.stderr"
        with open(out, "wb") as o, open(err, "wb") as e:
            proc = subprocess.Popen(argv, env=env, stdout=o, stderr=e, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=self.workdir)
        self.procs.append(([str(a) for a in argv], proc, out, err))

    def _note_descendants(self) -> None:
        for child in psutil.Process().children(recursive=True):
            if child.pid not in self.before:
                self.seen.setdefault(child.pid, child)
        for proc in list(self.seen.values()):
            try:
                for conn in proc.net_connections(kind="tcp"):
                    if conn.status == psutil.CONN_LISTEN:
                        self.listening.add((conn.laddr.ip, conn.laddr.port, proc.pid))
                    elif conn.raddr:
                        self.peers.add(conn.raddr.ip)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass

    def _alive(self) -> list[psutil.Process]:
        alive = []
        for proc in self.seen.values():
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except psutil.NoSuchProcess:
                pass
        return alive

    def wait(self, fail_fast: bool = True) -> Outcome:
        """Wait for every command (at most until the deadline); with ``fail_fast`` a command
        that fails ends the others at once (a peer would otherwise wait for it)."""
        timed_out = False
        while True:
            self._note_descendants()
            codes = [p.poll() for _, p, _, _ in self.procs]
            if all(c is not None for c in codes):
                break
            if fail_fast and any(c not in (None, 0) for c in codes):
                break
            if time.monotonic() > self.deadline:
                timed_out = True
                break
            try:
                self.procs[codes.index(None)][1].wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
        survivors: list[str] = []
        if not timed_out and all(p.poll() is not None for _, p, _, _ in self.procs):
            self._reap_zombies()
            survivors = [f"{p.pid} {p.name()}" for p in self._alive()]
        self.kill()
        finished = [Finished(argv, proc.returncode, out.read_text(errors="replace"),
                             err.read_text(errors="replace"))
                    for argv, proc, out, err in self.procs]
        return Outcome(finished, timed_out, survivors, set(self.listening), set(self.peers),
                       [p.pid for _, p, _, _ in self.procs], time.monotonic() - self.started)

    def _reap_zombies(self) -> None:
        for pid in list(self.seen):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass  # not our child (its launcher reaps it)

    def kill(self) -> None:
        """SIGKILL every started group and every descendant seen, then reap."""
        self._note_descendants()
        for _, proc, _, _ in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self._alive():
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        for _, proc, _, _ in self.procs:
            proc.wait()
        psutil.wait_procs(list(self.seen.values()), timeout=10)
        self._reap_zombies()

    def __enter__(self) -> Launch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


Commands = Callable[[int, list[str]], list[tuple[list[str], dict[str, str]]]]


class Runs:
    """Named training runs of one example, each a chain of launches that append to one
    ``--record`` file and share one ``--checkpoint-dir``. ``commands(processes, flags)`` gives
    the commands (argv, environment) that make one launch on ``processes`` processes;
    ``steps_flag`` is the example's flag for the steps to train to."""

    def __init__(self, root: Path, flags: list[str], commands: Commands, timeout: float,
                 steps_flag: str = "--steps"):
        self.root = root
        self.flags = flags
        self.commands = commands
        self.timeout = timeout
        self.steps_flag = steps_flag
        self.outcomes: dict[str, list[Outcome]] = {}

    def launch(self, name: str, processes: int, steps: int, resume: bool = False) -> Outcome:
        flags = [*self.flags, self.steps_flag, str(steps), "--record", str(self.record_path(name)),
                 "--checkpoint-dir", str(self.root / f"{name}-ckpt"),
                 *(["--resume"] if resume else [])]
        index = len(self.outcomes.get(name, []))
        with Launch(self.root, self.timeout) as launch:
            for i, (argv, env) in enumerate(self.commands(processes, flags)):
                launch.start(argv, env, f"{name}-{index}-{i}")
            outcome = launch.wait()
        outcome.world_size = processes
        assert outcome.ok, outcome.describe()
        self.outcomes.setdefault(name, []).append(outcome)
        return outcome

    def fork(self, name: str, new: str) -> None:
        """``new`` continues from ``name``'s checkpoint and record, as they are now."""
        shutil.copytree(self.root / f"{name}-ckpt", self.root / f"{new}-ckpt")
        shutil.copy(self.record_path(name), self.record_path(new))
        self.outcomes[new] = list(self.outcomes[name])

    def record_path(self, name: str) -> Path:
        return self.root / f"{name}.jsonl"

    def records(self, name: str) -> list[dict]:
        return [json.loads(line) for line in self.record_path(name).read_text().splitlines()]


def result_of(outcome: Outcome) -> dict:
    """The last stdout line of the first command: the run's result object."""
    return json.loads(outcome.finished[0].stdout.strip().splitlines()[-1])


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any launcher or framework variable a run could inherit."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JAX_", "XLA_", "TORCHELASTIC_", "MASTER_", "LOCAL_", "GROUP_",
                                "ROLE_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    env.update(PYTHONUNBUFFERED="1", **extra)
    return env
