#!/usr/bin/env python3
"""The example Relational Transformer against the practitioner's GBDT, on any dlkit database.

    python benchmarks/real_data.py --db DB --task T --seeds 3 --steps 300 --json

``DB`` is a database (``dlkit preprocess`` output; then ``--src`` names the input directory it
was built from, whose Parquet tables the GBDT features are computed from) or an input
directory (a ``dlkit.toml`` beside Parquet tables; it is then preprocessed into ``--work``).
Every arm uses the same seeds and the same split, read from dlkit itself (the task's seed rows
and observation times from ``tasks/<task>/``, their split from ``dlkit.Sampler.splits``), trains
on the train split and is scored on every validation seed: AUC for a boolean target, MAE in the
column's own units for a numeric one. Arms, each run once per seed ``0..N-1``:

- ``rt_full``: ``examples/train_torch.py`` (a subprocess; its result line's ``val_metric``;
  its learning rate decays over the run's ``--steps``, see ``run_example``);
- ``rt_anchor_only``: the same with ``--context anchor-only``;
- ``rt_aggregates``: only when the input's ``dlkit.toml`` has an ``[aggregates]`` section: the
  example on the database with aggregate cells, while ``rt_full`` and ``rt_anchor_only`` then
  run on the same input built without that section;
- ``gbdt_anchor``: scikit-learn's ``HistGradientBoosting`` on the anchor row's own columns;
- ``gbdt_aggregates``: the same on the anchor row, its foreign-key parents' columns, and as-of
  aggregates of the linked rows (below);
- ``constant``: the train labels' median (MAE; a constant's AUC is 0.5).

The aggregates are computed here from the source Parquet tables with pyarrow and numpy, not by
dlkit: for the anchor row itself (when other tables point at its table) and for each parent it
points to, and for each foreign key pointing at that row's table, the children visible at the
seed's observation time ``T`` (row time at or before ``T``, before it for a ``strict`` task;
a row without a time is always visible): their count, the days from the last one to ``T``, and
the sum and mean of each numeric and boolean column. A task's target column counts only where
its label is known (``row time + label_lag <= T``), and the seed's own target never does. A
parent whose time is after ``T`` contributes no columns.

``--json`` prints one JSON object: per arm the metric per seed, its median and the train
seconds per seed (a GBDT's fit; the example's whole run, start-up and validation pass
included, with its mean ``step_ms`` and its train and validation losses beside); the split
sizes; and the goal check of issue 32
(the example with aggregates, or with full context when the database has none, reaches
``gbdt_aggregates``: AUC at most 0.02 below it, MAE at most 1.15 times it; and whether that
GBDT beats the constant at all). Needs the ``bench`` extra (scikit-learn) and torch.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
TRAIN_SCRIPT = ROOT / "examples" / "train_torch.py"
NO_TIME = np.iinfo(np.int64).min
NEVER = np.iinfo(np.int64).max
DAY_US = 86_400 * 10**6
MAX_CATEGORIES = 250  # HistGradientBoosting's categorical features take codes below 255
# a TOML table header line: [name], [a.b], [[a.b]] (not an array value split over lines)
TABLE_HEADER = re.compile(r"^\s*\[\[?([A-Za-z0-9_.\- ]+)\]\]?\s*(#.*)?$")
AUC_MARGIN = 0.02
MAE_RATIO = 1.15
# OpenMP threads of the GBDT: one, as the example trains on one core beside dlkit's producer
# (more threads than free cores made a 4,000-row fit take minutes on a busy machine)
GBDT_THREADS = 1
MIN_VALUES = 20  # train seeds a GBDT feature must have a value for
# the example's losses kept beside its metric: did it learn on the train split, and beat the
# constant on the validation split
RT_LOSSES = ("train_loss_first", "train_loss_last", "val_loss", "baseline_val_loss")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the source tables and the schema ------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    name: str
    stype: str  # numeric, boolean, timestamp, categorical, text


@dataclass(frozen=True)
class Table:
    name: str
    primary_key: str | None
    time_column: str | None
    foreign_keys: tuple[tuple[str, str], ...]  # (column, parent table)
    columns: tuple[Column, ...]                  # feature columns (keys are none)
    data: pa.Table = field(repr=False)

    @property
    def num_rows(self) -> int:
        return int(self.data.num_rows)

    def times(self) -> np.ndarray:
        """Row times in UTC microseconds, ``NO_TIME`` where there is none."""
        if self.time_column is None:
            return np.full(self.num_rows, NO_TIME, np.int64)
        return timestamps(self.data[self.time_column])


def timestamps(values: pa.ChunkedArray) -> np.ndarray:
    if pa.types.is_date(values.type):
        values = pc.cast(values, pa.timestamp("s"))
    micros = pc.cast(pc.cast(values, pa.timestamp("us", tz=getattr(values.type, "tz", None))),
                     pa.int64())
    return np.asarray(micros.fill_null(NO_TIME).to_numpy(zero_copy_only=False), np.int64)


@dataclass(frozen=True)
class Schema:
    tables: dict[str, Table]
    lags: dict[tuple[str, str], int]  # (table, target column) -> label lag in microseconds

    def children_of(self, parent: str) -> list[tuple[Table, str]]:
        """Every (child table, foreign-key column) pointing at ``parent``, in table order."""
        return [(t, col) for t in self.tables.values() for col, p in t.foreign_keys
                if p == parent]


def read_parquet(path: Path) -> pa.Table:
    """A table file, or a directory of parts read in byte order of their names."""
    if path.is_dir():
        parts = sorted((p for p in path.iterdir() if p.suffix == ".parquet"
                        and not p.name.startswith((".", "_"))), key=lambda p: p.name.encode())
        return pa.concat_tables([pq.read_table(p) for p in parts])
    return pq.read_table(path)


def load_schema(src: Path, metadata: dict[str, Any], lags: dict[tuple[str, str], int]) -> Schema:
    """The source tables (from ``src``, the paths ``dlkit.toml`` gives) with the structure and
    semantic types the database's ``metadata.json`` records."""
    config = tomllib.loads((src / "dlkit.toml").read_text())
    tables = {}
    for t in metadata["tables"]:
        name = t["name"]
        spec = config.get("tables", {}).get(name, {})
        task_spec = config.get("tasks", {}).get(name, {})
        rel = spec.get("path") or task_spec.get("path")
        if isinstance(rel, dict):  # a task table read from train/val/test files, in order
            data = pa.concat_tables([read_parquet(src / rel[s]) for s in ("train", "val", "test")])
        elif rel:
            data = read_parquet(src / rel)
        else:
            data = read_parquet(src / f"{name}.parquet") if (src / f"{name}.parquet").exists() \
                else read_parquet(src / name)
        tables[name] = Table(
            name=name, primary_key=t.get("primary_key"), time_column=t.get("time_column"),
            foreign_keys=tuple((fk["column"], fk["parent_table"]) for fk in t["foreign_keys"]),
            columns=tuple(Column(c["name"], c["stype_name"]) for c in t["columns"]), data=data)
    return Schema(tables, lags)


