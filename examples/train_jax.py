#!/usr/bin/env python3
"""Train a compact Relational Transformer on dlkit batches with JAX and optax.

One process::

    python examples/train_jax.py --db out/db --task churn --steps 300

Several processes (one per host or per CPU slot; every process gets the same flags)::

    JAX_COORDINATOR_ADDRESS=127.0.0.1:12355 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=0 \\
        python examples/train_jax.py --db out/db --task churn --steps 300 &
    JAX_COORDINATOR_ADDRESS=127.0.0.1:12355 JAX_NUM_PROCESSES=2 JAX_PROCESS_ID=1 \\
        python examples/train_jax.py --db out/db --task churn --steps 300

``JAX_COORDINATOR_ADDRESS`` is JAX's own variable (process 0 serves there);
``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID`` are this script's, passed to
``jax.distributed.initialize``. Without them (or with ``JAX_NUM_PROCESSES=1``) the script runs
alone. The coordinator listens only on the address it is given (JAX's own default is every
interface; ``JAX_COORDINATOR_BIND_ADDRESS`` overrides), and with a coordinator on 127.0.0.1
or localhost the gloo CPU collectives (the default; ``JAX_CPU_COLLECTIVES_IMPLEMENTATION``
picks another) listen on 127.0.0.1 too, so a single-host run opens no port to the network.

The program is single-program-multiple-data: parameters are replicated on every process's
device, the global batch (``--batch-size``) is one array sharded along the batch axis, each
process filling its contiguous slice from its own ``dlkit.Sampler`` (rank =
``jax.process_index()``). The loss is the mean over the global batch, so XLA all-reduces the
gradients: each process's update is the average of the processes' gradients. The global
batch, and so a checkpoint's continuation, does not depend on the number of processes.

The model, the compact Relational Transformer that reads the batch's structure, and its
loss are in ``rt_jax.py``; here are the processes, the checkpoints and the training.

Checkpoints (``--checkpoint-dir D``): ``D/checkpoint_jax.npz`` holds the parameters, the
optimizer state, the step, every step's loss so far and the sampler's position; process 0 writes it atomically every
``--checkpoint-every`` steps and at the end. ``--resume`` continues from it on any number of
processes, with the global batches the uninterrupted run would have taken. The file ends in
a SHA-256 of the rest: a changed byte refuses it whole (``CHECKPOINT_INVALID``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402  (examples/common.py: the error boundary, logs, checkpoint files)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import metrics  # noqa: E402
import optax  # noqa: E402
import options  # noqa: E402
import rt_jax  # noqa: E402
import transforms  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

import dlkit  # noqa: E402
import dlkit.jax  # noqa: E402
from dlkit.atomic import atomic_writer  # noqa: E402
from dlkit.errors import CheckpointError, DlkitError  # noqa: E402

CHECKPOINT_FILE = "checkpoint_jax.npz"
CHECKPOINT_FORMAT = "dlkit-example-jax-v1"


# --- processes ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Processes:
    """This process's place in the job and the mesh every global array is laid out on."""

    rank: int
    world_size: int
    mesh: Mesh

    @property
    def replicated(self) -> NamedSharding:
        return NamedSharding(self.mesh, PartitionSpec())


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "")
    if text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise common.UsageError(f"${name} must be an integer, got {text!r}") from None


