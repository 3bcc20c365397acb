"""dlkit: relational data to fast, exactly reproducible training input for distributed ML."""

from dlkit.errors import DlkitError
from dlkit.nextbatch import (
    Cursor,
    RunManifest,
    SamplingPlan,
    Stage,
    load_checkpoint,
    load_manifest,
    next_batch,
    save_checkpoint,
)

__version__ = "0.1.0"

__all__ = [
    "Cursor", "DlkitError", "RunManifest", "SamplingPlan", "Stage", "__version__",
    "load_checkpoint", "load_manifest", "next_batch", "save_checkpoint",
]
