"""Input files must be regular files: a FIFO or directory is refused at once, never read."""

from __future__ import annotations

import errno
import os

import pytest

from dlkit.files import json_object_at, open_regular, read_regular


def test_a_regular_file_is_read_whole(tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(b"\x00abc\xff" * 1000)
    assert read_regular(path) == b"\x00abc\xff" * 1000
    link = tmp_path / "link"
    link.symlink_to(path)
    assert read_regular(link) == path.read_bytes()


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    with pytest.raises(OSError) as caught:
        read_regular(fifo)  # no writer ever comes: a blocking open would never return
    assert caught.value.errno == errno.EINVAL and "not a regular file" in str(caught.value)
    assert str(fifo) in str(caught.value)


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(OSError) as caught:
        open_regular(tmp_path)
    assert caught.value.errno == errno.EISDIR and "is a directory" in str(caught.value)


def test_json_object_at_recognises_only_a_json_object_in_a_regular_file(tmp_path):
    (tmp_path / "obj.json").write_text('{"format": "x"}')
    (tmp_path / "list.json").write_text("[1]")
    (tmp_path / "bad.json").write_text("{")
    os.mkfifo(tmp_path / "fifo.json")  # would block a plain read
    assert json_object_at(tmp_path / "obj.json") == {"format": "x"}
    for name in ("list.json", "bad.json", "fifo.json", "missing.json", "."):
        assert json_object_at(tmp_path / name) is None, name
