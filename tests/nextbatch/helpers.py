"""Builders shared by the NextBatch tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dlkit.nextbatch import Cursor, SamplingPlan, parse_manifest


def manifest_dict(n: int, gbs: int, block_size: int, drop_last: bool = False, seed: int = 7,
                  key: str = "ds") -> dict:
    return {"seed": seed, "global_batch_size": gbs,
            "data": {"sampler_block_size": block_size, "drop_last": drop_last},
            "datasets": {key: {"id": "ds", "version": "1", "cardinality": n, "hash": "ab" * 32}}}


GOLDEN_DIR = Path(__file__).resolve().parents[2] / "src" / "dlkit" / "nextbatch" / "goldens"


def one_case_golden(path: Path, edit: Callable[[dict], None] | None = None) -> Path:
    """A golden file at ``path``: the first case of a small bundled one, ``edit(case)`` first."""
    document = json.loads((GOLDEN_DIR / "nextbatch_v2_n1e6_drop_last.json").read_text())
    document["cases"] = document["cases"][:1]
    if edit is not None:
        edit(document["cases"][0])
    path.write_text(json.dumps(document))
    return path


def change_a_position(case: dict) -> None:
    """Make the case's expected index at one sampled position wrong."""
    case["positions"][3][2] += 1


def manifest_of(d: dict):
    return parse_manifest(json.dumps(d))


def epoch_stream(plan: SamplingPlan, cursor: Cursor, steps: int | None = None):
    """(per-step index lists, final cursor) by repeated next_batch calls."""
    out = []
    for _ in range(steps if steps is not None else plan.steps_to_epoch_end(cursor)):
        result = plan.next_batch(cursor)
        out.append(result.indices.tolist())
        cursor = result.cursor
    return out, cursor


def concat(chunks) -> np.ndarray:
    return np.concatenate([c.indices for c in chunks]) if chunks else np.empty(0, np.uint64)
