"""The background writer: bytes and SHA-256 of every file, direct or not, and its errors."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from dlkit.db.write import hashing
from dlkit.db.write.hashing import ALIGN, STAGE_BYTES, Hasher
from dlkit.errors import OutputError

# sizes around the alignment and the staging buffer, and a write of several chunks
SIZES = [0, 1, ALIGN - 1, ALIGN, ALIGN + 1, 3 * ALIGN + 5, STAGE_BYTES - 3, STAGE_BYTES + 7,
         2 * hashing.CHUNK + 11]


def _pieces(seed: int) -> list[bytes | np.ndarray]:
    rng = np.random.default_rng(seed)
    out: list[bytes | np.ndarray] = []
    for i, n in enumerate(SIZES):
        data = rng.integers(0, 256, n, dtype=np.uint8)
        out.append(data if i % 2 else data.tobytes())
    out.append(rng.normal(size=1001))  # float64, not a multiple of ALIGN bytes
    return out


def _expected(pieces) -> bytes:
    return b"".join(p.tobytes() if isinstance(p, np.ndarray) else p for p in pieces)


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("sync", [True, False])
def test_files_hold_every_byte_in_order_and_their_hash(tmp_path, direct, sync):
    hasher = Hasher(tmp_path, sync=sync, direct=direct, max_backlog=1 << 20)
    contents = {}
    for k in range(3):  # several files written interleaved
        contents[f"d/f{k}.bin"] = _pieces(k)
    files = {rel: hasher.open(rel) for rel in contents}
    for i in range(len(SIZES) + 1):
        for rel, f in files.items():
            f.write(contents[rel][i], bounded=i % 3 != 0)
    for f in files.values():
        f.close()
    digests = hasher.digests()
    hasher.close()
    for rel, pieces in contents.items():
        expect = _expected(pieces)
        assert (tmp_path / rel).read_bytes() == expect
        assert digests[rel] == {"size": len(expect), "sha256": hashlib.sha256(expect).digest()}


@pytest.mark.parametrize(("setting", "direct"), [("0", False), ("off", False), ("", True),
                                                 ("1", True)])
def test_direct_io_follows_the_environment(tmp_path, monkeypatch, setting, direct):
    monkeypatch.setenv("DLKIT_DIRECT_IO", setting)
    hasher = Hasher(tmp_path)
    explicit = Hasher(tmp_path, direct=False)
    try:
        assert hasher.direct == (direct and hashing._O_DIRECT != 0)
        assert explicit.direct is False  # an explicit choice wins over the environment
    finally:
        hasher.close()
        explicit.close()


def test_without_direct_io_support_the_same_bytes_are_written(tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        root = tmp_path  # no tmpfs here: the direct path is covered above
    else:
        import tempfile

        root = Path(tempfile.mkdtemp(dir=shm))
    try:
        hasher = Hasher(root, direct=True)
        f = hasher.open("x.bin")
        pieces = _pieces(7)
        for p in pieces:
            f.write(p)
        f.close()
        digests = hasher.digests()
        hasher.close()
        assert (root / "x.bin").read_bytes() == _expected(pieces)
        assert digests["x.bin"]["sha256"] == hashlib.sha256(_expected(pieces)).digest()
    finally:
        if root != tmp_path:
            import shutil

            shutil.rmtree(root)


def test_a_write_error_is_an_output_error_naming_the_file(tmp_path, monkeypatch):
    def full(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hashing.os, "write", full)
    hasher = Hasher(tmp_path)
    f = hasher.open("tables/t/0.values")
    f.write(b"x" * 10_000)
    with pytest.raises(OutputError, match=r"tables/t/0.values: cannot write: No space left"):
        f.close()  # the error surfaces at the producer's next call
        hasher.digests()
    hasher.close()


def test_a_file_written_twice_is_a_bug(tmp_path):
    hasher = Hasher(tmp_path)
    hasher.open("a").close()
    with pytest.raises(AssertionError):
        hasher.open("a")
    hasher.digests()
    hasher.close()


def test_page_aligned_arrays_go_to_disk_without_a_staging_copy(tmp_path, monkeypatch):
    """A page-aligned array at an aligned file offset is written from its own memory; the
    bytes and hash are the same as through the staging buffer, whatever came before."""
    from dlkit.db.write.scratch import empty_small_pages

    rng = np.random.default_rng(5)

    def aligned(n: int) -> np.ndarray:
        a = empty_small_pages(np.uint8, n)
        a[:] = rng.integers(0, 256, n, dtype=np.uint8)
        return a

    first, second, third = aligned(3 * ALIGN + 5), aligned(hashing.CHUNK + ALIGN), aligned(ALIGN)
    pieces = [first, b"x" * (ALIGN - 5), second, b"tail", third]  # third follows a carry
    written_from: list[int] = []
    original = hashing.HashedFile._write_blocks

    def spy(self, blocks, *offset):
        written_from.append(np.frombuffer(blocks, dtype=np.uint8).ctypes.data)
        original(self, blocks, *offset)

    monkeypatch.setattr(hashing.HashedFile, "_write_blocks", spy)
    hasher = Hasher(tmp_path, direct=True)
    with hasher.open("a.bin") as f:
        for piece in pieces:
            f.write(piece, bounded=False)
    digests = hasher.digests()
    direct = hasher.files["a.bin"].direct
    hasher.close()
    expect = _expected(pieces)
    assert (tmp_path / "a.bin").read_bytes() == expect
    assert digests["a.bin"]["sha256"] == hashlib.sha256(expect).digest()
    if direct:  # the file system took O_DIRECT: the aligned arrays were written in place
        assert first.ctypes.data in written_from
        assert second.ctypes.data in written_from
        assert third.ctypes.data not in written_from  # after a carry: staged


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_ranges_written_ahead_leave_the_same_file_and_hash(tmp_path, direct, seed):
    """A page-aligned array whose runs are written ahead, out of order and unhashed, then
    reached by the stream: every byte lands once, in place, and the hash is the stream's."""
    from dlkit.db.write.scratch import empty_small_pages

    rng = np.random.default_rng(seed)
    n = int(rng.integers(ALIGN, 3 * hashing.CHUNK))
    array = empty_small_pages(np.uint8, n)
    array[:] = rng.integers(0, 256, n, dtype=np.uint8)
    before = rng.integers(0, 256, int(rng.integers(0, 3)) * ALIGN, dtype=np.uint8).tobytes()
    after = b"padding" * int(rng.integers(0, 2000))
    # runs of random sizes (some under a block), written ahead in random order
    cuts = np.unique(np.concatenate([[0, n], rng.integers(0, n, int(rng.integers(0, 40)))]))
    runs = list(zip(cuts[:-1], cuts[1:]))
    rng.shuffle(runs)
    hasher = Hasher(tmp_path, direct=direct)
    f = hasher.open("g.bin")
    f.write(before, bounded=False)
    for lo, hi in runs:
        f.write_ahead(array[lo:hi], len(before) + int(lo))
    f.write(array, bounded=False)
    f.write(after)
    f.close()
    digests = hasher.digests()
    hasher.close()
    expect = before + array.tobytes() + after
    assert (tmp_path / "g.bin").read_bytes() == expect
    assert digests["g.bin"] == {"size": len(expect), "sha256": hashlib.sha256(expect).digest()}
    assert all(b - a >= ALIGN and a % ALIGN == 0 == b % ALIGN for a, b in f.ahead)


