#!/usr/bin/env python3
"""What a mixture of many small databases costs: setup, memory, files, shared tables, speed.

Generates (once, cached in ``--work``) a collection of ``max(--sizes)`` small relational
sources of one schema family whose members differ a bit: three tables (a parent of
"people", a parent of "things", a child of "events" with two foreign keys, a categorical,
a numeric and, in two of three, a text column), the tables and columns named differently
from database to database, some with an extra column, each with one or two tasks, and from
``--min-rows`` to ``--max-rows`` rows. ``dlkit.db.write.collection.preprocess_many`` builds
them (timed). Then, each in a fresh subprocess (so memory and files are those of one
mixture, nothing left over from another), after a warm-up on a separate small database (the
compiled kernels loaded, so what is left is the mixture's own cost):

1. **setup** of ``dlkit.Sampler([first N databases])`` for N in ``--sizes`` (default 10,
   100, 200): wall time of the constructor; resident memory it added (``VmRSS``) and its
   peak (``VmHWM``, reset before through ``/proc/self/clear_refs``); file descriptors
   (``/proc/self/fd``) and memory maps (lines of ``/proc/self/maps``) it added; the first
   train batch's time; the same counts after ``shutdown()`` and after the sampler is
   dropped; the same for one database of all their rows (``1+``), and with ``--baseline-src``
   for the largest mixture (or ``--baseline-sizes``) with another dlkit (``N*``, e.g. the
   code before a change);
2. **shared tables**: ``column_embeddings()`` + ``categorical_embeddings()`` (the databases'
   tables one after another) and ``dlkit.torch.upload_tables`` when torch is installed;
3. **batches/s** (train, B=32, S=256, 1 and 2 producer threads, the consumer only pulls)
   of the mixture of the largest N against one database of the same schema family holding
   the same total rows, and their ratio.

How the costs grow (figures of one run on the build VM, 2 shared cores; see
``benchmarks/results/mixture_*.md``): setup time, memory and maps grow linearly with the
number of databases, each paying a constant (its files opened and checked, its tasks
hash-split, its run manifest written, its graph's edge records built) plus a part linear in
its rows and seeds. For databases of a few thousand rows the constant dominates: about 3-4
ms and 0.6 MiB a database, so 200 open in under a second, in about 110 MiB (one database of
the same 331,056 rows: 0.15 s, 87 MiB, so about 0.1 MiB of the 0.6 is per database, the
rest per row). Every file the reader maps costs one memory map and, on Python before 3.13
(whose ``mmap`` keeps a duplicate of the descriptor), one file descriptor, held until the
sampler is dropped; the reader reads files under ``dlkit.db.read.mapped.READ_BELOW_BYTES``
(1 MiB) instead, so a small database holds none (before: 34 a database, 6,804 for 200, past
a ``ulimit -n`` of 1024 from 30 databases on) and a large one one per file of 1 MiB or more
(12 for the database of 331,056 rows).
The shared tables grow with the databases' columns and categories, not their rows: a
concatenation, well under a millisecond. A mixture's batch costs what its database's batch
costs, so the mixture's batches/s and those of one database of the same total size should
be close (a small database's sequences may be shorter: cells per batch are printed beside).

Timings on a shared 2-core machine are noisy: run it alone for figures you quote.

    python benchmarks/bench_mixture.py [--sizes 10 100 200] [--batches 200] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]

B, S, R, WIDTH = 32, 256, 64, 8
GENERATOR_VERSION = "v1"  # part of the cached inputs' directory name: bump on any change
T0_US = 1_609_459_200_000_000  # 2021-01-01
DAY_US = 86_400_000_000
# The family's names, varied by database: (people, things, events) tables and their columns.
PEOPLE = ("users", "customers", "members", "patients")
THINGS = ("items", "products", "venues")
EVENTS = ("events", "orders", "visits", "sessions", "reviews")
WORDS = ("calm", "bright", "late", "early", "noisy", "quiet", "fresh", "stale", "odd", "even")


# --- inputs ------------------------------------------------------------------------------


def source_rows(index: int, min_rows: int, max_rows: int) -> int:
    """The rows of source ``index``: spread over [min_rows, max_rows] by a fixed stride."""
    span = max_rows - min_rows
    return min_rows + (index * 7919) % (span + 1)


def write_source(out: Path, index: int, rows: int) -> None:
    """Source ``index`` of the family with ``rows`` rows in all: Parquet and ``dlkit.toml``.
    A pure function of (index, rows); ``dlkit.toml`` is written last (marks it complete)."""
    rng = np.random.default_rng(1000 + index)
    people, things = PEOPLE[index % len(PEOPLE)], THINGS[index % len(THINGS)]
    events = EVENTS[index % len(EVENTS)]
    n_people, n_things = max(rows // 8, 4), max(rows // 16, 4)
    n_events = max(rows - n_people - n_things, 8)
    with_text, extra = index % 3 != 2, index % 2 == 0
    out.mkdir(parents=True, exist_ok=True)
    joined = T0_US + rng.integers(0, 365 * DAY_US, n_people)
    person = {f"{people[:-1]}_id": np.arange(n_people, dtype=np.int64),
              "joined_at": pa.array(joined.astype("datetime64[us]"), pa.timestamp("us", "UTC")),
              f"region{index % 5}": pa.array(rng.choice(["north", "south", "east", "west"],
                                                        n_people)),
              "age": rng.integers(18, 90, n_people).astype(np.float64)}
    if extra:
        person["score"] = rng.normal(0.0, 1.0, n_people)
    pq.write_table(pa.table(person), out / f"{people}.parquet")
    thing = {f"{things[:-1]}_id": np.arange(n_things, dtype=np.int64),
             f"kind{index % 4}": pa.array(rng.choice(["a", "b", "c"], n_things)),
             "price": rng.gamma(2.0, 10.0, n_things)}
    if with_text:
        thing["title"] = pa.array([f"{things[:-1]} {i % 50} {WORDS[i % len(WORDS)]}"
                                   for i in range(n_things)])
    pq.write_table(pa.table(thing), out / f"{things}.parquet")
    who = rng.integers(0, n_people, n_events)
    when = joined[who] + rng.integers(0, 120 * DAY_US, n_events)
    event = {f"{events[:-1]}_id": np.arange(n_events, dtype=np.int64),
             f"{people[:-1]}_id": who, f"{things[:-1]}_id": rng.integers(0, n_things, n_events),
             "at": pa.array(when.astype("datetime64[us]"), pa.timestamp("us", "UTC")),
             "amount": rng.gamma(2.0, 20.0, n_events),
             "status": pa.array(rng.choice(["done", "open", "lost"], n_events))}
    if with_text:
        event["note"] = pa.array(rng.choice(WORDS, n_events))
    pq.write_table(pa.table(event), out / f"{events}.parquet")
    text_types = 'title = "text"\n' if with_text else ""
    note_type = 'note = "text"\n' if with_text else ""
    tasks = f'[tasks.{events}_status]\ntable = "{events}"\ntarget = "status"\n'
    if index % 2 == 1:
        tasks += f'\n[tasks.{events}_amount]\ntable = "{events}"\ntarget = "amount"\n'
    (out / "dlkit.toml").write_text(f"""name = "mix-{index:04d}"

