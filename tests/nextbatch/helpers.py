"""Builders shared by the NextBatch tests."""

from __future__ import annotations

import json

import numpy as np

from dlkit.nextbatch import Cursor, SamplingPlan, parse_manifest


def manifest_dict(n: int, gbs: int, block_size: int, drop_last: bool = False, seed: int = 7,
                  key: str = "ds") -> dict:
    return {"seed": seed, "global_batch_size": gbs,
            "data": {"sampler_block_size": block_size, "drop_last": drop_last},
            "datasets": {key: {"id": "ds", "version": "1", "cardinality": n, "hash": "ab" * 32}}}


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
