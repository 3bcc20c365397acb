#!/usr/bin/env python3
"""Train a compact Relational Transformer on dlkit batches with PyTorch.

One process::

    python examples/train_torch.py --db out/planted/db --task churn --steps 300

Several (DistributedDataParallel over gloo; torchrun sets RANK / WORLD_SIZE / MASTER_ADDR)::

    torchrun --standalone --nproc-per-node 2 examples/train_torch.py --db ... --steps 300

``--batch-size`` is the global batch: each rank's ``dlkit.Sampler`` takes its contiguous
slice (``batch_size = global / world_size``), so the global batches, and a checkpoint's
continuation, are the same on any world size.

The model, the compact Relational Transformer that reads the batch's structure, and its
loss are in ``rt_torch.py``; here are the processes, the checkpoints and the training.
"""

from __future__ import annotations

import gc
import hashlib
import io
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (examples/common.py: the error boundary, logs, checkpoint files)
import metrics  # noqa: E402
import options  # noqa: E402
import rt_torch  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import transforms  # noqa: E402
from torch import nn  # noqa: E402

import dlkit  # noqa: E402
from dlkit.atomic import atomic_writer  # noqa: E402
from dlkit.errors import CheckpointError  # noqa: E402
from dlkit.torch import to_torch, upload_tables  # noqa: E402

CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_FORMAT = "dlkit-example-torch-v1"


# --- distributed helpers ----------------------------------------------------------------------


@dataclass(frozen=True)
class World:
    rank: int
    size: int

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's ``tensor`` (same shape on all), concatenated in rank order on dim 0."""
        if not self.distributed:
            return tensor
        sent = tensor.to(torch.uint8) if tensor.dtype == torch.bool else tensor.contiguous()
        parts = [torch.empty_like(sent) for _ in range(self.size)]
        dist.all_gather(parts, sent)
        return torch.cat(parts).to(tensor.dtype)

    def mean(self, value: float) -> float:
        if not self.distributed:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t[0]) / self.size


def start_world() -> World:
    rank, size = common.world_from_env()
    if size > 1:
        dist.init_process_group("gloo", rank=rank, world_size=size)
    return World(rank, size)


def stop_world(world: World, completed: bool) -> None:
    """Leave the process group, and be sure it is gone before the interpreter shuts down.

    After a completed run every rank first waits for all: on two nodes, ranks that tore their
    connections down while a slower node's ranks still used theirs made those abort. The
    group itself must then die here, not at exit: DistributedDataParallel keeps a reference
    in a reference cycle, so ``destroy_process_group`` alone left the group (and its worker
    threads, still releasing the tensors of finished collectives) alive until the last
    garbage collection of interpreter shutdown; a worker that then needed the GIL was killed
    mid-destructor and the process aborted ("terminate called without an active exception",
    caught under gdb in ``ProcessGroupGloo::runLoop``, about 1 run in 20 on 2 processes).
    Collecting first makes ``destroy_process_group`` drop the last reference, and the
    group's destructor joins its threads while the interpreter is whole."""
    if world.distributed:
        if completed:
            dist.barrier()
        gc.collect()
        dist.destroy_process_group()
        gc.collect()


