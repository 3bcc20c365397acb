"""What a mixture of databases holds open (docs/mixture.md §4, "Resources"): a database's
files smaller than ``READ_BELOW_BYTES`` are read, so a mixture of small databases holds no
file descriptor; a mapped file holds one, so K databases of F mapped files hold K * F, all
given back when the sampler is shut down and dropped. Counted in ``/proc/self/fd``, against
the files on disk."""

from __future__ import annotations

import gc
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from dlkit.db import preprocess
from dlkit.db.read import mapped
from dlkit.sampler import BATCH_KEYS, Sampler

EXAMPLE = Path(__file__).resolve().parents[2] / "fixtures" / "example_db"
K = 3
SHAPE = dict(batch_size=4, sequence_length=48, max_rows=12, bfs_child_width=3, num_prefetch=0,
             seed=11)
METADATA_FILES = ("manifest.json", "metadata.json")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def mapped_files(db: Path) -> int:
    """Files the reader makes arrays of: every non-empty file but the two JSON ones."""
    return sum(1 for p in db.rglob("*") if p.is_file() and p.name not in METADATA_FILES
               and p.stat().st_size > 0)


@pytest.fixture(scope="module")
def databases(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("mixture")
    out = []
    for k in range(K):
        source = root / f"source-{k}"
        shutil.copytree(EXAMPLE, source)
        toml = source / "dlkit.toml"
        toml.write_text(toml.read_text().replace('name = "example-shop"', f'name = "shop-{k}"'))
        preprocess(source, root / f"shop-{k}", fsync=False)
        out.append(root / f"shop-{k}")
    with Sampler(out[:1], **SHAPE) as warm:  # load the kernels before anything is counted
        warm.next_train_batch()
    return out


def batches(paths: list[Path], count: int) -> tuple[list[dict[str, np.ndarray]], int, int]:
    """``count`` train batches of the mixture, the descriptors it added while open and after
    it was shut down and dropped."""
    gc.collect()
    before = open_fds()
    sampler = Sampler(paths, **SHAPE)
    pulled = [sampler.next_train_batch() for _ in range(count)]
    held = open_fds() - before
    sampler.shutdown()
    del sampler
    gc.collect()
    return pulled, held, open_fds() - before


def test_a_mixture_of_small_databases_holds_no_descriptor(databases):
    assert all(p.stat().st_size < mapped.READ_BELOW_BYTES
               for db in databases for p in db.rglob("*") if p.is_file())
    _, held, left = batches(databases, 4)
    assert held == 0 and left == 0


def test_mapped_files_hold_one_descriptor_each_until_the_sampler_goes(databases, monkeypatch):
    read, _, _ = batches(databases, 12)
    monkeypatch.setattr(mapped, "READ_BELOW_BYTES", 0)  # map every file, as a large database
    for k in (1, K):
        pulled, held, left = batches(databases[:k], 12)
        assert held == sum(mapped_files(db) for db in databases[:k])
        assert left == 0
    assert {int(b["database_idx"][0]) for b in pulled} == set(range(K))
    for ours, theirs in zip(read, pulled, strict=True):  # reading changes no batch
        for key in BATCH_KEYS:
            assert np.array_equal(ours[key], theirs[key]), key
