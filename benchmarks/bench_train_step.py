#!/usr/bin/env python3
"""What ``Sampler.train_batch(step)`` costs for a far step: time and memory, old against new.

On the bundled example database (``fixtures/example_db``, preprocessed once into ``--work``;
three tasks of 170, 300 and 60 seeds), batch size 8, for each step of ``--steps`` (default
10^3 .. 10^7) and two train schedules:

- **one task** (``task_weights`` 0, 1, 0): every step picks it, so the new code finds step
  ``k`` in O(1);
- **three tasks** (weights 1, 2.5, 0.5): each step's task is its own draw, so the new code
  counts the draws before ``k`` (about 20 ns each, constant memory); the old code made a job
  for every step before ``k`` and kept the dict that held them.

Each measurement runs in a fresh process: a sampler is opened and ``train_batch(0)`` built (the
kernels compiled or loaded, the build paid), the peak resident size is reset
(``/proc/self/clear_refs``), then ``train_batch(step)`` is timed; printed are its wall time,
the peak resident memory it added (``VmHWM``) and what it left resident (``VmRSS``). With
``--baseline-rev REV`` the same runs use the dlkit of git revision ``REV`` of this repository
(``git archive`` into ``--work``), e.g. the commit before the change, and the ratios are
printed; ``--baseline-max-step`` skips its slowest steps.

Timings on a shared 2-core machine are noisy: run it alone for figures you quote.

    python benchmarks/bench_train_step.py [--steps 1000 ... 10000000] [--baseline-rev REV]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCHEDULES = {"one task": [0.0, 1.0, 0.0], "three tasks": [1.0, 2.5, 0.5]}
DEFAULT_STEPS = [10**3, 10**4, 10**5, 10**6, 10**7]


def _kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(db: str, weights: list[float], step: int) -> dict[str, Any]:
    """One measurement (in a fresh process, with the dlkit its PYTHONPATH names)."""
    import dlkit

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sampler = dlkit.Sampler(db, batch_size=8, num_prefetch=0, num_threads=1,
                                task_weights=weights)
    with sampler:
        sampler.train_batch(0)
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
        before = _kib("VmRSS")
        start = time.perf_counter()
        try:
            sampler.train_batch(step)
            outcome = "ok"
        except Exception as error:  # the old code's MemoryError is a figure too
            outcome = f"{type(error).__name__}: {str(error)[:60]}"
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "peak_mib": (_kib("VmHWM") - before) / 1024,
                "kept_mib": (_kib("VmRSS") - before) / 1024, "outcome": outcome}


def measure(src: Path, db: Path, weights: list[float], step: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, __file__, "--child", str(db), json.dumps(weights),
                          str(step)], env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"seconds": float("nan"), "peak_mib": float("nan"), "kept_mib": float("nan"),
                "outcome": f"exit {out.returncode}: {out.stderr.strip().splitlines()[-1:]}"}
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def ensure_database(work: Path) -> Path:
    db = work / "example_db"
    if not (db / "manifest.json").exists():
        sys.path.insert(0, str(ROOT / "src"))
        from dlkit.db import preprocess

        preprocess(ROOT / "fixtures" / "example_db", db, overwrite=True, fsync=False)
    return db


def baseline_src(work: Path, rev: str) -> Path:
    out = work / f"baseline-{rev}"
    if not (out / "src" / "dlkit").exists():
        out.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out / "src"


def row(label: str, r: dict[str, Any]) -> str:
    return (f"{label:>4} {r['seconds']:9.4f} s  peak +{r['peak_mib']:8.1f} MiB  kept "
            f"+{r['kept_mib']:8.1f} MiB  {r['outcome']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=DEFAULT_STEPS)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) /
                        "dlkit-bench-train-step")
    parser.add_argument("--baseline-rev", help="git revision of the old code to compare")
    parser.add_argument("--baseline-max-step", type=int, default=10**7)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        db, weights, step = args.child
        print(json.dumps(child(db, json.loads(weights), int(step))))
        return
    args.work.mkdir(parents=True, exist_ok=True)
    db = ensure_database(args.work)
    old = baseline_src(args.work, args.baseline_rev) if args.baseline_rev else None
    for name, weights in SCHEDULES.items():
        print(f"== {name} (task_weights {weights}), batch 8", flush=True)
        for step in args.steps:
            new = measure(ROOT / "src", db, weights, step)
            print(f"step {step:>12,}", flush=True)
            if old is not None and step <= args.baseline_max_step:
                before = measure(old, db, weights, step)
                print(row("old", before))
                print(row("new", new))
                if before["outcome"] == new["outcome"] == "ok":
                    ratio = before["seconds"] / max(new["seconds"], 1e-9)
                    print(f"     new is {ratio:,.0f}x faster", flush=True)
            else:
                print(row("new", new), flush=True)


if __name__ == "__main__":
    main()
