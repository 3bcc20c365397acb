"""Manifest validation (P2): every malformed input is a ManifestError naming the problem."""

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.errors import ManifestError
from dlkit.nextbatch import load_manifest, parse_manifest
from tests import naive_nextbatch as naive
from tests.nextbatch.helpers import manifest_dict

GOOD = manifest_dict(1000, 8, 64)


def with_change(path, value):
    doc = json.loads(json.dumps(GOOD))
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return json.dumps(doc)


@pytest.mark.parametrize("text, fragment", [
    ("{not json", "not valid JSON"),
    (with_change(["seed"], 1.0), "floating-point"),
    (with_change(["global_batch_size"], 1e3), "floating-point"),
    (with_change(["datasets", "ds", "cardinality"], 2.5), "floating-point"),
    (with_change(["seed"], -1), "seed must lie in [0, 2^64-1]"),
    (with_change(["seed"], 2**64), "seed must lie in [0, 2^64-1]"),
    (with_change(["seed"], True), "seed must be an unsigned integer"),
    (with_change(["global_batch_size"], "8"), "global_batch_size must be an unsigned integer"),
    (with_change(["extra"], 1), "unknown key 'extra'"),
    (with_change(["data", "shuffle"], True), "unknown key 'shuffle' in data"),
    (with_change(["datasets", "ds", "path"], "/x"), "unknown key 'path'"),
    (with_change(["datasets", "ds", "hash"], "AB" * 32), "64 lowercase hex"),
    (with_change(["datasets", "ds", "hash"], "ab" * 31), "64 lowercase hex"),
    (with_change(["datasets", "ds", "id"], KeyError), "missing the required key 'id'"),
    (with_change(["datasets"], {}), "at least one dataset"),
    (with_change(["datasets"], KeyError), "missing the required key 'datasets'"),
    (with_change(["data", "drop_last"], 0), "drop_last must be true or false"),
    ('{"seed": 1, "seed": 2}', "duplicate key 'seed'"),
    ('{"seed": NaN}', "NaN is not allowed"),
    ("[]", "must be an object"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
])
def test_malformed_manifests_are_rejected_with_a_reason(text, fragment):
    with pytest.raises(ManifestError) as info:
        parse_manifest(text)
    assert fragment in str(info.value)
    assert info.value.code == "MANIFEST_INVALID"


def test_load_names_the_file(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(with_change(["seed"], 0.5))
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert str(path) in str(info.value)
    with pytest.raises(ManifestError, match="no such file"):
        load_manifest(tmp_path / "missing.json")
    with pytest.raises(ManifestError, match="is a directory"):
        load_manifest(tmp_path)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # no writer: a blocking read would never return
    with pytest.raises(ManifestError, match="not a regular file"):
        load_manifest(fifo)


def test_defaults_are_filled_into_the_hash():
    explicit = parse_manifest(json.dumps(GOOD | {"data": {"sampler_block_size": 1_048_576,
                                                         "drop_last": False}}))
    implicit = parse_manifest(with_change(["data"], KeyError))
    assert explicit.manifest_hash == implicit.manifest_hash
    assert implicit.data.sampler_block_size == 1_048_576 and implicit.data.drop_last is False


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1),
       st.booleans(), st.text(max_size=8))
def test_manifest_hash_matches_reference(seed, gbs, n, drop_last, key):
    doc = manifest_dict(n, gbs, 64, drop_last, seed, key)
    parsed = parse_manifest(json.dumps(doc))
    assert parsed.manifest_hash == naive.manifest_hash(doc)
    # Round trip through the manifest's own JSON form keeps the hash.
    assert parse_manifest(parsed.to_json()).manifest_hash == parsed.manifest_hash
