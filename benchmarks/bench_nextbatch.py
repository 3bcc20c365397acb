"""NextBatch_v2 throughput and memory against numpy's permutation, in one run.

    .venv/bin/python benchmarks/bench_nextbatch.py            # N = 10^8 epoch + 10^9 stream
    .venv/bin/python benchmarks/bench_nextbatch.py --n 10000000 --stream-n 0   # quick

Each measurement runs in a fresh subprocess so its peak RSS (ru_maxrss) is its own:
- numpy: ``numpy.random.default_rng(0).permutation(N)``, the obvious in-memory alternative;
- dlkit (array): one kernel call resolving the whole epoch into a preallocated array, the same
  output numpy produces (same memory);
- dlkit (streamed): the epoch resolved in 2^20-index chunks into one reused buffer, which is
  how dlkit consumes an epoch (constant memory);
- dlkit (to file): ``dlkit sample --steps all --format bin`` for N = 10^9 into a file, through
  the real CLI, reporting wall time, throughput and peak RSS.
All on one thread (NUMBA_NUM_THREADS=1; the kernels are serial anyway).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time
import numpy as np
mode, n = sys.argv[1], int(sys.argv[2])
if mode == "numpy":
    t = time.perf_counter(); out = np.random.default_rng(0).permutation(n); dt = time.perf_counter() - t
else:
    from dlkit.nextbatch import Cursor, SamplingPlan
    from dlkit.nextbatch.run_manifest import DataConfig, DatasetEntry, RunManifest
    m = RunManifest(seed=0, global_batch_size=1024, data=DataConfig(),
                    datasets={"d": DatasetEntry("d", "1", n, bytes(32))})
    plan = SamplingPlan.create(m, "d", 1, 0, "train")
    one = np.array([0], dtype=np.uint64)
    plan.resolve(0, one, np.array([min(n, 4096)], dtype=np.uint64))  # compile/load outside the timing
    if mode == "array":
        t = time.perf_counter()
        out = plan.resolve(0, one, np.array([n], dtype=np.uint64))
        dt = time.perf_counter() - t
    else:
        from dlkit.core.nextbatch import resolve_shuffled
        _, words, order = plan.order.epoch_state(0)
        buf = np.empty(1 << 20, dtype=np.uint64)
        checksum = 0
        t = time.perf_counter()
        for start in range(0, n, 1 << 20):
            length = min(1 << 20, n - start)
            resolve_shuffled(order, words, n, m.data.sampler_block_size,
                             np.array([start], np.uint64), np.array([length], np.uint64), buf[:length])
            checksum ^= int(buf[length - 1])
        dt = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": dt, "peak_rss": rss}))
"""


def child(mode: str, n: int) -> dict:
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(n)], capture_output=True,
                         text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def stream_to_file(n: int, directory: Path) -> dict:
    manifest = directory / "m.json"
    manifest.write_text(json.dumps({
        "seed": 0, "global_batch_size": 1 << 20,
        "datasets": {"d": {"id": "d", "version": "1", "cardinality": n, "hash": "00" * 32}}}))
    out = directory / "epoch.bin"
    script = (
        "import resource, sys\n"
        "from dlkit.cli.app import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    code = e.code\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, file=sys.stderr)\n"
        "sys.exit(code)\n")
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", script, "sample", str(manifest), "-d", "d",
                           "--format", "bin", "--out", str(out), "--quiet"],
                          capture_output=True, text=True)
    dt = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    size = out.stat().st_size
    out.unlink()
    return {"seconds": dt, "peak_rss": int(proc.stderr.strip().splitlines()[-1]), "bytes": size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10**8, help="epoch size for the comparison")
    parser.add_argument("--stream-n", type=int, default=10**9,
                        help="epoch size streamed to a file through the CLI (0 to skip)")
    parser.add_argument("--dir", type=Path, default=None, help="where the streamed file goes")
    args = parser.parse_args()

    n = args.n
    rows = {mode: child(mode, n) for mode in ("numpy", "array", "streamed")}
    base = n / rows["numpy"]["seconds"]
    print(f"full epoch, N = {n:,}, one thread")
    print(f"{'method':<32}{'M indices/s':>13}{'peak RSS MB':>13}{'vs numpy':>10}")
    names = {"numpy": "numpy default_rng.permutation", "array": "dlkit (whole epoch array)",
             "streamed": "dlkit (2^20 chunks, streamed)"}
    for mode, row in rows.items():
        rate = n / row["seconds"]
        print(f"{names[mode]:<32}{rate / 1e6:>13.1f}{row['peak_rss'] / 2**20:>13.0f}{rate / base:>9.1f}x")
    if args.stream_n:
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            row = stream_to_file(args.stream_n, Path(tmp))
        rate = args.stream_n / row["seconds"]
        print(f"\n`dlkit sample --format bin` of a whole N = {args.stream_n:,} epoch to a file "
              f"({row['bytes'] / 2**30:.1f} GiB):")
        print(f"  {row['seconds']:.1f} s wall ({rate / 1e6:.0f} M indices/s including the write), "
              f"peak RSS {row['peak_rss'] / 2**20:.0f} MB (target < 200 MB)")


if __name__ == "__main__":
    main()
