"""A channel's state: its JSON form (pinned across versions), its checks, its round trip."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.errors import CheckpointError
from dlkit.nextbatch import Cursor
from dlkit.sampler import Sampler
from dlkit.sampler.state import ChannelState
from tests.sampler.test_sampler import SMALL, assert_same_batches

ARGS = dict(SMALL, rank=0, world_size=1, batch_size=4, task_weights=[1.0, 2.0, 0.5])
# Sampler.state_dict() of dlkit 1c6cb21 (before ChannelState) after 7 train, 5 val and 3 test
# batches of ARGS on the module's database: today's sampler must write these bytes and resume
# from them.
STATE_1C6CB21 = (
    '{"format": "dlkit-sampler-state-v1", "config": {"manifest_hash": '
    '"c6355a6c945028fea1a1f9046bfb2c916e12b2204514cc492736dea27c2c318c", "global_batch_size": 4,'
    ' "sequence_length": 48, "max_rows": 12, "bfs_child_width": 3, "task_weights": [1.0, 2.0, '
    '0.5]}, "train": {"step": 7, "cursors": {"fake/task0/train": {"epoch": 0, "global_index": '
    '12}, "fake/task1/train": {"epoch": 0, "global_index": 12}, "fake/task2/train": {"epoch": '
    '0, "global_index": 4}}}, "val": {"step": 5, "cursors": {"fake/task0/val": {"epoch": 1, '
    '"global_index": 0}, "fake/task1/val": {"epoch": 0, "global_index": 8}, "fake/task2/val": '
    '{"epoch": 0, "global_index": 0}}, "current": "fake/task1/val"}, "test": {"step": 3, '
    '"cursors": {"fake/task0/test": {"epoch": 1, "global_index": 0}, "fake/task1/test": '
    '{"epoch": 0, "global_index": 0}, "fake/task2/test": {"epoch": 0, "global_index": 0}}, '
    '"current": "fake/task1/test"}}')


def pull(sampler, train, val, test):
    return ([sampler.next_train_batch() for _ in range(train)],
            [sampler.next_val_batch() for _ in range(val)],
            [sampler.next_test_batch() for _ in range(test)])


def test_the_state_has_the_bytes_of_earlier_versions(db):
    # since the checksum, the state is the pinned one with a last entry: the SHA-256 of the
    # canonical JSON (sorted keys, no spaces) of the pinned entries
    with Sampler(db, num_prefetch=2, num_threads=2, **ARGS) as s:
        pull(s, 7, 5, 3)
        state = s.state_dict()
    assert list(state)[-1] == "checksum"
    checksum = state.pop("checksum")
    assert json.dumps(state) == STATE_1C6CB21
    canonical = json.dumps(json.loads(STATE_1C6CB21), sort_keys=True, separators=(",", ":"))
    assert checksum == hashlib.sha256(canonical.encode()).hexdigest()


def test_a_state_of_an_earlier_version_resumes_exactly(db):
    with Sampler(db, num_prefetch=0, **ARGS) as s:
        pull(s, 7, 5, 3)
        following = pull(s, 4, 3, 2)
    with Sampler(db, num_prefetch=3, num_threads=2, **ARGS) as r:
        r.load_state_dict(json.loads(STATE_1C6CB21))  # no checksum: still loaded
        state = r.state_dict()
        state.pop("checksum")
        assert json.dumps(state) == STATE_1C6CB21  # loaded as it was written
        for got, want in zip(pull(r, 4, 3, 2), following):
            assert_same_batches(got, want)


keys = st.text(min_size=1, max_size=12)
cursors = st.builds(Cursor, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))


@given(st.sampled_from(["train", "val", "test"]), st.integers(0, 2**63 - 1),
       st.dictionaries(keys, cursors, max_size=5), st.none() | keys)
def test_json_round_trip(channel, step, cursor_map, current):
    state = ChannelState(channel, step, cursor_map, None if channel == "train" else current)
    value = json.loads(json.dumps(state.to_json()))
    assert ChannelState.from_json(channel, value) == state
    assert list(value) == (["step", "cursors"] if channel == "train" else
                           ["step", "cursors", "current"])
    assert list(value["cursors"]) == sorted(cursor_map)


def test_a_train_state_ignores_current_and_an_eval_state_keeps_it():
    value = {"step": 1, "cursors": {}, "current": "k"}
    assert ChannelState.from_json("train", value).to_json() == {"step": 1, "cursors": {}}
    assert ChannelState.from_json("val", value).to_json() == value


@pytest.mark.parametrize("value,why", [
    (None, "missing or not a mapping"),
    ({"step": -1, "cursors": {}}, "step must be an integer from 0 to 2^63-1, got -1"),
    ({"step": True, "cursors": {}}, "step must be an integer from 0 to 2^63-1, got True"),
    ({"step": 2**63, "cursors": {}}, "step must be an integer from 0 to 2^63-1, got 9223372"),
    ({"step": 0, "cursors": []}, "cursors must be a mapping of dataset key to cursor"),
    ({"step": 0, "cursors": {"k": {"epoch": 0}}}, "cursor of 'k' must be {epoch, global_index}"),
    ({"step": 0, "cursors": {"k": {"epoch": -1, "global_index": 0}}}, "cursor of 'k'"),
    ({"step": 0, "cursors": {"k": {"epoch": 2**64, "global_index": 0}}}, "cursor of 'k'"),
    ({"step": 0, "cursors": {}, "current": 3}, "current must be a dataset key or null, got 3"),
])
def test_a_malformed_state_names_the_channel_and_the_problem(value, why):
    with pytest.raises(CheckpointError) as caught:
        ChannelState.from_json("val", value)
    assert str(caught.value).startswith("sampler state 'val': ")
    assert why in str(caught.value)
