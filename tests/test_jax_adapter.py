"""dlkit.jax: a batch on a device, the global batch over a mesh (one process with one and with
two devices), the resident tables, rank and world from JAX, and the error without jax."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec

import dlkit.jax as dlj
from dlkit.db import preprocess
from dlkit.errors import InvalidArgumentError
from dlkit.sampler import Sampler
from tests.example_copies import example_named

EXAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "example_db"
SHAPE = {"batch_size": 8, "sequence_length": 256, "max_rows": 64, "num_threads": 1}
TEXT = 4


@pytest.fixture(scope="module")
def db_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("jax_adapter") / "db"
    preprocess(EXAMPLE, path, fsync=False)
    return path


@pytest.fixture(scope="module")
def batches(db_path):
    """One train batch of each task (numeric, categorical and boolean labels)."""
    with Sampler(db_path, 0, 1, seed=5, **SHAPE) as sampler:
        out = {}
        for batch in itertools.islice(sampler, 40):
            out.setdefault(int(batch["task_idx"][0]), batch)
        assert len(out) == 3
        return [out[t] for t in sorted(out)]


def expected_device_dtype(key: str, array: np.ndarray) -> np.dtype:
    """JAX without x64 holds int64 as int32; every other dtype as it is."""
    return np.dtype(np.int32) if array.dtype == np.int64 else array.dtype


def test_device_batch_puts_every_key_on_the_device(batches):
    assert not jax.config.jax_enable_x64
    for batch in batches:
        on_device = dlj.device_batch(batch)
        assert list(on_device) == [k for k in batch if k != "observation_times"]
        for key, value in on_device.items():
            assert isinstance(value, jax.Array), key
            assert value.devices() == {jax.devices()[0]}, key
            assert value.dtype == expected_device_dtype(key, batch[key]), key
            if key != "text_batch_embeddings":
                assert value.shape == batch[key].shape, key
                assert np.array_equal(np.asarray(value), batch[key]), key
        text, table = np.asarray(on_device["text_batch_embeddings"]), batch["text_batch_embeddings"]
        U = table.shape[0]
        assert text.shape[0] == 1 << max(0, U - 1).bit_length() >= max(U, 1)
        assert np.array_equal(text[:U], table) and not text[U:].any()


def test_int64_keys_that_do_not_fit_int32_are_refused_by_name(batches):
    batch = dict(batches[0])
    with pytest.raises(InvalidArgumentError, match="'observation_times'.*leave it out of keys"):
        dlj.device_batch(batch, keys=["observation_times"])
    batch["anchor_rows"] = batch["anchor_rows"] + (1 << 40)
    with pytest.raises(InvalidArgumentError, match="'anchor_rows' holds int64 values outside "
                                                   "int32.*jax_enable_x64"):
        dlj.device_batch(batch)
    with pytest.raises(InvalidArgumentError, match=r"keys \['nope'\] are not in the batch"):
        dlj.device_batch(batch, keys=["nope"])


def test_with_x64_every_key_keeps_its_dtype(batches):
    jax.config.update("jax_enable_x64", True)
    try:
        on_device = dlj.device_batch(batches[0])
        assert list(on_device) == list(batches[0])
        for key in ("anchor_rows", "observation_times"):
            assert on_device[key].dtype == np.int64
            assert np.array_equal(np.asarray(on_device[key]), batches[0][key])
    finally:
        jax.config.update("jax_enable_x64", False)


def test_a_fixed_text_capacity_pads_and_a_too_small_one_is_refused(batches):
    batch = batches[0]
    U = batch["text_batch_embeddings"].shape[0]
    out = dlj.device_batch(batch, text_capacity=U + 3)
    assert out["text_batch_embeddings"].shape == (U + 3, batch["text_batch_embeddings"].shape[1])
    with pytest.raises(InvalidArgumentError, match=f"text_capacity {U - 1} is smaller than "
                                                   f"this batch's {U} distinct texts"):
        dlj.device_batch(batch, text_capacity=U - 1)


def test_global_batch_on_one_process_shards_the_batch_axis(batches):
    mesh = dlj.batch_mesh()
    for batch in batches:
        out = dlj.global_batch(batch, mesh)
        for key, value in out.items():
            spec = value.sharding.spec
            if key in dlj.REPLICATED_KEYS:
                assert spec == PartitionSpec(), key
            else:
                assert spec == PartitionSpec(dlj.BATCH_AXIS), key
            if key != "text_batch_embeddings":
                assert value.shape == batch[key].shape, key
                assert np.array_equal(np.asarray(value), batch[key]), key
        text_cells = batch["semantic_types"] == TEXT
        table = np.asarray(out["text_batch_embeddings"])
        ids = np.asarray(out["text_embed_ids"])
        assert np.array_equal(table[ids[text_cells]],
                              batch["text_batch_embeddings"][batch["text_embed_ids"][text_cells]])


def test_upload_tables_replicates_the_samplers_tables(db_path):
    with Sampler(db_path, 0, 1, **SHAPE) as sampler:
        tables = dlj.upload_tables(sampler)
        assert np.array_equal(np.asarray(tables["column_embeddings"]),
                              sampler.column_embeddings())
        assert np.array_equal(np.asarray(tables["categorical_embeddings"]),
                              sampler.categorical_embeddings())
        assert all(t.sharding.spec == PartitionSpec() and t.dtype == np.float16
                   for t in tables.values())


def test_a_mixture_uploads_its_shared_tables_and_replicates_database_idx(tmp_path, db_path):
    other = example_named(tmp_path, "other-shop")
    with dlj.make_sampler([db_path, other], global_batch_size=8,
                          sequence_length=256, max_rows=64, seed=2) as mix, \
            Sampler(db_path, 0, 1, **SHAPE) as alone:
        tables = dlj.upload_tables(mix)
        own = alone.column_embeddings()
        assert np.array_equal(np.asarray(tables["column_embeddings"]),
                              np.concatenate([own, own]))
        assert "database_idx" in dlj.REPLICATED_KEYS
        seen = set()
        for batch in itertools.islice(mix, 12):
            out = dlj.global_batch(batch)
            assert out["database_idx"].sharding.spec == PartitionSpec()
            assert int(np.asarray(out["database_idx"])[0]) == int(batch["database_idx"][0])
            seen.add(int(batch["database_idx"][0]))
        assert seen == {0, 1}


def test_make_sampler_takes_rank_and_world_from_jax(db_path):
    assert dlj.rank_and_world() == (0, 1)
    with dlj.make_sampler(db_path, global_batch_size=8, sequence_length=256,
                          max_rows=64) as sampler:
        assert (sampler.config.rank, sampler.config.world_size) == (0, 1)
        assert sampler.config.batch_size == 8
    with pytest.raises(InvalidArgumentError, match="exactly one of batch_size"):
        dlj.make_sampler(db_path, batch_size=4, global_batch_size=8)
    with pytest.raises(InvalidArgumentError, match="positive multiple"):
        dlj.make_sampler(db_path, global_batch_size=0)


TWO_DEVICES = """
import sys, numpy as np, jax
from jax.sharding import PartitionSpec
import dlkit.jax as dlj
from dlkit.errors import InvalidArgumentError
from dlkit.sampler import Sampler
assert len(jax.devices()) == 2
with Sampler(sys.argv[1], 0, 1, seed=5, batch_size=8, sequence_length=256, max_rows=64,
             num_threads=1) as sampler:
    batch = sampler.next_train_batch()
    odd = Sampler(sys.argv[1], 0, 1, batch_size=3, sequence_length=256, max_rows=64,
                  num_prefetch=0)
    odd_batch = odd.next_train_batch()
    odd.shutdown()