# --- feature columns ---------------------------------------------------------------------------


def column_values(table: Table, column: Column) -> tuple[np.ndarray, bool] | None:
    """A column as float64 (NaN for null) and whether it is categorical codes; ``None`` for a
    column the GBDT does not take (text)."""
    values = table.data[column.name]
    if column.stype == "text":
        return None
    if column.stype == "categorical":
        uniques = pc.unique(values).drop_null()
        uniques = uniques.take(pc.sort_indices(uniques))
        codes = pc.index_in(values, value_set=uniques)
        out = np.asarray(pc.cast(codes, pa.float64()).fill_null(np.nan)
                         .to_numpy(zero_copy_only=False), np.float64)
        return out, len(uniques) <= MAX_CATEGORIES
    if column.stype == "timestamp":
        micros = timestamps(values).astype(np.float64)
        micros[timestamps(values) == NO_TIME] = np.nan
        return micros / DAY_US, False
    numbers = pc.cast(values, pa.float64())
    return np.asarray(numbers.fill_null(np.nan).to_numpy(zero_copy_only=False), np.float64), False


def parent_index(child: Table, fk: str, parent: Table) -> np.ndarray:
    """Each child row's parent row (-1 for a null or dangling key)."""
    assert parent.primary_key is not None
    keys = parent.data[parent.primary_key]
    values = child.data[fk]
    if values.type != keys.type:
        values = pc.cast(values, keys.type)
    idx = pc.index_in(values, value_set=keys)
    return np.asarray(idx.fill_null(-1).to_numpy(zero_copy_only=False), np.int64)


