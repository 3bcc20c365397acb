"""Atomic writes: a crash mid-write leaves the old file, never a mix, and no temp file."""

import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading

import pytest

from dlkit.atomic import atomic_write_bytes, atomic_writer
from dlkit.errors import OutputError


def test_exception_mid_write_keeps_old_content(tmp_path):
    path = tmp_path / "f.bin"
    atomic_write_bytes(path, b"old")
    with pytest.raises(RuntimeError):
        with atomic_writer(path) as stream:
            stream.write(b"new but incomplete")
            raise RuntimeError("crash")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f.bin"]


def test_new_file_gets_umask_permissions(tmp_path):
    path = tmp_path / "f.bin"
    atomic_write_bytes(path, b"x")
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask


def test_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(OutputError, match="does not exist"):
        atomic_write_bytes(tmp_path / "no" / "f.bin", b"x")


def test_killed_writer_leaves_old_or_new(tmp_path):
    path = tmp_path / "big.bin"
    atomic_write_bytes(path, b"A" * 1000)
    script = textwrap.dedent(f"""
        import sys
        from dlkit.atomic import atomic_writer
        with atomic_writer({str(path)!r}) as f:
            for _ in range(10_000):
                f.write(b"B" * 65536)
                print("wrote", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert proc.stdout.readline().startswith(b"wrote")  # it is mid-write now
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert path.read_bytes() == b"A" * 1000


def test_a_device_is_written_directly_not_replaced():
    """``-o /dev/null`` (or /dev/stdout): replacing the node would destroy the device."""
    with atomic_writer("/dev/null") as stream:
        stream.write(b"gone")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_fifo_gets_the_bytes_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    atomic_write_bytes(fifo, b"through the pipe")
    reader.join()
    assert received == [b"through the pipe"] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_directory_target_is_refused(tmp_path):
    with pytest.raises(OutputError, match="is a directory"):
        atomic_write_bytes(tmp_path, b"x")


def test_a_symlink_keeps_pointing_at_the_replaced_file(tmp_path):
    """A link is a name for a file, not the file: the file it names is replaced. So is a
    descriptor link such as /dev/stdout when the shell sends stdout to a file."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "out.json").write_bytes(b"old")
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "real" / "out.json")
    atomic_write_bytes(link, b"new")
    assert link.is_symlink() and (tmp_path / "real" / "out.json").read_bytes() == b"new"
    with open(tmp_path / "stdout.txt", "wb") as redirected:
        fd_link = tmp_path / "fd"
        fd_link.symlink_to(f"/proc/self/fd/{redirected.fileno()}")
        atomic_write_bytes(fd_link, b"through the descriptor")
    assert fd_link.is_symlink()
    assert (tmp_path / "stdout.txt").read_bytes() == b"through the descriptor"
