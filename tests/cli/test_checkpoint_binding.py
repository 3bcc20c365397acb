"""A `dlkit sample` checkpoint is bound to its run: it records the manifest hash, dataset key
and stage, and `--resume` with another run's manifest, dataset or stage is refused naming
both, before anything else about the run is checked."""

from __future__ import annotations

import hashlib
import json

import cbor2
import pytest

from dlkit.encoding import canonical_cbor
from dlkit.nextbatch.cursor import Checkpoint, parse_checkpoint_file, read_checkpoint
from dlkit.nextbatch.stage import Stage
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
               "dataset_key": "ds", "manifest_hash": _manifest_hash(DOC), "stage": "train"}
    checksum = hashlib.sha256(cbor2.dumps(payload, canonical=True)).digest()
    assert value == {**payload, "checksum": checksum}


@pytest.mark.parametrize("stage", ["eval", "infer"])
def test_a_checkpoint_records_the_stage_it_was_sampled_at(tmp_path, paths, stage):
    mine, _ = paths
    ckpt = tmp_path / "c.ckpt"
    result = run_dlkit("sample", mine, "-d", "ds", "--stage", stage, "--steps", "2", "-q",
                       "--checkpoint-out", ckpt)
    assert result.returncode == 0, result.stderr
    assert cbor2.loads(ckpt.read_bytes())["stage"] == stage


def _written_at(tmp_path, manifest, stage: str, steps: int = 2):
    ckpt = tmp_path / f"{stage}.ckpt"
    result = run_dlkit("sample", manifest, "-d", "ds", "--stage", stage, "--steps", steps,
                       "-q", "--checkpoint-out", ckpt)
    assert result.returncode == 0, result.stderr
    return ckpt


@pytest.mark.parametrize("written, resumed", [("train", "eval"), ("train", "infer"),
                                              ("eval", "train"), ("eval", "infer"),
                                              ("infer", "train")])
def test_resume_at_another_stage_is_refused_naming_the_file_and_both_stages(
        tmp_path, paths, written, resumed):
    mine, _ = paths
    ckpt = _written_at(tmp_path, mine, written)
    result = run_dlkit("sample", mine, "-d", "ds", "--stage", resumed, "--resume", ckpt,
                       "--steps", "1")
    err = assert_clean_failure(result, "CHECKPOINT_INVALID")
    assert result.returncode == 5 and result.stdout == b""
    assert str(ckpt) in err
    assert f"written at stage {written}" in err and f"samples stage {resumed}" in err


def test_resume_at_the_same_stage_continues_its_order(tmp_path, paths):
    mine, _ = paths
    ckpt = _written_at(tmp_path, mine, "eval", steps=2)
    result = run_dlkit("sample", mine, "-d", "ds", "--stage", "eval", "--resume", ckpt,
                       "--steps", "1")
    assert result.returncode == 0, result.stderr
    # eval is in order: after 2 steps of 8 the next step is positions 16..23 themselves
    assert result.stdout.decode() == " ".join(map(str, range(16, 24))) + "\n"


def _stageless(cursor: dict, manifest_doc: dict, checksum: bool) -> bytes:
    """A bound checkpoint as dlkit wrote it before the stage: 0.2's layout, or with the
    checksum of the map without it."""
    payload = {"data_cursors": {"ds": cursor}, "dataset_key": "ds",
               "manifest_hash": _manifest_hash(manifest_doc)}
    if checksum:
        payload["checksum"] = hashlib.sha256(cbor2.dumps(payload, canonical=True)).digest()
    return cbor2.dumps(payload, canonical=True)


@pytest.mark.parametrize("checksum", [True, False], ids=["checksummed", "dlkit-0.2"])
@pytest.mark.parametrize("stage", ["train", "eval"])
def test_a_checkpoint_without_its_stage_resumes_at_any_stage_and_says_so(
        tmp_path, paths, checksum, stage):
    """Every stage could write such a checkpoint: which one did is unknown, so none is
    refused; the one written now records the stage."""
    mine, _ = paths
    old = tmp_path / "old.ckpt"
    old.write_bytes(_stageless({"epoch": 0, "global_index": 16}, DOC, checksum))
    new = tmp_path / "new.ckpt"
    result = run_dlkit("sample", mine, "-d", "ds", "--stage", stage, "--resume", old,
                       "--steps", "1", "--json", "--out", tmp_path / "i.txt",
                       "--checkpoint-out", new)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["cursor_start"] == {"epoch": 0, "global_index": 16}
    assert "does not record its stage" in result.stderr.decode()
    assert cbor2.loads(new.read_bytes())["stage"] == stage
    if stage == "eval":
        assert (tmp_path / "i.txt").read_text() == " ".join(map(str, range(16, 24))) + "\n"


