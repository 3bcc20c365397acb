"""Atomic writes: a crash mid-write leaves the old file, never a mix, and no temp file."""

import contextlib
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


def test_a_symlink_is_replaced_itself_never_the_file_it_names(tmp_path):
    """A link at an output path is refused without overwrite; with it the link itself is
    replaced. A descriptor link such as /dev/stdout (the shell sent stdout to a file) is a
    stream: the bytes go to it."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "out.json").write_bytes(b"old")
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "real" / "out.json")
    with pytest.raises(OutputError, match="is a symbolic link"):
        atomic_write_bytes(link, b"new", overwrite=False)
    atomic_write_bytes(link, b"new")
    assert not link.is_symlink() and link.read_bytes() == b"new"
    assert (tmp_path / "real" / "out.json").read_bytes() == b"old"
    with open(tmp_path / "stdout.txt", "wb") as redirected:
        fd_link = tmp_path / "fd"
        fd_link.symlink_to(f"/proc/self/fd/{redirected.fileno()}")
        atomic_write_bytes(fd_link, b"through the descriptor", overwrite=False)
    assert fd_link.is_symlink()
    assert (tmp_path / "stdout.txt").read_bytes() == b"through the descriptor"


def test_an_existing_file_is_replaced_only_with_overwrite(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"mine")
    with pytest.raises(OutputError, match="already exists"):
        atomic_write_bytes(path, b"new", overwrite=False)
    assert path.read_bytes() == b"mine" and os.listdir(tmp_path) == ["f"]


def test_a_signal_during_a_commit_waits_for_its_end(tmp_path):
    """SIGTERM raised inside deferred_interrupts reaches its handler only after the block."""
    from dlkit.interrupts import deferred_interrupts

    order = []

    def handler(signum, frame):
        order.append("handler")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        with deferred_interrupts():
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
            order.append("block ran on")
        order.append("after")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert order == ["block ran on", "handler", "after"]


def test_leftovers_of_a_killed_writer_are_removed_by_the_next(tmp_path):
    from dlkit.atomic import AtomicFiles

    path = tmp_path / "f"
    script = textwrap.dedent(f"""
        import os, signal
        from dlkit.atomic import AtomicFiles
        with AtomicFiles([{str(path)!r}]) as (stream,):
            stream.write(b"partial")
            stream.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert sorted(n.split("-")[0] for n in os.listdir(tmp_path)) == [".f.dlkit", ".f.dlkit"]
    assert any(n.startswith(".f.dlkit-tmp-") for n in os.listdir(tmp_path))  # and the lock
    files = AtomicFiles([path])
    with files as (stream,):
        stream.write(b"whole")
        files.commit()
    assert os.listdir(tmp_path) == ["f"] and path.read_bytes() == b"whole"


def test_a_signal_while_outputs_are_set_up_leaves_nothing(tmp_path, monkeypatch):
    """Ctrl-C during the setup (locks, markers, temporary files) waits for its end, then
    unwinds: everything made so far is removed, though the with-block never started."""
    from dlkit import atomic

    real = atomic._write_synced

    def interrupted(path, data):
        real(path, data)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    monkeypatch.setattr(atomic, "_write_synced", interrupted)
    # Ctrl-C's own handler, whatever this process inherited: Python started as a background
    # job of a non-interactive shell (a CI script's `cmd &`) leaves SIGINT ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        files = atomic.AtomicFiles([tmp_path / "a", tmp_path / "b"])
        with pytest.raises(KeyboardInterrupt):
            with files:
                raise AssertionError("the block must not run")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert os.listdir(tmp_path) == []


def _enospc(*args, **kwargs):
    raise OSError(28, "No space left on device")


def test_a_full_disk_while_writing_an_output_names_the_output():
    import io
    from pathlib import Path

    from dlkit.atomic import _NamedWriter

    target = Path("/somewhere/indices.txt")
    stream = _NamedWriter(io.FileIO("/dev/full", "wb"), target)  # every write: ENOSPC
    with pytest.raises(OutputError) as info:
        stream.write(b"x" * 10_000_000)  # larger than the buffer: written through at once
        stream.flush()
    assert str(info.value) == f"{target}: write failed: No space left on device"
    with contextlib.suppress(OutputError):
        stream.close()


@pytest.mark.parametrize("fail_at", [0, 1, 2])
def test_a_full_disk_while_marking_outputs_leaves_no_temporary_file(tmp_path, monkeypatch,
                                                                    fail_at):
    from dlkit.atomic import AtomicFiles

    targets = [tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "c.txt"]
    real_write, calls = os.write, []

    def write(fd, data):
        calls.append(fd)
        if len(calls) > fail_at:
            return _enospc()
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(OutputError) as info:
        with AtomicFiles(targets) as streams:
            for stream in streams:
                stream.write(b"data")
    monkeypatch.undo()
    assert str(info.value) == f"{targets[fail_at]}: cannot write here: No space left on device"
    assert os.listdir(tmp_path) == []


def test_a_full_disk_while_writing_the_journal_leaves_no_temporary_file(tmp_path, monkeypatch):
    from dlkit.atomic import AtomicFiles

    targets = [tmp_path / "a.txt", tmp_path / "b.txt"]
    files = AtomicFiles(targets)
    with pytest.raises(OutputError) as info:
        with files as streams:
            for stream in streams:
                stream.write(b"data")
            monkeypatch.setattr(os, "write", _enospc)  # the journal is written by os.write
            files.commit()
    monkeypatch.undo()
    assert str(info.value) == f"{targets[0]}: write failed: No space left on device"
    assert os.listdir(tmp_path) == []
