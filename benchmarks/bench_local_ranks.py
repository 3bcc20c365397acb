#!/usr/bin/env python3
"""Several ranks of one job on one machine: memory per rank and batches/s per rank.

For 1, 2 and 4 local ranks (``LOCAL_WORLD_SIZE``), each rank a real process building its
sampler on the same generated database (``bench_sampler.ensure_database``), and for each way
of reading the graph and the values:

- ``private``: huge-page copies of its own in every rank (what a lone rank does);
- ``shared``: one segment per machine that the first rank fills and the others map
  (``dlkit.sampler.shared``);
- ``mmap``: the database's memory map, whose page cache every rank shares;

it prints each rank's anonymous memory (RssAnon) and shared-memory pages (RssShmem) after
its batches, the machine's shared-memory growth, and batches/s per rank (B=32, S=1024,
R=256, one producer thread, after a warm-up; the ranks run at the same time, so with more
ranks than cores each gets a share of them). The database's size is quoted beside them.

    python benchmarks/bench_local_ranks.py [--rows 10_000_000] [--batches 40] [--ranks 1,2,4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RANK = r"""
import json, os, sys, time, warnings
sys.path.insert(0, {root!r})
from dlkit.sampler import Sampler, SamplerWarning
warnings.simplefilter("ignore", SamplerWarning)

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    return 0

mode, batches = sys.argv[1], int(sys.argv[2])
huge = {{"private": True, "shared": True, "mmap": False}}[mode]
# private: each rank copies as if it were alone on the machine (what every rank did before
# local ranks were counted)
local = int(os.environ["LOCAL_WORLD_SIZE"]) if mode != "private" else 1
local_rank = int(os.environ["LOCAL_RANK"]) if mode != "private" else 0
start = time.perf_counter()
with Sampler({db!r}, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), batch_size=32,
             sequence_length=1024, max_rows=256, bfs_child_width=16, num_threads=1,
             num_prefetch=2, huge_pages=huge, local_rank=local_rank, local_world_size=local,
             task_weights={{"review_rating": 1, "order_status": 1}}) as s:
    ready = time.perf_counter() - start
    for _ in range(3):
        s.next_train_batch()
    print("warm", flush=True)
    sys.stdin.readline()  # every rank starts timing together
    t0 = time.perf_counter()
    for _ in range(batches):
        s.next_train_batch()
    rate = batches / (time.perf_counter() - t0)
    print(json.dumps({{"path": s.builder.memory_path, "rate": rate, "setup_s": ready,
                      "anon": status("RssAnon:"), "shmem": status("RssShmem:")}}), flush=True)
    sys.stdin.readline()
"""


def shm_used() -> int:
    usage = shutil.disk_usage("/dev/shm")
    return usage.used


def run(db: Path, mode: str, ranks: int, batches: int) -> list[dict]:
    script = RANK.format(root=str(ROOT), db=str(db))
    before = shm_used()
    procs = []
    try:
        for r in range(ranks):
            env = {**os.environ, "RANK": str(r), "WORLD_SIZE": str(ranks),
                   "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(ranks)}
            procs.append(subprocess.Popen([sys.executable, "-c", script, mode, str(batches)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          text=True, env=env))
        for p in procs:
            assert p.stdout.readline().strip() == "warm"
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        reports = [json.loads(p.stdout.readline()) for p in procs]
        growth = shm_used() - before
        for report in reports:
            report["shm_growth"] = growth
        return reports
    finally:
        for p in procs:
            if p.stdin and not p.stdin.closed:
                p.stdin.close()
            p.wait(timeout=600)


def main() -> None:
    from benchmarks.bench_sampler import ensure_database

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--modes", default="private,shared,mmap")
    parser.add_argument("--work", type=Path, default=ROOT / "out" / "bench")
    args = parser.parse_args()
    db = ensure_database(args.work, args.rows)
    size = sum(f.stat().st_size for f in db.rglob("*") if f.is_file())
    print(f"database: {db} ({size / 1e9:.2f} GB), cores: {os.cpu_count()}, "
          f"load: {os.getloadavg()[0]:.2f}")
    print(f"{'ranks':>5} {'mode':>8} {'path':>8} {'batches/s per rank':>20} "
          f"{'RssAnon/rank GB':>16} {'x db':>6} {'shm growth GB':>14} {'x db':>6}")
    for ranks in (int(r) for r in args.ranks.split(",")):
        for mode in args.modes.split(","):
            reports = run(db, mode, ranks, args.batches)
            rates = [r["rate"] for r in reports]
            anon = max(r["anon"] for r in reports)
            growth = reports[0]["shm_growth"]
            print(f"{ranks:>5} {mode:>8} {reports[0]['path']:>8} "
                  f"{sum(rates) / len(rates):>20.2f} {anon / 1e9:>16.2f} "
                  f"{anon / size:>6.2f} {growth / 1e9:>14.2f} {growth / size:>6.2f}")


if __name__ == "__main__":
    main()
