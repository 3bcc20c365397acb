"""NextBatch_v2: deterministic, world-size-independent batch index sampling.

The normative definition is ``docs/nextbatch_v2.md`` (which follows the pinned profile).
"""

from typing import TYPE_CHECKING

from dlkit._lazy import lazy_attributes

if TYPE_CHECKING:
    from dlkit.nextbatch.cursor import Cursor as Cursor
    from dlkit.nextbatch.cursor import load_checkpoint as load_checkpoint
    from dlkit.nextbatch.cursor import save_checkpoint as save_checkpoint
    from dlkit.nextbatch.run_manifest import DataConfig as DataConfig
    from dlkit.nextbatch.run_manifest import DatasetEntry as DatasetEntry
    from dlkit.nextbatch.run_manifest import RunManifest as RunManifest
    from dlkit.nextbatch.run_manifest import load_manifest as load_manifest
    from dlkit.nextbatch.run_manifest import parse_manifest as parse_manifest
    from dlkit.nextbatch.sampler import BatchResult as BatchResult
    from dlkit.nextbatch.sampler import SamplingMetadata as SamplingMetadata
    from dlkit.nextbatch.sampler import SamplingPlan as SamplingPlan
    from dlkit.nextbatch.sampler import Stage as Stage
    from dlkit.nextbatch.sampler import StepChunk as StepChunk
    from dlkit.nextbatch.sampler import next_batch as next_batch

# imported on first use: the sampler's kernels load numba (see dlkit._lazy)
__getattr__, __dir__, __all__ = lazy_attributes(__name__, {
    "dlkit.nextbatch.cursor": ("Cursor", "load_checkpoint", "save_checkpoint"),
    "dlkit.nextbatch.run_manifest": ("DataConfig", "DatasetEntry", "RunManifest", "load_manifest",
                                 "parse_manifest"),
    "dlkit.nextbatch.sampler": ("BatchResult", "SamplingMetadata", "SamplingPlan", "Stage",
                                "StepChunk", "next_batch"),
})
