"""NextBatch_v3 goldens: they verify, and the plain-Python reference reproduces them.

fixtures/make_golden_v3.py wrote them with dlkit's fast path; here whole streams of one
N = 10^6 train case, and every train prefix and sampled position of every file, are recomputed
by tests/naive_feistel.py (about 6 us per index, so whole streams are limited to one case).
"""

import json
from pathlib import Path

import pytest

from dlkit.nextbatch.golden import verify_golden
from tests import naive_feistel as naive

GOLDEN = Path(__file__).parents[2] / "src" / "dlkit" / "nextbatch" / "goldens"
FILES = sorted(GOLDEN.glob("nextbatch_v3_*.json"))
KEY = "golden/train"


def cases(path):
    return json.loads(path.read_text())["cases"]


def test_goldens_cover_the_matrix():
    assert [p.name for p in FILES] == ["nextbatch_v3_n1e6.json", "nextbatch_v3_n1e9.json",
                                       "nextbatch_v3_n2e40.json"]
    all_cases = [c for f in FILES for c in cases(f)]
    assert all(c["manifest"]["data"]["sampling_mode"] == naive.V3_MODE for c in all_cases)
    cardinalities = {c["manifest"]["datasets"][KEY]["cardinality"] for c in all_cases}
    assert cardinalities == {10**6, 10**9, 2**40 + 7}
    assert len({c["manifest"]["seed"] for c in all_cases}) == 5
    assert {c["stage"] for c in all_cases} == {"train", "eval"}
    streams = [s for c in all_cases for s in c["streams"]]
    assert {s["world_size"] for s in streams} == {1, 2, 8}
    assert any(s["start_index"] > 0 for s in streams) and any(s["epoch"] > 0 for s in streams)
    assert any(c["manifest"]["data"]["drop_last"] for c in all_cases)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_golden_verifies_with_the_fast_path(path):
    report = verify_golden(path)
    assert report.streams_checked > 0 and report.positions_checked > 0


def prefix_positions(stream, gbs, limit):
    """(epoch, position) of each index of a stream's first ``prefix_steps`` calls.

    Steps advance as the procedure does: by the global batch (the last step of an epoch by
    what is left before ``limit``), rolling over into the next epoch.
    """
    epoch, g = stream["epoch"], stream["start_index"]
    micro = gbs // stream["world_size"]
    out = []
    for _ in range(stream["prefix_steps"]):
        first = g + stream["rank"] * micro
        out.extend((epoch, p) for p in range(first, min(first + micro, limit)))
        g += gbs
        if g >= limit:
            epoch, g = epoch + 1, 0
    return out


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_prefixes_and_positions_match_the_reference(path):
    for case in cases(path):
        doc = case["manifest"]
        n = doc["datasets"][KEY]["cardinality"]
        gbs = doc["global_batch_size"]
        train = case["stage"] == "train"
        limit = (n // gbs) * gbs if (train and doc["data"]["drop_last"]) else n
        epochs, memo = {}, {}

        def index(epoch, p):
            if not train:
                return p
            if (epoch, p) not in memo:  # ranks of all world sizes share positions
                if epoch not in epochs:
                    epochs[epoch] = naive.Epoch(doc, KEY, epoch)
                memo[epoch, p] = epochs[epoch].index(p)
            return memo[epoch, p]

        for stream in case["streams"]:
            prefix = [index(e, p) for e, p in prefix_positions(stream, gbs, limit)]
            assert naive.digest(prefix) == stream["prefix_sha256"]
            assert len(prefix) == stream["prefix_num_indices"]
            assert prefix[:16] == stream["first_indices"]
        for epoch, position, expected in case["positions"]:
            assert index(epoch, position) == expected


def test_whole_streams_of_one_case_match_the_reference():
    case = next(c for c in cases(GOLDEN / "nextbatch_v3_n1e6.json")
                if c["stage"] == "train" and c["manifest"]["seed"] == 42
                and not c["manifest"]["data"]["drop_last"])
    doc = case["manifest"]
    sequence = naive.Epoch(doc, KEY, 0).all_indices()
    assert sorted(sequence) == list(range(10**6))
    for stream in case["streams"]:
        ranks = naive.rank_stream(sequence, doc["global_batch_size"], stream["world_size"],
                                  stream["rank"], stream["start_index"])
        assert len(ranks) == stream["num_indices"]
        assert naive.digest(ranks) == stream["sha256"]
