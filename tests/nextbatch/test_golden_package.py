"""The golden files ship as package data: after a normal install, `dlkit verify-golden` with no
arguments checks and names every bundled golden file, from any directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dlkit.nextbatch.golden import bundled_golden_dir, default_golden_paths

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = sorted(p.name for p in (ROOT / "src" / "dlkit" / "nextbatch" / "goldens").glob("*.json"))


def test_the_default_golden_files_are_the_bundled_ones():
    assert len(BUNDLED) >= 6
    assert [p.name for p in default_golden_paths()] == BUNDLED
    assert bundled_golden_dir().is_dir()


@pytest.mark.slow
def test_an_installed_wheel_verifies_every_bundled_golden_from_anywhere(tmp_path):
    source = tmp_path / "source"  # a copy: building in place would write into the tree
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".venv", ".venv-demo", ".git", "tests", "benchmarks", "fixtures", "build", "*.egg-info",
        "__pycache__", "*.nbi", "*.nbc", ".pytest_cache"))
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(wheels), str(source)], check=True, timeout=600,
                   capture_output=True)
    wheel, = wheels.glob("dlkit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert sorted(Path(n).name for n in names if "/goldens/" in n) == BUNDLED
    assert "dlkit/py.typed" in names  # and the annotations (PEP 561)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheel)], check=True, timeout=600, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target)}
    where = subprocess.run([sys.executable, "-c", "import dlkit; print(dlkit.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, check=True)
    assert where.stdout.startswith(str(target))  # the installed copy, not the source tree
    result = subprocess.run([sys.executable, "-m", "dlkit", "verify-golden"], cwd=elsewhere,
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    checked = sorted(line.split()[1].rstrip(":") for line in result.stderr.splitlines()
                     if line.startswith("ok "))
    assert checked == BUNDLED
