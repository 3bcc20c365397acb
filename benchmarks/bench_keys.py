#!/usr/bin/env python3
"""Foreign-key resolution: dlkit's key index against Arrow's own hash lookup, in one run.

Primary keys (``--keys``, strings like ``product-123`` or sparse integers) are indexed once;
then ``--lookups`` foreign keys (uniform over the keys, 2 % dangling) are resolved batch by
batch (the build's 2^18 rows) into row numbers, by

1. ``KeyIndex.lookup`` (what ``dlkit preprocess`` runs: a hash index built by the
   build's kernels, the home slots of 32 keys fetched at once, and for strings over eight
   bytes, their stored offsets and bytes too);
2. ``pyarrow.compute.index_in`` with the keys as its value set (Arrow's hash table), given
   every foreign key in one call: Arrow hashes the value set on each call, so one call is
   its best case; and, as a streaming build would have to call it, batch by batch (timed
   over the first eight batches: each rebuilds Arrow's table).

Both give the same rows (checked). Printed: index build time and lookups per second of each,
and their ratio, with the machine's cores and load.

    python benchmarks/bench_keys.py [--keys 5000000] [--lookups 20000000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from dlkit.db.write.convert import to_string_buffers  # noqa: E402
from dlkit.db.write.primary_keys import KeyIndex  # noqa: E402

BATCH_ROWS = 1 << 18


def keys_of(kind: str, n: int, rng: np.random.Generator) -> pa.Array:
    numbers = rng.permutation(n * 4)[:n]  # sparse: the hash index, not the dense one
    if kind == "integer":
        return pa.array(numbers.astype(np.int64))
    return pc.binary_join_element_wise("product-", pc.cast(pa.array(numbers), pa.string()), "")


def run(kind: str, n: int, lookups: int) -> None:
    rng = np.random.default_rng(0)
    keys = keys_of(kind, n, rng)
    refs = rng.integers(0, n, lookups)
    foreign = keys.take(pa.array(refs))
    dangling = rng.random(lookups) < 0.02
    missing = pa.array(["none"] * lookups) if kind == "string" else pa.array(
        np.full(lookups, -1, np.int64))
    foreign = pc.if_else(pa.array(dangling), missing, foreign)
    batches = [foreign.slice(i, BATCH_ROWS) for i in range(0, lookups, BATCH_ROWS)]

    def build(values: pa.Array) -> KeyIndex:
        if kind == "string":
            return KeyIndex.build_str(*to_string_buffers(values)[:2], "products.key")
        return KeyIndex.build_int(values.to_numpy(), "products.key")

    build(keys.slice(0, 2)).lookup(batches[0][:2], 0, np.empty(2, np.int64), "")  # kernels load
    started = time.perf_counter()
    index = build(keys)
    build_ours = time.perf_counter() - started
    ours = np.empty(lookups, dtype=np.int64)
    started = time.perf_counter()
    for k, batch in enumerate(batches):
        index.lookup(batch, 0, ours[k * BATCH_ROWS:k * BATCH_ROWS + len(batch)], "orders.fk")
    ours_s = time.perf_counter() - started

    options = pc.SetLookupOptions(value_set=keys)
    started = time.perf_counter()
    pc.index_in(keys.slice(0, 1), options=options)
    build_arrow = time.perf_counter() - started  # hashing the value set, and one lookup
    started = time.perf_counter()
    theirs = pc.index_in(foreign, options=options).fill_null(-1).to_numpy()
    arrow_s = time.perf_counter() - started - build_arrow  # its table built once, as ours

    started = time.perf_counter()
    for batch in batches[:8]:
        pc.index_in(batch, options=options)
    per_batch_s = (time.perf_counter() - started) / sum(len(b) for b in batches[:8]) * lookups

    assert np.array_equal(ours, theirs), "the two lookups disagree"
    assert np.array_equal(ours == -1, dangling)
    print(f"{kind} keys: {n:,} keys, {lookups:,} lookups")
    print(f"  dlkit KeyIndex   index {build_ours:5.2f} s   {lookups / ours_s / 1e6:6.1f} M lookups/s")
    print(f"  pyarrow index_in index {build_arrow:5.2f} s   {lookups / arrow_s / 1e6:6.1f} M lookups/s"
          " (one call: the index time is taken off)")
    print(f"  pyarrow index_in, batch by batch:  {lookups / per_batch_s / 1e6:6.1f} M lookups/s")
    print(f"  lookups: {arrow_s / ours_s:.1f}x Arrow's one call, {per_batch_s / ours_s:.1f}x its "
          "batch-by-batch calls (same rows)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=5_000_000)
    ap.add_argument("--lookups", type=int, default=20_000_000)
    args = ap.parse_args()
    print(f"cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f}; one thread each")
    for kind in ("string", "integer"):
        run(kind, args.keys, args.lookups)


if __name__ == "__main__":
    main()
