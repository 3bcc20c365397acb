#!/usr/bin/env python3
"""Shuffle quality and speed: NextBatch_v2, NextBatch_v3 and numpy's permutation, in one run.

    .venv/bin/python benchmarks/shuffle_quality.py [--seeds 16] [--throughput-n 100000000]
                                                   [--json] [--check]

**Quality.** For N = 10^4, 10^6 and 2^20 + 1, v2 and v3 order a whole train epoch ``--seeds``
times (the real ``SamplingPlan`` with manifest seed ``s``, default block size 2^20, global
batch 1024) and numpy ``--numpy-seeds`` times (``default_rng(s).permutation(N)``; more runs, so
its noise band is itself well estimated). On each epoch ``i_p``
(index emitted at position ``p``), with batches of 1024 consecutive positions:

- ``distinct gaps``: number of distinct values of ``i_{p+1} - i_p`` over ``N - 1``;
- ``corr(pos, index)``: Pearson correlation of ``p`` and ``i_p``;
- ``batch decile chi2``: per full batch, chi-square of how many of its indices fall in each
  tenth of the dataset (``floor(10 i / N)``) against 1024/10, averaged over batches;
- ``slot x decile chi2``: chi-square of independence of the 10 x 10 table (tenth of the
  position inside its batch) x (tenth of the dataset), over all full batches;
- ``batch mean sd``: spread (sd) over full batches of the batch mean of a sorted column
  (the column's value at row ``i`` is ``i / N``);
- extra: ``pair decile chi2`` (independence of the tenths of consecutive indices, 10 x 10) and
  ``ascents`` (fraction of ``p`` with ``i_{p+1} > i_p``).

numpy's runs give each statistic's mean and sd (its sampling noise). A method **passes** a
statistic when every one of its runs lies in numpy's band ``mean ± 4 sd`` *and* its mean is
within 4 standard errors of numpy's (two-sample z on the means), i.e. it is indistinguishable
from a real shuffle at this many runs.

**Throughput.** A whole N = ``--throughput-n`` epoch resolved in 2^20-index chunks into one
reused buffer (how dlkit streams an epoch), v2 and v3 alternately, best of ``--repeat``, on one
thread. Rates use CPU time of the process (``time.process_time``), which is steadier than wall
time on a shared machine; wall-time rates are printed too. The v3/v2 ratio is the target
(v3 within 2x of v2). A line for the 64-bit path (N > 2^32) is included for the record.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from dlkit.core.feistel import resolve_feistel
from dlkit.core.nextbatch import resolve_shuffled
from dlkit.nextbatch import SamplingPlan
from dlkit.nextbatch.run_manifest import DataConfig, DatasetEntry, RunManifest
from dlkit.nextbatch.tokens import SAMPLING_MODE_TRAIN, SAMPLING_MODE_TRAIN_V3

SIZES = (10**4, 10**6, 2**20 + 1)
BATCH = 1024
BAND_SD = 4.0
Z_LIMIT = 4.0
CHUNK = 1 << 20
STATISTICS = ("distinct gaps", "corr(pos, index)", "batch decile chi2", "slot x decile chi2",
              "batch mean sd", "pair decile chi2 (extra)", "ascents (extra)")
METHODS = ("numpy", "v2", "v3")


# --- orders ---------------------------------------------------------------------------------


def manifest(seed: int, n: int, mode: str) -> RunManifest:
    entry = DatasetEntry(id="bench", version="1", cardinality=n, hash=bytes(32))
    return RunManifest(seed=seed, global_batch_size=BATCH, datasets={"d": entry},
                       data=DataConfig(sampling_mode=mode))


def plan_for(seed: int, n: int, mode: str) -> SamplingPlan:
    return SamplingPlan.create(manifest(seed, n, mode), "d", 1, 0, "train")


def epoch_order(method: str, seed: int, n: int) -> np.ndarray:
    if method == "numpy":
        return np.random.default_rng(seed).permutation(n)
    mode = SAMPLING_MODE_TRAIN if method == "v2" else SAMPLING_MODE_TRAIN_V3
    return plan_for(seed, n, mode).resolve(0, np.array([0], np.uint64), np.array([n], np.uint64))


# --- statistics -----------------------------------------------------------------------------


def _independence_chi2(rows: np.ndarray, cols: np.ndarray) -> float:
    table = np.zeros((10, 10))
    np.add.at(table, (rows, cols), 1)
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    return float(((table - expected) ** 2 / expected).sum())


def statistics(order: np.ndarray) -> dict[str, float]:
    n = order.shape[0]
    x = order.astype(np.int64)
    gaps = np.diff(x)
    decile = (x * 10) // n
    full = (n // BATCH) * BATCH
    batches = decile[:full].reshape(-1, BATCH)
    counts = np.stack([(batches == d).sum(1) for d in range(10)], axis=1)
    expected = BATCH / 10
    slot = (np.arange(full) % BATCH) * 10 // BATCH
    return {
        "distinct gaps": np.unique(gaps).shape[0] / gaps.shape[0],
        "corr(pos, index)": float(np.corrcoef(np.arange(n, dtype=np.float64), x)[0, 1]),
        "batch decile chi2": float((((counts - expected) ** 2) / expected).sum(1).mean()),
        "slot x decile chi2": _independence_chi2(slot, decile[:full]),
        "batch mean sd": float((x[:full].reshape(-1, BATCH).mean(1) / n).std()),
        "pair decile chi2 (extra)": _independence_chi2(decile[:-1], decile[1:]),
        "ascents (extra)": float((gaps > 0).mean()),
    }


@dataclass(frozen=True)
class Verdict:
    mean: float
    in_band: int
    z: float

    def passes(self, runs: int) -> bool:
        return self.in_band == runs and abs(self.z) < Z_LIMIT


def judge(values: list[float], reference: list[float]) -> Verdict:
    mu, sd = float(np.mean(reference)), float(np.std(reference, ddof=1))
    mean = float(np.mean(values))
    in_band = sum(abs(v - mu) <= BAND_SD * sd for v in values)
    se = math.sqrt(sd**2 / len(reference) + float(np.var(values, ddof=1)) / len(values))
    z = (mean - mu) / se if se > 0 else (0.0 if mean == mu else math.inf)
    return Verdict(mean, in_band, z)


def quality(sizes: tuple[int, ...], seeds: int, numpy_seeds: int) -> list[dict]:
    rows = []
    for n in sizes:
        runs = {m: [statistics(epoch_order(m, s, n))
                    for s in range(numpy_seeds if m == "numpy" else seeds)] for m in METHODS}
        for name in STATISTICS:
            values = {m: [r[name] for r in runs[m]] for m in METHODS}
            ref = values["numpy"]
            row = {"n": n, "statistic": name, "numpy_mean": float(np.mean(ref)),
                   "numpy_sd": float(np.std(ref, ddof=1))}
            for m in ("v2", "v3"):
                verdict = judge(values[m], ref)
                row[m] = {"mean": verdict.mean, "in_band": verdict.in_band, "z": verdict.z,
                          "pass": verdict.passes(seeds)}
            rows.append(row)
        print(f"  quality: N = {n:,} done", file=sys.stderr)
    return rows


# --- throughput -----------------------------------------------------------------------------


def time_epoch(resolve_chunk, n: int, buf: np.ndarray) -> tuple[float, float]:
    """(CPU seconds, wall seconds) to resolve positions [0, n) in CHUNK-sized slices."""
    cpu, wall = time.process_time(), time.perf_counter()
    for start in range(0, n, CHUNK):
        length = min(CHUNK, n - start)
        resolve_chunk(np.array([start], np.uint64), np.array([length], np.uint64), buf[:length])
    return time.process_time() - cpu, time.perf_counter() - wall


def throughput(n: int, repeat: int) -> dict:
    buf = np.empty(CHUNK, dtype=np.uint64)
    v2_plan, v3_plan = plan_for(0, n, SAMPLING_MODE_TRAIN), plan_for(0, n, SAMPLING_MODE_TRAIN_V3)
    _, words, order = v2_plan.order.epoch_state(0)
    _, _, keys = v3_plan.order.epoch_state(0)
    n64 = np.uint64(n)
    resolvers = {
        "v2": lambda s, c, out: resolve_shuffled(order, words, n64, np.uint64(2**20), s, c, out),
        "v3": lambda s, c, out: resolve_feistel(keys, n64, s, c, out),
    }
    for resolve_chunk in resolvers.values():  # compile/load outside the timing
        resolve_chunk(np.array([0], np.uint64), np.array([4096], np.uint64), buf[:4096])
    best = {m: (math.inf, math.inf) for m in resolvers}
    for _ in range(repeat):
        for m, resolve_chunk in resolvers.items():
            cpu, wall = time_epoch(resolve_chunk, n, buf)
            best[m] = (min(best[m][0], cpu), min(best[m][1], wall))
    # The 64-bit path (N > 2^32), on the first 2^24 positions of a 10^12 epoch.
    wide_n = 10**12
    wide_keys = plan_for(0, wide_n, SAMPLING_MODE_TRAIN_V3).order.epoch_state(0)[2]
    cpu, _ = time_epoch(lambda s, c, out: resolve_feistel(wide_keys, np.uint64(wide_n), s, c, out),
                        1 << 24, buf)
    return {"n": n, "v2_cpu_s": best["v2"][0], "v3_cpu_s": best["v3"][0],
            "v2_wall_s": best["v2"][1], "v3_wall_s": best["v3"][1],
            "ratio_cpu": best["v3"][0] / best["v2"][0],
            "ratio_wall": best["v3"][1] / best["v2"][1],
            "wide_path_rate": (1 << 24) / cpu}


# --- report ---------------------------------------------------------------------------------


def fmt(value: float) -> str:
    return f"{value:.4g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"


def print_report(rows: list[dict], speed: dict | None, seeds: int, numpy_seeds: int) -> None:
    print(f"\nShuffle quality: {seeds} epochs of v2 and v3, {numpy_seeds} of numpy, per N; "
          f"global batch {BATCH}.\npass = every run in numpy's mean ± {BAND_SD:g} sd, and the "
          f"mean within {Z_LIMIT:g} standard errors of numpy's (z)")
    header = (f"{'N':>9}  {'statistic':<25}{'numpy mean':>11}{'± sd':>10}  "
              f"{'v2 mean':>11}{'z':>9} {'v2':<5}  {'v3 mean':>11}{'z':>7} {'v3':<5}")
    print(header)
    print("-" * len(header))
    for row in rows:
        v2, v3 = row["v2"], row["v3"]
        z2 = f"{v2['z']:+.1f}" if abs(v2["z"]) < 1e4 else f"{v2['z']:+.1e}"
        print(f"{row['n']:>9}  {row['statistic']:<25}{fmt(row['numpy_mean']):>11}"
              f"{fmt(row['numpy_sd']):>10}  {fmt(v2['mean']):>11}{z2:>9} "
              f"{'pass' if v2['pass'] else 'FAIL':<5}  {fmt(v3['mean']):>11}{v3['z']:>+7.1f} "
              f"{'pass' if v3['pass'] else 'FAIL':<5}")
    v2_fails = sum(not r["v2"]["pass"] for r in rows)
    v3_fails = sum(not r["v3"]["pass"] for r in rows)
    print(f"v2 fails {v2_fails} of {len(rows)} statistic/N cells; v3 fails {v3_fails}.")
    if speed:
        n = speed["n"]
        print(f"\nThroughput, whole N = {n:,} epoch in 2^20 chunks, one thread "
              f"(CPU time; wall time in brackets):")
        for m in ("v2", "v3"):
            print(f"  {m}: {n / speed[m + '_cpu_s'] / 1e6:7.0f} M indices/s "
                  f"({n / speed[m + '_wall_s'] / 1e6:.0f})")
        print(f"  v3 takes {speed['ratio_cpu']:.2f}x v2's time ({speed['ratio_wall']:.2f}x wall); "
              f"target <= 2x")
        print(f"  v3 64-bit path (N = 10^12, first 2^24 positions): "
              f"{speed['wide_path_rate'] / 1e6:.0f} M indices/s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=16,
                        help="v2 and v3 epochs per N (default 16)")
    parser.add_argument("--numpy-seeds", type=int, default=None,
                        help="numpy epochs per N for the noise band (default 2 x --seeds)")
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES),
                        help="dataset sizes for the quality table (default 10^4 10^6 2^20+1)")
    parser.add_argument("--throughput-n", type=int, default=10**8,
                        help="epoch size for the v3/v2 throughput ratio (0 skips; default 10^8)")
    parser.add_argument("--repeat", type=int, default=3, help="throughput repetitions (best)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless v3 passes every statistic and stays within 2x of v2")
    args = parser.parse_args()
    if args.seeds < 3 or (args.numpy_seeds is not None and args.numpy_seeds < 3):
        parser.error("--seeds and --numpy-seeds must be at least 3 to estimate a spread")
    numpy_seeds = args.numpy_seeds or 2 * args.seeds
    rows = quality(tuple(args.sizes), args.seeds, numpy_seeds)
    speed = throughput(args.throughput_n, args.repeat) if args.throughput_n else None
    if args.json:
        print(json.dumps({"seeds": args.seeds, "numpy_seeds": numpy_seeds, "quality": rows,
                          "throughput": speed}, indent=1))
    else:
        print_report(rows, speed, args.seeds, numpy_seeds)
    ok = all(r["v3"]["pass"] for r in rows) and (speed is None or speed["ratio_cpu"] <= 2.0)
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
