"""A `dlkit sample` checkpoint is bound to its run: it records the manifest hash and dataset
key, and `--resume` with another run's manifest is refused naming both hashes."""

from __future__ import annotations

import hashlib
import json

import cbor2
import pytest

from dlkit.encoding import canonical_cbor
from dlkit.nextbatch.cursor import Checkpoint, parse_checkpoint_file, read_checkpoint
from tests.cli.helpers import assert_clean_failure, run_dlkit
from tests.nextbatch.helpers import manifest_dict

DOC = manifest_dict(70, 8, 16, seed=3)
OTHER = manifest_dict(70, 8, 16, seed=4)


def _manifest_hash(doc: dict) -> bytes:
    """SHA-256 of the canonical CBOR of the manifest with its defaults filled in, hashes as
    bytes: computed here from the documented definition, not by dlkit."""
    value = {"seed": doc["seed"], "global_batch_size": doc["global_batch_size"],
             "data": {"sampler_block_size": doc["data"]["sampler_block_size"],
                      "drop_last": doc["data"]["drop_last"]},
             "datasets": {k: {**e, "hash": bytes.fromhex(e["hash"])}
                          for k, e in doc["datasets"].items()}}
    return hashlib.sha256(cbor2.dumps(value, canonical=True)).digest()


@pytest.fixture()
def paths(tmp_path):
    mine, other = tmp_path / "run.json", tmp_path / "other.json"
    mine.write_text(json.dumps(DOC))
    other.write_text(json.dumps(OTHER))
    return mine, other


def test_a_checkpoint_records_its_manifest_hash_and_dataset(tmp_path, paths):
    mine, _ = paths
    ckpt = tmp_path / "c.ckpt"
    result = run_dlkit("sample", mine, "-d", "ds", "--steps", "3", "-q", "--checkpoint-out", ckpt)
    assert result.returncode == 0, result.stderr
    value = cbor2.loads(ckpt.read_bytes())
    payload = {"data_cursors": {"ds": {"epoch": 0, "global_index": 24}},
               "dataset_key": "ds", "manifest_hash": _manifest_hash(DOC)}
    checksum = hashlib.sha256(cbor2.dumps(payload, canonical=True)).digest()
    assert value == {**payload, "checksum": checksum}


def test_resume_with_another_runs_manifest_is_refused_naming_both_hashes(tmp_path, paths):
    mine, other = paths
    ckpt = tmp_path / "c.ckpt"
    assert run_dlkit("sample", mine, "-d", "ds", "--steps", "1", "-q",
                     "--checkpoint-out", ckpt).returncode == 0
    result = run_dlkit("sample", other, "-d", "ds", "--resume", ckpt, "--steps", "1")
    err = assert_clean_failure(result, "CHECKPOINT_INVALID")
    assert result.returncode == 5
    assert _manifest_hash(DOC).hex() in err and _manifest_hash(OTHER).hex() in err
    assert result.stdout == b""
    ok = run_dlkit("sample", mine, "-d", "ds", "--resume", ckpt, "--steps", "1")
    assert ok.returncode == 0 and ok.stdout.decode().count("\n") == 1


def test_a_checkpoint_of_dlkit_0_1_still_resumes_and_says_it_is_unchecked(tmp_path, paths):
    mine, _ = paths
    old = tmp_path / "old.ckpt"
    old.write_bytes(canonical_cbor({"data_cursors": {"ds": {"epoch": 0, "global_index": 8}}}))
    new = tmp_path / "new.ckpt"
    result = run_dlkit("sample", mine, "-d", "ds", "--resume", old, "--steps", "1", "--json",
                       "--out", tmp_path / "i.txt", "--checkpoint-out", new)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["cursor_start"] == {"epoch": 0, "global_index": 8}
    assert "names no run manifest" in result.stderr.decode()
    assert read_checkpoint(new).manifest_hash == _manifest_hash(DOC)


def test_the_bound_layout_round_trips_and_is_strict():
    from dlkit.nextbatch.cursor import Cursor, checkpoint_bytes

    checkpoint = Checkpoint({"ds": Cursor(1, 2)}, b"\x07" * 32, "ds")
    assert parse_checkpoint_file(checkpoint_bytes(checkpoint)) == checkpoint
    for bad in ({"data_cursors": {}, "manifest_hash": b"\x07" * 31, "dataset_key": "ds"},
                {"data_cursors": {}, "manifest_hash": b"\x07" * 32},
                {"data_cursors": {}, "manifest_hash": "07" * 32, "dataset_key": "ds"},
                {"data_cursors": {}, "manifest_hash": b"\x07" * 32, "dataset_key": 3}):
        with pytest.raises(ValueError):
            parse_checkpoint_file(canonical_cbor(bad))