def prefix_query(groups: np.ndarray, times: np.ndarray, weights: Sequence[np.ndarray],
                 q_groups: np.ndarray, q_cuts: np.ndarray
                 ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """Over the rows with ``groups == q_group`` and ``times <= q_cut``, for each query: their
    count, the sum of each ``weights`` array, and their latest time (``NO_TIME`` if none)."""
    keep = groups >= 0
    g, t = groups[keep], times[keep]
    order = np.lexsort((t, g))
    g, t = g[order], t[order]
    uniq = np.unique(np.concatenate([t, q_cuts]))
    m = np.int64(len(uniq) + 1)
    row_keys = g * m + np.searchsorted(uniq, t)
    q_keys = np.maximum(q_groups, 0) * m + np.searchsorted(uniq, q_cuts)
    hi = np.searchsorted(row_keys, q_keys, "right")
    lo = np.searchsorted(g, np.maximum(q_groups, 0), "left")
    hi = np.where(q_groups >= 0, hi, lo)
    count = hi - lo
    sums = []
    for w in weights:
        cum = np.concatenate([[0.0], np.cumsum(w[keep][order])])
        sums.append(cum[hi] - cum[lo])
    last = np.where(count > 0, t[np.maximum(hi - 1, 0)] if t.size else NO_TIME, NO_TIME)
    return count, sums, last


@dataclass(frozen=True)
class Features:
    names: list[str]
    values: np.ndarray        # [seeds, features] float64, NaN where unknown
    categorical: np.ndarray   # [features] bool


@dataclass
class _Builder:
    names: list[str] = field(default_factory=list)
    columns: list[np.ndarray] = field(default_factory=list)
    categorical: list[bool] = field(default_factory=list)

    def add(self, name: str, values: np.ndarray, categorical: bool = False) -> None:
        self.names.append(name)
        self.columns.append(np.asarray(values, np.float64))
        self.categorical.append(categorical)

    def build(self, n: int) -> Features:
        values = np.stack(self.columns, 1) if self.columns else np.zeros((n, 0))
        return Features(self.names, values, np.array(self.categorical, bool))


def hidden_label(schema: Schema, table: Table, column: str, row_times: np.ndarray,
                 obs: np.ndarray) -> np.ndarray:
    """Where a (lagged) target cell is not known yet at the unstrict observation time."""
    lag = schema.lags.get((table.name, column))
    if lag is None:
        return np.zeros(row_times.shape, bool)
    return (row_times != NO_TIME) & (row_times + lag > obs)


def row_features(out: _Builder, schema: Schema, table: Table, rows: np.ndarray,
                 obs: np.ndarray, prefix: str, skip: str | None = None,
                 visible: np.ndarray | None = None) -> None:
    """The feature columns of ``table``'s ``rows`` (-1: none), NaN where not visible."""
    times = table.times()
    have = rows >= 0
    safe = np.where(have, rows, 0)
    seen = have if visible is None else have & visible
    for column in table.columns:
        if column.name == skip:
            continue
        got = column_values(table, column)
        if got is None:
            continue
        values, categorical = got
        v = np.where(seen, values[safe] if values.size else np.nan, np.nan)
        v[hidden_label(schema, table, column.name, times[safe], obs) & seen] = np.nan
        out.add(f"{prefix}{column.name}", v, categorical)


def aggregate_features(out: _Builder, schema: Schema, parent: str, q_rows: np.ndarray,
                       obs: np.ndarray, cut: np.ndarray, prefix: str,
                       anchor: tuple[Table, np.ndarray, str] | None) -> None:
    """As-of aggregates of the children of ``parent``'s rows ``q_rows`` (-1: none), one block
    per child foreign key. ``anchor`` (task table, anchor rows, target) keeps the seed's own
    target out of its own aggregates."""
    for child, fk in schema.children_of(parent):
        groups = parent_index(child, fk, schema.tables[parent])
        times = child.times()
        name = f"{prefix}{child.name}.{fk}"
        count, _, last = prefix_query(groups, times, [], q_rows, cut)
        out.add(f"{name}:count", count)
        age = np.where((count > 0) & (last != NO_TIME) & (obs != NEVER),
                       (obs - last) / DAY_US, np.nan)
        out.add(f"{name}:days_since_last", age)
        for column in child.columns:
            if column.stype not in ("numeric", "boolean"):
                continue
            got = column_values(child, column)
            assert got is not None
            values = got[0]
            known = ~np.isnan(values)
            lag = schema.lags.get((child.name, column.name))
            if lag is None:
                eff, q_cut = times, cut
            else:  # a label counts once known: row time + lag <= T (the unstrict time)
                eff = np.where(times == NO_TIME, NO_TIME, times + lag)
                q_cut = obs
            _, (total, n), _ = prefix_query(groups, eff, [np.where(known, values, 0.0),
                                                          known.astype(np.float64)],
                                            q_rows, q_cut)
            if anchor is not None and anchor[0].name == child.name and anchor[2] == column.name:
                # the seed's own target is never an input: take it out where it was counted
                rows = anchor[1]
                own = (groups[rows] == q_rows) & (q_rows >= 0) & known[rows] \
                    & (eff[rows] <= q_cut)
                total = total - np.where(own, values[rows], 0.0)
                n = n - own
            out.add(f"{name}.{column.name}:sum", total)
            with np.errstate(invalid="ignore", divide="ignore"):
                out.add(f"{name}.{column.name}:mean", np.where(n > 0, total / np.maximum(n, 1),
                                                                np.nan))


def build_features(schema: Schema, task_table: str, target: str, anchor_rows: np.ndarray,
                   obs_times: np.ndarray, strict: bool, aggregates: bool) -> Features:
    """The GBDT's inputs for each seed: the anchor row's own columns (its target left out),
    and with ``aggregates`` its parents' columns and the as-of aggregates of the linked rows."""
    table = schema.tables[task_table]
    rows = np.asarray(anchor_rows, np.int64)
    obs = np.where(obs_times == NO_TIME, NEVER, obs_times).astype(np.int64)
    cut = obs - 1 if strict else obs
    cut = np.where(obs == NEVER, NEVER, cut)
    out = _Builder()
    row_features(out, schema, table, rows, obs, "", skip=target)
    if aggregates:
        anchor = (table, rows, target)
        if table.primary_key is not None:
            aggregate_features(out, schema, table.name, rows, obs, cut, "self<-", anchor)
        for fk, parent_name in table.foreign_keys:
            parent = schema.tables[parent_name]
            prow = parent_index(table, fk, parent)[rows]
            ptimes = parent.times()[np.maximum(prow, 0)]
            visible = (ptimes == NO_TIME) | (ptimes <= cut)
            row_features(out, schema, parent, prow, obs, f"{fk}->{parent_name}.",
                         visible=visible)
            aggregate_features(out, schema, parent_name, prow, obs, cut,
                               f"{fk}->{parent_name}<-", anchor)
    return out.build(rows.size)


# --- seeds and split, from dlkit ---------------------------------------------------------------


@dataclass(frozen=True)
class TaskSeeds:
    table: str
    target: str
    stype: str            # boolean or numeric
    anchor_rows: np.ndarray
    obs_times: np.ndarray
    split: np.ndarray     # 0 train, 1 val, 2 test, per seed
    strict: bool
    lags: dict[tuple[str, str], int]
    metadata: dict[str, Any]


def task_seeds(db: Path, task: str, split_seed: int) -> TaskSeeds:
    import dlkit
    from dlkit.db import open_database

    database = open_database(db)
    try:
        metadata = json.loads((db / "metadata.json").read_text())
        by_name = {t.name: t for t in database.tasks}
        if task not in by_name:
            raise SystemExit(f"error: {db}: no task {task!r} (tasks: {', '.join(by_name)})")
        lags = {(t.table, t.target_column): int(t.rules.label_lag_us) for t in database.tasks
                if t.rules.label_lag_us}
        data = by_name[task]
        meta_task = next(t for t in metadata["tasks"] if t["name"] == task)
        with dlkit.Sampler(db, split_seed=split_seed, batch_size=1,
                           task_weights={task: 1.0}) as sampler:
            splits = next(s for s in sampler.splits if s.task == task)
            split = np.full(data.num_seeds, -1, np.int8)
            for code, positions in enumerate(splits.positions):
                split[np.asarray(positions)] = code
        return TaskSeeds(table=data.table, target=data.target_column,
                         stype=meta_task["target_stype_name"],
                         anchor_rows=np.array(data.anchor_row, np.int64),
                         obs_times=np.array(data.obs_time, np.int64), split=split,
                         strict=bool(data.rules.strict), lags=lags, metadata=metadata)
    finally:
        database.close()


# --- arms ----------------------------------------------------------------------------------------


def metric(stype: str, predictions: np.ndarray, labels: np.ndarray) -> float:
    if stype == "boolean":
        from sklearn.metrics import roc_auc_score

        return float(roc_auc_score(labels, predictions))
    return float(np.mean(np.abs(predictions - labels)))


def run_gbdt(features: Features, labels: np.ndarray, split: np.ndarray, stype: str,
             seed: int, loss: str = "squared_error") -> tuple[float, float]:
    """(validation metric, train seconds) of a HistGradientBoosting model."""
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=GBDT_THREADS):
        return _fit_gbdt(HistGradientBoostingClassifier, HistGradientBoostingRegressor,
                         features, labels, split, stype, seed, loss)


