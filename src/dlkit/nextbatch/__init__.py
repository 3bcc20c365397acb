"""NextBatch_v2: deterministic, world-size-independent batch index sampling.

The normative definition is ``docs/nextbatch_v2.md`` (which follows the pinned profile).
"""

from dlkit.nextbatch.cursor import Cursor, load_checkpoint, save_checkpoint
from dlkit.nextbatch.manifest import DataConfig, DatasetEntry, RunManifest, load_manifest, parse_manifest
from dlkit.nextbatch.sampler import BatchResult, SamplingMetadata, SamplingPlan, Stage, StepChunk, next_batch

__all__ = [
    "BatchResult", "Cursor", "DataConfig", "DatasetEntry", "RunManifest", "SamplingMetadata",
    "SamplingPlan", "Stage", "StepChunk", "load_checkpoint", "load_manifest", "next_batch",
    "parse_manifest", "save_checkpoint",
]
