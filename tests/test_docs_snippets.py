"""Every ```python block of README.md and docs/*.md runs as written.

Each block runs in a fresh interpreter, in a temporary directory that holds what the docs'
examples name: ``out/db`` (the bundled example, preprocessed) and ``run.json`` (its run
manifest, made by ``dlkit manifest out/db --seed 42 --global-batch-size 64``). A block that
is not meant to run (an API listing, a shell session) is not fenced as ```python.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.db.conftest import example_db  # noqa: F401 - the session fixture

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def blocks() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{doc.relative_to(REPO)}:{line}", match.group(1)))
    return found


def test_the_docs_have_python_blocks_and_the_pattern_finds_them():
    found = blocks()
    total = sum(doc.read_text(encoding="utf-8").count("```python") for doc in DOCS)
    assert len(found) == total >= 5, [name for name, _ in found]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, example_db) -> Path:  # noqa: F811
    work = tmp_path_factory.mktemp("snippets")
    shutil.copytree(example_db, work / "out" / "db")
    subprocess.run([sys.executable, "-m", "dlkit", "manifest", "out/db", "--seed", "42",
                    "--global-batch-size", "64", "--out", "run.json", "--quiet"], cwd=work,
                   check=True, timeout=300)
    return work


@pytest.mark.parametrize("where,code", blocks(), ids=[name for name, _ in blocks()])
def test_a_python_block_runs_as_written(workdir, where, code):
    result = subprocess.run([sys.executable, "-c", code], cwd=workdir, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, f"{where}:\n{code}\n--- stderr\n{result.stderr}"
