"""Suite-wide settings: hypothesis profiles (no deadlines: the first call of a kernel compiles)."""

import os
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60
)
settings.register_profile(
    "thorough", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=600
)
settings.load_profile(os.environ.get("DLKIT_HYPOTHESIS_PROFILE", "default"))


@pytest.fixture
def without_torch(monkeypatch):
    """Imports of torch (and of every torch submodule already loaded, which Python would
    return from its cache without looking at the parent) fail as if it were not installed."""
    import sys

    for name in [n for n in sys.modules if n == "torch" or n.startswith("torch.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "torch", None)


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def dlkit(capsys):
    """Run the CLI in this process, through its real entry point and error boundary."""
    from dlkit.cli.app import main

    def run(*args: object) -> CliResult:
        capsys.readouterr()
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run