[tables.{people}]
primary_key = "{people[:-1]}_id"
time_column = "joined_at"
[tables.{people}.types]
region{index % 5} = "categorical"

[tables.{things}]
primary_key = "{things[:-1]}_id"
[tables.{things}.types]
kind{index % 4} = "categorical"
{text_types}
[tables.{events}]
primary_key = "{events[:-1]}_id"
time_column = "at"
foreign_keys = {{ {people[:-1]}_id = "{people}", {things[:-1]}_id = "{things}" }}
[tables.{events}.types]
status = "categorical"
{note_type}
{tasks}""")


def inputs_dir(work: Path, count: int, min_rows: int, max_rows: int) -> Path:
    return work / f"mixture_{GENERATOR_VERSION}_{count}_{min_rows}-{max_rows}"


def ensure_collection(work: Path, count: int, min_rows: int, max_rows: int) -> dict[str, Any]:
    """The ``count`` sources and their databases (built by ``preprocess_many``, timed), the
    single database of their total rows, and a small warm-up database; built once."""
    from dlkit.db import preprocess
    from dlkit.db.write.collection import Outcome, preprocess_many

    root = inputs_dir(work, count, min_rows, max_rows)
    sources, dbs = root / "sources", root / "dbs"
    rows = [source_rows(i, min_rows, max_rows) for i in range(count)]
    for i, n in enumerate(rows):
        if not (sources / f"db{i:04d}" / "dlkit.toml").exists():
            write_source(sources / f"db{i:04d}", i, n)
    info_file = root / "build.json"
    info = json.loads(info_file.read_text()) if info_file.exists() else {}
    if not all((dbs / f"db{i:04d}" / "manifest.json").exists() for i in range(count)):
        print(f"preprocessing {count} databases into {dbs} ...", file=sys.stderr, flush=True)
        report = preprocess_many(sources, dbs, skip_existing=True, fsync=False)
        if report.failures:
            raise SystemExit(f"{report.failures[0].name}: {report.failures[0].error}")
        built = [r.seconds for r in report.results if r.outcome is Outcome.BUILT]
        if len(built) == count:  # a complete, timed build (not a resumed one)
            info["preprocess_many_s"] = report.seconds
            info["per_database_s"] = sorted(built)[len(built) // 2]
    for name, n, index in (("single", sum(rows), 1), ("warmup", min_rows, 3)):
        if not (root / name / "manifest.json").exists():
            write_source(root / f"{name}-source", index, n)
            started = time.perf_counter()
            preprocess(root / f"{name}-source", root / name, fsync=False, overwrite=True)
            info[f"{name}_preprocess_s"] = time.perf_counter() - started
    info.update(count=count, rows=rows, total_rows=sum(rows))
    info_file.write_text(json.dumps(info))
    return {"root": str(root), **info}


# --- measurements (each in its own process) ---------------------------------------------


def _status(field: str) -> int:
    """A ``/proc/self/status`` field in bytes (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def memory_maps() -> int:
    with open("/proc/self/maps") as maps:
        return sum(1 for _ in maps)


def _warm_up(root: Path) -> None:
    """Load the compiled kernels on another database, then drop it."""
    import dlkit

    with dlkit.Sampler([root / "warmup"], batch_size=4, sequence_length=S, max_rows=R,
                       bfs_child_width=WIDTH, num_prefetch=0) as sampler:
        sampler.next_train_batch()
        sampler.column_embeddings()
    gc.collect()


def measure_setup(root: Path, n: int) -> dict[str, Any]:
    import dlkit

    _warm_up(root)
    try:
        import dlkit.torch as dlkit_torch
    except ImportError:
        dlkit_torch = None
    # n = 0: the single database of every database's rows (no mixture), for comparison
    paths = [root / "dbs" / f"db{i:04d}" for i in range(n)] if n else root / "single"
    fds0, maps0, rss0 = open_fds(), memory_maps(), _status("VmRSS")
    peak_reset = _reset_peak()
    hwm0 = _status("VmHWM") if peak_reset else rss0
    started = time.perf_counter()
    sampler = dlkit.Sampler(paths, batch_size=B, sequence_length=S, max_rows=R,
                            bfs_child_width=WIDTH, num_prefetch=0)
    out: dict[str, Any] = {"n": max(n, 1), "setup_s": time.perf_counter() - started,
                           "components": len(sampler.components),
                           "trained": sum(c.weight > 0 for c in sampler.components),
                           "memory_path": sampler.builders[0].memory_path,
                           "fds": open_fds() - fds0, "maps": memory_maps() - maps0,
                           "rss_mb": (_status("VmRSS") - rss0) / 2**20,
                           "peak_mb": (_status("VmHWM") - hwm0) / 2**20,
                           "peak_reset": peak_reset}
    started = time.perf_counter()
    sampler.next_train_batch()
    out["first_batch_s"] = time.perf_counter() - started
    started = time.perf_counter()
    columns, categories = sampler.column_embeddings(), sampler.categorical_embeddings()
    out["tables_s"] = time.perf_counter() - started
    out["table_rows"] = [int(columns.shape[0]), int(categories.shape[0])]
    out["tables_kb"] = (columns.nbytes + categories.nbytes) / 1024
    if dlkit_torch is not None:
        started = time.perf_counter()
        dlkit_torch.upload_tables(sampler)
        out["upload_s"] = time.perf_counter() - started
    sampler.shutdown()
    out["fds_after_shutdown"], out["maps_after_shutdown"] = open_fds() - fds0, memory_maps() - maps0
    del sampler, columns, categories
    gc.collect()
    out["fds_after_drop"], out["maps_after_drop"] = open_fds() - fds0, memory_maps() - maps0
    return out


def measure_rate(root: Path, n: int, threads: int, batches: int) -> dict[str, Any]:
    import dlkit

    _warm_up(root)
    source: list[Path] | Path = ([root / "dbs" / f"db{i:04d}" for i in range(n)] if n
                                 else root / "single")
    with dlkit.Sampler(source, batch_size=B, sequence_length=S, max_rows=R,
                       bfs_child_width=WIDTH, num_threads=threads,
                       num_prefetch=2 * threads, seed=1) as sampler:
        for _ in range(max(10, batches // 10)):
            sampler.next_train_batch()
        cells = 0
        started = time.perf_counter()
        for _ in range(batches):
            cells += int((sampler.next_train_batch()["is_padding"] == 0).sum())
        elapsed = time.perf_counter() - started
    return {"n": n, "threads": threads, "batches_per_s": batches / elapsed,
            "cells_per_batch": cells / batches}




def in_subprocess(*argv: str, src: Path = ROOT / "src", may_fail: bool = False
                  ) -> dict[str, Any]:
    """The child's result; with ``may_fail``, a failed child's last error line (another
    dlkit may run out of file descriptors) as ``{"error": ...}``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(src), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    done = subprocess.run([sys.executable, __file__, "--child", *argv], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        if may_fail:
            lines = done.stderr.strip().splitlines() or ["no message"]
            return {"error": lines[-1]}
        raise SystemExit(f"child {' '.join(argv)} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def child(argv: list[str]) -> None:
    kind, root, n = argv[0], Path(argv[1]), int(argv[2])
    if kind == "setup":
        result = measure_setup(root, n)
    else:
        result = measure_rate(root, n, int(argv[3]), int(argv[4]))
    print(json.dumps(result))


# --- report ------------------------------------------------------------------------------


def print_table(results: dict[str, Any]) -> None:
    build = results["build"]
    print(f"collection: {build['count']} databases, {min(build['rows']):,}-"
          f"{max(build['rows']):,} rows each, {build['total_rows']:,} in all; "
          f"B={B} S={S} R={R} width={WIDTH}; Python {results['python']}, ulimit -n "
          f"{results['fd_limit']}; load {results['load_before']} -> {results['load_after']}")
    if "preprocess_many_s" in build:
        print(f"preprocess_many: {build['preprocess_many_s']:.1f} s "
              f"({build['per_database_s']:.2f} s median per database); the single database "
              f"of {build['total_rows']:,} rows: {build.get('single_preprocess_s', 0):.1f} s")
    setups = results["setup"]
    print()
    print(f"{'N':>5} {'setup s':>8} {'ms/db':>6} {'first batch s':>13} {'RSS MB':>7} "
          f"{'peak MB':>8} {'fds':>5} {'maps':>6} {'maps/db':>7} {'tables ms':>9} "
          f"{'upload ms':>9} {'fds/maps shut':>13} {'dropped':>8}")
    baseline = results.get("baseline_setup", [])
    rows = [(str(s["n"]), s) for s in setups] + [("1+", results["single_setup"])] + [
        (f"{b['n']}*", b) for b in baseline]
    for label, s in rows:
        if "error" in s:
            print(f"{label:>5} failed: {s['error']}")
            continue
        upload = f"{1e3 * s['upload_s']:9.1f}" if "upload_s" in s else f"{'-':>9}"
        print(f"{label:>5} {s['setup_s']:8.2f} {1e3 * s['setup_s'] / s['n']:6.1f} "
              f"{s['first_batch_s']:13.3f} {s['rss_mb']:7.1f} {s['peak_mb']:8.1f} "
              f"{s['fds']:>5} {s['maps']:>6} {s['maps'] / s['n']:7.1f} "
              f"{1e3 * s['tables_s']:9.2f} {upload} "
              f"{s['fds_after_shutdown']:>6}/{s['maps_after_shutdown']:<6} "
              f"{s['fds_after_drop']:>3}/{s['maps_after_drop']:<4}")
    print(f"  + one database of all {build['total_rows']:,} rows (not a mixture)")
    if baseline:
        print(f"  * with the dlkit of {results['baseline_src']}")
    first, last = setups[0], setups[-1]
    if last["n"] > first["n"]:
        grow = (last["n"] / first["n"])
        print(f"{first['n']} -> {last['n']} databases ({grow:.0f}x): setup "
              f"{last['setup_s'] / first['setup_s']:.1f}x, RSS "
              f"{last['rss_mb'] / max(first['rss_mb'], 1e-9):.1f}x, maps "
              f"{last['maps'] / max(first['maps'], 1):.1f}x; "
              f"memory path {last['memory_path']}; shared tables {last['table_rows'][0]} column "
              f"+ {last['table_rows'][1]} category rows ({last['tables_kb']:.0f} KiB)")
    print()
    rates = results["rates"]
    print(f"batches/s (median of {len(rates['single_1']['runs'])}), train, the "
          f"{results['rate_n']} databases against one database of their "
          f"{results['rate_rows']:,} rows:")
    for threads in (1, 2):
        mix, one = rates[f"mixture_{threads}"], rates[f"single_{threads}"]
        spread = "; ".join(f"{name} runs " + ", ".join(f"{r:.0f}" for r in run["runs"])
                           for name, run in (("mixture", mix), ("single", one)))
        print(f"  {threads} thread{'s' if threads > 1 else ' '}: mixture "
              f"{mix['batches_per_s']:7.1f} ({mix['cells_per_batch']:.0f} cells/batch)   single "
              f"{one['batches_per_s']:7.1f} ({one['cells_per_batch']:.0f} cells/batch)   "
              f"mixture/single {mix['batches_per_s'] / one['batches_per_s']:.2f}x   ({spread})")
    print(f"  control: a pure nogil kernel scales {results['control_2_thread_speedup']:.2f}x on 2 "
          "threads on this machine right now (2 on an idle 2-core machine; 1 when no core is "
          "free, and then no sampler can scale)")


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median throughput (the upper middle one of an even count)."""
    return sorted(runs, key=lambda r: r["batches_per_s"])[len(runs) // 2]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 200],
                        help="mixture sizes to set up (default 10 100 200)")
    parser.add_argument("--min-rows", type=int, default=300, help="rows of the smallest database")
    parser.add_argument("--max-rows", type=int, default=3000, help="rows of the largest database")
    parser.add_argument("--batches", type=int, default=200, help="timed batches per rate run")
    parser.add_argument("--work", type=Path, default=ROOT / "out" / "bench" / "mixture",
                        help="where the generated sources and databases are kept between runs")
    parser.add_argument("--repeat", type=int, default=3,
                        help="rate runs of each kind, alternated (default 3; medians quoted)")
    parser.add_argument("--baseline-src", type=Path, default=None,
                        help="also set up the largest mixture with the dlkit of another source "
                             "tree (PYTHONPATH=DIR, e.g. the code before a change)")
    parser.add_argument("--baseline-sizes", type=int, nargs="+", default=None,
                        help="mixture sizes set up with --baseline-src (default: the largest)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    sizes = sorted(set(args.sizes))
    results: dict[str, Any] = {"load_before": load(), "cpus": os.cpu_count(),
                               "python": sys.version.split()[0],
                               "fd_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}
    build = ensure_collection(args.work, sizes[-1], args.min_rows, args.max_rows)
    results["build"] = build
    root = build["root"]
    results["setup"] = [in_subprocess("setup", root, str(n)) for n in sizes]
    results["single_setup"] = in_subprocess("setup", root, "0")
    if args.baseline_src is not None:
        results["baseline_src"] = str(args.baseline_src)
        results["baseline_setup"] = [
            {"n": n, **in_subprocess("setup", root, str(n), src=args.baseline_src.resolve(),
                                     may_fail=True)}
            for n in sorted(set(args.baseline_sizes or sizes[-1:]))]
    # The single database holds every database's rows; the mixture is all of them too.
    results["rate_n"], results["rate_rows"] = sizes[-1], build["total_rows"]
    # A shared VM's speed swings from minute to minute: alternate the runs, quote medians.
    runs: dict[str, list[dict[str, Any]]] = {}
    for _ in range(max(1, args.repeat)):
        for threads in (1, 2):
            for name, n in (("mixture", sizes[-1]), ("single", 0)):
                runs.setdefault(f"{name}_{threads}", []).append(in_subprocess(
                    "rate", root, str(n), str(threads), str(args.batches)))
    results["rates"] = {key: {**median_run(found), "runs": [r["batches_per_s"] for r in found]}
                        for key, found in runs.items()}
    from dlkit.bench.workloads import machine_parallelism

    results["control_2_thread_speedup"] = machine_parallelism()
    results["load_after"] = load()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print_table(results)


if __name__ == "__main__":
    main()