def start_processes() -> Processes:
    """Join the JAX distributed runtime when ``JAX_NUM_PROCESSES`` > 1; a 1-D mesh over every
    process's devices, in process order (``dlkit.jax.batch_mesh``)."""
    num_processes = _env_int("JAX_NUM_PROCESSES", 1)
    if num_processes > 1:
        address = os.environ.get("JAX_COORDINATOR_ADDRESS", "")
        if not address or ":" not in address:
            raise common.UsageError("$JAX_COORDINATOR_ADDRESS must be host:port when "
                                    "$JAX_NUM_PROCESSES > 1")
        process_id = _env_int("JAX_PROCESS_ID", -1)
        if not 0 <= process_id < num_processes:
            raise common.UsageError(f"$JAX_PROCESS_ID must be in [0, {num_processes}), got "
                                    f"{os.environ.get('JAX_PROCESS_ID')!r}")
        if "JAX_CPU_COLLECTIVES_IMPLEMENTATION" not in os.environ:
            # gloo (JAX 0.10's default; older releases had none, and CPU collectives across
            # processes then fail); the variable lets a user pick "mpi" instead
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        if address.rsplit(":", 1)[0] in ("127.0.0.1", "localhost") and \
                jax.config.jax_cpu_collectives_implementation == "gloo":
            _gloo_on_loopback()
        try:
            jax.distributed.initialize(
                coordinator_address=address, num_processes=num_processes,
                process_id=process_id, initialization_timeout=120,
                # JAX's default listens on every interface ([::]:port): only on the address
                coordinator_bind_address=os.environ.get("JAX_COORDINATOR_BIND_ADDRESS",
                                                        address))
        except (RuntimeError, ValueError) as exc:  # unreachable, timed out, port taken
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise DlkitError(f"process {process_id} of {num_processes} could not join the JAX "
                             f"coordinator at {address}: {first}",
                             code="COORDINATOR_UNREACHABLE") from None
    rank, world_size = dlkit.jax.rank_and_world()
    return Processes(rank, world_size, dlkit.jax.batch_mesh())


def _gloo_on_loopback() -> None:
    """Have the gloo CPU collectives listen on 127.0.0.1. JAX lets gloo pick the address of
    the host's name, which may be a public interface; 0.10 has no option for it, so the CPU
    backend factory is wrapped (before any backend exists) to pass the hostname."""
    try:
        from jax._src import distributed, xla_bridge
        from jax._src.lib import _jax

        registration = xla_bridge._backend_factories["cpu"]

        def make_cpu_client() -> Any:
            if distributed.global_state.client is None:
                return registration.factory()
            collectives = _jax.make_gloo_tcp_collectives(
                distributed_client=distributed.global_state.client, hostname="127.0.0.1")
            return xla_bridge.make_cpu_client(collectives=collectives)

        xla_bridge._backend_factories["cpu"] = dataclasses.replace(registration,
                                                                   factory=make_cpu_client)
    except (ImportError, AttributeError, KeyError, TypeError) as exc:  # JAX internals moved
        common.log(f"warning: cannot pin gloo to 127.0.0.1 ({exc}); it listens on the "
                   "address of the host's name")


# --- batches on the devices -----------------------------------------------------------------

# What the model reads (anchor_rows and observation_times stay on the host).
MODEL_KEYS = ("semantic_types", "column_ids", "seq_row_ids", "numeric_values",
              "timestamp_values", "bool_values", "categorical_embed_ids", "text_embed_ids",
              "is_null", "is_target", "is_padding", "fk_adj", "col_perm", "out_perm",
              "text_batch_embeddings", "labels", "sequence_mask")


def device_batch(local: dict[str, np.ndarray], procs: Processes) -> dict[str, jax.Array]:
    """The global batch, row ``i`` = row ``i`` of the one-process global batch: process ``r``
    contributes its contiguous slice; text tables are gathered (``dlkit.jax.global_batch``)."""
    return dlkit.jax.global_batch(local, procs.mesh, keys=MODEL_KEYS)


def gather_int64(values: np.ndarray) -> np.ndarray:
    """Every process's ``values`` (int64, same length), concatenated in rank order. Sent as
    uint32 halves: JAX computes in 32 bits unless x64 is switched on."""
    halves = np.ascontiguousarray(values, dtype=np.int64).view(np.uint32)
    gathered = np.asarray(multihost_utils.process_allgather(halves, tiled=True))
    return gathered.astype(np.uint32).view(np.int64)


def params_digest(params: Any) -> bytes:
    """SHA-256 of this process's own copy of the parameters, leaves in tree order, float32."""
    digest = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(params):
        digest.update(np.ascontiguousarray(np.asarray(leaf.addressable_data(0)),
                                           np.float32).tobytes())
    return digest.digest()


def gather_digests(params: Any, procs: Processes) -> list[str]:
    mine = np.frombuffer(params_digest(params), np.uint8)
    if procs.world_size == 1:
        return [mine.tobytes().hex()]
    every = np.asarray(multihost_utils.process_allgather(mine))  # [W, 32]
    return [row.astype(np.uint8).tobytes().hex() for row in every]


