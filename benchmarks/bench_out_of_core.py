#!/usr/bin/env python3
"""A database larger than memory: preprocess under a memory budget, then sample from it.

In one run, on inputs made by ``bench_preprocess.generate`` (users, products with string
keys, orders with two foreign keys; cached under ``--workdir``):

1. ``in RAM``: ``dlkit preprocess`` of the ``--ram-edges`` input (default 100 M edges) with
   the default budget (half the available memory: every working array in memory);
2. ``out of core``: ``dlkit preprocess --memory-budget 2G`` of the ``--edges`` input (default
   500 M edges), whose database is larger than this machine's memory;

each a real ``dlkit`` process whose anonymous memory (RssAnon: what the budget bounds;
mapped files are the page cache's) is sampled every 20 ms. Printed: wall time, time per edge
and its ratio to the in-RAM build, peak anonymous memory against the budget, bytes spilled
(from ``--json``), and both database hashes' stability is left to the tests (a spilled
build writes the same bytes: ``tests/db/write/test_memory_budget.py``).

3. ``sampler``: the ``Sampler`` (B=32, S=1024, R=256, one producer thread) on the large
   database, from a cold page cache (its files evicted with ``posix_fadvise(DONTNEED)``) and
   then warm (the same process, the next batches), against the same sampler on the in-RAM
   database; with its setup time and anonymous memory.

Disk: the inputs, both databases and the build's scratch files need about 70 bytes per edge;
the run refuses to start unless that leaves 15 GB free. Databases are deleted at the end
unless ``--keep``.

    python benchmarks/bench_out_of_core.py [--edges 500_000_000] [--ram-edges 100_000_000]
        [--budget 2G] [--workdir DIR] [--batches 40] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_preprocess import GENERATOR_VERSION, generate  # noqa: E402

BYTES_PER_EDGE = 70  # input ~14, database ~52, scratch beyond the budget
FREE_AFTER = 15 << 30

SAMPLER = r"""
import json, os, sys, time
from dlkit.sampler import Sampler

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    return 0

def evict(root):
    for dirpath, _, names in os.walk(root):
        for name in names:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)

db, batches = sys.argv[1], int(sys.argv[2])
started = time.perf_counter()
s = Sampler(db, 0, 1, batch_size=32, sequence_length=1024, max_rows=256, bfs_child_width=16,
            num_threads=1, num_prefetch=2)
setup = time.perf_counter() - started
s.next_train_batch()
evict(db)
rates = []
for _ in range(3):
    t0 = time.perf_counter()
    for _ in range(batches):
        s.next_train_batch()
    rates.append(batches / (time.perf_counter() - t0))
print(json.dumps({"setup_s": setup, "rates": rates, "path": s.builder.memory_path,
                  "anon": status("RssAnon:")}))
"""


def watch_anon(pid: int, peak: list[int], done: threading.Event) -> None:
    while not done.is_set():
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        peak[0] = max(peak[0], int(line.split()[1]) * 1024)
        except OSError:
            return
        done.wait(0.02)


def preprocess(source: Path, out: Path, budget: str | None) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "dlkit", "preprocess", str(source), str(out), "--json"]
    if budget is not None:
        cmd += ["--memory-budget", budget]
    peak, done = [0], threading.Event()
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watcher = threading.Thread(target=watch_anon, args=(proc.pid, peak, done), daemon=True)
    watcher.start()
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - started
    done.set()
    watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"preprocess of {source} failed:\n{stderr}")
    report = json.loads(stdout)
    return {"wall_s": wall, "peak_anon": peak[0], "edges": report["num_edges"],
            "bytes": report["size_bytes"], "spilled": report["spilled_bytes"],
            "budget": report["memory_budget"], "hash": report["database_hash"],
            "stages": {s["name"]: round(s["seconds"], 1) for s in report["stages"]}}


def sample(db: Path, batches: int) -> dict:
    out = subprocess.run([sys.executable, "-c", SAMPLER, str(db), str(batches)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"sampler on {db} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def gib(n: float) -> str:
    return f"{n / (1 << 30):.2f} GiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--edges", type=int, default=500_000_000)
    ap.add_argument("--ram-edges", type=int, default=100_000_000)
    ap.add_argument("--budget", default="2G")
    ap.add_argument("--workdir", default=str(Path.home() / ".cache" / "dlkit-bench-ooc"))
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--keep", action="store_true", help="keep the databases")
    a = ap.parse_args()
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    for name in ("db-ram", "db-big"):  # a kept run's databases: rebuilt below
        shutil.rmtree(work / name, ignore_errors=True)
    need = BYTES_PER_EDGE * (a.edges + a.ram_edges)
    free = shutil.disk_usage(work).free
    if free - need < FREE_AFTER:
        raise SystemExit(f"{work}: {gib(free)} free; this run needs about {gib(need)} and "
                         f"leaves 15 GiB: pass smaller --edges")
    with open("/proc/meminfo") as f:
        memory = int(next(line for line in f if line.startswith("MemTotal:")).split()[1]) * 1024
    print(f"cores {os.cpu_count()}, memory {gib(memory)}, load {os.getloadavg()[0]:.1f}")
    sources = {}
    for edges in (a.ram_edges, a.edges):
        source = work / f"in-{edges}-{GENERATOR_VERSION}"
        if not (source / "dlkit.toml").exists():
            print(f"generating {edges:,} edges of Parquet in {source} ...", flush=True)
            generate(source, edges)
        sources[edges] = source
    ram = preprocess(sources[a.ram_edges], work / "db-ram", None)
    print(f"in RAM       {ram['edges']:>13,} edges  {ram['wall_s']:7.1f} s  "
          f"{ram['wall_s'] / ram['edges'] * 1e9:6.1f} ns/edge  peak anon {gib(ram['peak_anon'])}"
          f"  db {gib(ram['bytes'])}  stages {ram['stages']}", flush=True)
    big = preprocess(sources[a.edges], work / "db-big", a.budget)
    ratio = (big["wall_s"] / big["edges"]) / (ram["wall_s"] / ram["edges"])
    print(f"out of core  {big['edges']:>13,} edges  {big['wall_s']:7.1f} s  "
          f"{big['wall_s'] / big['edges'] * 1e9:6.1f} ns/edge  peak anon {gib(big['peak_anon'])}"
          f" (budget {gib(big['budget'])}, goal <= {gib(big['budget'] + (1 << 29))})  "
          f"spilled {gib(big['spilled'])}  db {gib(big['bytes'])}  stages {big['stages']}")
    print(f"per-edge time out of core / in RAM: {ratio:.2f}x (goal <= 1.5x); database "
          f"{big['bytes'] / memory:.2f}x this machine's memory", flush=True)
    for name, db in (("in-RAM db", work / "db-ram"), ("larger-than-RAM db", work / "db-big")):
        s = sample(db, a.batches)
        rates = ", ".join(f"{r:.1f}" for r in s["rates"])
        print(f"sampler on the {name}: setup {s['setup_s']:.1f} s, anon {gib(s['anon'])}, "
              f"path {s['path']}; batches/s cold, then warmer, per {a.batches}: {rates}",
              flush=True)
    print(f"load {os.getloadavg()[0]:.1f}")
    if not a.keep:
        for name in ("db-ram", "db-big"):
            shutil.rmtree(work / name, ignore_errors=True)


if __name__ == "__main__":
    main()
