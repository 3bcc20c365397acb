"""PyTorch adapter: dlkit batches as dicts of ``torch.Tensor``.

``to_torch(batch)`` converts one batch (a dict of numpy arrays) without copying: every key
becomes ``torch.from_numpy(array)``, a tensor over the same memory (the sampler allocates
fresh arrays for every batch, so nothing overwrites them later). Every dtype of a batch has a
torch counterpart (torch >= 2.3 has ``uint16`` and ``uint32``), so no key is copied, with two
exceptions that keep the tensor safe: an array numpy marks read-only (e.g. one read with
``np.load(..., mmap_mode="r")``; writing through a tensor over it would crash) and one in
non-native byte order are copied first. ``uint16``/``uint32`` tensors (``seq_row_ids``,
``*_embed_ids``, the permutations, ``task_idx``, ``cat_emb_*``) support few operations in
torch: convert them where they are used (``ids.long()`` or ``ids.int()``, on the device after
the transfer, where the conversion is cheap). ``pin_memory=True`` copies each array once into
page-locked memory so that the copy to ``device`` runs asynchronously (``non_blocking``);
without an accelerator it is ignored with a warning, as ``DataLoader`` does.

``SamplerDataset(sampler)`` is a ``torch.utils.data.IterableDataset`` over a
:class:`dlkit.Sampler`: the endless train stream by default, or one pass of the val or test
split (``split="val"``, ``Sampler.iter_eval``) per ``iter()``. Its ``state_dict()`` /
``load_state_dict()`` make it *Stateful* in the sense of torchdata's ``StatefulDataLoader``,
which saves and restores it with the loader's own state, so one checkpoint holds the model,
the optimizer and the data position::

    sampler = dlkit.Sampler(db, batch_size=32, num_threads=2)   # ranks from torchrun's env
    dataset = SamplerDataset(sampler, device=f"cuda:{sampler.local_rank}", pin_memory=True)
    loader = StatefulDataLoader(dataset, batch_size=None, num_workers=0)  # or DataLoader
    for step, batch in zip(range(steps), loader):
        ...
    torch.save({"model": model.state_dict(), "optim": optim.state_dict(),
                "data": loader.state_dict()}, path)

Use it with ``batch_size=None`` (a dlkit batch is already a batch: the loader must not collate
batches into a batch of batches) and ``num_workers=0``. The sampler's own producer threads
build batches ahead of the training loop (``num_threads``, ``num_prefetch``) and its Numba
kernels release the GIL, so they overlap with the model's step in the training process itself.
Worker processes would add nothing but cost: each would need its own sampler (its own
database maps and in-memory copies, gigabytes on a large database) and its own Numba threads
(forking a process that runs threads is unsafe), and every batch would be pickled through a
pipe. ``iter()`` in a ``DataLoader`` worker process raises ``InvalidArgumentError``.
``SamplerDataset.state_dict()`` is the sampler's JSON state after the last batch the dataset
yielded, so resuming (on any world size with the same global batch) continues with exactly the
batches an uninterrupted run would have seen.

Importing this module imports torch; without it, one ``MissingExtraError`` says to install
``dlkit[torch]``. ``import dlkit`` never imports torch.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dlkit.encoding import check_state_checksum, with_checksum
from dlkit.errors import CheckpointError, InvalidArgumentError, MissingExtraError
from dlkit.sampler.split import SPLITS, Split

if TYPE_CHECKING:
    from dlkit.sampler.api import Sampler

try:
    import torch
    from torch.types import Device
    from torch.utils.data import IterableDataset, get_worker_info
except ImportError as _exc:  # the one error a user without the extra sees
    raise MissingExtraError(f"dlkit.torch needs PyTorch, which could not be imported "
                            f"({_exc}): pip install '.[torch]' in a checkout of dlkit") from _exc

__all__ = ["DATASET_STATE_FORMAT", "SPLITS", "SamplerDataset", "TorchBatches", "to_torch",
           "upload_tables"]

DATASET_STATE_FORMAT = "dlkit-torch-dataset-v1"
# the entries of a state from before its checksum (still loaded)
_UNCHECKSUMMED_KEYS = frozenset({"format", "split", "task", "sampler", "eval_batches"})


def _accelerator_available() -> bool:
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6
    if accelerator is not None:
        return bool(accelerator.is_available())
    return bool(torch.cuda.is_available())


_warned_no_pinning = False


def _pinning(pin_memory: bool) -> bool:
    """Whether to pin: asked for and possible (page-locked memory needs an accelerator)."""
    global _warned_no_pinning
    if not pin_memory:
        return False
    if _accelerator_available():
        return True
    if not _warned_no_pinning:
        _warned_no_pinning = True
        warnings.warn("dlkit.torch: pin_memory=True ignored, no accelerator is available",
                      stacklevel=3)
    return False


def _tensor(array: np.ndarray) -> torch.Tensor:
    if not array.flags.writeable or not array.dtype.isnative:
        # read-only memory (a tensor writing into it would crash the process) or a byte order
        # torch cannot read: the one case that copies
        array = np.array(array, dtype=array.dtype.newbyteorder("="), order="C")
    return torch.from_numpy(array)


def _resolve_device(device: Device) -> torch.device | None:
    if device is None:
        return None
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise InvalidArgumentError(f"device {device!r} is not a torch device: {exc}") from None


def _convert(batch: Mapping[str, np.ndarray], device: torch.device | None,
             pin: bool) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    on_cpu = device is None or device.type == "cpu"
    for key, array in batch.items():
        tensor = _tensor(array)
        if pin:
            tensor = tensor.pin_memory()
        if not on_cpu:
            tensor = tensor.to(device, non_blocking=True)
        out[key] = tensor
    return out


def to_torch(batch: Mapping[str, np.ndarray], device: Device = None,
             pin_memory: bool = False) -> dict[str, torch.Tensor]:
    """``batch`` (a dict of numpy arrays, as ``Sampler.next_train_batch()`` returns) as a dict
    of tensors, in the same key order, with the same dtypes and shapes.

    Without ``device`` (or with a CPU device) and without pinning, each tensor shares its
    array's memory (see the module docstring for the two cases that copy). ``pin_memory``
    copies into page-locked memory first; ``device`` then copies there with
    ``non_blocking=True`` (asynchronous from pinned memory).
    """
    return _convert(batch, _resolve_device(device), _pinning(pin_memory))


def upload_tables(sampler: Sampler, device: Device = None) -> dict[str, torch.Tensor]:
    """The database's resident tables, to upload once before training: ``column_embeddings``
    ``[C, D]`` (row = a batch's ``column_ids``) and ``categorical_embeddings`` ``[Vc, D]``
    (row = ``categorical_embed_ids``), float16, on ``device``."""
    target = _resolve_device(device)
    tables = {"column_embeddings": sampler.column_embeddings(),
              "categorical_embeddings": sampler.categorical_embeddings()}
    return {key: torch.from_numpy(table).to(target) if target is not None
            else torch.from_numpy(table) for key, table in tables.items()}


@dataclass(frozen=True)
class DatasetState:
    """Where a :class:`SamplerDataset` stands: for train, the sampler's state after the last
    batch yielded; for val/test, how many batches of the current pass were yielded."""

    split: Split
    task: str | int | None
    sampler: Mapping[str, Any] | None = None
    eval_batches: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": DATASET_STATE_FORMAT, "split": self.split.value,
                               "task": self.task}
        if self.split is Split.TRAIN:
            out["sampler"] = self.sampler
        else:
            out["eval_batches"] = self.eval_batches
        return with_checksum(out)

    @classmethod
    def from_json(cls, state: object) -> DatasetState:
        if not isinstance(state, Mapping) or state.get("format") != DATASET_STATE_FORMAT:
            raise CheckpointError("not a dlkit.torch dataset state (expected format "
                                  f"{DATASET_STATE_FORMAT!r})")
        check_state_checksum(state, "dataset state", _UNCHECKSUMMED_KEYS)
        split, task = state.get("split"), state.get("task")
        if split not in SPLITS:
            raise CheckpointError(f"dataset state: split must be one of {', '.join(SPLITS)}, "
                                  f"got {split!r}")
        if task is not None and (isinstance(task, bool) or not isinstance(task, (str, int))):
            raise CheckpointError(f"dataset state: task must be a name, an index or null, "
                                  f"got {task!r}")
        if split == Split.TRAIN:
            if not isinstance(state.get("sampler"), Mapping):
                raise CheckpointError("dataset state: a train state needs the sampler's state")
            return cls(Split.TRAIN, task, sampler=state["sampler"])
        done = state.get("eval_batches")
        if isinstance(done, bool) or not isinstance(done, int) or done < 0:
            raise CheckpointError(f"dataset state: eval_batches must be an integer >= 0, "
                                  f"got {done!r}")
        return cls(Split(split), task, eval_batches=done)


def _check_split(split: Split | str, task: str | int | None) -> Split:
    parsed = Split.parse(split)
    if parsed is Split.TRAIN and task is not None:
        raise InvalidArgumentError("task selects an eval pass (split val or test); the train "
                                   "stream mixes tasks by the sampler's task_weights")
    return parsed


class _SplitReader:
    """What both readers of a sampler's split hold: the sampler, the split (and task), and
    where the tensors go."""

    def _bind(self, sampler: Sampler, split: Split | str, task: str | int | None, device: Device,
              pin_memory: bool) -> None:
        self.split = _check_split(split, task)
        self.sampler = sampler
        self.task = task
        self.device = _resolve_device(device)
        self.pin_memory = pin_memory


class TorchBatches(_SplitReader):
    """A plain iterator of torch batches from ``sampler``: endless train batches
    (``split="train"``) or one pass of ``Sampler.iter_eval(split, task)``. Same conversion
    as :func:`to_torch`."""

    def __init__(self, sampler: Sampler, split: Split | str = Split.TRAIN, *,
                 task: str | int | None = None, device: Device = None, pin_memory: bool = False):
        self._bind(sampler, split, task, device, pin_memory)
        self._pin = _pinning(pin_memory)
        self._numpy = self._source()

    def _source(self) -> Iterator[dict[str, np.ndarray]]:
        if self.split is Split.TRAIN:
            return iter(self.sampler.next_train_batch, None)  # endless; never returns None
        return self.sampler.iter_eval(self.split, self.task)

    def __iter__(self) -> TorchBatches:
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        return _convert(next(self._numpy), self.device, self._pin)


class SamplerDataset(_SplitReader, IterableDataset[dict[str, torch.Tensor]]):
    """``torch.utils.data.IterableDataset`` over ``sampler``'s ``split`` (see the module
    docstring): each ``iter()`` is the endless train stream from where the sampler stands, or
    a new pass of val/test. Stateful for torchdata's ``StatefulDataLoader``: a train state
    is the sampler's (both of its channels); an eval state counts the batches of the pass
    already yielded, and a restored pass rebuilds and skips those (eval passes are short and
    rarely cut: a checkpoint is usually taken between them)."""

    def __init__(self, sampler: Sampler, split: Split | str = Split.TRAIN, *,
                 task: str | int | None = None, device: Device = None, pin_memory: bool = False):
        super().__init__()
        self._bind(sampler, split, task, device, pin_memory)
        self._eval_batches = 0  # batches of the current eval pass yielded
        self._eval_skip = 0     # batches a restored eval pass starts after

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        if get_worker_info() is not None:
            raise InvalidArgumentError(
                "dlkit.torch.SamplerDataset runs in the training process: use "
                "DataLoader(dataset, batch_size=None, num_workers=0); the sampler's own "
                "threads build batches ahead (num_threads, num_prefetch)")
        return self._batches()

    def _batches(self) -> Iterator[dict[str, torch.Tensor]]:
        # a generator: it pulls a batch from the sampler only when the loader asks for one,
        # so the sampler's consumed state is always that of the last batch yielded
        pin = _pinning(self.pin_memory)
        if self.split is Split.TRAIN:
            while True:
                yield _convert(self.sampler.next_train_batch(), self.device, pin)
        skip, self._eval_skip = self._eval_skip, 0
        self._eval_batches = skip
        for batch in itertools.islice(self.sampler.iter_eval(self.split, self.task), skip,
                                      None):
            self._eval_batches += 1
            yield _convert(batch, self.device, pin)
        self._eval_batches = 0  # the pass is complete: a restore starts a new one

    def __len__(self) -> int:
        """Batches per eval pass (every rank the same); the train stream has no length."""
        if self.split is Split.TRAIN:
            raise TypeError("the train stream is endless: it has no len(); "
                            "see Sampler.steps_per_epoch")
        return int(self.sampler.eval_steps(self.split, self.task))

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable; see :class:`DatasetState`."""
        if self.split is Split.TRAIN:
            return DatasetState(Split.TRAIN, None, sampler=self.sampler.state_dict()).to_json()
        return DatasetState(self.split, self.task, eval_batches=self._eval_batches).to_json()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue after the batch ``state_dict`` was taken at (the next ``iter()``)."""
        state = DatasetState.from_json(state_dict)
        if (state.split, state.task) != (self.split, self.task):
            raise CheckpointError(f"dataset state is of split {state.split.value!r} task "
                                  f"{state.task!r}; this dataset is split "
                                  f"{self.split.value!r} task "
                                  f"{self.task!r}")
        if state.split is Split.TRAIN:
            assert state.sampler is not None, "from_json: a train state has the sampler's"
            self.sampler.load_state_dict(state.sampler)
        else:
            steps = len(self)
            if state.eval_batches > steps:
                raise CheckpointError(f"dataset state: eval_batches is {state.eval_batches}, "
                                      f"more than the {steps} batches of a {self.split} pass")
            self._eval_skip = self._eval_batches = state.eval_batches
