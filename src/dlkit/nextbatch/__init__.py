"""NextBatch_v2: deterministic, world-size-independent batch index sampling.

The normative definition is ``docs/nextbatch_v2.md`` (which follows the pinned profile).
"""

from typing import TYPE_CHECKING

from dlkit._lazy import lazy_attributes

if TYPE_CHECKING:
    from dlkit.nextbatch.cursor import Cursor, load_checkpoint, save_checkpoint
    from dlkit.nextbatch.run_manifest import (
        DataConfig,
        DatasetEntry,
        RunManifest,
        load_manifest,
        parse_manifest,
    )
    from dlkit.nextbatch.sampler import (
        BatchResult,
        SamplingMetadata,
        SamplingPlan,
        Stage,
        StepChunk,
        next_batch,
    )

# imported on first use: the sampler's kernels load numba (see dlkit._lazy)
__getattr__, __dir__, __all__ = lazy_attributes(__name__, {
    "dlkit.nextbatch.cursor": ("Cursor", "load_checkpoint", "save_checkpoint"),
    "dlkit.nextbatch.run_manifest": ("DataConfig", "DatasetEntry", "RunManifest", "load_manifest",
                                 "parse_manifest"),
    "dlkit.nextbatch.sampler": ("BatchResult", "SamplingMetadata", "SamplingPlan", "Stage",
                                "StepChunk", "next_batch"),
})
