"""The bench's row files: written, mapped, advised, and refused when not a regular file."""

from __future__ import annotations

import os

import numpy as np
import pytest

from dlkit.bench.workloads import RowFile, write_row_file
from dlkit.errors import InputFormatError


def test_row_file_round_trip_and_willneed(tmp_path):
    write_row_file(tmp_path / "rows.bin", 100, 24)
    data = RowFile(tmp_path / "rows.bin", 24)
    assert data.rows.shape == (100, 24)
    assert data.rows[37, :8].view("<u8")[0] == 37
    data.willneed(np.array([99, 0, 50], dtype=np.uint64))  # runs clipped to the file's end
    data.touch_all()


def test_a_row_file_must_be_a_regular_file(tmp_path):
    with pytest.raises(InputFormatError, match="cannot read: is a directory"):
        RowFile(tmp_path, 24)
    os.mkfifo(tmp_path / "pipe")  # no writer: a blocking open would never return
    with pytest.raises(InputFormatError, match="cannot read: is not a regular file"):
        RowFile(tmp_path / "pipe", 24)
