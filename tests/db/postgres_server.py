"""A throwaway PostgreSQL server for the tests: Debian's ``postgresql`` package, a cluster in
a temporary directory listening on a Unix socket only, stopped and removed afterwards.

Run by root, the cluster belongs to the ``postgres`` user (initdb refuses root). A machine
without PostgreSQL fails the tests that need it (``apt-get install postgresql``): they are
part of ``make test`` and never skipped.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

DATABASE = "dlkit_test"
USER = "dlkit"


@dataclass(frozen=True)
class PostgresServer:
    socket_dir: Path
    bin_dir: Path

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql:///{database}?host={self.socket_dir}&user={USER}"


def postgres_bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return Path(found[-1]).parent if found else None


def _run(argv: list[str], user: str | None) -> None:
    if user is not None:
        argv = ["runuser", "-u", user, "--", *argv]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): "
                           f"{result.stdout}{result.stderr}")


def start_server() -> tuple[PostgresServer, object]:
    """A running server and the function that stops and removes it."""
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): "
                           "apt-get update && apt-get install -y postgresql")
    root = Path(tempfile.mkdtemp(prefix="dlkit-pg-"))
    user = None
    if os.geteuid() == 0:
        user = "postgres"
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    data = root / "data"
    started = False

    def stop() -> None:
        try:
            if started:
                with contextlib.suppress(RuntimeError):  # a start that failed: nothing runs
                    _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w",
                          "stop"], user)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    try:
        _run([str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", USER, "-E", "UTF8",
              "--locale=C", "--no-sync"], user)
        started = True  # from here on a failed start may still have left a server
        _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w", "-o",
              f"-k {root} -c listen_addresses='' -F", "start"], user)
        _run([str(bin_dir / "createdb"), "-h", str(root), "-U", USER, DATABASE], user)
    except BaseException:
        stop()
        raise
    return PostgresServer(socket_dir=root, bin_dir=bin_dir), stop
