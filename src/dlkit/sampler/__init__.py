"""The relational batch sampler: hash splits, world-size-independent shards, temporal BFS,
Relational-Transformer batches (design §2b-§2e, §3a, §3b, §9; format in docs/batch_format.md).
"""

from dlkit.sampler.api import STATE_FORMAT, Sampler, SamplerConfig
from dlkit.sampler.batch import BATCH_KEYS, BATCH_LAYOUT, BatchBuilder, BatchConfig, BuiltBatch
from dlkit.sampler.schedule import SamplerWarning
from dlkit.sampler.splits import (
    SPLITS,
    SplitRatios,
    build_run_manifest,
    compute_splits,
    dataset_key,
)

__all__ = [
    "BATCH_KEYS", "BATCH_LAYOUT", "BatchBuilder", "BatchConfig", "BuiltBatch", "SPLITS",
    "STATE_FORMAT", "Sampler", "SamplerConfig", "SamplerWarning", "SplitRatios",
    "build_run_manifest", "compute_splits", "dataset_key",
]
