"""dlkit: relational data to fast, exactly reproducible training input for distributed ML."""

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from dlkit.sampler import Sampler

__version__ = "0.1.0"

__all__ = [
    "Cursor", "DlkitError", "RunManifest", "SamplingPlan", "Stage", "Sampler", "__version__",
    "load_checkpoint", "load_manifest", "next_batch", "save_checkpoint",
]


def __getattr__(name: str) -> Any:
    # The relational sampler (its prefetch engine, typed column lists) is imported on first
    # use, so `import dlkit` stays as quick for scripts that only need NextBatch.
    if name == "Sampler":
        from dlkit.sampler import Sampler

        return Sampler
    raise AttributeError(f"module 'dlkit' has no attribute {name!r}")
