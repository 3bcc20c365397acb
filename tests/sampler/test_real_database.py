"""The sampler on a real database made by `dlkit preprocess` from the bundled example."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dlkit.db import open_database, preprocess
from dlkit.errors import DatabaseError
from dlkit.sampler import Sampler
from dlkit.sampler.batch import BatchBuilder, BatchConfig
from tests import naive_sampler as naive
from tests.sampler.test_batch import assert_matches_reference
from tests.sampler.test_database import assert_is_a_sampler_database

EXAMPLE = Path(__file__).resolve().parents[2] / "fixtures" / "example_db"


@pytest.fixture(scope="module")
def db_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("example") / "db"
    preprocess(EXAMPLE, path, fsync=False)
    return path


def test_the_reader_database_satisfies_the_sampler_protocol(db_path):
    with open_database(db_path) as db:
        assert_is_a_sampler_database(db)


@pytest.mark.parametrize("width,S,R", [(16, 1024, 256), (2, 40, 9)])
def test_seeds_match_the_reference(db_path, width, S, R):
    with open_database(db_path) as db:
        builder = BatchBuilder(db, BatchConfig(S, R, width), seed=42)
        for view, task in zip(builder.tasks, db.tasks):
            seeds = np.arange(0, view.num_seeds, 9)  # the reference is slow: a spread subset
            built = builder.build(view, seeds, epoch=3)
            assert_matches_reference(db, built, task, S=S, R=R, width=width, seed=42, epoch=3)


def test_no_row_after_the_observation_time_and_fk_adj_is_graph_bin(db_path):
    with open_database(db_path) as db:
        g = db.graph
        builder = BatchBuilder(db, BatchConfig(1024, 256, 4), seed=1)
        checked_edges = 0
        for view in builder.tasks:
            built = builder.build(view, np.arange(view.num_seeds), epoch=0)
            for b in range(view.num_seeds):
                rows = built.visited_rows[b, :built.visited_counts[b]]
                times = g.row_times[rows]
                obs = int(built.obs_times[b])
                assert obs == naive.NO_TIME or np.all((times == naive.NO_TIME) | (times <= obs))
                adj = built.arrays["fk_adj"][b]
                n = len(rows)
                for i, row in enumerate(rows):
                    parents = g.parent_ids[g.parent_offsets[row]:g.parent_offsets[row + 1]]
                    assert np.array_equal(adj[i, :n], np.isin(rows, parents).astype(np.uint8))
                checked_edges += int(adj.sum())
                assert not adj[n:].any() and not adj[:, n:].any()
        assert checked_edges > 1000


def test_sampler_on_a_database_path(db_path):
    with Sampler(str(db_path), 0, 1, batch_size=8, num_threads=2, seed=3) as s:
        batch = s.next_train_batch()
        assert batch["numeric_values"].shape == (8, 1024)
        assert s.column_embeddings().shape[0] == s.database_metadata().num_columns
        assert s.next_val_batch()["fk_adj"].shape == (8, 256, 256)


def test_a_corrupt_database_is_one_clear_error(db_path, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(db_path, broken)
    graph = broken / "graph.bin"
    graph.write_bytes(graph.read_bytes()[:-8])
    with pytest.raises(DatabaseError, match="graph.bin"):
        Sampler(broken, 0, 1)
    with pytest.raises(DatabaseError):
        Sampler(tmp_path / "missing", 0, 1)


def test_int64_ids_and_offsets_give_the_same_batches(db_path, tmp_path, monkeypatch):
    """A graph beyond 2^31 rows or edges stores int64 row ids or offsets; forced on the
    example, every batch is the same as with the int32 ones a database of its size gets."""
    from dlkit.db import format as fmt

    wide = tmp_path / "wide"
    with monkeypatch.context() as patch:
        patch.setattr(fmt, "MAX_INT32_ROWS", 0)
        patch.setattr(fmt, "MAX_INT32_EDGES", 0)
        preprocess(EXAMPLE, wide, fsync=False)
    names = ("parent_offsets", "parent_ids", "child_offsets", "child_ids")
    with open_database(db_path) as narrow_db, open_database(wide) as wide_db:
        for name in names:
            assert getattr(narrow_db.graph, name).dtype == np.int32
            assert getattr(wide_db.graph, name).dtype == np.int64
            assert np.array_equal(getattr(narrow_db.graph, name), getattr(wide_db.graph, name))
        config = BatchConfig(256, 64, 4)
        narrow = BatchBuilder(narrow_db, config, seed=5)
        wide_builder = BatchBuilder(wide_db, config, seed=5)
        for a, b in zip(narrow.tasks, wide_builder.tasks):
            seeds = np.arange(a.num_seeds)
            x, y = narrow.build(a, seeds, epoch=1), wide_builder.build(b, seeds, epoch=1)
            assert x.arrays.keys() == y.arrays.keys()
            for key in x.arrays:
                assert np.array_equal(x.arrays[key], y.arrays[key]), key



def test_every_label_is_the_source_value_of_its_seed(db_path):
    """Labels of every seed of every split (one eval pass each) against the Parquet source
    and metadata.json, read here without the database reader."""
    import json

    import pyarrow.parquet as pq

    meta = json.loads((db_path / "metadata.json").read_text())
    checked = 0
    with Sampler(db_path, 0, 1, batch_size=16, num_prefetch=0) as s:
        for task in meta["tasks"]:
            table = next(t for t in meta["tables"] if t["name"] == task["table"])
            column = next(c for c in table["columns"] if c["name"] == task["target_column"])
            source = pq.read_table(EXAMPLE / f"{task['table']}.parquet").column(
                task["target_column"]).to_pylist()
            anchors = np.fromfile(db_path / "tasks" / task["name"] / "anchor_row.bin", "<i8")
            info = s.label_info(task["name"])
            assert info.stype_name == column["stype_name"]
            seen = []
            for split in ("train", "val", "test"):
                for batch in s.iter_eval(split, task=task["name"]):
                    real = batch["sequence_mask"].astype(bool)
                    for anchor, label in zip(batch["anchor_rows"][real], batch["labels"][real]):
                        value = source[int(anchor)]
                        if column["stype_name"] == "numeric":
                            assert batch["labels"].dtype == np.float32
                            assert label == np.float32((value - column["mean"]) / column["std"])
                            assert abs(info.to_units(label) - value) <= 1e-5 * column["std"]
                        elif column["stype_name"] == "boolean":
                            assert label == float(value)
                        else:
                            assert column["stype_name"] == "categorical"
                            assert batch["labels"].dtype == np.int64
                            assert column["categories"][int(label)] == value
                            assert info.categories[int(label)] == value
                            assert int(batch["cat_emb_start"][0]) == column["cat_emb_start"]
                        seen.append(int(anchor))
            # Every seed (every row with a non-null target) was labelled exactly once.
            assert sorted(seen) == anchors.tolist() == [
                r for r, v in enumerate(source) if v is not None]
            checked += len(seen)
    assert checked == sum(t["num_seeds"] for t in meta["tasks"])
