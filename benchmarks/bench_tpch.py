#!/usr/bin/env python3
"""TPC-H at scale: ``dlkit preprocess`` with every declared key, against pyarrow reading the
same files and DuckDB building the same foreign-key index; the edges checked against DuckDB.

1. TPC-H is generated as Parquet by ``tpchgen-cli`` (``pip install tpchgen-cli``: the
   DuckDB wheel does not ship its ``tpch`` extension, which it would download) at
   ``--sf`` (1: 6 M lineitem rows, 8.7 M rows in all), once per work directory.
2. The schema declares every key of the TPC-H specification: eight primary keys, two of them
   composite (partsupp's (ps_partkey, ps_suppkey), lineitem's (l_orderkey, l_linenumber)),
   and nine foreign keys, one composite (lineitem (l_partkey, l_suppkey) -> partsupp);
   orders and lineitem have time columns (o_orderdate, l_shipdate). Every column is a
   feature (the comments are texts: embedded).
3. Timed, one after the other on a warm page cache: ``pyarrow.parquet.read_table`` of every
   file (decoding alone); ``preprocess`` (everything: keys, graph, features, texts,
   embeddings, hashes); DuckDB building the same two foreign-key indexes from the same files:
   per foreign key, a join of child and parent rows (``file_row_number``) ordered by child
   (the child -> parent CSR) and by (parent, child time, child) (the parent -> children CSR).
4. Checked: per foreign key, dlkit's edges (from ``graph.bin``, both directions) equal
   DuckDB's join pairs in those orders, exactly (counts and a SHA-256 of the pairs printed).

With ``--sql``, the same tables are also loaded into a DuckDB file with every key declared
(``PRIMARY KEY``, ``FOREIGN KEY ... REFERENCES``) and built by ``dlkit import sql`` from its
catalog alone (time columns by flag): its time, and its rows and edges against the Parquet
build's.

    python benchmarks/bench_tpch.py [--sf 1] [--work /tmp/dlkit-tpch] [--budget 4G] [--sql]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from dlkit.db import open_database, preprocess  # noqa: E402

TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")
SCHEMA = """\
format_version = 1
name = "tpch"

[tables.region]
primary_key = "r_regionkey"

[tables.nation]
primary_key = "n_nationkey"
foreign_keys = { n_regionkey = "region" }

[tables.supplier]
primary_key = "s_suppkey"
foreign_keys = { s_nationkey = "nation" }

[tables.customer]
primary_key = "c_custkey"
foreign_keys = { c_nationkey = "nation" }

[tables.part]
primary_key = "p_partkey"

[tables.partsupp]
primary_key = ["ps_partkey", "ps_suppkey"]
foreign_keys = { ps_partkey = "part", ps_suppkey = "supplier" }

[tables.orders]
primary_key = "o_orderkey"
time_column = "o_orderdate"
foreign_keys = { o_custkey = "customer" }

