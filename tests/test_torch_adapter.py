"""dlkit.torch: zero-copy conversion, the IterableDataset over a Sampler and its checkpoint
state (alone, in torch's DataLoader and in torchdata's StatefulDataLoader), and the one error
a user without torch sees."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

import dlkit.torch as dlt
from dlkit.db import preprocess
from dlkit.encoding import with_checksum
from dlkit.errors import CheckpointError, InvalidArgumentError, MissingExtraError
from dlkit.sampler import Sampler

EXAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "example_db"
# small sequences keep every batch cheap; the adapter does not care about their size
SHAPE = {"batch_size": 8, "sequence_length": 256, "max_rows": 64, "num_threads": 1}
# what each numpy dtype of a batch must become, written out (not derived from torch)
TORCH_DTYPE = {np.int8: torch.int8, np.int32: torch.int32, np.int64: torch.int64,
               np.uint8: torch.uint8, np.uint16: torch.uint16, np.uint32: torch.uint32,
               np.float16: torch.float16, np.float32: torch.float32}


@pytest.fixture(scope="module")
def db_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("torch_adapter") / "db"
    preprocess(EXAMPLE, path, fsync=False)
    return path


def make_sampler(db_path, **kwargs):
    return Sampler(db_path, 0, 1, seed=7, **{**SHAPE, **kwargs})


def assert_same_batch(tensors: dict, arrays: dict) -> None:
    assert list(tensors) == list(arrays)
    for key, array in arrays.items():
        assert tensors[key].dtype == TORCH_DTYPE[array.dtype.type], key
        assert tuple(tensors[key].shape) == array.shape, key
        assert np.array_equal(tensors[key].numpy(), array), key


def test_to_torch_shares_every_arrays_memory_with_its_dtype_and_shape(db_path):
    with make_sampler(db_path) as sampler:
        for batch in itertools.islice(sampler, 3):  # all three tasks' target types
            copy = {k: v.copy() for k, v in batch.items()}
            tensors = dlt.to_torch(batch)
            assert_same_batch(tensors, copy)
            assert {"labels", "anchor_rows", "observation_times", "sequence_mask"} <= set(batch)
            for key, array in batch.items():
                assert np.shares_memory(tensors[key].numpy(), array), key
                assert tensors[key].data_ptr() == array.ctypes.data, key
            batch["numeric_values"][0, 0] = 12.5  # one memory: a write shows through
            assert tensors["numeric_values"][0, 0].item() == 12.5


def test_a_cpu_device_still_shares_memory_and_other_devices_get_a_copy():
    arrays = {"a": np.arange(6, dtype=np.uint32).reshape(2, 3), "b": np.ones(4, np.float16)}
    on_cpu = dlt.to_torch(arrays, device="cpu")
    assert all(np.shares_memory(on_cpu[k].numpy(), arrays[k]) for k in arrays)
    # the meta device (no storage) takes the path a GPU copy takes, without a GPU
    on_meta = dlt.to_torch(arrays, device=torch.device("meta"))
    assert [t.device.type for t in on_meta.values()] == ["meta", "meta"]
    assert on_meta["a"].dtype == torch.uint32 and tuple(on_meta["a"].shape) == (2, 3)
    with pytest.raises(InvalidArgumentError, match="'no-such-device' is not a torch device"):
        dlt.to_torch(arrays, device="no-such-device")


def test_read_only_and_byte_swapped_arrays_are_copied_without_warnings():
    frozen = np.arange(5, dtype=np.int64)
    frozen.setflags(write=False)
    swapped = np.arange(4, dtype=">f4")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns about a non-writable array it shares
        out = dlt.to_torch({"frozen": frozen, "swapped": swapped})
    assert not np.shares_memory(out["frozen"].numpy(), frozen)
    assert out["frozen"].tolist() == [0, 1, 2, 3, 4]
    assert out["swapped"].dtype == torch.float32 and out["swapped"].tolist() == [0, 1, 2, 3]


def test_pin_memory_without_an_accelerator_is_ignored_with_one_warning(monkeypatch):
    assert not dlt._accelerator_available()  # CI has no GPU: this checks the fallback
    monkeypatch.setattr(dlt, "_warned_no_pinning", False)
    arrays = {"a": np.zeros(3, np.float32)}
    with pytest.warns(UserWarning, match="pin_memory=True ignored"):
        out = dlt.to_torch(arrays, pin_memory=True)
    assert not out["a"].is_pinned() and np.shares_memory(out["a"].numpy(), arrays["a"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dlt.to_torch(arrays, pin_memory=True)  # once only


def test_upload_tables_gives_the_samplers_tables(db_path):
    with make_sampler(db_path) as sampler:
        tables = dlt.upload_tables(sampler, device="cpu")
        assert np.array_equal(tables["column_embeddings"].numpy(), sampler.column_embeddings())
        assert np.array_equal(tables["categorical_embeddings"].numpy(),
                              sampler.categorical_embeddings())
        assert tables["column_embeddings"].dtype == torch.float16


def test_dataloader_yields_the_samplers_batches(db_path):
    with make_sampler(db_path) as plain:
        expected = [plain.next_train_batch() for _ in range(5)]
    with make_sampler(db_path, num_threads=2) as sampler:
        loader = DataLoader(dlt.SamplerDataset(sampler), batch_size=None, num_workers=0)
        got = list(itertools.islice(loader, 5))
    for tensors, arrays in zip(got, expected, strict=True):
        assert_same_batch(tensors, arrays)
    with make_sampler(db_path) as sampler:
        plain_iter = dlt.TorchBatches(sampler)
        assert_same_batch(next(plain_iter), expected[0])


def test_a_restored_dataset_continues_with_the_uninterrupted_batches(db_path):
    with make_sampler(db_path) as sampler:
        uninterrupted = [sampler.next_train_batch() for _ in range(7)]
    with make_sampler(db_path, num_prefetch=4) as sampler:
        dataset = dlt.SamplerDataset(sampler)
        stream = iter(dataset)
        for i in range(3):
            assert_same_batch(next(stream), uninterrupted[i])
        state = json.loads(json.dumps(dataset.state_dict()))  # JSON all the way
        assert state["split"] == "train" and state["sampler"]["train"]["step"] == 3
    with make_sampler(db_path, num_threads=2) as sampler:
        dataset = dlt.SamplerDataset(sampler)
        dataset.load_state_dict(state)
        resumed = list(itertools.islice(iter(dataset), 4))
    for tensors, arrays in zip(resumed, uninterrupted[3:], strict=True):
        assert_same_batch(tensors, arrays)


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")  # torchdata on torch >= 2.7
def test_stateful_dataloader_checkpoints_the_data_position(db_path):
    with make_sampler(db_path) as sampler:
        uninterrupted = [sampler.next_train_batch() for _ in range(6)]
    with make_sampler(db_path) as sampler:
        loader = StatefulDataLoader(dlt.SamplerDataset(sampler), batch_size=None, num_workers=0)
        batches = iter(loader)
        for i in range(2):
            assert_same_batch(next(batches), uninterrupted[i])
        checkpoint = json.loads(json.dumps(loader.state_dict()))
        assert_same_batch(next(batches), uninterrupted[2])  # going on does not change it
    with make_sampler(db_path) as sampler:
        loader = StatefulDataLoader(dlt.SamplerDataset(sampler), batch_size=None, num_workers=0)
        loader.load_state_dict(checkpoint)
        resumed = list(itertools.islice(loader, 4))
    for tensors, arrays in zip(resumed, uninterrupted[2:], strict=True):
        assert_same_batch(tensors, arrays)


def test_an_eval_dataset_is_one_pass_and_resumes_inside_it(db_path):
    with make_sampler(db_path) as sampler:
        expected = list(sampler.iter_eval("val", "order_status"))
        dataset = dlt.SamplerDataset(sampler, "val", task="order_status")
        assert len(dataset) == len(expected) >= 2
        loader = DataLoader(dataset, batch_size=None, num_workers=0)
        for tensors, arrays in zip(loader, expected, strict=True):
            assert_same_batch(tensors, arrays)
        assert dataset.state_dict()["eval_batches"] == 0  # a complete pass
        assert len(list(loader)) == len(expected)  # each iteration is a new pass
        partial = iter(dataset)
        next(partial)
        state = dataset.state_dict()
        assert state["eval_batches"] == 1
    with make_sampler(db_path) as sampler:
        dataset = dlt.SamplerDataset(sampler, "val", task="order_status")
        dataset.load_state_dict(state)
        rest = list(dataset)
    for tensors, arrays in zip(rest, expected[1:], strict=True):
        assert_same_batch(tensors, arrays)


def test_bad_states_and_arguments_are_one_clear_error(db_path):
    with make_sampler(db_path) as sampler:
        dataset = dlt.SamplerDataset(sampler)
        with pytest.raises(CheckpointError, match="not a dlkit.torch dataset state"):
            dataset.load_state_dict({"format": "something else"})
        val_state = dlt.SamplerDataset(sampler, "val").state_dict()
        with pytest.raises(CheckpointError, match="split 'val'.*this dataset is split 'train'"):
            dataset.load_state_dict(val_state)
        with pytest.raises(CheckpointError, match="checksum mismatch"):
            dlt.SamplerDataset(sampler, "val").load_state_dict({**val_state, "eval_batches": 1})
        with pytest.raises(CheckpointError, match="eval_batches must be an integer >= 0"):
            dlt.SamplerDataset(sampler, "val").load_state_dict(
                with_checksum({**val_state, "eval_batches": -1}))
        with pytest.raises(InvalidArgumentError, match="split must be one of train, val, test"):
            dlt.SamplerDataset(sampler, "validation")
        with pytest.raises(InvalidArgumentError, match="task selects an eval pass"):
            dlt.SamplerDataset(sampler, "train", task="order_status")
        with pytest.raises(TypeError, match="endless"):
            len(dataset)


WORKER_SCRIPT = """
import gc, sys
import psutil
from torch.utils.data import DataLoader
import dlkit.torch as dlt
from dlkit.errors import InvalidArgumentError
from dlkit.sampler import Sampler
with Sampler(sys.argv[1], 0, 1, batch_size=8, sequence_length=256, max_rows=64) as sampler:
    loader = DataLoader(dlt.SamplerDataset(sampler), batch_size=None, num_workers=1,
                        multiprocessing_context="fork")
    batches = iter(loader)
    try:
        next(batches)
        sys.exit("a worker process built a batch")
    except InvalidArgumentError as exc:
        assert "num_workers=0" in str(exc), exc
    workers = psutil.Process().children()
    assert workers  # the worker process that refused
    del batches  # the loader's iterator stops its workers
    gc.collect()
    _, alive = psutil.wait_procs(workers, timeout=30)
    assert not alive, alive
