"""How many not-yet-known labels a sequence shows without a label lag, and with one.

A flights-like database: flights depart within an hour and land one to five hours later;
their arrival delay is known only on landing. The task predicts a flight's arrival delay at
its departure, and its context reaches the other flights of the same hour through their
shared hour row. Without a label lag, every flight of the hour that departed at or before
the seed shows its arrival delay, though none has landed; with `label_lag = "6h"` those cells
are hidden (`is_hidden = 1`). Prints, for one batch of sequences each, how many sequences
show a not-yet-known delay and how many such cells are shown and hidden.

    python benchmarks/label_leakage.py [--flights 4000] [--batch 256]
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dlkit.db import open_database, preprocess
from dlkit.sampler import Sampler, SamplerWarning

HOUR = 3_600_000_000
LAG = 6 * HOUR


def write_flights(root: Path, flights: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    hours = max(1, flights // 40)
    hour_time = 1_700_000_000_000_000 + np.arange(hours, dtype=np.int64) * HOUR
    pq.write_table(pa.table({"hour_id": np.arange(hours),
                             "time": pa.array(hour_time, pa.timestamp("us")),
                             "visibility": rng.normal(10, 3, hours)}), root / "hours.parquet")
    hour = rng.integers(0, hours, flights)
    departs = hour_time[hour] + rng.integers(0, HOUR, flights)
    pq.write_table(pa.table({"flight_id": np.arange(flights), "hour_id": hour,
                             "departs": pa.array(departs, pa.timestamp("us")),
                             "distance": rng.integers(200, 3000, flights),
                             "arr_delay": rng.normal(5, 20, flights)}),
                   root / "flights.parquet")


SCHEMA = """name = "flights"
[tables.hours]
primary_key = "hour_id"
time_column = "time"
[tables.flights]
primary_key = "flight_id"
time_column = "departs"
foreign_keys = {{ hour_id = "hours" }}
[tasks.arr_delay]
table = "flights"
target = "arr_delay"
{lag}
"""


def count(db_path: Path, batch: int) -> tuple[int, int, int, int]:
    """(sequences, sequences showing a not-yet-known delay, such cells shown, hidden)."""
    with open_database(db_path) as db:
        times = np.asarray(db.graph.row_times)
        delay_column = db.table("flights").column("arr_delay").column_id
        with Sampler(db, 0, 1, batch_size=batch, num_prefetch=0, sequence_length=512,
                     max_rows=128, bfs_child_width=64, split_ratios=(1.0, 0.0, 0.0)) as s:
            built = s.next_built_batch("train")
    a = built.arrays
    cells = (a["column_ids"] == delay_column) & (a["is_target"] == 0) & (a["is_padding"] == 0)
    leaking, shown, hidden = set(), 0, 0
    for b, p in zip(*np.nonzero(cells)):
        row = built.visited_rows[b, a["seq_row_ids"][b, p]]
        if times[row] + LAG > built.obs_times[b]:  # departed less than 6 h before: not landed
            if a["is_hidden"][b, p]:
                hidden += 1
            else:
                shown += 1
                leaking.add(int(b))
    return a["labels"].shape[0], len(leaking), shown, hidden


def main() -> None:
    warnings.simplefilter("ignore", SamplerWarning)  # every seed is train: val/test are empty
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flights", type=int, default=4000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "in").mkdir()
        write_flights(root / "in", args.flights, args.seed)
        for name, lag in (("no lag", ""), ('label_lag = "6h"', 'label_lag = "6h"')):
            (root / "in" / "dlkit.toml").write_text(SCHEMA.format(lag=lag))
            out = root / name.replace(" ", "_").replace('"', "").replace("=", "")
            preprocess(root / "in", out, fsync=False)
            sequences, leaking, shown, hidden = count(out, args.batch)
            print(f"{name:>18}: {leaking} of {sequences} sequences show a delay not known yet; "
                  f"such cells shown {shown}, hidden {hidden}")


if __name__ == "__main__":
    main()
