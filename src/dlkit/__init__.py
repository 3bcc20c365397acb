"""dlkit: relational data to fast, exactly reproducible training input for distributed ML."""

from typing import TYPE_CHECKING

from dlkit._lazy import lazy_attributes
from dlkit.errors import DlkitError

if TYPE_CHECKING:
    from dlkit.nextbatch import Cursor as Cursor
    from dlkit.nextbatch import RunManifest as RunManifest
    from dlkit.nextbatch import SamplingPlan as SamplingPlan
    from dlkit.nextbatch import Stage as Stage
    from dlkit.nextbatch import load_checkpoint as load_checkpoint
    from dlkit.nextbatch import load_manifest as load_manifest
    from dlkit.nextbatch import next_batch as next_batch
    from dlkit.nextbatch import save_checkpoint as save_checkpoint
    from dlkit.sampler import Sampler as Sampler

__version__ = "0.2.0"

__getattr__, __dir__, _lazy_names = lazy_attributes(__name__, {
    "dlkit.nextbatch": ("Cursor", "RunManifest", "SamplingPlan", "Stage", "load_checkpoint",
                        "load_manifest", "next_batch", "save_checkpoint"),
    "dlkit.sampler": ("Sampler",),
})
__all__ = ["DlkitError", "__version__", *_lazy_names]
