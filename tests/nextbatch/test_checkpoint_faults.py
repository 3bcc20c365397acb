"""Fault injection on checkpoint files: every single-bit flip, every truncation and every
zeroed block of a small checkpoint is refused with one ``CHECKPOINT_INVALID`` line naming
the file; the intact file still resumes exactly."""

from __future__ import annotations

import pytest

from dlkit.errors import CheckpointError
from dlkit.nextbatch import Cursor, load_checkpoint
from dlkit.nextbatch.cursor import Checkpoint, checkpoint_bytes, read_checkpoint
from dlkit.nextbatch.stage import Stage

BOUND = Checkpoint({"ds": Cursor(3, 12), "other": Cursor(0, 7)}, bytes(range(32)), "ds",
                   Stage.EVAL)
STAGELESS = Checkpoint({"ds": Cursor(3, 12)}, bytes(range(32)), "ds")  # before the stage
UNBOUND = Checkpoint({"ds": Cursor(1, 2**40)})


def corruptions(data: bytes):
    """(label, bytes) for every single-bit flip, every proper truncation and every zeroed
    block of 1, 2, 4 and 8 bytes that changes the file."""
    for i in range(len(data)):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[i] ^= 1 << bit
            yield f"flip byte {i} bit {bit}", bytes(flipped)
    for n in range(len(data)):
        yield f"truncated to {n}", data[:n]
    for width in (1, 2, 4, 8):
        for i in range(len(data) - width + 1):
            zeroed = data[:i] + bytes(width) + data[i + width:]
            if zeroed != data:
                yield f"zeroed {width} at {i}", zeroed


@pytest.mark.parametrize("checkpoint", [BOUND, STAGELESS, UNBOUND],
                         ids=["bound", "stageless", "unbound"])
def test_every_corruption_of_a_checkpoint_is_refused_naming_the_file(tmp_path, checkpoint):
    good = checkpoint_bytes(checkpoint)
    path = tmp_path / "c.ckpt"
    path.write_bytes(good)
    assert read_checkpoint(path) == checkpoint
    accepted = []
    count = 0
    for label, data in corruptions(good):
        path.write_bytes(data)
        count += 1
        try:
            read_checkpoint(path)
        except CheckpointError as exc:
            message = str(exc)
            assert message.startswith(f"{path}: ") and "\n" not in message, (label, message)
            assert exc.code == "CHECKPOINT_INVALID"
        else:
            accepted.append(label)
    assert count > 8 * len(good)
    assert accepted == []


def test_a_flip_inside_a_cursor_is_named_a_checksum_mismatch(tmp_path):
    good = checkpoint_bytes(UNBOUND)
    # the last byte of global_index 2**40 (0x1b 00 00 01 00 00 00 00 00): 2**40 + 1 would
    # otherwise be a canonical, well-formed cursor
    at = good.index(bytes.fromhex("1b0000010000000000")) + 8
    data = bytearray(good)
    data[at] ^= 1
    path = tmp_path / "c.ckpt"
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        load_checkpoint(path)