def _fit_gbdt(classifier: Any, regressor: Any, features: Features, labels: np.ndarray,
              split: np.ndarray, stype: str, seed: int, loss: str) -> tuple[float, float]:
    train, val = split == 0, split == 1
    # a column with (almost) no value on the train split tells nothing, and one that has no
    # value in the GBDT's own early-stopping part of it fails its binning
    used = (~np.isnan(features.values[train])).sum(axis=0) >= MIN_VALUES
    x_train, x_val = features.values[train][:, used], features.values[val][:, used]
    categorical = features.categorical[used]
    mask = categorical if categorical.any() else None
    started = time.perf_counter()
    if stype == "boolean":
        model: Any = classifier(random_state=seed, categorical_features=mask)
        model.fit(x_train, labels[train].astype(np.int64))
        seconds = time.perf_counter() - started
        predictions = model.predict_proba(x_val)[:, 1]
    else:
        model = regressor(random_state=seed, categorical_features=mask, loss=loss)
        model.fit(x_train, labels[train])
        seconds = time.perf_counter() - started
        predictions = model.predict(x_val)
    return metric(stype, predictions, labels[val]), seconds


def example_command(db: Path, task: str, seed: int, steps: int, context: str,
                    extra: Sequence[str], split_seed: int) -> list[str]:
    """The example's command line. Its learning rate decays to its floor over the run's own
    ``steps`` (``--decay-steps steps``, unless ``extra`` gives another): the example's
    default (1,000, a function of the step alone so a resumed run matches) leaves a 300-step
    run near its peak rate, and scores its last weights, a noisy iterate."""
    schedule = [] if any(a.split("=")[0] == "--decay-steps" for a in extra) else \
        ["--decay-steps", str(steps)]
    return [sys.executable, str(TRAIN_SCRIPT), "--db", str(db), "--task", task,
            "--steps", str(steps), "--seed", str(seed), "--context", context,
            "--split-seed", str(split_seed), *schedule, *extra]


