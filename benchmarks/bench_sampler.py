#!/usr/bin/env python3
"""Relational sampler throughput on a generated database of >= 10 million rows.

Measures, in one run:

1. batches/s of ``dlkit.Sampler`` (B=32, S=1024, R=256, child width 16) with 1 and 2 producer
   threads (the consumer only pulls), after a warm-up, on the tasks whose sequences fill all
   S cells (review_rating, order_status), ``--repeat`` times alternately, medians quoted (a
   shared VM's speed swings from minute to minute); with 1 thread again reading the memory map instead
   of the huge-page copies (``huge_pages=False``); then with all three tasks (user_premium
   seeds are observed at sign-up, before any order or review, so their sequences hold one
   row);
2. a control: how well a pure ``nogil`` CPU kernel scales to 2 threads at that moment (other
   work on a shared machine takes cores away; then no sampler can scale either);
3. the same semantics in plain Python (``tests/naive_sampler.py``, the reference the tests
   compare the kernels with) on one sequence of each of the first batches, checked equal to
   the kernels' output, and the ratio;
4. the consumer's wait per batch when it spends longer on each batch (a calibrated nogil
   CPU kernel of 1.3x the measured per-batch production time of one thread, standing in for
   a training step) than the producer: it should not wait.

The database (Parquet -> ``dlkit.db.preprocess``) is generated once into ``--work`` and reused.
Timings on a shared 2-core machine are noisy: run it alone for figures you quote.

    python benchmarks/bench_sampler.py [--rows 10_000_000] [--batches 300] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dlkit.bench.workloads import calibrate_burn, machine_parallelism  # noqa: E402
from dlkit.core.gather import burn  # noqa: E402
from dlkit.db import open_database, preprocess  # noqa: E402
from dlkit.db.format import FORMAT_VERSION  # noqa: E402
from dlkit.sampler import Sampler  # noqa: E402
from tests import naive_sampler as naive  # noqa: E402

B, S, R, WIDTH = 32, 1024, 256, 16
SCHEMA = """\
format_version = 1
name = "bench-shop"

[tables.users]
primary_key = "user_id"
time_column = "signup_time"
[tables.users.types]
country = "categorical"
bio = "text"

[tables.products]
primary_key = "product_id"
[tables.products.types]
title = "text"
category = "categorical"

[tables.orders]
primary_key = "order_id"
time_column = "ordered_at"
foreign_keys = { user_id = "users", product_id = "products" }
[tables.orders.types]
status = "categorical"

[tables.reviews]
primary_key = "review_id"
time_column = "created_at"
foreign_keys = { user_id = "users", product_id = "products" }
[tables.reviews.types]
review_text = "text"

[tasks.review_rating]
table = "reviews"
target = "rating"

[tasks.order_status]
table = "orders"
target = "status"

