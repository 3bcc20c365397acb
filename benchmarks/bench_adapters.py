#!/usr/bin/env python3
"""What the framework adapters cost per batch, and what the training loop waits for data.

Measures, in one run, on the bundled example database (preprocessed into ``--work``):

1. Conversion cost per batch at the default shape (B=32, S=1024, R=256: ~5 MB in 25 arrays),
   each against the obvious alternative, alternately, ``--repeat`` times over the same batches,
   medians quoted:
   - ``dlkit.torch.to_torch(batch)`` (``torch.from_numpy`` per key: no copy) vs
     ``{k: torch.tensor(v)}`` (a copy per key; slow on the 3-D arrays here) and vs
     ``{k: torch.from_numpy(v.copy())}`` (the cheapest copy, a memcpy per key);
   - ``next()`` on ``DataLoader(SamplerDataset(...), batch_size=None, num_workers=0)`` over
     ready batches (the adapter plus the loader, no sampling);
   - ``dlkit.jax.device_batch(batch)`` (one ``jax.device_put`` of the dict, int64 checks, text
     table padded to a power of two) vs ``{k: jnp.asarray(v)}`` per key (which silently
     truncates int64 keys without x64, so it does less);
   - ``dlkit.jax.global_batch(batch)`` (1 process, every device: sharded/replicated arrays)
     vs the same ``jnp.asarray`` per key.
   Goal: < 50 us per batch without pinning for the torch adapter (pinning needs an
   accelerator; this machine has none, so it is not measured). JAX on the CPU copies each
   array into its own buffer (numpy's 16-byte alignment is below what XLA aliases), so its
   figures are a ~5 MB copy, not adapter overhead.
2. The consumer's wait: ``examples/train_torch.py`` and ``examples/train_jax.py`` at their
   defaults (global batch 32, 128 cells, their Relational Transformers, losses and
   optimizers; ``dlkit.Sampler`` with 1 producer thread, batches prefetched) on the bundled
   database's ``review_rating`` task, each run as a subprocess for ``--steps`` steps; the
   result line reports the wait for each batch (p50, p99; the first step excluded) and the
   mean step time. Goal: p99 < 5% of the step. For
   contrast, the time to build one batch of that shape in the caller's thread
   (``num_prefetch=0``): what each step would wait without the producer thread.

Timings on a shared 2-core machine are noisy: run it alone for figures you quote.

    python benchmarks/bench_adapters.py [--repeat 200] [--steps 100] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from dlkit.db import preprocess
from dlkit.sampler import Sampler

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "fixtures" / "example_db"
TASK = "review_rating"  # the bundled database's numeric task (reviews link users and products)


def us(seconds: float) -> float:
    return seconds * 1e6


def database(work: Path) -> Path:
    db = work / "example_db"
    if not (db / "manifest.json").exists():
        preprocess(EXAMPLE, db, fsync=False, overwrite=True)
    return db


def median_call(fn, batches, repeat: int) -> float:
    """Median seconds per call of ``fn(batch)`` over ``repeat`` passes of ``batches``."""
    times = []
    for _ in range(repeat):
        for batch in batches:
            started = time.perf_counter()
            fn(batch)
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def conversion_costs(db: Path, repeat: int) -> dict[str, float]:
    import jax
    import jax.numpy as jnp
    import torch

    import dlkit.jax as dlj
    import dlkit.torch as dlt

    with Sampler(db, 0, 1, seed=1, task_weights={TASK: 1}) as sampler:  # default shape
        batches = [sampler.next_train_batch() for _ in range(4)]
    mesh = dlj.batch_mesh()

    def torch_copy(batch):
        return {k: torch.tensor(v) for k, v in batch.items()}

    def torch_memcpy(batch):  # the cheapest copy: numpy's memcpy, then shared
        return {k: torch.from_numpy(v.copy()) for k, v in batch.items()}

    def jax_per_key(batch):
        out = {k: jnp.asarray(v) for k, v in batch.items()}
        jax.block_until_ready(out)
        return out

    def jax_ours(batch):
        return jax.block_until_ready(dlj.device_batch(batch))

    def jax_global(batch):
        return jax.block_until_ready(dlj.global_batch(batch, mesh))

    pairs = {"torch": (dlt.to_torch, torch_copy), "torch_memcpy": (dlt.to_torch, torch_memcpy),
             "jax_device": (jax_ours, jax_per_key),
             "jax_global": (jax_global, jax_per_key)}
    for ours, theirs in pairs.values():  # warm up (jax compiles nothing, but allocates)
        for batch in batches:
            ours(batch), theirs(batch)
    out: dict[str, float] = {}
    rounds = 5  # alternate, so a slow minute of the shared machine hits both sides
    for name, (ours, theirs) in pairs.items():
        mine, other = [], []
        for _ in range(rounds):
            mine.append(median_call(ours, batches, max(1, repeat // rounds)))
            other.append(median_call(theirs, batches, max(1, repeat // rounds)))
        out[f"{name}_us"] = us(statistics.median(mine))
        out[f"{name}_alternative_us"] = us(statistics.median(other))
    out["batch_mb"] = sum(v.nbytes for v in batches[0].values()) / 1e6
    out["num_arrays"] = len(batches[0])
    return out


def dataloader_cost(db: Path, repeat: int) -> dict[str, float]:
    """``next()`` on ``DataLoader(SamplerDataset(...), batch_size=None, num_workers=0)`` over
    a stand-in sampler that hands out ready batches (so only the adapter and the loader are
    timed) vs ``to_torch`` on the same batches."""
    from torch.utils.data import DataLoader

    import dlkit.torch as dlt

    with Sampler(db, 0, 1, seed=1, task_weights={TASK: 1}) as sampler:
        batches = [sampler.next_train_batch() for _ in range(4)]

    class Ready:  # the one Sampler method the train stream calls
        def __init__(self):
            self.batches = itertools.cycle(batches)

        def next_train_batch(self):
            return next(self.batches)

    loader = iter(DataLoader(dlt.SamplerDataset(Ready()), batch_size=None, num_workers=0))
    next(loader)
    times = []
    for _ in range(repeat * len(batches)):
        started = time.perf_counter()
        next(loader)
        times.append(time.perf_counter() - started)
    return {"dataloader_us": us(statistics.median(times)),
            "to_torch_us": us(median_call(dlt.to_torch, batches, repeat))}


def build_cost(db: Path, args: list[str], batches: int = 40) -> float:
    """Median seconds ``next_train_batch`` takes with nothing prefetched (``num_prefetch=0``:
    built in the caller's thread), at the example's shape: what the loop would wait without
    the producer thread."""
    sequence_length = int(args[args.index("--sequence-length") + 1])
    batch_size = int(args[args.index("--batch-size") + 1])
    with Sampler(db, 0, 1, seed=0, batch_size=batch_size, sequence_length=sequence_length,
                 max_rows=sequence_length, task_weights={TASK: 1}, num_prefetch=0) as sampler:
        sampler.next_train_batch()
        times = []
        for _ in range(batches):
            started = time.perf_counter()
            sampler.next_train_batch()
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def consumer_wait(db: Path, steps: int, framework: str) -> dict[str, float]:
    """``examples/train_<framework>.py`` at its defaults (1 producer thread, batches
    prefetched): its own wait and step figures from its result line."""
    args = ["--batch-size", "32", "--sequence-length", "128"]  # the examples' defaults
    script = ROOT / "examples" / f"train_{framework}.py"
    command = [sys.executable, str(script), "--db", str(db), "--task", TASK,
               "--steps", str(steps), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{script.name} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    step_ms = float(result["step_ms"])
    built_ms = build_cost(db, args) * 1e3
    return {"step_ms": step_ms, "wait_p50_ms": float(result["wait_p50_ms"]),
            "wait_p99_ms": float(result["wait_p99_ms"]),
            "wait_p50_fraction": float(result["wait_p50_ms"]) / step_ms,
            "wait_p99_fraction": float(result["wait_p99_ms"]) / step_ms,
            "unprefetched_build_ms": built_ms, "unprefetched_fraction": built_ms / step_ms}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=200, help="passes over 4 batches per side")
    parser.add_argument("--steps", type=int, default=100, help="timed train steps")
    parser.add_argument("--work", type=Path, default=ROOT / "out" / "bench_adapters")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    ns = parser.parse_args()
    load = os.getloadavg()[0]
    db = database(ns.work)
    costs = conversion_costs(db, ns.repeat)
    loader = dataloader_cost(db, ns.repeat)
    waits = {framework: consumer_wait(db, ns.steps, framework) for framework in ("torch", "jax")}
    result = {"conversion": costs, "dataloader": loader, "wait": waits, "load_average": load,
              "cpus": os.cpu_count()}
    if ns.json:
        print(json.dumps(result))
        return 0
    c = costs
    print(f"load average at the start {load:.1f} on {os.cpu_count()} cpus (other work slows "
          "both sides of each comparison)")
    print(f"conversion per batch (B=32 S=1024 R=256, {c['batch_mb']:.1f} MB, "
          f"{c['num_arrays']} arrays), medians:")
    for name, label, alternative in (
            ("torch", "dlkit.torch.to_torch (zero-copy)", "torch.tensor per key (copy)"),
            ("torch_memcpy", "dlkit.torch.to_torch (zero-copy)", "from_numpy(np.copy) per key"),
            ("jax_device", "dlkit.jax.device_batch", "jnp.asarray per key"),
            ("jax_global", "dlkit.jax.global_batch (1 process)", "jnp.asarray per key")):
        ours, theirs = c[f"{name}_us"], c[f"{name}_alternative_us"]
        print(f"  {label:<38} {ours:9.1f} us   {alternative:<28} {theirs:9.1f} us   "
              f"ratio {theirs / ours:6.1f}x")
    print(f"  DataLoader(SamplerDataset, batch_size=None, num_workers=0) next(): "
          f"{loader['dataloader_us']:.1f} us per batch (to_torch alone "
          f"{loader['to_torch_us']:.1f} us)")
    goal = "met" if c["torch_us"] < 50 and loader["dataloader_us"] < 50 else "NOT met"
    print(f"  goal < 50 us per batch without pinning (torch adapter): {goal}")
    for framework, w in waits.items():
        print(f"examples/train_{framework}.py (defaults: global batch 32, 128 cells, 1 producer "
              f"thread, {ns.steps} steps) on {TASK}: step {w['step_ms']:.1f} ms, wait p50 "
              f"{w['wait_p50_ms']:.3f} ms ({100 * w['wait_p50_fraction']:.2f}%), p99 "
              f"{w['wait_p99_ms']:.3f} ms ({100 * w['wait_p99_fraction']:.2f}%); without "
              f"prefetch each step would wait {w['unprefetched_build_ms']:.1f} ms for its batch "
              f"({100 * w['unprefetched_fraction']:.1f}% of the step)")
    ok = all(w["wait_p99_fraction"] < 0.05 for w in waits.values())
    print(f"  goal wait p99 < 5% of the step: {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