def run_example(db: Path, task: str, seed: int, steps: int, context: str,
                extra: Sequence[str], split_seed: int) -> dict[str, Any]:
    """examples/train_torch.py's result line (:func:`example_command`), and its wall time as
    ``seconds``."""
    cmd = example_command(db, task, seed, steps, context, extra, split_seed)
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    seconds = time.perf_counter() - started
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"error: {' '.join(cmd)} failed ({proc.returncode}):\n"
                         f"{proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    result["seconds"] = seconds
    return result


def source_labels(schema: Schema, seeds: TaskSeeds) -> np.ndarray:
    table = schema.tables[seeds.table]
    values = pc.cast(table.data[seeds.target], pa.float64())
    labels = np.asarray(values.fill_null(np.nan).to_numpy(zero_copy_only=False), np.float64)
    return labels[seeds.anchor_rows]


# --- inputs: a database, or an input directory built here ------------------------------------


def preprocess(src: Path, out: Path) -> Path:
    if (out / "metadata.json").is_file():
        return out
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    log(f"preprocessing {src} -> {out}")
    proc = subprocess.run([sys.executable, "-m", "dlkit", "preprocess", str(src), str(out)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"error: dlkit preprocess {src} failed:\n{proc.stderr[-2000:]}")
    return out


def without_aggregates(src: Path, out: Path) -> Path:
    """A copy of the input directory (its files linked) whose dlkit.toml has no [aggregates]."""
    out.mkdir(parents=True, exist_ok=True)
    for entry in src.iterdir():
        link = out / entry.name
        if entry.name != "dlkit.toml" and not link.exists():
            link.symlink_to(entry.resolve())
    kept, skipping = [], False
    for line in (src / "dlkit.toml").read_text().splitlines(keepends=True):
        header = TABLE_HEADER.match(line)
        if header:
            skipping = header.group(1).strip().split(".")[0].strip() == "aggregates"
        if not skipping:
            kept.append(line)
    (out / "dlkit.toml").write_text("".join(kept))
    return out


@dataclass(frozen=True)
class Inputs:
    src: Path
    db: Path                   # the database as given (with aggregates when it has them)
    db_plain: Path             # without aggregate cells
    has_aggregates: bool


def resolve_inputs(db: Path, src: Path | None, work: Path) -> Inputs:
    if not (db / "metadata.json").is_file():
        if not (db / "dlkit.toml").is_file():
            raise SystemExit(f"error: {db}: neither a database nor an input directory "
                             "(no metadata.json, no dlkit.toml)")
        src, db = db, preprocess(db, work / "db")
    if src is None:
        raise SystemExit(f"error: {db} is a database: --src must name the input directory "
                         "it was built from (its Parquet tables feed the GBDT)")
    has_aggregates = "aggregates" in tomllib.loads((src / "dlkit.toml").read_text())
    plain = db
    if has_aggregates:
        plain = preprocess(without_aggregates(src, work / "src_plain"), work / "db_plain")
    return Inputs(src=src, db=db, db_plain=plain, has_aggregates=has_aggregates)


# --- the benchmark -------------------------------------------------------------------------


def summarize(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def goal_check(arms: dict[str, dict[str, Any]], stype: str) -> dict[str, Any]:
    ref_name = "rt_aggregates" if "rt_aggregates" in arms else "rt_full"
    if ref_name not in arms or "gbdt_aggregates" not in arms:
        return {"reference": ref_name, "checked": False}
    ref, gbdt = arms[ref_name]["median"], arms["gbdt_aggregates"]["median"]
    check: dict[str, Any] = {"reference": ref_name, "checked": True, "rt": ref, "gbdt": gbdt}
    if stype == "boolean":
        check.update(rule=f"AUC >= gbdt_aggregates - {AUC_MARGIN}", margin=ref - gbdt,
                     passed=bool(ref >= gbdt - AUC_MARGIN))
    else:
        check.update(rule=f"MAE <= {MAE_RATIO} x gbdt_aggregates", ratio=ref / gbdt,
                     passed=bool(ref <= MAE_RATIO * gbdt))
    if "rt_anchor_only" in arms:
        check["vs_anchor_only"] = ref - arms["rt_anchor_only"]["median"]
    if "constant" in arms:  # a bar below the constant's makes the check say little
        constant = arms["constant"]["median"]
        check["gbdt_beats_constant"] = bool(gbdt > constant if stype == "boolean"
                                            else gbdt < constant)
    return check


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    work = args.work or Path("out") / "real_data" / Path(args.db).resolve().name
    inputs = resolve_inputs(Path(args.db), args.src and Path(args.src), Path(work))
    seeds = task_seeds(inputs.db, args.task, args.split_seed)
    if seeds.stype not in ("boolean", "numeric"):
        raise SystemExit(f"error: task {args.task!r} has a {seeds.stype} target; the "
                         "benchmark takes boolean and numeric tasks")
    schema = load_schema(inputs.src, seeds.metadata, seeds.lags)
    labels = source_labels(schema, seeds)
    metric_name = "auc" if seeds.stype == "boolean" else "mae"
    split_sizes = {name: int((seeds.split == code).sum())
                   for code, name in enumerate(("train", "val", "test"))}
    log(f"task {args.task}: {seeds.stype} {seeds.table}.{seeds.target}, seeds {split_sizes}")
    arms: dict[str, dict[str, Any]] = {}
    wanted = set(args.arms.split(",")) if args.arms else None

    def record(arm: str, value: float, seconds: float, **extra: Any) -> None:
        entry = arms.setdefault(arm, {"metric": [], "train_seconds": []})
        entry["metric"].append(value)
        entry["train_seconds"].append(seconds)
        for key, val in extra.items():
            entry.setdefault(key, []).append(val)
        log(f"{arm}: {metric_name} {value:.4f} ({seconds:.1f} s)")

    feature_sets = {}
    for arm, with_aggregates in (("gbdt_anchor", False), ("gbdt_aggregates", True)):
        if wanted is None or arm in wanted:
            started = time.perf_counter()
            feature_sets[arm] = build_features(schema, seeds.table, seeds.target,
                                               seeds.anchor_rows, seeds.obs_times,
                                               seeds.strict, with_aggregates)
            log(f"{arm}: {len(feature_sets[arm].names)} features in "
                f"{time.perf_counter() - started:.1f} s")
    rt_arms = [("rt_full", inputs.db_plain, "full"),
               ("rt_anchor_only", inputs.db_plain, "anchor-only")]
    if inputs.has_aggregates:
        rt_arms.append(("rt_aggregates", inputs.db, "full"))
    for seed in range(args.seeds):
        train = seeds.split == 0
        constant = float(np.median(labels[train]))
        val = labels[seeds.split == 1]
        value = 0.5 if seeds.stype == "boolean" else metric("numeric", np.full(val.shape,
                                                                              constant), val)
        record("constant", value, 0.0)
        for arm, features in feature_sets.items():
            value, seconds = run_gbdt(features, labels, seeds.split, seeds.stype, seed,
                                      args.gbdt_loss)
            record(arm, value, seconds, features=len(features.names))
        for arm, db, context in rt_arms:
            if (wanted is not None and arm not in wanted) or seed >= args.rt_seeds:
                continue
            result = run_example(db, args.task, seed, args.steps, context, args.rt_args,
                                 args.split_seed)
            if int(result["val_count"]) != split_sizes["val"]:
                raise SystemExit(f"error: {arm} scored {result['val_count']} val seeds, "
                                 f"the split has {split_sizes['val']}")
            record(arm, float(result["val_metric"]), float(result["seconds"]),
                   step_ms=float(result["step_ms"]),
                   **{key: float(result[key]) for key in RT_LOSSES})
    for entry in arms.values():
        entry["median"] = summarize(entry["metric"])
        entry["median_train_seconds"] = summarize(entry["train_seconds"])
    return {"db": str(inputs.db), "task": args.task, "table": seeds.table,
            "target": seeds.target, "stype": seeds.stype, "metric": metric_name,
            "seeds": list(range(args.seeds)), "rt_seeds": list(range(args.rt_seeds)),
            "steps": args.steps, "gbdt_loss": args.gbdt_loss, "split": split_sizes,
            "arms": arms, "goal": goal_check(arms, seeds.stype)}


def render(report: dict[str, Any]) -> str:
    lines = [f"{report['db']} task {report['task']} ({report['stype']}, {report['metric']}), "
             f"split {report['split']}, {report['steps']} steps"]
    for arm, entry in report["arms"].items():
        per_seed = " / ".join(f"{v:.3f}" for v in entry["metric"])
        lines.append(f"  {arm:16s} median {entry['median']:.4f}  ({per_seed})  "
                     f"train {entry['median_train_seconds']:.1f} s")
    goal = report["goal"]
    if goal.get("checked"):
        weak = "" if goal.get("gbdt_beats_constant", True) else \
            " (the GBDT is no better than the constant)"
        lines.append(f"  goal: {goal['reference']} {goal['rt']:.4f} vs gbdt_aggregates "
                     f"{goal['gbdt']:.4f}: {goal['rule']}: "
                     f"{'passed' if goal['passed'] else 'NOT reached'}{weak}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", required=True, help="database, or input directory")
    parser.add_argument("--src", default=None, help="input directory the database was built from")
    parser.add_argument("--task", required=True)
    parser.add_argument("--seeds", type=int, default=3, help="runs per arm (seeds 0..N-1)")
    parser.add_argument("--rt-seeds", type=int, default=None,
                        help="runs of the example's arms (default: --seeds; fewer on a busy "
                             "machine, where one run takes minutes)")
    parser.add_argument("--steps", type=int, default=300, help="train steps of the example")
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--arms", default=None,
                        help="comma-separated arms to run (default: all)")
    parser.add_argument("--work", type=Path, default=None,
                        help="where an input directory is built (default out/real_data/NAME)")
    parser.add_argument("--rt-arg", dest="rt_args", action="append", default=[],
                        help="an extra argument for examples/train_torch.py (repeatable), "
                             "e.g. --rt-arg=--sequence-length --rt-arg=256")
    parser.add_argument("--gbdt-loss", choices=("squared_error", "absolute_error"),
                        default="squared_error",
                        help="the GBDT's loss on a numeric target (default squared_error, the "
                             "example's; absolute_error fits the MAE it is scored by)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.rt_seeds is None:
        args.rt_seeds = args.seeds
    if args.seeds < 1 or args.steps < 1 or not 0 <= args.rt_seeds <= args.seeds:
        parser.error("--seeds and --steps must be positive, --rt-seeds from 0 to --seeds")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    report = benchmark(args)
    print(json.dumps(report) if args.json else render(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