[tasks.user_premium]
table = "users"
target = "is_premium"
"""


def _times(rng: np.random.Generator, n: int, start: np.ndarray | int, span_s: int) -> pa.Array:
    micros = np.asarray(start, dtype=np.int64) + rng.integers(0, span_s * 10**6, n)
    return pa.array(micros.astype("datetime64[us]"), type=pa.timestamp("us", tz="UTC"))


def generate_parquet(out: Path, rows: int, seed: int = 7) -> None:
    """users : products : orders : reviews = 10 : 0.5 : 50 : 39.5 (per 100 rows)."""
    rng = np.random.default_rng(seed)
    nu, np_ = rows // 10, max(rows // 200, 10)
    no = rows // 2
    nr = rows - nu - np_ - no
    out.mkdir(parents=True, exist_ok=True)
    t0 = 1_577_836_800 * 10**6  # 2020-01-01
    signup = t0 + rng.integers(0, 3 * 365 * 86400 * 10**6, nu)
    bios = np.array([f"bio number {i}: likes {w}" for i, w in
                     zip(range(500), np.resize(["tea", "books", "games", "hiking"], 500))])
    age = rng.integers(18, 90, nu).astype(float)
    age[rng.random(nu) < 0.1] = np.nan
    pq.write_table(pa.table({
        "user_id": np.arange(nu, dtype=np.int64),
        "signup_time": pa.array(signup.astype("datetime64[us]"), type=pa.timestamp("us", tz="UTC")),
        "country": pa.array(rng.choice(["DE", "FR", "US", "JP", "BR", "IN"], nu)),
        "age": pa.array(age, from_pandas=True),
        "is_premium": rng.random(nu) < 0.2,
        "bio": pa.array(np.where(rng.random(nu) < 0.3, None, bios[rng.integers(0, 500, nu)])),
    }), out / "users.parquet")
    titles = np.array([f"Product {i} {c}" for i, c in
                       zip(range(2000), np.resize(["Kettle", "Novel", "Hose", "Vinyl"], 2000))])
    pq.write_table(pa.table({
        "product_id": np.arange(np_, dtype=np.int64),
        "title": pa.array(titles[rng.integers(0, 2000, np_)]),
        "category": pa.array(rng.choice(["books", "games", "garden", "kitchen"], np_)),
        "price": rng.gamma(2.0, 20.0, np_),
        "launched": _times(rng, np_, t0 - 365 * 86400 * 10**6, 365 * 86400),
    }), out / "products.parquet")
    for name, n in (("orders", no), ("reviews", nr)):
        user = rng.integers(0, nu, n)
        when = signup[user] + rng.integers(0, 400 * 86400 * 10**6, n)
        columns = {f"{name[:-1]}_id": np.arange(n, dtype=np.int64), "user_id": user,
                   "product_id": rng.integers(0, np_, n),
                   "ordered_at" if name == "orders" else "created_at":
                       pa.array(when.astype("datetime64[us]"), type=pa.timestamp("us", tz="UTC"))}
        if name == "orders":
            columns["quantity"] = rng.integers(1, 6, n)
            columns["status"] = pa.array(rng.choice(["delivered", "shipped", "returned"], n))
        else:
            columns["rating"] = rng.integers(1, 6, n).astype(float)
            columns["review_text"] = pa.array(np.array([f"review text {i}" for i in range(5000)])[
                rng.integers(0, 5000, n)])
            columns["helpful"] = rng.random(n) < 0.5
        pq.write_table(pa.table(columns), out / f"{name}.parquet")
    (out / "dlkit.toml").write_text(SCHEMA)  # last: marks the Parquet complete


def ensure_database(work: Path, rows: int) -> Path:
    db = work / f"db_{rows}"
    if (db / "manifest.json").exists():
        manifest = json.loads((db / "manifest.json").read_text())
        if manifest.get("format_version") == FORMAT_VERSION:
            return db  # a database of an older format is built again from its Parquet
    source = work / f"parquet_{rows}"
    if not (source / "dlkit.toml").exists():
        print(f"generating {rows:,} rows of Parquet in {source} ...", flush=True)
        generate_parquet(source, rows)
    print(f"preprocessing into {db} ...", flush=True)
    started = time.perf_counter()
    preprocess(source, db, overwrite=True, fsync=False)
    print(f"  done in {time.perf_counter() - started:.1f} s", flush=True)
    return db


# Users observed at sign-up see no order or review yet, so user_premium sequences hold one row;
# FULL leaves that task out so every sequence fills its S = 1024 cells (the hard case).
FULL = {"review_rating": 1.0, "order_status": 1.0, "user_premium": 0.0}


def sampler_rate(db: Path, threads: int, batches: int, weights: dict[str, float] | None = FULL,
                 warmup: int = 20, huge_pages: bool | None = None) -> dict[str, float]:
    with Sampler(db, 0, 1, seed=1, batch_size=B, sequence_length=S, max_rows=R,
                 bfs_child_width=WIDTH, num_threads=threads, num_prefetch=2 * threads,
                 task_weights=weights, huge_pages=huge_pages) as s:
        copied = bool(s.config.huge_pages)
        for _ in range(warmup):
            s.next_train_batch()
        cells = 0
        started = time.perf_counter()
        for _ in range(batches):
            cells += int((s.next_train_batch()["is_padding"] == 0).sum())
        elapsed = time.perf_counter() - started
    return {"batches_per_s": batches / elapsed, "ms_per_batch": 1e3 * elapsed / batches,
            "cells_per_batch": cells / batches, "huge_pages": copied}


def consumer_waits(db: Path, threads: int, consume_s: float, batches: int,
                   prefetch: int) -> dict[str, float]:
    """Pull with a busy consumer; report how long each pull blocked (after the queue filled)."""
    waits = []
    iterations = int(calibrate_burn() * consume_s * 1e3)
    with Sampler(db, 0, 1, seed=2, batch_size=B, sequence_length=S, max_rows=R,
                 bfs_child_width=WIDTH, num_threads=threads, num_prefetch=prefetch,
                 task_weights=FULL) as s:
        s.next_train_batch()
        time.sleep(prefetch * consume_s)  # let the producers fill the queue once
        for _ in range(batches):
            t = time.perf_counter()
            s.next_train_batch()
            waits.append(time.perf_counter() - t)
            burn(iterations, 1)  # the consumer's own work, GIL released like a training step
    waits_ms = sorted(1e3 * w for w in waits)
    return {"consume_ms": 1e3 * consume_s, "prefetch": prefetch,
            "wait_p50_ms": statistics.median(waits_ms),
            "wait_p99_ms": waits_ms[int(0.99 * (len(waits_ms) - 1))], "wait_max_ms": waits_ms[-1]}




def naive_rate(db_path: Path, batches: int) -> dict[str, float]:
    """The plain-Python reference on one sequence of each of the first ``batches`` train
    batches (the same task mix as the timed stream), checked equal to the kernels' output."""
    elapsed, sequences = 0.0, 0
    with Sampler(db_path, 0, 1, seed=1, batch_size=B, sequence_length=S, max_rows=R,
                 bfs_child_width=WIDTH, num_prefetch=0, task_weights=FULL) as s:
        db = s._db  # noqa: SLF001 - the same open database
        for _ in range(batches):
            built = s.next_built_batch("train")
            task = db.task(built.task)
            started = time.perf_counter()
            visits, cells = naive.sequence(db, task, int(built.seed_indices[0]), seed=1,
                                           epoch=built.epoch, width=WIDTH, S=S, R=R)
            naive.fk_adjacency(db, visits)
            naive.permutations(db, visits, cells, S)
            elapsed += time.perf_counter() - started
            sequences += 1
            kernel_rows = built.visited_rows[0, :built.visited_counts[0]].tolist()
            assert [v[0] for v in visits] == kernel_rows
            assert len(cells) == built.cell_counts[0]
    per_batch = elapsed / sequences * B
    return {"sequences": sequences, "s_per_batch": per_batch, "batches_per_s": 1 / per_batch}


