"""Builders for the NextBatch_v3 tests (v2's helpers plus the manifest's sampling_mode)."""

from __future__ import annotations

from tests.naive_feistel import V3_MODE
from tests.nextbatch.helpers import manifest_dict


def v3_dict(n: int, gbs: int, block_size: int = 1_048_576, drop_last: bool = False,
            seed: int = 7, key: str = "ds") -> dict:
    doc = manifest_dict(n, gbs, block_size, drop_last, seed, key)
    doc["data"]["sampling_mode"] = V3_MODE
    return doc