def test_misplaced_data_is_not_written_ahead(tmp_path):
    """Bytes at another position within a block in memory than in the file: left to the
    stream (O_DIRECT could not take them)."""
    from dlkit.db.write.scratch import empty_small_pages

    array = empty_small_pages(np.uint8, 4 * ALIGN)
    array[:] = np.arange(4 * ALIGN) % 251
    hasher = Hasher(tmp_path, direct=True)
    with hasher.open("g.bin") as f:
        f.write(b"x" * 100)
        f.write_ahead(array, 100)  # page-aligned memory, file offset 100
        f.write(array, bounded=False)
    hasher.digests()
    hasher.close()
    assert f.ahead == []
    assert (tmp_path / "g.bin").read_bytes() == b"x" * 100 + array.tobytes()


def test_released_comes_once_after_the_data_is_hashed_and_written(tmp_path):
    """A writer may reuse an array once ``released`` is called: every byte of it is then in
    the hash and on its way to disk (all but an unaligned tail, kept for the next write)."""
    data = np.arange(3 * hashing.CHUNK // 8 + 5, dtype=np.int64)  # several parts
    hasher = Hasher(tmp_path, direct=True)
    f = hasher.open("r.bin")
    seen = []

    def released():
        seen.append((f.h.copy().digest(), (tmp_path / "r.bin").stat().st_size))

    f.write(data, bounded=False, released=released)
    f.write(b"", released=lambda: seen.append("empty"))  # nothing to write: at once
    f.close()
    hasher.digests()
    hasher.close()
    assert len(seen) == 2 and "empty" in seen
    digest, size = next(s for s in seen if s != "empty")
    assert digest == hashlib.sha256(data.tobytes()).digest()
    assert size >= data.nbytes - ALIGN