def parameter_digest(model: nn.Module) -> torch.Tensor:
    """SHA-256 of this rank's parameters (float32, in ``parameters()`` order) as 32 int64s."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().float().contiguous().numpy().tobytes())
    return torch.tensor(list(h.digest()), dtype=torch.int64)


# --- checkpoints --------------------------------------------------------------------------------


def save_checkpoint(path: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                    sampler_state: dict[str, Any], fingerprint: dict[str, Any],
                    losses: Sequence[float] = ()) -> None:
    """The checkpoint after ``step`` steps; ``losses`` are those steps' losses, so a resumed
    run reports the ``train_loss_first`` of an uninterrupted one."""
    buffer = io.BytesIO()
    torch.save({"format": CHECKPOINT_FORMAT, "fingerprint": fingerprint, "step": step,
                "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "sampler": sampler_state,
                "losses": torch.tensor(list(losses), dtype=torch.float64)}, buffer)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(path) as out:  # the temporary file exists while the bytes are sealed
        out.write(common.sealed(buffer.getvalue()))


def load_checkpoint(path: Path, fingerprint: dict[str, Any]) -> dict[str, Any]:
    if not path.is_file():
        raise CheckpointError("no such file: --resume continues from the checkpoint in "
                              "--checkpoint-dir", path=path)
    payload = common.unsealed(path)  # checked whole before torch.load sees a byte
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as exc:  # checksummed, yet unreadable (another torch?): one line
        raise CheckpointError(f"not a readable checkpoint ({common.first_line(exc)})",
                              path=path) from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"not a {CHECKPOINT_FORMAT} checkpoint", path=path)
    theirs = state.get("fingerprint", {})
    diffs = [f"{k}: checkpoint {theirs.get(k)!r}, now {v!r}" for k, v in fingerprint.items()
             if theirs.get(k) != v]
    if diffs:
        raise CheckpointError(f"taken with other settings ({'; '.join(diffs)})", path=path)
    return state


# --- training -----------------------------------------------------------------------------------


def learning_rate(args: options.TrainArgs, step: int) -> float:
    """``options.learning_rate``: warm-up, then the --schedule decay (a function of the step
    alone, so a resumed run takes the steps of an uninterrupted one)."""
    return options.learning_rate(args, step)


def main(argv: list[str] | None = None) -> int:
    args = options.parse_args("torch", argv)
    return in_world(lambda world: train(args, world))


def in_world(work: Callable[[World], int]) -> int:
    """``work(world)`` between joining the process group and leaving it (``stop_world``).
    A failure's traceback holds ``work``'s frames, and through them the model and its
    process group: they are cleared first, or the group would outlive ``stop_world`` as
    after a completed run it did, and abort the rank at exit instead of its error line."""
    world = start_world()
    completed = False
    try:
        status = work(world)
        completed = True
        return status
    except BaseException as exc:
        traceback.clear_frames(exc.__traceback__)
        raise
    finally:
        stop_world(world, completed)


def set_threads(args: options.TrainArgs, world: World) -> None:
    """Torch's threads: the cores of this machine, shared by its ranks, less one per rank
    for each of dlkit's producer threads."""
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE") or world.size)
    cores = (os.cpu_count() or 1) // local_world
    torch.set_num_threads(max(1, cores - args.num_threads))


def train(args: options.TrainArgs, world: World) -> int:
    set_threads(args, world)
    torch.manual_seed(args.seed)
    batch_size = options.local_batch_size(args, world.size)
    sampler = dlkit.Sampler(args.db, rank=world.rank, world_size=world.size,
                            split_seed=args.split_seed, seed=args.seed, batch_size=batch_size,
                            sequence_length=args.sequence_length,
                            max_rows=args.rows, bfs_child_width=args.bfs_child_width,
                            bfs_child_policy=args.bfs_child_policy,
                            task_weights={args.task: 1.0},
                            num_threads=args.num_threads, num_prefetch=4)
    with sampler:
        return run_training(args, world, sampler)


def lookup_tables(sampler: dlkit.Sampler) -> dict[str, torch.Tensor]:
    """The frozen column and categorical embedding tables the batches' ids index, uploaded
    once (not parameters)."""
    resident = upload_tables(sampler)
    tables = {"column": resident["column_embeddings"].float(),
              "categorical": resident["categorical_embeddings"].float()}
    if tables["categorical"].shape[0] == 0:  # no categorical column: one unused row
        tables["categorical"] = torch.zeros(1, tables["column"].shape[1])
    return tables


