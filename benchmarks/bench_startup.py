#!/usr/bin/env python3
"""How fast ``dlkit`` answers: whole processes, beside Python's own start-up.

Times, in one run and alternately (``--repeat`` rounds, medians quoted with the minimum and
the load average before and after, since a shared machine's speed swings from minute to
minute):

- ``python -c pass`` and ``python -c "import numpy, pyarrow"`` (the floor any command pays);
- ``dlkit --version`` and ``dlkit sample --help`` (goal: 0.15 s on an idle machine), help
  both as printed again from dlkit's help cache and as rendered with the cache off;
- ``dlkit verify`` of the bundled example database (goal: 0.6 s), preprocessed once into
  ``--work``;
- ``dlkit manifest`` of that database;
- ``dlkit sample`` of 10 steps of the example manifest to /dev/null (goal: 0.8 s).

Compiled kernels are loaded from the on-disk cache: one untimed round runs first to fill it.
``--baseline-src DIR`` also times the dlkit commands from another source tree (``PYTHONPATH=
DIR``, e.g. the code before a change) in the same rounds. ``--crossover ROWS ...`` also times
``dlkit verify`` of generated databases of those sizes with its kernels interpreted and
compiled: where interpreting stops paying is ``reader.INTERPRET_BELOW_BYTES``.

    python benchmarks/bench_startup.py [--repeat 11] [--work DIR] [--baseline-src DIR]
        [--crossover ROWS ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from dlkit.db.read.reader import INTERPRET_BELOW_BYTES  # noqa: E402

GOALS = {"dlkit --version": 0.15, "dlkit sample --help": 0.15, "dlkit verify": 0.6,
         "dlkit sample -n 10": 0.8}


def commands(db: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Each command's argv and the environment it adds. Help is timed twice: as printed again
    from dlkit's help cache (what a user sees from the second time on) and as rendered afresh
    with the cache off (the first time, or after an upgrade)."""
    dlkit = [sys.executable, "-m", "dlkit"]
    manifest = str(ROOT / "fixtures" / "example_manifest.json")
    return {
        "python -c pass": ([sys.executable, "-c", "pass"], {}),
        "python -c 'import numpy, pyarrow'": ([sys.executable, "-c", "import numpy, pyarrow"],
                                              {}),
        "dlkit --version": ([*dlkit, "--version"], {}),
        "dlkit sample --help": ([*dlkit, "sample", "--help"], {}),
        "dlkit sample --help (rendered)": ([*dlkit, "sample", "--help"],
                                           {"DLKIT_HELP_CACHE": "0"}),
        "dlkit verify": ([*dlkit, "verify", str(db), "--quiet"], {}),
        "dlkit manifest": ([*dlkit, "manifest", str(db), "-s", "1", "-g", "8", "--overwrite",
                            "-o", str(db.parent / "run.json")], {}),
        "dlkit sample -n 10": ([*dlkit, "sample", manifest, "-d", "example/train", "-n", "10"],
                               {}),
    }


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def ensure_database(work: Path, src: Path) -> Path:
    db = work / "example_db"
    if not (db / "manifest.json").exists():
        subprocess.run([sys.executable, "-m", "dlkit", "preprocess",
                        str(ROOT / "fixtures" / "example_db"), str(db), "--quiet"],
                       env={**os.environ, "PYTHONPATH": str(src)}, check=True)
    return db


# Runs `dlkit verify DB` with the size below which its kernels run interpreted set to argv[1].
_VERIFY_WITH_THRESHOLD = (
    "import sys; from dlkit.db.read import reader; reader.INTERPRET_BELOW_BYTES = int(sys.argv[1]); "
    "sys.argv = ['dlkit', 'verify', sys.argv[2], '--quiet']; from dlkit.cli import main; main()")


def crossover(work: Path, sizes: list[int], repeat: int, env: dict[str, str]) -> list[dict]:
    """``dlkit verify`` of generated databases of ``sizes`` rows, its kernels interpreted and
    compiled: where interpreting stops paying (``reader.INTERPRET_BELOW_BYTES``)."""
    from bench_sampler import ensure_database as generated

    found = []
    for rows in sizes:
        db = generated(work / "crossover", rows)
        size = sum(p.stat().st_size for p in db.rglob("*") if p.is_file())
        medians = {}
        for mode, threshold in (("interpreted", 1 << 62), ("compiled", 0)):
            argv = [sys.executable, "-c", _VERIFY_WITH_THRESHOLD, str(threshold), str(db)]
            timed(argv, env)
            medians[mode] = statistics.median(timed(argv, env) for _ in range(repeat))
        found.append({"rows": rows, "bytes": size, **{f"{m}_s": t for m, t in medians.items()}})
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=11)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "dlkit-startup")
    parser.add_argument("--baseline-src", type=Path, default=None)
    parser.add_argument("--crossover", type=int, nargs="*", default=[], metavar="ROWS",
                        help="also time verify of generated databases of these many rows, "
                             "kernels interpreted and compiled (e.g. 500 5000 20000)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    src = ROOT / "src"
    args.work.mkdir(parents=True, exist_ok=True)
    db = ensure_database(args.work, src)
    trees = {"this": src} | ({"baseline": args.baseline_src} if args.baseline_src else {})
    runs = [(tree, name, argv, {**os.environ, "PYTHONPATH": str(path), **extra})
            for tree, path in trees.items() for name, (argv, extra) in commands(db).items()
            if tree == "this" or name.startswith("dlkit")]
    for _, _, argv, env in runs:  # fills the kernel and help caches of each tree, untimed
        timed(argv, env)
    load_before = os.getloadavg()
    times: dict[tuple[str, str], list[float]] = {(t, n): [] for t, n, _, _ in runs}
    for _ in range(args.repeat):
        for tree, name, argv, env in runs:
            times[tree, name].append(timed(argv, env))
    load_after = os.getloadavg()
    rows = [{"tree": tree, "command": name, "median_s": statistics.median(t),
             "min_s": min(t), "goal_s": GOALS.get(name)} for (tree, name), t in times.items()]
    sizes = crossover(args.work, args.crossover, args.repeat,
                      {**os.environ, "PYTHONPATH": str(src)})
    if args.json:
        print(json.dumps({"cores": os.cpu_count(), "load_before": load_before,
                          "load_after": load_after, "repeat": args.repeat, "rows": rows,
                          "crossover": sizes}, indent=2))
        return
    print(f"{os.cpu_count()} cores; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after; median and minimum of {args.repeat} runs")
    print(f"{'tree':<9} {'command':<36} {'median':>8} {'min':>8} {'goal':>6}")
    for row in rows:
        goal = f"{row['goal_s']:.2f}" if row["goal_s"] else ""
        print(f"{row['tree']:<9} {row['command']:<36} {row['median_s']:>7.3f}s "
              f"{row['min_s']:>7.3f}s {goal:>6}")
    if sizes:
        print(f"\ndlkit verify by database size (median of {args.repeat}; kernels interpreted "
              f"below {INTERPRET_BELOW_BYTES / 2**20:g} MiB)")
        print(f"{'rows':>8} {'MiB':>8} {'interpreted':>12} {'compiled':>9}")
        for size in sizes:
            print(f"{size['rows']:>8} {size['bytes'] / 2**20:>8.2f} "
                  f"{size['interpreted_s']:>11.2f}s {size['compiled_s']:>8.2f}s")


if __name__ == "__main__":
    main()
