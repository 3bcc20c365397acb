#!/usr/bin/env python3
"""Text columns under a memory budget: the distinct texts spill instead of growing memory.

In one run, on generated tables (string primary keys, two text columns: a body with
``rows / 2`` distinct values, a title with ``rows / 8``; cached under ``--workdir``):

1. ``preprocess``: ``dlkit preprocess --memory-budget`` of each ``--rows`` size, a real
   process whose anonymous memory (RssAnon, what the budget bounds) is sampled every 20 ms:
   wall time, peak anonymous memory against budget + 0.5 GiB, bytes spilled. The peak must
   not grow with the input.
2. ``interning``: the text ids of the largest input's batches (the same Arrow batches, read
   once) by ``TextIndex`` in the build's working arrays, against the obvious alternative, a
   Python ``dict`` from text to id walking the same cells in the same order; their times and
   the memory each holds at the end (the dict's by ``tracemalloc``). Both give the same ids
   (checked).

    python benchmarks/bench_texts.py [--rows 4000000 16000000] [--budget 1G] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_out_of_core import gib, preprocess  # noqa: E402

from dlkit.cli.db import parse_size  # noqa: E402
from dlkit.db.write.scratch import Arrays, default_memory_budget  # noqa: E402
from dlkit.db.write.texts import TextIndex  # noqa: E402

BATCH_ROWS = 1 << 18
TEXTS = ("body", "title")


def generate(root: Path, rows: int) -> Path:
    """The input of ``rows`` rows under ``root`` (made once)."""
    source = root / f"texts-{rows}"
    if (source / "dlkit.toml").exists():
        return source
    shutil.rmtree(source, ignore_errors=True)
    source.mkdir(parents=True)
    rng = np.random.default_rng(0)
    writer = None
    for start in range(0, rows, 1 << 20):
        n = min(1 << 20, rows - start)

        def strings(prefix: str, numbers: np.ndarray, suffix: str = "") -> pa.Array:
            return pc.binary_join_element_wise(prefix, pc.cast(pa.array(numbers), pa.string()),
                                               suffix, "")

        part = pa.table({
            "key": strings("user-", rng.permutation(n) + start),
            "when": pa.array(rng.integers(0, 10**12, n), pa.timestamp("us")),
            "body": strings("review number ", rng.integers(0, rows // 2, n), " with some words"),
            "title": strings("title ", rng.integers(0, rows // 8 + 1, n)),
        })
        writer = writer or pq.ParquetWriter(source / "t.parquet", part.schema)
        writer.write_table(part)
    assert writer is not None
    writer.close()
    (source / "dlkit.toml").write_text('[tables.t]\nprimary_key = "key"\ntime_column = "when"\n'
                                       'types = { body = "text", title = "text" }\n')
    return source


def dict_ids(batches: list[list[pa.Array]]) -> tuple[list[np.ndarray], dict[str, int]]:
    """The alternative: a dict from text to id, cells walked row by row, then column."""
    ids: dict[str, int] = {}
    out = []
    for columns in batches:
        values = [c.to_pylist() for c in columns]
        encoded = np.zeros((len(columns), len(columns[0])), dtype=np.int64)
        for r, row in enumerate(zip(*values, strict=True)):
            for c, text in enumerate(row):
                if text is not None:
                    encoded[c, r] = ids.setdefault(text, len(ids))
        out.append(encoded)
    return out, ids


def interning(source: Path, budget: int) -> None:
    reader = pq.ParquetFile(source / "t.parquet")
    batches = [[batch.column(name) for name in TEXTS]
               for batch in reader.iter_batches(BATCH_ROWS, columns=list(TEXTS))]
    cells = sum(len(b[0]) for b in batches) * len(TEXTS)
    with tempfile.TemporaryDirectory(dir=source) as scratch:
        arrays = Arrays(Path(scratch), budget)
        index = TextIndex(arrays)
        started = time.perf_counter()
        ours = [index.encode_row_major(columns, list(TEXTS)) for columns in batches]
        index_s = time.perf_counter() - started
        held = arrays.used, arrays.spilled
    tracemalloc.start()
    started = time.perf_counter()
    theirs, table = dict_ids(batches)
    dict_s = time.perf_counter() - started
    # the dict and its strings: what is traced, less the id arrays it returns
    dict_bytes = tracemalloc.get_traced_memory()[0] - sum(a.nbytes for a in theirs)
    tracemalloc.stop()
    for mine, other in zip(ours, theirs, strict=True):
        for c, (values, _valid) in enumerate(mine):
            assert np.array_equal(values, other[c]), "TextIndex and the dict disagree"
    assert index.count == len(table)
    print(f"\ninterning {cells:,} cells, {index.count:,} distinct texts (budget {gib(budget)}):")
    print(f"  TextIndex     {index_s:6.2f} s  {cells / index_s / 1e6:5.1f} M cells/s  "
          f"in memory {gib(held[0])}, spilled {gib(held[1])} (grown arrays included)")
    print(f"  Python dict   {dict_s:6.2f} s  {cells / dict_s / 1e6:5.1f} M cells/s  "
          f"holds {gib(dict_bytes)}, all of it in memory")
    print(f"  speed-up {dict_s / index_s:.1f}x (same ids)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[4_000_000, 16_000_000])
    ap.add_argument("--budget", default="1G")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "dlkit-texts")
    args = ap.parse_args()
    budget = parse_size(args.budget, "--budget")
    print(f"cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f}, "
          f"default budget {gib(default_memory_budget())}")
    print(f"{'rows':>12} {'wall':>8} {'peak anon':>11} {'limit':>10} {'spilled':>10}  hash")
    for rows in args.rows:
        source = generate(args.workdir, rows)
        result = preprocess(source, args.workdir / f"db-{rows}", args.budget)
        limit = budget + (512 << 20)
        print(f"{rows:>12,} {result['wall_s']:7.1f}s {gib(result['peak_anon']):>11} "
              f"{gib(limit):>10} {gib(result['spilled']):>10}  {result['hash'][:12]}"
              + ("" if result["peak_anon"] <= limit else "  OVER"))
        shutil.rmtree(args.workdir / f"db-{rows}", ignore_errors=True)
    interning(generate(args.workdir, max(args.rows)), budget)


if __name__ == "__main__":
    main()