def local_value(array: jax.Array) -> np.ndarray:
    """A replicated array's value (this process's copy)."""
    return np.asarray(array.addressable_data(0))


# --- checkpoints ----------------------------------------------------------------------------


def save_checkpoint(path: Path, step: int, params: Any, opt_state: Any,
                    sampler_state: dict[str, Any], fingerprint: dict[str, Any],
                    losses: Sequence[float] = ()) -> None:
    """One ``.npz`` (parameters, optimizer state, the losses of the steps so far, and a JSON
    record of the step, the sampler's position and the run's fingerprint), written beside
    ``path`` and renamed over it."""
    arrays: dict[str, np.ndarray] = {}
    for prefix, tree in (("params", params), ("opt", opt_state)):
        for i, leaf in enumerate(jax.tree_util.tree_leaves(tree)):
            arrays[f"{prefix}/{i:04d}"] = local_value(leaf)
    arrays["losses"] = np.asarray(losses, np.float64)
    record = {"format": CHECKPOINT_FORMAT, "step": step, "sampler": sampler_state,
              "fingerprint": fingerprint}
    arrays["record"] = np.frombuffer(json.dumps(record).encode(), np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(path) as out:
        out.write(common.sealed(buffer.getvalue()))


@dataclasses.dataclass(frozen=True)
class Restored:
    """What a checkpoint restores: the step it was taken after, the parameters and the
    optimizer state (placed like the fresh ones), the sampler's state, and the losses of the
    steps before it (none in a checkpoint of an earlier version of this example)."""

    step: int
    params: Any
    opt_state: Any
    sampler: dict[str, Any]
    losses: list[float]


def load_checkpoint(path: Path, params: Any, opt_state: Any, fingerprint: dict[str, Any],
                    procs: Processes) -> Restored:
    """The checkpoint ``path``, its arrays shaped and placed like ``params`` and
    ``opt_state``."""
    if not path.is_file():
        raise CheckpointError("no such file: --resume continues from the checkpoint in "
                              "--checkpoint-dir", path=path)
    payload = common.unsealed(path)  # checked whole before np.load sees a byte
    try:
        with np.load(io.BytesIO(payload)) as data:
            arrays = {key: data[key] for key in data.files}
        record = json.loads(arrays.pop("record").tobytes())
    except (OSError, ValueError, KeyError) as exc:
        raise CheckpointError(f"not a readable checkpoint ({common.first_line(exc)})",
                              path=path) from None
    if not isinstance(record, dict) or record.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"not a {CHECKPOINT_FORMAT} checkpoint", path=path)
    theirs = record.get("fingerprint") or {}
    diffs = [f"{k}: checkpoint {theirs.get(k)!r}, now {v!r}" for k, v in fingerprint.items()
             if theirs.get(k) != v]
    if diffs:
        raise CheckpointError(f"taken with other settings ({'; '.join(diffs)})", path=path)
    losses = arrays.pop("losses", np.zeros(0))

    def restore(prefix: str, tree: Any) -> Any:
        leaves, treedef = jax.tree_util.tree_flatten(tree)
        loaded = []
        for i, leaf in enumerate(leaves):
            value = arrays.get(f"{prefix}/{i:04d}")
            if value is None or value.shape != leaf.shape or value.dtype != leaf.dtype:
                raise CheckpointError(f"{prefix} leaf {i} does not fit the model", path=path)
            loaded.append(jax.device_put(value, procs.replicated))
        return jax.tree_util.tree_unflatten(treedef, loaded)

    return Restored(int(record["step"]), restore("params", params), restore("opt", opt_state),
                    record["sampler"], [float(v) for v in losses.tolist()])


# --- training -------------------------------------------------------------------------------


def lr_schedule(args: options.TrainArgs) -> Any:
    """``options.learning_rate`` (the torch example's rule) in jnp, for optax: warm-up, then the
    --schedule decay, a function of the step alone (not of --steps), so a run stopped at k
    and resumed to K takes exactly the steps of one run to K."""
    def schedule(count: jax.Array) -> jax.Array:
        warm = args.lr * jnp.minimum(1.0, (count + 1) / max(1, args.warmup))
        if args.schedule == "constant":
            return warm
        t = jnp.clip((count - args.warmup) / max(1, args.decay_steps - args.warmup), 0.0, 1.0)
        shape = 0.5 * (1 + jnp.cos(jnp.pi * t)) if args.schedule == "cosine" else 1 - t
        decayed = args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * shape)
        return jnp.where(count < args.warmup, warm, decayed)

    return schedule


