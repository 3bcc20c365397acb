"""Run the real ``dlkit`` entry point in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys


def run_dlkit(*args: str, cwd=None, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """Without COLUMNS: a readline the test process loaded puts COLUMNS=80 in the environment
    its children inherit, and output off a terminal would be fitted to it."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run([sys.executable, "-m", "dlkit", *map(str, args)], capture_output=True,
                          cwd=cwd, input=stdin, timeout=300, env=env)


def assert_clean_failure(result: subprocess.CompletedProcess, code: str) -> str:
    """One readable error line naming the code; no traceback; non-zero exit."""
    err = result.stderr.decode()
    assert result.returncode != 0, err
    assert "Traceback" not in err, err
    assert f"error {code}:" in err, err
    assert len([line for line in err.splitlines() if line.strip()]) == 1, err
    return err
