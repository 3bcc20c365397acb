"""``manifest.json`` parsing: every malformed manifest is a DatabaseError naming the problem."""

from __future__ import annotations

import json

import pytest

from dlkit.db.manifest import database_hash, parse_manifest, render_manifest
from dlkit.errors import DatabaseError

FILES = {"graph.bin": {"size": 4096, "sha256": bytes(range(32))},
         "metadata.json": {"size": 10, "sha256": bytes(32)}}


def _doc() -> dict:
    return json.loads(render_manifest(FILES, database_hash(FILES)))


def _render(doc: dict) -> bytes:
    """``doc`` in the canonical layout, so only the edit itself can be refused."""
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8")


def test_a_rendered_manifest_parses_back():
    file_map, recorded = parse_manifest(_render(_doc()))
    assert file_map == FILES and recorded == database_hash(FILES)


@pytest.mark.parametrize("size", [2**64, 2**70, -1, 1.0, True, "1"])
def test_a_size_beyond_uint64_or_not_an_integer_is_refused(size):
    doc = _doc()
    doc["files"]["graph.bin"]["size"] = size
    with pytest.raises(DatabaseError, match="entry for 'graph.bin' must be"):
        parse_manifest(_render(doc))


def test_the_largest_uint64_size_parses():
    doc = _doc()
    doc["files"]["graph.bin"]["size"] = 2**64 - 1
    file_map, _ = parse_manifest(_render(doc))
    assert file_map["graph.bin"]["size"] == 2**64 - 1


def test_a_file_name_that_is_not_utf8_is_refused():
    doc = _doc()
    doc["files"]["\ud800"] = {"sha256": "00" * 32, "size": 1}  # json writes it as \\ud800
    with pytest.raises(DatabaseError, match="is not UTF-8 text"):
        parse_manifest(_render(doc))


def test_deeply_nested_json_is_refused():
    with pytest.raises(DatabaseError, match="nested too deeply"):
        parse_manifest(b"[" * 100_000 + b"]" * 100_000)