def make_optimizer(args: options.TrainArgs) -> optax.GradientTransformation:
    return optax.chain(optax.clip_by_global_norm(1.0),
                       optax.adamw(lr_schedule(args), weight_decay=args.weight_decay))


def main(argv: list[str] | None = None) -> int:
    args = options.parse_args("jax", argv)
    with native_stdout_to_stderr():
        procs = start_processes()
        options.local_batch_size(args, procs.world_size)  # a multiple of the processes
        sampler = dlkit.jax.make_sampler(
            args.db, global_batch_size=args.batch_size, split_seed=args.split_seed,
            seed=args.seed, sequence_length=args.sequence_length,
            max_rows=args.rows, bfs_child_width=args.bfs_child_width,
            bfs_child_policy=args.bfs_child_policy, task_weights={args.task: 1.0},
            num_threads=args.num_threads, num_prefetch=4)
        with sampler:
            result = train(args, procs, sampler)
        jax.distributed.shutdown()  # (a no-op on one process; JAX also does it at exit)
    if result is not None:
        metrics.emit(result)  # on the real stdout, after everything else
    return 0


@contextlib.contextmanager
def native_stdout_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 at stderr while training: native code (gloo prints its peers
    there) must not write to stdout, whose last line is the result."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def train(args: options.TrainArgs, procs: Processes,
          sampler: dlkit.Sampler) -> dict[str, Any] | None:
    """Train, checkpoint, validate; the result object on process 0 (None on the others)."""
    info = sampler.label_info(args.task)
    # Uploaded once, replicated on every device; only per-batch arrays travel each step.
    tables = dlkit.jax.upload_tables(sampler, procs.mesh)
    cfg = rt_jax.ModelConfig(d_model=args.d_model, heads_per_relation=1, layers=args.layers,
                             table_dim=int(tables["column_embeddings"].shape[1]),
                             text_dim=sampler.database_metadata().embeddings.text_dim,
                             out_dim=info.num_classes if info.stype == metrics.CATEGORICAL else 1,
                             stype=info.stype, block=args.attention_block,
                             numeric_encoding=args.numeric_encoding,
                             column_gain=args.column_gain, dropout=args.dropout,
                             fk_attention=args.fk_attention, readout=args.readout,
                             loss=args.loss,
                             pos_weight=metrics.positive_weight(args, sampler))
    optimizer = make_optimizer(args)
    # Every process computes the same initial values (same key, same program).
    params = jax.jit(lambda key: rt_jax.init_params(key, cfg),
                     out_shardings=procs.replicated)(jax.random.PRNGKey(args.seed))
    opt_state = jax.jit(optimizer.init, out_shardings=procs.replicated)(params)

    def loss_fn(params: Any, batch: dict[str, jax.Array], key: jax.Array) -> jax.Array:
        outputs = rt_jax.forward(params, batch, tables, cfg, key if cfg.dropout else None)
        # The mean over the global batch: XLA sums the processes' gradients (all-reduce).
        return rt_jax.masked_mean(rt_jax.per_sequence_loss(outputs, batch["labels"], cfg.stype,
                                                           cfg.loss, cfg.pos_weight),
                                  batch["sequence_mask"])

    # the dropout masks of a step are a function of (seed, step): a resumed run draws the same
    dropout_root = jax.random.fold_in(jax.random.PRNGKey(args.seed), 0x64726F70)

    @jax.jit
    def train_step(params: Any, opt_state: Any, batch: dict[str, jax.Array],
                   step: jax.Array) -> tuple:
        key = jax.random.fold_in(dropout_root, step)
        loss, grads = jax.value_and_grad(loss_fn)(params, batch, key)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    @jax.jit
    def eval_step(params: Any, batch: dict[str, jax.Array]) -> tuple[jax.Array, ...]:
        # replicated: every process (process 0 in particular) gets the whole global batch
        outputs = (rt_jax.forward(params, batch, tables, cfg), batch["labels"],
                   batch["sequence_mask"])
        return jax.lax.with_sharding_constraint(outputs, procs.replicated)

    fingerprint = {**options.fingerprint(args, "jax"), "model": dataclasses.asdict(cfg)}
    checkpoint = Path(args.checkpoint_dir) / CHECKPOINT_FILE if args.checkpoint_dir else None
    step = 0
    losses: list[float] = []  # every step's from step 0: a resumed run's first from its checkpoint
    if args.resume:
        assert checkpoint is not None  # parse_args refuses --resume without a directory
        restored = load_checkpoint(checkpoint, params, opt_state, fingerprint, procs)
        common.check_resume_step(restored.step, args.steps, checkpoint)
        step, params, opt_state, losses = (restored.step, restored.params, restored.opt_state,
                                           restored.losses)
        sampler.load_state_dict(restored.sampler)
        common.log(f"resumed at step {step} from {checkpoint}")

    recorder = (common.Recorder(args.record, step if args.resume else None)
                if args.record and procs.rank == 0 else None)
    waits: list[float] = []
    step_times: list[float] = []
    first_step = step
    log_every = max(1, args.steps // 10)
    while step < args.steps:
        started = time.perf_counter()
        local = transforms.prepare(sampler.next_train_batch(), args)
        waited = time.perf_counter() - started
        params, opt_state, loss = train_step(params, opt_state, device_batch(local, procs),
                                             jnp.int32(step))
        loss_value = float(local_value(loss))  # waits for the step (JAX dispatches async)
        if step > first_step:  # the first step compiles
            waits.append(waited)
            step_times.append(time.perf_counter() - started)
        losses.append(loss_value)
        if args.record:
            anchors = gather_int64(local["anchor_rows"])
            digests = gather_digests(params, procs)
            if recorder is not None:
                recorder.write({"step": step, "task_idx": int(local["task_idx"][0]),
                                **({"database_idx": int(local["database_idx"][0])}
                                   if "database_idx" in local else {}),
                                "anchors": anchors.tolist(), "params": digests,
                                "loss": loss_value})
        step += 1
        if step % log_every == 0 or step == args.steps:
            common.log(f"step {step}/{args.steps} loss {loss_value:.4f}")
        if checkpoint is not None and (step % args.checkpoint_every == 0 or step == args.steps):
            sampler_state = sampler.state_dict()
            if procs.rank == 0:
                save_checkpoint(checkpoint, step, params, opt_state, sampler_state, fingerprint,
                                losses)
    if recorder is not None:
        recorder.close()

    predictions, labels = evaluate(params, eval_step, sampler, args, procs)
    if procs.world_size > 1:  # nobody leaves (and shuts the runtime down) before the others
        multihost_utils.sync_global_devices("dlkit-train-jax-done")
    if procs.rank != 0:
        return None
    return metrics.result(
        framework="jax", world_size=procs.world_size, steps=args.steps, info=info,
        predictions=predictions, labels=labels,
        baseline=metrics.baseline_predictions(sampler, args.task, len(labels), loss=cfg.loss,
                                              pos_weight=cfg.pos_weight),
        waits=waits, step_times=step_times, losses=losses, loss=cfg.loss,
        pos_weight=cfg.pos_weight, context=args.context,
        seed=args.seed, resumed_from=first_step if args.resume else None)


def evaluate(params: Any, eval_step: Any, sampler: dlkit.Sampler, args: options.TrainArgs,
             procs: Processes) -> tuple[np.ndarray, np.ndarray]:
    """Outputs and labels of every val seed (each once across the processes), on every
    process; boolean and numeric outputs flat ``[N]``, categorical ``[N, C]``."""
    outputs, labels = [], []
    for local in sampler.iter_eval("val", task=args.task):
        out, label, mask = (local_value(a) for a in eval_step(
            params, device_batch(transforms.prepare(local, args), procs)))
        keep = mask.astype(bool)
        outputs.append(out[keep] if out.shape[1] > 1 else out[keep, 0])
        labels.append(label[keep])
    return np.concatenate(outputs), np.concatenate(labels)


if __name__ == "__main__":
    sys.exit(common.run(main))
