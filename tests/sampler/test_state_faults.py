"""Fault injection on ``Sampler.state_dict()``: a state whose JSON text had any single bit
flipped, or was cut anywhere, is refused with one ``CHECKPOINT_INVALID`` error whenever it
still parses as JSON; the intact state resumes exactly."""

from __future__ import annotations

import json

import pytest

from dlkit.errors import CheckpointError
from dlkit.sampler import Sampler
from tests.sampler.test_sampler import SMALL, assert_same_batches

ARGS = dict(SMALL, rank=0, world_size=1, batch_size=4, num_prefetch=0)


def parsed_corruptions(text: str):
    """Every single-bit flip and every truncation of ``text`` that still parses as JSON
    (a damaged text that does not parse never reaches ``load_state_dict``)."""
    data = text.encode()
    variants = []
    for i in range(len(data)):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[i] ^= 1 << bit
            variants.append(bytes(flipped))
    variants += [data[:n] for n in range(len(data))]
    for variant in variants:
        try:
            value = json.loads(variant)
        except (ValueError, RecursionError):
            continue
        yield variant, value


def test_every_corruption_of_a_state_is_refused(db):
    with Sampler(db, **ARGS) as s:
        s.next_train_batch()
        s.next_val_batch()
        state = s.state_dict()
        following = [s.next_train_batch() for _ in range(2)]
    text = json.dumps(state)
    with Sampler(db, **ARGS) as r:
        accepted, parsed = [], 0
        for variant, value in parsed_corruptions(text):
            parsed += 1
            try:
                r.load_state_dict(value)
            except CheckpointError as exc:
                assert "\n" not in str(exc) and exc.code == "CHECKPOINT_INVALID"
            else:
                accepted.append(variant)
        assert parsed > len(text)  # most flips inside strings and digits still parse
        assert accepted == []
        r.load_state_dict(json.loads(text))  # the intact state: a round trip resumes exactly
        assert_same_batches([r.next_train_batch() for _ in range(2)], following)


def test_a_changed_cursor_is_a_checksum_mismatch(db):
    with Sampler(db, **ARGS) as s:
        s.next_train_batch()
        state = s.state_dict()
        key = next(iter(state["train"]["cursors"]))
        state["train"]["cursors"][key]["global_index"] += 4  # a valid, different cursor
        with pytest.raises(CheckpointError, match="sampler state: checksum mismatch"):
            s.load_state_dict(state)
        del state["checksum"]  # a state without a checksum but with an unknown entry
        with pytest.raises(CheckpointError, match="no checksum, and unknown entries 'trian'"):
            s.load_state_dict({**state, "trian": state["train"]})
