"""JAX adapter: dlkit batches on devices, and one global batch across processes.

Three steps, each a function:

- ``make_sampler(db, global_batch_size=...)``: a :class:`dlkit.Sampler` for this process,
  with ``rank = jax.process_index()`` and ``world_size = jax.process_count()`` (call
  ``jax.distributed.initialize()`` first on a multi-process run). Process ``p`` builds the
  ``p``-th contiguous slice of every global batch.
- ``upload_tables(sampler, mesh)``: the resident tables a model looks rows up in
  (``column_embeddings`` ``[C, D]`` for ``column_ids``, ``categorical_embeddings`` ``[Vc, D]``
  for ``categorical_embed_ids``), float16, replicated on every device of the mesh, once before
  training.
- ``global_batch(batch, mesh)``: the process-local batches of every process assembled into
  one global batch with ``jax.make_array_from_process_local_data``, over a 1-D mesh of every
  device (axis ``"batch"``, ``batch_mesh()``), each ``[B, ...]`` key sharded along its first
  axis. Row ``i`` of the global arrays is row ``i`` of the world-size-1 global batch of the
  same step. ``device_batch(batch)`` is the single-device form (one ``jax.device_put``).

Keys that are not per sequence:

- ``target_stype``, ``task_idx``, ``database_idx``, ``cat_emb_start``, ``cat_emb_count``
  (``[1]``) are the same on every process (every rank samples the same task at the same step) and are *replicated*.
- ``text_batch_embeddings`` ``[U, D]`` holds the distinct texts of this process's sequences
  only, and ``U`` changes from batch to batch. It is *gathered*: each process pads its table
  to ``text_capacity`` rows (zeros) and the global table ``[P * text_capacity, D]`` is their
  concatenation in process order, sharded along its first axis; ``text_embed_ids`` of text
  cells (``semantic_types == 4``) on process ``p`` are moved by ``p * text_capacity`` so they
  index the global table (other cells keep 0). ``global_text_embeddings[text_embed_ids]``
  inside a jitted step is then the cell's text embedding on every process. ``text_capacity``
  must be the same on every process: give it (an upper bound of ``U``; a larger ``U`` is an
  error) or leave it out to use the smallest power of two that holds the largest ``U`` of
  every process at this step (one small all-gather between processes per batch when there is
  more than one). A jitted step then recompiles only when the bucket grows. ``device_batch``
  pads the same way (to a power of two unless ``text_capacity`` is given) so that shapes stay
  stable on one device too.

64-bit integers: JAX's default (``jax_enable_x64`` off) truncates int64 arrays to int32
*silently*. ``labels`` of a categorical task and ``anchor_rows`` are int64 in a batch; this
adapter converts them to int32 after checking every value fits (an error names the key if
not). ``observation_times`` (microseconds since 1970, INT64_MIN for none) never fits, so
without x64 it is left out of the device batch (it describes the seed and is no model input;
read it from the numpy batch), and asking for it by ``keys`` is an error.
``jax.config.update("jax_enable_x64", True)`` keeps every key as it is.

Importing this module imports jax; without it, one ``MissingExtraError`` says to install
``dlkit[jax]``. ``import dlkit`` never imports jax.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dlkit.errors import InvalidArgumentError, MissingExtraError
from dlkit.sampler.batch import BATCH_SCALAR_KEYS

try:
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
except ImportError as _exc:  # the one error a user without the extra sees
    raise MissingExtraError(f"dlkit.jax needs JAX, which could not be imported ({_exc}): "
                            "pip install '.[jax]' in a checkout of dlkit") from _exc

if TYPE_CHECKING:
    from dlkit.sampler.api import Sampler
    from dlkit.sampler.database import DatabaseSource

__all__ = ["BATCH_AXIS", "HOST_ONLY_WITHOUT_X64", "REPLICATED_KEYS", "batch_mesh",
           "device_batch", "global_batch", "make_sampler", "rank_and_world", "upload_tables"]

BATCH_AXIS = "batch"
# [1]-shaped, identical on every process at a step: replicated, not sharded
REPLICATED_KEYS = BATCH_SCALAR_KEYS
TEXT_TABLE = "text_batch_embeddings"
TEXT_IDS = "text_embed_ids"
TEXT_STYPE = 4  # semantic_types of a text cell (docs/batch_format.md §5)
# int64 keys that cannot fit int32: left on the host unless jax_enable_x64 is on
HOST_ONLY_WITHOUT_X64 = frozenset({"observation_times"})
_INT32 = np.iinfo(np.int32)


def _partition(*axes: str) -> PartitionSpec:
    """``PartitionSpec(*axes)``, typed (JAX leaves its constructor unannotated)."""
    return PartitionSpec(*axes)  # type: ignore[no-untyped-call]


def _from_process_local_data(sharding: NamedSharding, data: np.ndarray,
                             shape: tuple[int, ...]) -> jax.Array:
    """``jax.make_array_from_process_local_data``, typed (JAX leaves it unannotated)."""
    array: jax.Array = jax.make_array_from_process_local_data(  # type: ignore[no-untyped-call]
        sharding, data, shape)
    return array


def rank_and_world() -> tuple[int, int]:
    """``(jax.process_index(), jax.process_count())``: this process's rank and the world size."""
    return int(jax.process_index()), int(jax.process_count())


