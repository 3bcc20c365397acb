"""The relational batch sampler: hash splits, world-size-independent shards, temporal BFS,
Relational-Transformer batches (the format: docs/batch_format.md).
"""

from typing import TYPE_CHECKING

from dlkit._lazy import lazy_attributes

if TYPE_CHECKING:
    from dlkit.sampler.api import STATE_FORMAT, Sampler
    from dlkit.sampler.batch import (
        BATCH_KEYS,
        BATCH_LAYOUT,
        BATCH_SCALAR_KEYS,
        BatchBuilder,
        BatchConfig,
        BuiltBatch,
        ChildPolicy,
        ContextExamplePolicy,
    )
    from dlkit.sampler.config import SamplerConfig
    from dlkit.sampler.database import SamplerDatabase
    from dlkit.sampler.schedule import SamplerWarning
    from dlkit.sampler.splits import (
        SPLITS,
        SplitRatios,
        build_run_manifest,
        compute_splits,
        dataset_key,
    )

# imported on first use: the sampler's kernels load numba (see dlkit._lazy)
__getattr__, __dir__, __all__ = lazy_attributes(__name__, {
    "dlkit.sampler.api": ("STATE_FORMAT", "Sampler"),
    "dlkit.sampler.batch": ("BATCH_KEYS", "BATCH_LAYOUT", "BATCH_SCALAR_KEYS", "BatchBuilder",
                            "BatchConfig", "BuiltBatch", "ChildPolicy", "ContextExamplePolicy"),
    "dlkit.sampler.config": ("SamplerConfig",),
    "dlkit.sampler.database": ("SamplerDatabase",),
    "dlkit.sampler.schedule": ("SamplerWarning",),
    "dlkit.sampler.splits": ("SPLITS", "SplitRatios", "build_run_manifest", "compute_splits",
                             "dataset_key"),
})