def test_resume_for_another_dataset_is_refused_before_the_run_is_checked(tmp_path):
    """'small' cannot be sampled at all (train, drop_last, 5 seeds < batch 8): the
    checkpoint's dataset is still the mistake named, not BATCH_SIZE_INCONSISTENT."""
    doc = manifest_dict(70, 8, 16, drop_last=True, seed=3)
    doc["datasets"]["small"] = {**doc["datasets"]["ds"], "cardinality": 5}
    manifest = tmp_path / "run.json"
    manifest.write_text(json.dumps(doc))
    ckpt = _written_at(tmp_path, manifest, "train")
    for dataset in ("small", "ds-typo"):
        result = run_dlkit("sample", manifest, "-d", dataset, "--resume", ckpt, "--steps", "1")
        err = assert_clean_failure(result, "CHECKPOINT_INVALID")
        assert result.returncode == 5 and str(ckpt) in err
        assert f"written for dataset 'ds', and this run samples dataset '{dataset}'" in err
    direct = run_dlkit("sample", manifest, "-d", "small", "--steps", "1")
    assert_clean_failure(direct, "BATCH_SIZE_INCONSISTENT")  # what resume used to say first


def test_the_binding_is_checked_before_the_run_another_manifest_too(tmp_path, paths):
    mine, other = paths
    ckpt = _written_at(tmp_path, mine, "train")
    result = run_dlkit("sample", other, "-d", "ds", "-w", "3", "--resume", ckpt)
    assert_clean_failure(result, "CHECKPOINT_INVALID")  # not: 8 is not divisible by 3


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

    for stage in (None, *Stage):
        checkpoint = Checkpoint({"ds": Cursor(1, 2)}, b"\x07" * 32, "ds", stage)
        assert parse_checkpoint_file(checkpoint_bytes(checkpoint)) == checkpoint
    for bad in ({"data_cursors": {}, "manifest_hash": b"\x07" * 31, "dataset_key": "ds"},
                {"data_cursors": {}, "manifest_hash": b"\x07" * 32},
                {"data_cursors": {}, "manifest_hash": "07" * 32, "dataset_key": "ds"},
                {"data_cursors": {}, "manifest_hash": b"\x07" * 32, "dataset_key": 3}):
        with pytest.raises(ValueError):
            parse_checkpoint_file(canonical_cbor(bad))
    bound = {"data_cursors": {}, "manifest_hash": b"\x07" * 32, "dataset_key": "ds"}
    for bad, message in (({**bound, "stage": "test"}, "stage must be one of"),
                         ({**bound, "stage": 1}, "stage must be one of"),
                         ({**bound, "stage": None}, "stage must be one of"),
                         ({"data_cursors": {}, "stage": "train"}, "not a dlkit checkpoint")):
        with pytest.raises(ValueError, match=message):
            parse_checkpoint_file(_with_checksum(bad))
    with pytest.raises(ValueError, match="a stage without a checksum"):
        parse_checkpoint_file(canonical_cbor({**bound, "stage": "train"}))


def _with_checksum(value: dict) -> bytes:
    checksum = hashlib.sha256(cbor2.dumps(value, canonical=True)).digest()
    return cbor2.dumps({**value, "checksum": checksum}, canonical=True)


def test_the_checksum_covers_the_stage():
    from dlkit.nextbatch.cursor import Cursor, checkpoint_bytes

    data = checkpoint_bytes(Checkpoint({"ds": Cursor(1, 2)}, b"\x07" * 32, "ds", Stage.EVAL))
    value = cbor2.loads(data)
    forged = cbor2.dumps({**value, "stage": "infer"}, canonical=True)  # the old checksum
    with pytest.raises(ValueError, match="checksum mismatch"):
        parse_checkpoint_file(forged)
