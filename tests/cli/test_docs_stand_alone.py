"""The docs stand alone: they cite no file outside the repository (a design document, a seed,
a pinned profile) and every repository file they name exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md", ROOT / "CHANGELOG.md"]
TOP = ("src/", "docs/", "fixtures/", "tests/", "benchmarks/", "dlkit/", "scripts/", "examples/")
PATH = re.compile(r"`([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.*-]+)+)`")
ELSEWHERE = re.compile(r"shared/|seeds?/\d|seed \d{3}\b|\bprofile P\d|\bP\d\b")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_doc_cites_what_is_not_in_the_repository(doc):
    text = doc.read_text()
    assert not [m.group(0) for m in ELSEWHERE.finditer(text)], doc.name
    missing = []
    for match in PATH.finditer(text):
        path = match.group(1)
        if not path.startswith(TOP):
            continue
        candidates = [ROOT / path, ROOT / "src" / path]
        if not any(c.exists() or list(c.parent.glob(c.name)) for c in candidates):
            missing.append(path)
    assert missing == [], f"{doc.name} names files that do not exist: {missing}"


def test_nextbatch_v2_doc_defines_every_step_itself():
    text = (ROOT / "docs" / "nextbatch_v2.md").read_text()
    for term in ("kernel_replay_token_v1", "nextbatch_epoch_seed_v2", "0xD2511F53",
                 "0x9E3779B9", "2^63", "coprime", "BATCH_SIZE_INCONSISTENT", "drop_last",
                 "data_cursors", "manifest_hash"):
        assert term in text, term
