"""The viewer's context of a seed is the Sampler's own sequence for that seed (cells, rows,
foreign-key links), and its child counts agree with the source tables read with pyarrow."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

import dlkit
from dlkit.db import open_database
from dlkit.sampler.batch import ChildPolicy, ContextExamplePolicy
from dlkit.viewer.context import Knobs, build_context, seeds_by_split
from tests.db.conftest import EXAMPLE

KNOBS = [Knobs(48, 12, 2), Knobs(256, 64, 16),
         Knobs(1024, 64, 1, ChildPolicy.UNIFORM, 3, ContextExamplePolicy.PARENT)]


def _sampler_sequences(db_path, task, split, knobs):
    """anchor row -> (its batch, its index in the batch), from the Sampler's eval pass."""
    out = {}
    with dlkit.Sampler(db_path, batch_size=8, sequence_length=knobs.sequence_length,
                       max_rows=knobs.max_rows, bfs_child_width=knobs.bfs_child_width,
                       context_examples=knobs.context_examples,
                       context_example_policy=knobs.context_example_policy,
                       num_prefetch=0) as sampler:
        for batch in sampler.iter_eval(split, task):
            for b in np.flatnonzero(batch["sequence_mask"]):
                out[int(batch["anchor_rows"][b])] = (batch, int(b))
    return out


@pytest.mark.parametrize("knobs", KNOBS, ids=lambda k: k.key())
@pytest.mark.parametrize("task", ["review_rating", "user_premium"])
def test_context_is_the_samplers_sequence(example_db, task, knobs):
    sequences = _sampler_sequences(example_db, task, "val", knobs)
    with open_database(example_db) as db:
        anchors = seeds_by_split(db, task)["val"]
        assert sorted(sequences) == sorted(int(a) for a in anchors)
        column_names = {c.column_id: c.name for c in db.columns}
        example_rows = 0
        for anchor in anchors[:4]:
            ctx = build_context(db, task, int(anchor), knobs)
            batch, b = sequences[int(anchor)]
            real = np.flatnonzero(batch["is_padding"][b] == 0)
            assert ctx["num_cells"] == real.size
            cells = [(r["index"], c) for r in ctx["rows"] for c in r["cells"]]
            rows = {r["index"]: r for r in ctx["rows"]}
            assert [c["position"] for _, c in cells] == list(range(real.size))
            for row, cell in cells:
                p = cell["position"]
                assert int(batch["seq_row_ids"][b, p]) == row
                assert column_names[int(batch["column_ids"][b, p])] == cell["column"]
                assert bool(batch["is_target"][b, p]) == cell["target"]
                assert bool(batch["is_hidden"][b, p]) == cell["hidden"]
                assert bool(batch["is_null"][b, p]) == cell["null"]
                assert bool(batch["is_context_example"][b, p]) == rows[row]["context_example"]
            example_rows += ctx["num_example_rows"]
            assert ctx["num_example_rows"] == sum(r["context_example"] for r in ctx["rows"])
            # the foreign-key links among visited rows are the batch's fk_adj
            n = ctx["num_rows"]
            adj = np.zeros((n, n), dtype=bool)
            for r in ctx["rows"]:
                adj[r["index"], r["parents"]] = True
            assert (adj == batch["fk_adj"][b, :n, :n].astype(bool)).all()
        # the example settings fill these short sequences; without them no row is an example
        assert (example_rows > 0) == (knobs.context_examples > 0)


def _us(value) -> int:
    return (value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def test_child_counts_match_the_source_tables(example_db):
    """For a review seed: its user's orders and reviews visible at the review's time, counted
    from the Parquet files, are what the context says the user row had visible."""
    users = pq.read_table(EXAMPLE / "users.parquet").to_pylist()
    orders = pq.read_table(EXAMPLE / "orders.parquet").to_pylist()
    reviews = pq.read_table(EXAMPLE / "reviews.parquet").to_pylist()
    with open_database(example_db) as db:
        for anchor in seeds_by_split(db, "review_rating")["train"][:6]:
            ctx = build_context(db, "review_rating", int(anchor), Knobs(1024, 256, 1))
            seed = reviews[int(anchor)]
            obs = _us(seed["created_at"])
            user_row = next(r for r in ctx["rows"] if r["table"] == "users" and r["depth"] == 1)
            assert users[user_row["local_row"]]["user_id"] == seed["user_id"]
            expected = {
                "orders": sum(o["user_id"] == seed["user_id"] and _us(o["ordered_at"]) <= obs
                              for o in orders),
                "reviews": sum(r["user_id"] == seed["user_id"] and _us(r["created_at"]) <= obs
                               for r in reviews)}
            got = {c["table"]: c["visible"] for c in user_row["children"]}
            assert got == {t: n for t, n in expected.items() if n}
            in_sequence = {(r["table"], r["local_row"]) for r in ctx["rows"]}
            for c in user_row["children"]:
                assert c["taken"] <= c["visible"]
            # width 1: at most one child per table reached from this row, plus the seed itself
            taken = {c["table"]: c["taken"] for c in user_row["children"]}
            assert taken["reviews"] >= 1 and ("reviews", int(anchor)) in in_sequence


def test_a_row_that_is_no_seed_is_refused(example_db):
    with open_database(example_db) as db:
        with pytest.raises(dlkit.errors.InvalidArgumentError, match="not a seed"):
            build_context(db, "review_rating", 10**9, Knobs())


@pytest.mark.parametrize("split, step", [("train", 0), ("train", 45), ("val", 6)])
def test_a_step_is_the_batch_dlkit_batches_writes(example_db, tmp_path, split, step):
    """Step K's seeds and their contexts (at the step's epoch) are those of the batch
    `dlkit batches` writes as step K."""
    from dlkit.viewer.context import step_seeds
    from tests.cli.helpers import run_dlkit

    out = tmp_path / "batches"
    done = run_dlkit("batches", example_db, "--task", "review_rating", "--split", split,
                     "--steps", step + 1, "-b", 4, "-S", 64, "-R", 16, "--bfs-child-width", 2,
                     "--out", out, "-q")
    assert done.returncode == 0, done.stderr.decode()
    index = json.loads((out / "index.json").read_text())
    written = index["batches"][step]
    batch = np.load(out / f"step_{step:06d}.npz")
    with open_database(example_db) as db:
        found = step_seeds(db, "review_rating", split, step, batch_size=4)
        assert list(found.anchors) == written["anchor_rows"]
        assert found.epoch == written["epoch"]
        for b, anchor in enumerate(found.anchors):
            ctx = build_context(db, "review_rating", anchor, Knobs(64, 16, 2),
                                epoch=found.epoch)
            real = int((batch["is_padding"][b] == 0).sum())
            assert ctx["num_cells"] == real
            rows = [r["index"] for r in ctx["rows"] for _ in r["cells"]]
            assert rows == batch["seq_row_ids"][b, :real].tolist()
