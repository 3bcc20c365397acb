"""`dlkit preprocess-many`: shards partition the collection, every database is the one
`dlkit preprocess` builds, re-runs build only what is missing, two runs that meet build each
source once, and a failing source is named while the others are built."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.db.write.collection import (
    Outcome,
    Source,
    preprocess_many,
    read_sources,
    shard_of,
)
from dlkit.errors import InvalidArgumentError
from tests.cli.helpers import assert_clean_failure, run_dlkit

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "fixtures" / "example_db"


@given(names=st.lists(st.text("abcdefgh", min_size=1, max_size=4), unique=True, max_size=40),
       num_shards=st.integers(1, 9))
def test_the_shards_partition_the_sources_evenly(names, num_shards):
    sources = tuple(Source(n, Path(n)) for n in sorted(names))
    shares = [shard_of(sources, i, num_shards) for i in range(num_shards)]
    dealt = [s for share in shares for s in share]
    assert sorted(dealt, key=lambda s: s.name) == list(sources)  # each once, none left out
    sizes = [len(share) for share in shares]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("shard, num_shards", [(2, 2), (-1, 3), (0, 0), (True, 2)])
def test_a_shard_outside_the_array_is_refused(shard, num_shards):
    with pytest.raises(InvalidArgumentError):
        shard_of((), shard, num_shards)


def test_sources_from_a_directory_and_from_a_list(tmp_path):
    for name in ("b", "a", ".hidden"):
        (tmp_path / "dir" / name).mkdir(parents=True)
    (tmp_path / "dir" / "notes.txt").write_text("a file is no source")
    assert [s.name for s in read_sources(tmp_path / "dir")] == ["a", "b"]
    listing = tmp_path / "sources.txt"
    listing.write_text(f"# sources\n\ndir/b   # relative to the list\n{tmp_path}/dir/a\n")
    assert read_sources(listing) == (Source("a", tmp_path / "dir" / "a"),
                                     Source("b", tmp_path / "dir" / "b"))


@pytest.mark.parametrize("text, problem", [
    ("x/shop\ny/shop\n", "two sources named 'shop'"),
    ("# nothing\n", "no source directory"),
    (".\n", "needs a directory name"),
])
def test_a_bad_list_is_refused_before_anything_is_built(tmp_path, text, problem):
    listing = tmp_path / "sources.txt"
    listing.write_text(text)
    with pytest.raises(InvalidArgumentError, match=problem):
        read_sources(listing)


def test_skip_existing_and_overwrite_contradict(tmp_path):
    with pytest.raises(InvalidArgumentError, match="contradict"):
        preprocess_many(tmp_path, tmp_path / "out", skip_existing=True, overwrite=True)


@pytest.fixture
def collection(tmp_path) -> Path:
    """Two good sources and one whose schema is not TOML."""
    root = tmp_path / "sources"
    for name in ("shop_a", "shop_b"):
        shutil.copytree(EXAMPLE, root / name)
    (root / "broken").mkdir()
    (root / "broken" / "dlkit.toml").write_text("tables = [\n")
    return root


def _database_hash(db: Path) -> str:
    result = run_dlkit("verify", db, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["database_hash"]


def test_a_collection_builds_each_source_as_preprocess_does(collection, tmp_path):
    out = tmp_path / "dbs"
    result = run_dlkit("preprocess-many", collection, out, "--json")
    lines = result.stderr.decode().splitlines()
    warnings = [line for line in lines if line.startswith("warning: ")]
    # each build's warning, named by its source, as `dlkit preprocess` prints it; then one error
    assert [w.split(":")[1].strip() for w in warnings] == ["shop_a", "shop_b"]
    (err,) = [line for line in lines if line not in warnings]
    assert result.returncode == 1 and err.startswith("error SOURCES_FAILED: ")
    assert "1 of 3 sources failed; first: broken:" in err
    report = json.loads(result.stdout)
    assert [len(s["warnings"]) for s in report["sources"]] == [0, 1, 1]
    assert (report["built"], report["failed"], report["skipped"]) == (2, 1, 0)
    broken = next(s for s in report["sources"] if s["name"] == "broken")
    assert broken["error_code"] == "SCHEMA_INVALID" and "not valid TOML" in broken["error"]
    assert sorted(os.listdir(out)) == ["shop_a", "shop_b"]  # nothing half-built, no leftovers
    alone = tmp_path / "alone"
    assert run_dlkit("preprocess", collection / "shop_a", alone, "--quiet").returncode == 0
    for source in report["sources"][1:]:  # shop_a, shop_b: the database preprocess builds
        assert source["database_hash"] == _database_hash(Path(source["output"]))
    assert _database_hash(out / "shop_a") == _database_hash(alone)

    again = run_dlkit("preprocess-many", collection, out, "--skip-existing", "--json")
    report = json.loads(again.stdout)
    assert (report["built"], report["failed"], report["skipped"]) == (0, 1, 2)

    refused = run_dlkit("preprocess-many", collection, out, "--json")
    outcomes = {s["name"]: (s["outcome"], s["error_code"])
                for s in json.loads(refused.stdout)["sources"]}
    assert outcomes["shop_a"] == ("failed", "OUTPUT_ERROR")  # exists: never replaced
    assert _database_hash(out / "shop_a") == _database_hash(alone)
    # the failure names the option that replaces it, and that option exists
    error = next(s["error"] for s in json.loads(refused.stdout)["sources"]
                 if s["name"] == "shop_a")
    assert "pass --overwrite to replace it" in error
    rebuilt = run_dlkit("preprocess-many", collection, out, "--overwrite", "--json")
    report = json.loads(rebuilt.stdout)
    assert (report["built"], report["failed"], report["skipped"]) == (2, 1, 0)
    assert _database_hash(out / "shop_a") == _database_hash(alone)  # the same build again
    both = run_dlkit("preprocess-many", collection, out, "--overwrite", "--skip-existing")
    assert both.returncode == 2 and b"contradict each other" in both.stderr


def test_two_shards_build_the_collection_between_them(collection, tmp_path):
    (collection / "broken" / "dlkit.toml").unlink()
    shutil.rmtree(collection / "broken")
    out = tmp_path / "dbs"
    built = []
    for shard in (0, 1):
        result = run_dlkit("preprocess-many", collection, out, "--shard", shard,
                           "--num-shards", 2, "--json")
        assert result.returncode == 0, result.stderr
        built.append([s["name"] for s in json.loads(result.stdout)["sources"]])
    assert built == [["shop_a"], ["shop_b"]]
    assert sorted(os.listdir(out)) == ["shop_a", "shop_b"]


def test_two_runs_that_meet_build_each_source_once(collection, tmp_path):
    shutil.rmtree(collection / "broken")
    for name in ("shop_c", "shop_d"):
        shutil.copytree(EXAMPLE, collection / name)
    out = tmp_path / "dbs"
    argv = [sys.executable, "-m", "dlkit", "preprocess-many", str(collection), str(out),
            "--skip-existing", "--json"]
    runs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(2)]
    reports = []
    for run in runs:
        stdout, stderr = run.communicate(timeout=600)
        assert run.returncode == 0, stderr
        reports.append(json.loads(stdout))
    outcomes: dict[str, list[str]] = {}
    for report in reports:
        for source in report["sources"]:
            outcomes.setdefault(source["name"], []).append(source["outcome"])
    for name, seen in outcomes.items():  # built by exactly one run; the other saw it
        assert sorted(seen) in (["built", "busy"], ["built", "skipped"]), (name, seen)
    assert sorted(os.listdir(out)) == ["shop_a", "shop_b", "shop_c", "shop_d"]
    for name in outcomes:
        _database_hash(out / name)
    last = json.loads(run_dlkit("preprocess-many", collection, out, "--skip-existing",
                                "--json").stdout)
    assert last["skipped"] == 4 and last["built"] == 0


def test_a_shard_beyond_the_array_is_a_usage_error(collection, tmp_path):
    result = run_dlkit("preprocess-many", collection, tmp_path / "dbs", "--shard", 2,
                       "--num-shards", 2)
    assert_clean_failure(result, "USAGE")
    assert result.returncode == 2 and not (tmp_path / "dbs").exists()


def test_outcomes_are_named_in_the_summary(collection, tmp_path):
    result = run_dlkit("preprocess-many", collection, tmp_path / "dbs")
    summary = result.stderr.decode()
    assert "shard 0 of 1: 3 sources of 3: 2 built, 0 skipped, 0 busy, 1 failed" in summary
    assert [o.value for o in Outcome] == ["built", "skipped", "busy", "failed"]
