#!/usr/bin/env python3
"""``dlkit verify`` against plain ``sha256sum`` of the same files, from a warm page cache.

Measures, in one run, on a generated database (``bench_sampler.ensure_database``: generated
once into ``--work`` and reused; default 10 M rows):

1. ``dlkit verify DB`` as a subprocess (``python -m dlkit``, the whole command: interpreter
   start, imports, every hash and structure check): wall time, GB/s (the bytes of every file
   the manifest lists, plus ``manifest.json``, divided by the wall time), CPU time (its
   rusage), peak resident memory (``VmHWM``, the kernel's own high-water mark: ``ru_maxrss``
   would count this process's pages the child held between fork and exec) and the peaks of
   its anonymous and file-backed resident memory (``RssAnon`` / ``RssFile``, polled every
   2 ms);
2. ``sha256sum`` of the same files (one process, every file as an argument);
3. for reference, SHA-256 of the same files with Python's ``hashlib`` on one thread (4 MiB
   blocks), inside this process;

each ``--repeat`` times, alternately, after reading every file once (the page cache warm);
medians quoted, with the machine's cores and load average (a shared machine's speed swings
from minute to minute). ``--baseline-src DIR`` also runs ``dlkit verify`` from another source
tree (``PYTHONPATH=DIR``, e.g. the code before a change) in the same rounds.

    python benchmarks/bench_verify.py [--rows 10_000_000] [--repeat 3] [--baseline-src DIR]
        [--work DIR] [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_sampler import ensure_database  # noqa: E402

from dlkit.db.manifest import HASH_BLOCK  # noqa: E402


def database_files(db: Path) -> tuple[list[Path], int]:
    """Every file the manifest lists plus ``manifest.json``, and their total size."""
    manifest = json.loads((db / "manifest.json").read_text())
    files = [db / rel for rel in sorted(manifest["files"])] + [db / "manifest.json"]
    return files, sum(f.stat().st_size for f in files)


def warm(files: list[Path]) -> None:
    buf = bytearray(HASH_BLOCK)
    for path in files:
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def _poll_memory(pid: int, peaks: dict[str, int], done: threading.Event) -> None:
    while not done.is_set():
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    key = line.split(":", 1)[0]
                    if key in peaks:
                        peaks[key] = max(peaks[key], int(line.split()[1]) * 1024)
        except OSError:
            pass
        done.wait(0.002)


def run_measured(argv: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    """Wall time, CPU time and peak memory of one child process (its own rusage)."""
    peaks = {"VmHWM": 0, "RssAnon": 0, "RssFile": 0}
    done = threading.Event()
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    poller = threading.Thread(target=_poll_memory, args=(proc.pid, peaks, done), daemon=True)
    poller.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    done.set()
    poller.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {stderr.strip()}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mb": peaks["VmHWM"] / 2**20, "peak_anon_mb": peaks["RssAnon"] / 2**20,
            "peak_file_mb": peaks["RssFile"] / 2**20}


def verify_run(db: Path, src: Path | None) -> dict[str, float]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    return run_measured([sys.executable, "-m", "dlkit", "verify", "--quiet", str(db)], env)


def hashlib_run(files: list[Path]) -> dict[str, float]:
    started, cpu = time.perf_counter(), time.process_time()
    buf = bytearray(HASH_BLOCK)
    view = memoryview(buf)
    for path in files:
        h = hashlib.sha256()
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                h.update(view[:n])
    return {"wall_s": time.perf_counter() - started, "cpu_s": time.process_time() - cpu}


def median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="database rows (default 10M)")
    parser.add_argument("--work", type=Path, default=ROOT / "out" / "bench" / "sampler",
                        help="where the generated database is kept between runs")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (default 3; medians)")
    parser.add_argument("--baseline-src", type=Path, default=None,
                        help="also run `dlkit verify` from this source tree (PYTHONPATH)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    db = ensure_database(args.work, args.rows)
    files, total = database_files(db)
    warm(files)
    runs: dict[str, list[dict[str, float]]] = {"verify": [], "sha256sum": [], "hashlib_1_thread": []}
    if args.baseline_src is not None:
        runs["verify_baseline"] = []
    for _ in range(max(1, args.repeat)):
        runs["verify"].append(verify_run(db, ROOT / "src"))
        if args.baseline_src is not None:
            runs["verify_baseline"].append(verify_run(db, args.baseline_src))
        runs["sha256sum"].append(run_measured(["sha256sum", *map(str, files)]))
        runs["hashlib_1_thread"].append(hashlib_run(files))
    results: dict[str, object] = {
        "database": str(db), "rows": args.rows, "files": len(files), "bytes": total,
        "cores": len(os.sched_getaffinity(0)), "load_average": os.getloadavg(),
        "baseline_src": str(args.baseline_src) if args.baseline_src else None}
    for name, measured in runs.items():
        m = median(measured)
        m["gb_per_s"] = total / m["wall_s"] / 1e9
        m["walls_s"] = [round(r["wall_s"], 3) for r in measured]
        results[name] = m
    verify = results["verify"]
    results["verify_vs_sha256sum"] = verify["gb_per_s"] / results["sha256sum"]["gb_per_s"]
    results["verify_vs_hashlib_1_thread"] = (verify["gb_per_s"]
                                             / results["hashlib_1_thread"]["gb_per_s"])
    if "verify_baseline" in results:
        results["verify_vs_baseline"] = verify["gb_per_s"] / results["verify_baseline"]["gb_per_s"]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{db}: {len(files)} files, {total / 1e9:.3f} GB; {results['cores']} cores, load "
          f"average {' '.join(f'{x:.2f}' for x in results['load_average'])}; medians of "
          f"{max(1, args.repeat)} rounds (walls in brackets)")
    for name in runs:
        m = results[name]
        memory = (f", peak RSS {m['peak_rss_mb']:.0f} MB (anon {m['peak_anon_mb']:.0f} MB, "
                  f"file {m['peak_file_mb']:.0f} MB)" if "peak_rss_mb" in m else "")
        print(f"  {name:17s} {m['gb_per_s']:5.2f} GB/s  wall {m['wall_s']:.2f} s "
              f"{m['walls_s']}  cpu {m['cpu_s']:.2f} s{memory}")
    print(f"  verify / sha256sum {results['verify_vs_sha256sum']:.2f}x, verify / hashlib "
          f"1 thread {results['verify_vs_hashlib_1_thread']:.2f}x"
          + (f", verify / baseline {results['verify_vs_baseline']:.2f}x"
             if "verify_vs_baseline" in results else ""))


if __name__ == "__main__":
    main()
