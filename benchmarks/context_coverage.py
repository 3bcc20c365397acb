#!/usr/bin/env python3
"""How much of a seed's own history its sequence holds, per child policy, width and length.

For seeds of one task, the *entities* of a seed are its row and the row's foreign-key parents
(a ballot's player, an order's user). For each child table this counts the entities'
children visible at the observation time, how many of them the sequence took, and whether
the latest visible one of them all is in it (with several parents, e.g. a salary's player and
team, that is often another entity's: the team's other salaries of the same day): the
figures the choice of ``bfs_child_width``, ``bfs_child_policy`` and the sequence length is
made from (docs/batch_format.md, "Child policies")::

    python benchmarks/context_coverage.py out/db --task churn --seeds 300
    python benchmarks/context_coverage.py out/db --task churn --json

Prints one line per (policy, S, W): per child table "taken / visible" (means over the seeds
with such children) and the share of those seeds whose latest child is in the sequence.
Builds batches only (no model); the same seeds for every configuration.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from typing import Any

import numpy as np

from dlkit.core.codes import NO_TIME
from dlkit.db import open_database
from dlkit.sampler.batch import BatchBuilder, BatchConfig, ChildPolicy


def coverage(db: Any, task: str, seeds: int, length: int, width: int, policy: str,
             seed: int = 0) -> dict[str, dict[str, float]]:
    """Per child table: mean visible, mean taken, share with the latest taken (over the seeds
    whose entities have a visible child of that table)."""
    builder = BatchBuilder(db, BatchConfig(length, length, width,
                                           bfs_child_policy=ChildPolicy.parse(policy)), seed)
    view = builder.task(task)
    strict = int(view.rules.strict)
    rng = np.random.default_rng(0)
    picks = np.sort(rng.choice(view.num_seeds, min(seeds, view.num_seeds), replace=False))
    graph = db.graph
    names = [t.name for t in db.tables]
    offsets = np.asarray(db.table_offsets)
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for start in range(0, len(picks), 64):
        built = builder.build(view, picks[start:start + 64], 0)
        for b in range(built.visited_rows.shape[0]):
            n = int(built.visited_counts[b])
            visited = set(built.visited_rows[b, :n].tolist())
            obs = int(built.obs_times[b])
            cutoff = np.iinfo(np.int64).max if obs == NO_TIME else obs - strict
            seed_row = int(built.visited_rows[b, 0])
            entities = [seed_row] + graph.parent_ids[
                graph.parent_offsets[seed_row]:graph.parent_offsets[seed_row + 1]].tolist()
            per_table: dict[str, list[int]] = {}
            for entity in entities:
                lo, hi = int(graph.child_offsets[entity]), int(graph.child_offsets[entity + 1])
                k = int(np.searchsorted(graph.child_times[lo:hi], cutoff, side="right"))
                for child in graph.child_ids[lo:lo + k].tolist():
                    if child == seed_row:
                        continue
                    table = names[int(np.searchsorted(offsets, child, side="right")) - 1]
                    per_table.setdefault(table, []).append(int(child))
            for table, children in per_table.items():
                s = sums[table]
                s[0] += 1
                s[1] += len(children)
                s[2] += sum(c in visited for c in children)
                s[3] += children[-1] in visited  # the list is in time order
    return {t: {"seeds": int(s[0]), "visible": s[1] / s[0], "taken": s[2] / s[0],
                "latest_taken": s[3] / s[0]} for t, s in sorted(sums.items())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("db")
    parser.add_argument("--task", required=True)
    parser.add_argument("--seeds", type=int, default=300)
    parser.add_argument("--lengths", default="128,512,1024")
    parser.add_argument("--widths", default="16,64")
    parser.add_argument("--policies", default="uniform,recent,quota")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    with open_database(args.db) as db:
        for length in (int(x) for x in args.lengths.split(",")):
            for width in (int(x) for x in args.widths.split(",")):
                for policy in args.policies.split(","):
                    tables = coverage(db, args.task, args.seeds, length, width, policy)
                    rows.append({"policy": policy, "S": length, "W": width, "tables": tables})
                    if not args.json:
                        cells = "; ".join(f"{t} {v['taken']:.1f}/{v['visible']:.1f} "
                                          f"latest {v['latest_taken']:.0%}"
                                          for t, v in tables.items())
                        print(f"{policy:8} S={length:<5} W={width:<3} {cells}", flush=True)
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