def median_run(runs: list[dict[str, float]]) -> dict[str, float]:
    """The run of median throughput (the upper middle one of an even count)."""
    return sorted(runs, key=lambda r: r["batches_per_s"])[len(runs) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="database rows (default 10M)")
    parser.add_argument("--batches", type=int, default=300, help="timed batches per run")
    parser.add_argument("--naive-batches", type=int, default=12,
                        help="batches whose first sequence the plain-Python reference builds")
    parser.add_argument("--work", type=Path, default=ROOT / "out" / "bench" / "sampler",
                        help="where the generated database is kept between runs")
    parser.add_argument("--prefetch", type=int, default=8,
                        help="num_prefetch of the busy-consumer run (default 8)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="1- and 2-thread runs, alternated (default 3; the median is quoted)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    db = ensure_database(args.work, args.rows)
    with open_database(db) as opened:
        size = {"rows": opened.num_rows, "edges": opened.num_edges}
    results: dict[str, object] = {"database": str(db), **size, "B": B, "S": S, "R": R,
                                  "child_width": WIDTH, "cpus": os.cpu_count()}
    results["control_2_thread_speedup"] = machine_parallelism()
    # A shared VM's speed swings from minute to minute: alternate 1- and 2-thread runs and
    # quote medians (the speed-up as the median of same-moment pairs).
    ones, twos = [], []
    for _ in range(max(1, args.repeat)):
        ones.append(sampler_rate(db, 1, args.batches))
        twos.append(sampler_rate(db, 2, args.batches))
    one, two = median_run(ones), median_run(twos)
    mapped = sampler_rate(db, 1, args.batches, huge_pages=False)
    mixed = sampler_rate(db, 1, args.batches, weights=None)
    results["threads_1"], results["threads_2"], results["all_tasks_1_thread"] = one, two, mixed
    results["threads_1_runs"] = [r["batches_per_s"] for r in ones]
    results["threads_2_runs"] = [r["batches_per_s"] for r in twos]
    results["threads_1_memory_map"] = mapped
    results["speedup_2_threads"] = statistics.median(
        t["batches_per_s"] / o["batches_per_s"] for o, t in zip(ones, twos))
    results["naive"] = naive_rate(db, args.naive_batches)
    results["speedup_vs_naive"] = one["batches_per_s"] / results["naive"]["batches_per_s"]
    consume = 1.3 * one["ms_per_batch"] / 1e3
    results["consumer"] = consumer_waits(db, 1, consume, min(args.batches, 200), args.prefetch)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"database: {size['rows']:,} rows, {size['edges']:,} edges; B={B} S={S} R={R} "
          f"width={WIDTH}")
    print("full sequences (review_rating + order_status):")
    runs_1 = ", ".join(f"{r:.1f}" for r in results["threads_1_runs"])
    runs_2 = ", ".join(f"{r:.1f}" for r in results["threads_2_runs"])
    print(f"1 thread : {one['batches_per_s']:8.1f} batches/s median ({one['ms_per_batch']:.2f} "
          f"ms/batch, {one['cells_per_batch']:.0f} cells/batch, huge-page copies "
          f"{'on' if one['huge_pages'] else 'off'}; runs {runs_1})   target >= 100")
    print(f"2 threads: {two['batches_per_s']:8.1f} batches/s median (runs {runs_2}; "
          f"{results['speedup_2_threads']:.2f}x one thread, median of same-moment pairs)   "
          f"target >= 1.6x; control: a pure nogil kernel scales "
          f"{results['control_2_thread_speedup']:.2f}x on this machine right now")
    print(f"1 thread reading the memory map (huge_pages=False): "
          f"{mapped['batches_per_s']:.1f} batches/s ({mapped['ms_per_batch']:.2f} ms/batch)")
    print(f"all three tasks, 1 thread: {mixed['batches_per_s']:.1f} batches/s "
          f"({mixed['cells_per_batch']:.0f} cells/batch: user_premium sequences are one row)")
    naive_result = results["naive"]
    print(f"plain Python: {naive_result['batches_per_s']:.3f} batches/s "
          f"({naive_result['s_per_batch']:.1f} s/batch, {naive_result['sequences']} sequences "
          f"timed, equal to the kernels)  -> kernels {results['speedup_vs_naive']:.0f}x faster")
    c = results["consumer"]
    print(f"consumer busy {c['consume_ms']:.2f} ms/batch (1.3x production, num_prefetch "
          f"{c['prefetch']}): waited p50 "
          f"{c['wait_p50_ms']:.3f} ms, p99 {c['wait_p99_ms']:.3f} ms, "
          f"max {c['wait_max_ms']:.3f} ms")


if __name__ == "__main__":
    main()