[tables.lineitem]
primary_key = ["l_orderkey", "l_linenumber"]
time_column = "l_shipdate"
[tables.lineitem.foreign_keys]
l_orderkey = "orders"
l_partkey = "part"
l_suppkey = "supplier"
partsupp = { columns = ["l_partkey", "l_suppkey"], table = "partsupp" }
"""
# (child, child columns, parent, parent columns): the foreign keys above
FOREIGN_KEYS = (
    ("nation", ("n_regionkey",), "region", ("r_regionkey",)),
    ("supplier", ("s_nationkey",), "nation", ("n_nationkey",)),
    ("customer", ("c_nationkey",), "nation", ("n_nationkey",)),
    ("partsupp", ("ps_partkey",), "part", ("p_partkey",)),
    ("partsupp", ("ps_suppkey",), "supplier", ("s_suppkey",)),
    ("orders", ("o_custkey",), "customer", ("c_custkey",)),
    ("lineitem", ("l_orderkey",), "orders", ("o_orderkey",)),
    ("lineitem", ("l_partkey",), "part", ("p_partkey",)),
    ("lineitem", ("l_suppkey",), "supplier", ("s_suppkey",)),
    ("lineitem", ("l_partkey", "l_suppkey"), "partsupp", ("ps_partkey", "ps_suppkey")),
)
TIME = {"orders": "o_orderdate", "lineitem": "l_shipdate"}


def keys_only_schema(directory: Path) -> str:
    """SCHEMA with every column but keys and time columns excluded."""
    import tomllib

    from dlkit.db.schema.sql_schema import render_toml

    doc = tomllib.loads(SCHEMA)
    for name, spec in doc["tables"].items():
        keys = spec.get("primary_key", [])
        keep = set([keys] if isinstance(keys, str) else keys)
        for column, value in spec.get("foreign_keys", {}).items():
            keep.update(value["columns"] if isinstance(value, dict) else [column])
        keep.add(spec.get("time_column", ""))
        spec["exclude"] = [c for c in pq.read_schema(directory / f"{name}.parquet").names
                           if c not in keep]
    return render_toml(doc)


def generate(sf: float, directory: Path) -> None:
    marker = directory / f".sf-{sf}"
    if marker.exists():
        return
    shutil.rmtree(directory, ignore_errors=True)
    tool = shutil.which("tpchgen-cli") or str(Path(sys.executable).parent / "tpchgen-cli")
    if not Path(tool).exists():
        sys.exit("tpchgen-cli not found: pip install tpchgen-cli")
    started = time.perf_counter()
    subprocess.run([tool, "parquet", "-s", str(sf), "--output-dir", str(directory)],
                   check=True)
    marker.touch()
    print(f"generated TPC-H SF {sf} in {time.perf_counter() - started:.1f} s")


def read_all(directory: Path) -> tuple[float, int]:
    started = time.perf_counter()
    rows = sum(pq.read_table(directory / f"{t}.parquet").num_rows for t in TABLES)
    return time.perf_counter() - started, rows


def duckdb_index(directory: Path) -> tuple[float, dict[int, tuple[np.ndarray, np.ndarray]]]:
    """Per foreign key: (child, parent) local rows ordered by child, and ordered by (parent,
    child time, child); and the seconds it took."""
    import duckdb

    con = duckdb.connect()
    out = {}
    started = time.perf_counter()
    for i, (child, cols, parent, pcols) in enumerate(FOREIGN_KEYS):
        on = " AND ".join(f"c.{a} = p.{b}" for a, b in zip(cols, pcols))
        when = f"c.{TIME[child]}, " if child in TIME else ""
        src = (f"FROM read_parquet('{directory / child}.parquet', file_row_number = true) c "
               f"JOIN read_parquet('{directory / parent}.parquet', file_row_number = true) p "
               f"ON {on}")
        by_child = con.sql(f"SELECT c.file_row_number AS c, p.file_row_number AS p {src} "
                           "ORDER BY c").fetchnumpy()
        by_parent = con.sql(f"SELECT c.file_row_number AS c, p.file_row_number AS p {src} "
                            f"ORDER BY p, {when}c").fetchnumpy()
        out[i] = (np.stack([by_child["c"], by_child["p"]]),
                  np.stack([by_parent["c"], by_parent["p"]]))
    return time.perf_counter() - started, out


def dlkit_pairs(db, child: str, parent: str) -> tuple[np.ndarray, np.ndarray]:
    """dlkit's (child, parent) local rows of the foreign key child -> parent, in the order of
    the child -> parents CSR and of the parent -> children CSR."""
    g = db.graph
    c, p = db.table(child), db.table(parent)
    lo, hi = int(g.parent_offsets[c.row_offset]), int(g.parent_offsets[c.row_offset + c.num_rows])
    counts = np.diff(np.asarray(g.parent_offsets[c.row_offset:c.row_offset + c.num_rows + 1]))
    kids = np.repeat(np.arange(c.num_rows, dtype=np.int64), counts)
    parents = np.asarray(g.parent_ids[lo:hi], dtype=np.int64)
    keep = np.asarray(g.row_table)[parents] == p.index
    forward = np.stack([kids[keep], parents[keep] - p.row_offset])
    lo, hi = int(g.child_offsets[p.row_offset]), int(g.child_offsets[p.row_offset + p.num_rows])
    counts = np.diff(np.asarray(g.child_offsets[p.row_offset:p.row_offset + p.num_rows + 1]))
    owners = np.repeat(np.arange(p.num_rows, dtype=np.int64), counts)
    kids = np.asarray(g.child_ids[lo:hi], dtype=np.int64)
    keep = np.asarray(g.row_table)[kids] == c.index
    backward = np.stack([kids[keep] - c.row_offset, owners[keep]])
    return forward, backward


def digest(pairs: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(pairs, dtype=np.int64).tobytes()).hexdigest()[:16]


def duckdb_file(data: Path, path: Path) -> str:
    """The TPC-H tables in a DuckDB file, every key declared; its URL."""
    import tomllib

    import duckdb

    path.unlink(missing_ok=True)
    doc = tomllib.loads(SCHEMA)["tables"]
    with duckdb.connect(str(path)) as con:
        for table in TABLES:
            source = f"read_parquet('{data / table}.parquet')"
            columns = [f"{name} {kind}" for name, kind, *_ in
                       con.sql(f"DESCRIBE SELECT * FROM {source}").fetchall()]
            pk = doc[table].get("primary_key")
            if pk is not None:
                columns.append(f"PRIMARY KEY ({', '.join([pk] if isinstance(pk, str) else pk)})")
            for child, cols, parent, pcols in FOREIGN_KEYS:
                if child == table:
                    columns.append(f"FOREIGN KEY ({', '.join(cols)}) REFERENCES {parent} "
                                   f"({', '.join(pcols)})")
            con.execute(f"CREATE TABLE {table} ({', '.join(columns)})")
            con.execute(f"INSERT INTO {table} SELECT * FROM {source}")
    return f"duckdb:///{path.resolve()}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (1: 6 M lineitems)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/dlkit-tpch"))
    ap.add_argument("--budget", default=None, help="--memory-budget of the build, e.g. 4G")
    ap.add_argument("--sql", action="store_true",
                    help="also build from a DuckDB file through `dlkit import sql`")
    args = ap.parse_args()
    data = args.work / f"sf{args.sf:g}"
    generate(args.sf, data)
    (data / "dlkit.toml").write_text(SCHEMA)
    per_parent = {}
    for child, _, parent, _ in FOREIGN_KEYS:  # the check tells foreign keys by parent table
        assert (child, parent) not in per_parent, "two foreign keys to one parent"
        per_parent[(child, parent)] = True

    print(f"TPC-H SF {args.sf:g}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    read_all(data)  # the page cache warm for every contender
    arrow_s, rows = read_all(data)
    print(f"pyarrow read_table of every file: {arrow_s:.2f} s ({rows:,} rows)")

    from dlkit.cli.db import parse_size

    budget = None if args.budget is None else parse_size(args.budget, "--budget")
    out = args.work / f"db-sf{args.sf:g}"
    started = time.perf_counter()
    report = preprocess(data, out, overwrite=True, fsync=False, memory_budget=budget)
    dlkit_s = time.perf_counter() - started
    stages = ", ".join(f"{s.name} {s.seconds:.2f}" for s in report.stages)
    print(f"dlkit preprocess: {dlkit_s:.2f} s ({report.num_rows:,} rows, {report.num_edges:,} "
          f"edges, {report.num_texts:,} texts; {stages}); {dlkit_s / arrow_s:.1f}x the read")

    keys_only = args.work / f"keys-sf{args.sf:g}"
    shutil.rmtree(keys_only, ignore_errors=True)
    keys_only.mkdir(parents=True)
    for t in TABLES:
        (keys_only / f"{t}.parquet").symlink_to(data / f"{t}.parquet")
    (keys_only / "dlkit.toml").write_text(keys_only_schema(data))
    started = time.perf_counter()
    keys_report = preprocess(keys_only, args.work / f"db-keys-sf{args.sf:g}", overwrite=True,
                             fsync=False, memory_budget=budget)
    keys_s = time.perf_counter() - started
    print(f"dlkit preprocess, keys and time columns only (every other column excluded): "
          f"{keys_s:.2f} s ({keys_report.num_edges:,} edges)")

    duck_s, pairs = duckdb_index(data)
    print(f"DuckDB join + ORDER BY, both directions of every foreign key: {duck_s:.2f} s; "
          f"dlkit's keys-only build is {keys_s / duck_s:.2f}x that, its whole build "
          f"{dlkit_s / duck_s:.2f}x")

    total = 0
    with open_database(out) as db:
        for i, (child, cols, parent, _) in enumerate(FOREIGN_KEYS):
            forward, backward = dlkit_pairs(db, child, parent)
            duck_forward, duck_backward = pairs[i]
            same = (np.array_equal(forward, duck_forward)
                    and np.array_equal(backward, duck_backward))
            total += forward.shape[1]
            print(f"  {child}({', '.join(cols)}) -> {parent}: {forward.shape[1]:,} edges, "
                  f"DuckDB {duck_forward.shape[1]:,}; sha256 {digest(forward)} / "
                  f"{digest(duck_forward)}: {'same' if same else 'DIFFERENT'}")
            if not same:
                sys.exit(f"edges of {child} -> {parent} differ from DuckDB's join")
    assert total == report.num_edges
    print(f"every edge checked against DuckDB's join, both directions: {total:,}")
    if args.sql:
        from dlkit.db.schema.sql_schema import SqlSchemaOptions
        from dlkit.db.write.sql_source import import_sql

        started = time.perf_counter()
        url = duckdb_file(data, args.work / f"tpch-sf{args.sf:g}.duckdb")
        print(f"DuckDB file with every key declared, loaded in "
              f"{time.perf_counter() - started:.2f} s")
        started = time.perf_counter()
        imported = import_sql(url, args.work / f"db-sql-sf{args.sf:g}", overwrite=True,
                              fsync=False, memory_budget=budget,
                              options=SqlSchemaOptions(time_columns=tuple(
                                  f"{t}.{c}" for t, c in TIME.items())))
        sql_s = time.perf_counter() - started
        export_s = sql_s - imported.build.seconds
        same = ({t.name: (t.rows, t.edges) for t in imported.build.tables}
                == {t.name: (t.rows, t.edges) for t in report.tables})
        hashes = imported.build.database_hash == report.database_hash
        print(f"dlkit import sql (catalog keys): {sql_s:.2f} s, of which the export to Parquet "
              f"{export_s:.2f} s; rows and edges per table "
              f"{'the same as' if same else 'DIFFERENT from'} the Parquet build's (the hash "
              f"{'too' if hashes else 'differs: tables sorted by name, strings not views'})")
        if not same:
            sys.exit("the SQL import differs from the Parquet build")


if __name__ == "__main__":
    main()
