#!/usr/bin/env python3
"""Benchmark value-based key inference (``dlkit schema infer``) on millions of rows.

Generates (once, cached under --workdir) the five-table flights database of the tests
(tests/db/write/infer_data.py: string keys carrier / faa / tailnum / obs_key / id, 15% of tail
numbers dangling) with --flights rows in ``flights``, then times in one process:

1. ``sampled``: dlkit's key search (``dlkit.db.write.infer.probe_columns`` + ``find_keys``): each
   key-kind column read in about ``READ_ROWS`` rows, ``SAMPLE_ROWS`` of them looked up in each
   key candidate's index; only would-be keys read whole;
2. ``exact``: the obvious alternative: every key-kind column read whole, uniqueness by
   ``pyarrow.compute.count_distinct``, and every column's containment in every unique column
   by ``pyarrow.compute.is_in`` over all its rows.

Prints both times, their ratio, the keys each finds and the largest difference between a
sampled share and the exact one. Timings on a shared machine vary; the ratio less so.

    python benchmarks/bench_infer.py --flights 5000000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dlkit.db.schema.arrow_types import KEY_FAMILIES, type_family  # noqa: E402
from dlkit.db.write import infer  # noqa: E402
from dlkit.db.write.source import TableSource  # noqa: E402
from tests.db.write.infer_data import FLIGHTS_FOREIGN, FLIGHTS_PRIMARY, write_flights  # noqa: E402


def sampled(sources):
    probes = infer.probe_columns(sources)
    types = {(t, f.name): f.type for t, s in sources.items() for f in s.schema}
    keys = infer.find_keys(probes, list(sources), types)
    shares = {(k.table, k.column, c): v for k in probes for c, v in k.shares.items()}
    return keys, shares


def exact(sources):
    columns = {}
    for t, s in sources.items():
        for f in s.schema:
            family = type_family(f.type)
            if family in KEY_FAMILIES:
                columns[(t, f.name)] = (family, pq.read_table(s.files[0], columns=[f.name])
                                        .column(0))
    unique = [k for k, (_, v) in columns.items()
              if v.null_count == 0 and pc.count_distinct(v).as_py() == len(v)]
    shares = {}
    for key in unique:
        family, values = columns[key]
        for child, (fam, col) in columns.items():
            if child != key and fam == family:
                valid = pc.drop_null(col)
                if len(valid):
                    found = pc.sum(pc.is_in(valid, value_set=values.combine_chunks())).as_py()
                    shares[(*key, child)] = (found or 0) / len(valid)
    return unique, shares


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flights", type=int, default=5_000_000)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/dlkit-bench-infer"))
    args = ap.parse_args()
    root = args.workdir / f"flights-{args.flights}"
    if not (root / "flights.parquet").exists():
        t = time.perf_counter()
        write_flights(root, args.flights)
        print(f"generated {root} in {time.perf_counter() - t:.1f} s")
    sources = {n: TableSource.open(n, p) for n, p in infer._candidates(root)}
    sampled({"airlines": sources["airlines"]})  # load the compiled kernels once
    t = time.perf_counter()
    keys, sample_shares = sampled(sources)
    t_sampled = time.perf_counter() - t
    t = time.perf_counter()
    unique, exact_shares = exact(sources)
    t_exact = time.perf_counter() - t
    primary = {t: g.column for t, g in keys.primary.items()}
    foreign = {(t, g.column): g.parent for t, gs in keys.foreign.items() for g in gs}
    print(f"rows: {sum(s.num_rows for s in sources.values()):,} in {len(sources)} tables")
    print(f"sampled: {t_sampled:.2f} s   exact: {t_exact:.2f} s   "
          f"exact/sampled: {t_exact / t_sampled:.1f}x")
    print(f"primary keys found: {len(primary)}/5 {'OK' if primary == FLIGHTS_PRIMARY else primary}")
    print(f"foreign keys found: {len(foreign)}/6 {'OK' if foreign == FLIGHTS_FOREIGN else foreign}")
    print(f"unique columns (exact): {sorted(f'{t}.{c}' for t, c in unique)}")
    common = set(sample_shares) & set(exact_shares)
    worst = max(common, key=lambda k: abs(sample_shares[k] - exact_shares[k]))
    print(f"largest |sampled share - exact share| over {len(common)} pairs: "
          f"{abs(sample_shares[worst] - exact_shares[worst]):.4f} ({worst[0]}.{worst[1]} <- "
          f"{worst[2][0]}.{worst[2][1]})")


if __name__ == "__main__":
    main()