def make_sampler(db: DatabaseSource | Sequence[DatabaseSource], *, batch_size: int | None = None,
                 global_batch_size: int | None = None, **kwargs: Any) -> Sampler:
    """A :class:`dlkit.Sampler` over ``db`` (a database, or a list of them: a mixture) for
    this JAX process: rank and world size from
    :func:`rank_and_world`. Give either ``batch_size`` (this process's share) or
    ``global_batch_size`` (divided by the process count); other keywords go to ``Sampler``."""
    from dlkit.sampler import Sampler

    rank, world = rank_and_world()
    if (batch_size is None) == (global_batch_size is None):
        raise InvalidArgumentError("give exactly one of batch_size (per process) and "
                                   "global_batch_size")
    if batch_size is None:  # then global_batch_size was given
        if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int) \
                or global_batch_size < 1 or global_batch_size % world:
            raise InvalidArgumentError(f"global_batch_size must be a positive multiple of the "
                                       f"{world} JAX processes, got {global_batch_size!r}")
        batch_size = global_batch_size // world
    return Sampler(db, rank=rank, world_size=world, batch_size=batch_size, **kwargs)


def batch_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A 1-D mesh (axis ``"batch"``) over ``devices`` (default: every device of every
    process), ordered by process then device id, so process ``p``'s devices hold the ``p``-th
    block of a global batch."""
    devices = jax.devices() if devices is None else list(devices)
    ordered = sorted(devices, key=lambda d: (d.process_index, d.id))
    return Mesh(np.array(ordered), (BATCH_AXIS,))


def _x64() -> bool:
    return bool(jax.config.jax_enable_x64)  # type: ignore[attr-defined]  # not in the stubs


def _selected(batch: Mapping[str, np.ndarray], keys: Iterable[str] | None) -> list[str]:
    if keys is None:
        if _x64():
            return list(batch)
        return [k for k in batch if k not in HOST_ONLY_WITHOUT_X64]
    chosen = list(keys)
    missing = [k for k in chosen if k not in batch]
    if missing:
        raise InvalidArgumentError(f"keys {missing} are not in the batch (keys: "
                                   f"{', '.join(batch)})")
    return chosen


def _device_dtype(key: str, array: np.ndarray) -> np.ndarray:
    """``array`` as JAX will hold it: int64 narrowed to int32 (checked) without x64."""
    if array.dtype != np.int64 or _x64():
        return array
    if array.size and (array.min() < _INT32.min or array.max() > _INT32.max):
        hint = (" (it is host-side seed information; leave it out of keys)"
                if key in HOST_ONLY_WITHOUT_X64 else "")
        raise InvalidArgumentError(
            f"batch key {key!r} holds int64 values outside int32 and JAX truncates int64 to "
            f"int32 unless jax.config.update('jax_enable_x64', True){hint}")
    return array.astype(np.int32)


def _bucket(rows: int, multiple: int) -> int:
    """The smallest power of two >= ``rows`` (and >= 1), rounded up to ``multiple``."""
    size = 1 << max(0, int(rows) - 1).bit_length()
    return -(-size // multiple) * multiple


def _padded_text(table: np.ndarray, capacity: int) -> np.ndarray:
    if table.shape[0] > capacity:
        raise InvalidArgumentError(f"text_capacity {capacity} is smaller than this batch's "
                                   f"{table.shape[0]} distinct texts (text_batch_embeddings)")
    if table.shape[0] == capacity:
        return table
    out = np.zeros((capacity, *table.shape[1:]), dtype=table.dtype)
    out[:table.shape[0]] = table
    return out


def _text_capacity(rows: int, given: int | None, multiple: int, processes: int) -> int:
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, int) or given < 1 \
                or given % multiple:
            raise InvalidArgumentError(f"text_capacity must be a positive multiple of the "
                                       f"{multiple} local devices, got {given!r}")
        return given
    if processes > 1:
        from jax.experimental import multihost_utils

        rows = int(np.max(multihost_utils.process_allgather(np.int32(rows))))
    return _bucket(rows, multiple)


def device_batch(batch: Mapping[str, np.ndarray], device: jax.Device | None = None, *,
                 keys: Iterable[str] | None = None,
                 text_capacity: int | None = None) -> dict[str, jax.Array]:
    """``batch`` on one device (``jax.device_put`` of the whole dict at once; default: the
    default device), in the batch's key order, int64 handled as the module docstring says and
    ``text_batch_embeddings`` padded to ``text_capacity`` rows (default: a power of two)."""
    names = _selected(batch, keys)
    host = {k: _device_dtype(k, batch[k]) for k in names}
    if TEXT_TABLE in host:
        table = host[TEXT_TABLE]
        host[TEXT_TABLE] = _padded_text(
            table, _text_capacity(table.shape[0], text_capacity, 1, processes=1))
    placed = jax.device_put(host, device)  # one call for every array; keys come back sorted
    return {key: placed[key] for key in host}


def global_batch(batch: Mapping[str, np.ndarray], mesh: Mesh | None = None, *,
                 keys: Iterable[str] | None = None,
                 text_capacity: int | None = None) -> dict[str, jax.Array]:
    """This process's ``batch`` as its part of the global batch over ``mesh`` (default
    :func:`batch_mesh`): every process calls it with its batch of the same step. Per-sequence
    keys are sharded along the batch axis, the ``[1]`` keys replicated, the text table
    gathered (module docstring). This process's batch size must be a multiple of its devices
    in the mesh."""
    mesh = batch_mesh() if mesh is None else mesh
    if mesh.axis_names != (BATCH_AXIS,):
        raise InvalidArgumentError(f"mesh must be 1-D with axis {BATCH_AXIS!r} "
                                   f"(batch_mesh()), got axes {mesh.axis_names}")
    flat = list(mesh.devices.flat)
    mine = [i for i, d in enumerate(flat) if d.process_index == jax.process_index()]
    if not mine or len(flat) % len(mine) or mine != list(range(mine[0], mine[0] + len(mine))) \
            or mine[0] % len(mine):
        raise InvalidArgumentError("the mesh must hold the same number of devices of every "
                                   "process, each process's together (batch_mesh() does)")
    local, processes, position = len(mine), len(flat) // len(mine), mine[0] // len(mine)
    names = _selected(batch, keys)
    sharded = NamedSharding(mesh, _partition(BATCH_AXIS))
    replicated = NamedSharding(mesh, _partition())
    host = {k: _device_dtype(k, batch[k]) for k in names}
    if TEXT_TABLE in host:
        capacity = _text_capacity(host[TEXT_TABLE].shape[0], text_capacity, local,
                                  processes)
        host[TEXT_TABLE] = _padded_text(host[TEXT_TABLE], capacity)
        offset = position * capacity
        if TEXT_IDS in host and offset:
            if "semantic_types" not in batch:
                raise InvalidArgumentError("moving text_embed_ids to the global text table "
                                           "needs semantic_types in the batch")
            ids = host[TEXT_IDS]
            host[TEXT_IDS] = np.where(batch["semantic_types"] == TEXT_STYPE,
                                      ids + np.uint32(offset), ids).astype(ids.dtype)
    shardings = {}
    for key, array in host.items():
        if key in REPLICATED_KEYS:
            shardings[key] = replicated
        elif array.ndim == 0 or array.shape[0] % local:
            raise InvalidArgumentError(
                f"batch key {key!r} has {array.shape[0] if array.ndim else 0} rows on this "
                f"process, not a multiple of its {local} devices: choose a batch size "
                "that is")
        else:
            shardings[key] = sharded
    if processes == 1:  # every device is this process's: one transfer call for the batch
        placed = jax.device_put(host, shardings)
        return {key: placed[key] for key in host}
    return {key: _from_process_local_data(
                shardings[key], array,
                array.shape if key in REPLICATED_KEYS
                else (array.shape[0] * processes, *array.shape[1:]))
            for key, array in host.items()}


def upload_tables(sampler: Sampler, mesh: Mesh | None = None) -> dict[str, jax.Array]:
    """``column_embeddings`` and ``categorical_embeddings`` (float16) replicated on every
    device of ``mesh`` (default :func:`batch_mesh`): once, before training."""
    mesh = batch_mesh() if mesh is None else mesh
    replicated = NamedSharding(mesh, _partition())
    tables = {"column_embeddings": sampler.column_embeddings(),
              "categorical_embeddings": sampler.categorical_embeddings()}
    return {key: _from_process_local_data(replicated, table, table.shape)
            for key, table in tables.items()}