print("refused")
"""


def test_worker_processes_are_refused_with_the_reason(db_path):
    # A fresh interpreter: forking this one, where other tests may have started JAX's or
    # Numba's threads, could deadlock the worker.
    done = subprocess.run([sys.executable, "-c", WORKER_SCRIPT, str(db_path)],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and done.stdout.strip() == "refused", done.stderr


def run_without(module: str, code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter where importing ``module`` fails as if not installed."""
    script = f"import sys\nsys.modules[{module!r}] = None\n{code}"
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)


def test_without_torch_the_error_names_the_extra():
    result = run_without("torch", """
import dlkit
from dlkit.errors import MissingExtraError
try:
    import dlkit.torch
except MissingExtraError as exc:
    print(exc.code, exc)
""")
    assert result.returncode == 0, result.stderr
    code, message = result.stdout.strip().split(" ", 1)
    assert code == "MISSING_EXTRA"
    assert message.startswith("dlkit.torch needs PyTorch") and \
        message.endswith("pip install '.[torch]' in a checkout of dlkit")
    assert issubclass(MissingExtraError, ImportError)


def test_import_dlkit_and_the_sampler_load_no_framework():
    script = ("import dlkit, dlkit.sampler\nfrom dlkit.sampler import Sampler\n"
              "import sys\nprint(' '.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                check=True, timeout=120).stdout.split())
    assert "dlkit.sampler.api" in loaded
    assert not {"torch", "jax", "torchdata"} & loaded


def _parsed_corruptions(text: str):
    """Every single-bit flip and truncation of ``text`` that still parses as JSON."""
    data = text.encode()
    variants = [data[:n] for n in range(len(data))]
    for i in range(len(data)):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[i] ^= 1 << bit
            variants.append(bytes(flipped))
    for variant in variants:
        try:
            yield json.loads(variant)
        except ValueError:
            continue


@pytest.mark.parametrize("split", ["train", "val"])
def test_every_corruption_of_a_dataset_state_is_refused(db_path, split):
    task = None if split == "train" else "order_status"
    with make_sampler(db_path) as sampler:
        dataset = dlt.SamplerDataset(sampler, split, task=task)
        next(iter(dataset))
        text = json.dumps(dataset.state_dict())
        accepted = 0
        for value in _parsed_corruptions(text):
            try:
                dlt.SamplerDataset(sampler, split, task=task).load_state_dict(value)
            except CheckpointError as exc:
                assert "\n" not in str(exc)
            else:
                accepted += 1
        assert accepted == 0


@pytest.mark.parametrize("count", [2**31, 2**63, 2**64, 10**30])
def test_out_of_range_counts_in_a_state_are_a_checkpoint_error(db_path, count):
    with make_sampler(db_path) as sampler:
        val = dlt.SamplerDataset(sampler, "val", task="order_status")
        with pytest.raises(CheckpointError, match="more than the"):
            val.load_state_dict(with_checksum({**val.state_dict(), "eval_batches": count}))
        train = dlt.SamplerDataset(sampler).state_dict()
        inner = {k: v for k, v in train["sampler"].items() if k != "checksum"}
        inner["train"] = {**inner["train"], "step": count}
        forged = with_checksum({**train, "sampler": with_checksum(inner)})
        if count < 2**63:
            dlt.SamplerDataset(sampler).load_state_dict(forged)
        else:
            with pytest.raises(CheckpointError, match="step must be an integer from 0 to 2"):
                dlt.SamplerDataset(sampler).load_state_dict(forged)