mesh = dlj.batch_mesh()
out = dlj.global_batch(batch, mesh)
for key, value in out.items():
    shards = sorted(value.addressable_shards, key=lambda s: s.device.id)
    assert len(shards) == 2, key
    if key in dlj.REPLICATED_KEYS:
        assert all(np.array_equal(np.asarray(s.data), batch[key]) for s in shards), key
        continue
    rows = value.shape[0] // 2
    if key != "text_batch_embeddings":
        for i, s in enumerate(shards):
            assert np.array_equal(np.asarray(s.data), batch[key][i * rows:(i + 1) * rows]), key
assert out["text_batch_embeddings"].shape[0] % 2 == 0
for bad, match in ((lambda: dlj.global_batch(odd_batch, mesh), "not a multiple of its 2"),
                   (lambda: dlj.global_batch(batch, mesh, text_capacity=5), "multiple of the 2")):
    try:
        bad()
    except InvalidArgumentError as exc:
        assert match in str(exc), exc
    else:
        raise AssertionError(match)
print("ok")
"""


def test_global_batch_splits_the_batch_over_two_local_devices(db_path):
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
           "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, "-c", TWO_DEVICES, str(db_path)], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_without_jax_the_error_names_the_extra():
    script = textwrap.dedent("""
        import sys
        sys.modules['jax'] = None
        import dlkit
        from dlkit.errors import MissingExtraError
        try:
            import dlkit.jax
        except MissingExtraError as exc:
            print(exc.code, exc)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    code, message = result.stdout.strip().split(" ", 1)
    assert code == "MISSING_EXTRA"
    assert message.startswith("dlkit.jax needs JAX")
    assert message.endswith("pip install '.[jax]' in a checkout of dlkit")