def model_config(args: options.TrainArgs, tables: dict[str, torch.Tensor], text_dim: int,
                 num_classes: int) -> rt_torch.ModelConfig:
    return rt_torch.ModelConfig(d_model=args.d_model, layers=args.layers, heads=4,
                                table_dim=tables["column"].shape[1], text_dim=text_dim,
                                num_classes=num_classes, block=args.attention_block,
                                numeric_encoding=args.numeric_encoding,
                                column_gain=args.column_gain, dropout=args.dropout,
                                fk_attention=args.fk_attention, readout=args.readout)


@dataclass
class Progress:
    """What the train steps of one run measured (rank 0 logs and reports them)."""

    losses: list[float]      # every step's from step 0: a resumed run's first from its checkpoint
    waits: list[float]       # seconds blocked for a batch, the first step left out
    step_times: list[float]  # seconds per step, the first step left out


def dropout_seed(seed: int, step: int, rank: int) -> int:
    """The seed of the dropout masks rank ``rank`` draws in train step ``step``: a function of
    (seed, step, rank), so a resumed run draws the masks of an uninterrupted one (a global
    generator seeded once would carry on from wherever the first run left it)."""
    digest = hashlib.sha256(f"dlkit-example-dropout:{seed}:{step}:{rank}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def train_steps(args: options.TrainArgs, world: World, sampler: dlkit.Sampler, model: nn.Module,
                net: nn.Module, optimizer: torch.optim.Optimizer,
                tables: dict[str, torch.Tensor], start: int, stop: int, *,
                checkpoint: Path | None = None, fingerprint: dict[str, Any] | None = None,
                recorder: common.Recorder | None = None, label: str = "step",
                pos_weight: float = 1.0, losses_before: Sequence[float] = ()) -> Progress:
    """Train steps ``start .. stop - 1`` on ``sampler``'s train stream (``net``: ``model``,
    or its DDP wrapper), the learning rate and the dropout masks of each a function of its
    step; with ``checkpoint``, write one every ``--checkpoint-every`` steps and at ``stop``.
    ``losses_before``: the losses of steps ``0 .. start - 1`` (a resumed run's, from its
    checkpoint), which the progress's losses and the checkpoints carry on from."""
    progress = Progress(list(losses_before), [], [])
    log_every = max(1, stop // 10)
    model.train()
    step = start
    while step < stop:
        started = time.perf_counter()
        arrays = sampler.next_train_batch()
        waited = time.perf_counter() - started
        batch = to_torch(transforms.prepare(arrays, args))
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(args, step)
        with torch.random.fork_rng(devices=[]):  # the global generator is left as it was
            torch.manual_seed(dropout_seed(args.seed, step, world.rank))
            loss = rt_torch.loss_per_sequence(net(batch, tables), batch, args.loss,
                                              pos_weight).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss_value = world.mean(float(loss.detach()))
        if step > start:  # the first step warms caches up
            progress.waits.append(waited)
            progress.step_times.append(time.perf_counter() - started)
        progress.losses.append(loss_value)
        if args.record:
            anchors = world.gather(batch["anchor_rows"].long())
            digests = world.gather(parameter_digest(model)[None])
            if recorder is not None:
                recorder.write({"step": step, "task_idx": int(batch["task_idx"][0]),
                                **({"database_idx": int(batch["database_idx"][0])}
                                   if "database_idx" in batch else {}),
                                "anchors": anchors.tolist(),
                                "params": [bytes(d.tolist()).hex() for d in digests],
                                "loss": loss_value})
        step += 1
        if world.rank == 0 and (step % log_every == 0 or step == stop):
            common.log(f"{label} {step}/{stop} loss {loss_value:.4f}")
        if checkpoint is not None and (step % args.checkpoint_every == 0 or step == stop):
            assert fingerprint is not None
            sampler_state = sampler.state_dict()
            if world.rank == 0:
                save_checkpoint(checkpoint, step, model, optimizer, sampler_state,
                                fingerprint, progress.losses)
    return progress


def run_training(args: options.TrainArgs, world: World, sampler: dlkit.Sampler) -> int:
    info = sampler.label_info(args.task)
    tables = lookup_tables(sampler)
    cfg = model_config(args, tables, sampler.database_metadata().embeddings.text_dim,
                       info.num_classes if info.stype == metrics.CATEGORICAL else 0)
    model = rt_torch.RelationalTransformer(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr,
                                  weight_decay=args.weight_decay)
    pos_weight = metrics.positive_weight(args, sampler)
    fingerprint = {**options.fingerprint(args, "torch"), "model": asdict(cfg)}
    checkpoint = Path(args.checkpoint_dir) / CHECKPOINT_FILE if args.checkpoint_dir else None
    step, losses = 0, []
    if args.resume:
        assert checkpoint is not None  # parse_args refuses --resume without a directory
        step, losses = resume(checkpoint, fingerprint, model, optimizer, sampler, args.steps)
    net = nn.parallel.DistributedDataParallel(model) if world.distributed else model

    recorder = (common.Recorder(args.record, step if args.resume else None)
                if args.record and world.rank == 0 else None)
    progress = train_steps(args, world, sampler, model, net, optimizer, tables, step,
                           args.steps, checkpoint=checkpoint, fingerprint=fingerprint,
                           recorder=recorder, pos_weight=pos_weight, losses_before=losses)
    if recorder is not None:
        recorder.close()

    predictions, labels = evaluate(model, tables, sampler, args, world, info.stype)
    if world.rank == 0:
        metrics.emit(metrics.result(
            framework="torch", world_size=world.size, steps=args.steps, info=info,
            predictions=predictions, labels=labels,
            baseline=metrics.baseline_predictions(sampler, args.task, len(labels),
                                                  loss=args.loss, pos_weight=pos_weight),
            waits=progress.waits, step_times=progress.step_times, losses=progress.losses,
            loss=args.loss, pos_weight=pos_weight,
            context=args.context, seed=args.seed, resumed_from=step if args.resume else None))
    if world.distributed:
        dist.barrier()
    return 0


def resume(checkpoint: Path, fingerprint: dict[str, Any], model: nn.Module,
           optimizer: torch.optim.Optimizer, sampler: dlkit.Sampler, steps: int,
           steps_flag: str = "--steps") -> tuple[int, list[float]]:
    """Load ``checkpoint`` (taken with ``fingerprint``) into the model, the optimizer and the
    sampler: the step it was taken after (not beyond ``steps``, the run's last), and the
    losses of the steps before it."""
    state = load_checkpoint(checkpoint, fingerprint)
    step = int(state["step"])
    common.check_resume_step(step, steps, checkpoint, steps_flag)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    sampler.load_state_dict(state["sampler"])
    # a checkpoint of an earlier version of this example holds no losses: the resumed run's
    # train_loss_first is then that of its own steps
    losses = state.get("losses")
    common.log(f"resumed at step {step} from {checkpoint}")
    return step, [] if losses is None else [float(v) for v in losses.tolist()]


@torch.no_grad()
def evaluate(model: nn.Module, tables: dict[str, torch.Tensor], sampler: dlkit.Sampler,
             args: options.TrainArgs, world: World, stype: int, task: str | None = None,
             **where: Any) -> tuple[np.ndarray, np.ndarray]:
    """Outputs and labels of every val seed of ``task`` (default ``--task``; ``where``: the
    sampler's ``database=`` of a mixture), each once across the ranks, on every rank."""
    model.eval()
    outputs, labels = [], []
    for arrays in sampler.iter_eval("val", task=task or args.task, **where):
        batch = to_torch(transforms.prepare(arrays, args))
        out = rt_torch.outputs_for_metrics(model(batch, tables), stype)
        keep = world.gather(batch["sequence_mask"].bool())
        outputs.append(world.gather(out)[keep])
        labels.append(world.gather(batch["labels"])[keep])
    model.train()
    return torch.cat(outputs).numpy(), torch.cat(labels).numpy()


if __name__ == "__main__":
    sys.exit(common.run(main))