TWO_PROCESSES = """
import sys, numpy as np, jax
port, process, db = sys.argv[1], int(sys.argv[2]), sys.argv[3]
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                           process_id=process, initialization_timeout=60)
from jax.experimental import multihost_utils
import dlkit.jax as dlj
from dlkit.sampler import Sampler
shape = dict(seed=5, sequence_length=256, max_rows=64, num_threads=1)
with dlj.make_sampler(db, global_batch_size=8, **shape) as sampler:
    assert (sampler.config.rank, sampler.config.world_size) == (process, 2)
    mine = [sampler.next_train_batch() for _ in range(3)]
with Sampler(db, 0, 1, batch_size=8, **shape) as sampler:  # the world-size-1 global batches
    whole = [sampler.next_train_batch() for _ in range(3)]
mesh = dlj.batch_mesh()
for local, expected in zip(mine, whole):
    out = dlj.global_batch(local, mesh)
    full = {k: np.asarray(multihost_utils.process_allgather(v, tiled=True))
            for k, v in out.items()}
    for key, value in full.items():
        if key not in ("text_batch_embeddings", "text_embed_ids"):
            assert np.array_equal(value, expected[key]), key
    # the gathered text table: each text cell still finds its own text's embedding
    cells = expected["semantic_types"] == 4
    got = full["text_batch_embeddings"][full["text_embed_ids"][cells]]
    assert np.array_equal(got, expected["text_batch_embeddings"][expected["text_embed_ids"][cells]])
    assert not full["text_embed_ids"][~cells].any()
    assert full["text_batch_embeddings"].shape[0] % 2 == 0
print("ok")
"""


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_processes_assemble_the_world_size_1_global_batch(db_path, tmp_path):
    """jax.distributed on 2 CPU processes (gloo, loopback only): the global arrays are the
    global batch of a world-size-1 run, row for row, and text cells index the gathered table."""
    port = free_port()
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    logs = [(tmp_path / f"out{i}", tmp_path / f"err{i}") for i in range(2)]
    procs = []
    try:
        for i, (out, err) in enumerate(logs):  # files, not pipes: a full pipe could stall one
            with open(out, "w") as stdout, open(err, "w") as stderr:
                procs.append(subprocess.Popen(
                    [sys.executable, "-c", TWO_PROCESSES, str(port), str(i), str(db_path)],
                    env=env, stdout=stdout, stderr=stderr))
        for p in procs:
            p.wait(timeout=180)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (out, err) in zip(procs, logs):
        lines = out.read_text().split()
        assert p.returncode == 0 and lines[-1:] == ["ok"], err.read_text()[-3000:]
