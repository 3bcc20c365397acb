"""One copy per machine: the shared segment's lifecycle, and local ranks that share it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dlkit.errors import OutputError
from dlkit.sampler import Sampler
from dlkit.sampler.shared import SEGMENT_ALIGN, SegmentSizer, SharedSegment
from tests.sampler.fakedb import random_database
from tests.sampler.test_sampler import SMALL

ROOT = Path(__file__).resolve().parents[2]


def test_the_first_member_fills_the_others_map_and_the_last_removes(tmp_path):
    values = np.arange(1000, dtype=np.int64)
    first = SharedSegment.join("k", 3 * SEGMENT_ALIGN, root=tmp_path)
    assert first.fill
    a = first.copy(values)
    b = first.empty((10, 4), np.float64)
    b[...] = 7.0
    first.publish()
    second = SharedSegment.join("k", 3 * SEGMENT_ALIGN, root=tmp_path)
    assert not second.fill
    a2, b2 = second.copy(np.zeros_like(values)), second.empty((10, 4), np.float64)
    assert np.array_equal(a2, values) and (b2 == 7.0).all()
    assert not a2.flags.writeable  # the mapping of a member that did not fill is read-only
    directory = first.directory
    del a, b, a2, b2
    first.close()
    assert directory.exists()  # a member is left
    second.close()
    assert not directory.exists()


def test_a_segment_left_by_crashed_members_is_rebuilt(tmp_path):
    first = SharedSegment.join("k", SEGMENT_ALIGN, root=tmp_path)
    first.copy(np.ones(8))
    first.publish()
    os.close(first._members_fd)  # noqa: SLF001 - the kernel drops a dead process's locks
    first._finalizer.detach()  # noqa: SLF001 - and it never leaves
    again = SharedSegment.join("k", SEGMENT_ALIGN, root=tmp_path)
    assert again.fill, "a ready segment without members must be rebuilt, not trusted"
    again.close()
    assert not again.directory.exists()


def test_an_interrupted_build_is_redone(tmp_path):
    first = SharedSegment.join("k", SEGMENT_ALIGN, root=tmp_path)
    first.copy(np.ones(8))
    first.close()  # failed before publish: no ready marker
    second = SharedSegment.join("k", SEGMENT_ALIGN, root=tmp_path)
    assert second.fill
    second.close()


def test_a_segment_of_another_size_is_refused(tmp_path):
    first = SharedSegment.join("k", SEGMENT_ALIGN, root=tmp_path)
    first.publish()
    with pytest.raises(OutputError, match="another dlkit version"):
        SharedSegment.join("k", 2 * SEGMENT_ALIGN, root=tmp_path)
    first.close()


def test_the_sizer_counts_what_the_segment_hands_out(tmp_path):
    sizer = SegmentSizer()
    for shape, dtype in (((5, 4), np.int64), (3, np.uint8), ((SEGMENT_ALIGN,), np.uint8)):
        fake = sizer.empty(shape, dtype)
        assert fake.shape == (shape if isinstance(shape, tuple) else (shape,))
    segment = SharedSegment.join("k", sizer.size, root=tmp_path)
    for shape, dtype in (((5, 4), np.int64), (3, np.uint8), ((SEGMENT_ALIGN,), np.uint8)):
        segment.empty(shape, dtype)
    with pytest.raises(RuntimeError, match="overrun"):
        segment.empty(1, np.uint8)
    segment.close()


RANK_SCRIPT = r"""
import json, sys, hashlib
import numpy as np
sys.path.insert(0, {root!r})
from dlkit.sampler import Sampler
from tests.sampler.fakedb import random_database
from tests.sampler.test_sampler import SMALL
rank = int(sys.argv[1])
db = random_database(7, num_tables=4, max_rows=160, num_tasks=3)
with Sampler(db, rank, 2, batch_size=3, num_prefetch=0, huge_pages=True,
             local_world_size=2, **SMALL) as s:
    digest = hashlib.sha256()
    for _ in range(4):
        for key, array in s.next_train_batch().items():
            digest.update(key.encode() + array.tobytes())
    print(json.dumps({{"path": s.builder.memory_path, "filled": s.builder.segment.fill,
                      "digest": digest.hexdigest()}}), flush=True)
    sys.stdin.readline()  # stay a member until the parent says go: the ranks overlap
"""


def batches_digest(sampler):
    import hashlib

    digest = hashlib.sha256()
    for _ in range(4):
        for key, array in sampler.next_train_batch().items():
            digest.update(key.encode() + array.tobytes())
    return digest.hexdigest()


def test_two_local_ranks_share_one_segment_and_build_the_same_batches(tmp_path):
    env = {**os.environ, "DLKIT_SHM_DIR": str(tmp_path)}
    script = RANK_SCRIPT.format(root=str(ROOT))
    ranks = [subprocess.Popen([sys.executable, "-c", script, str(r)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
             for r in range(2)]
    try:
        reports = [json.loads(p.stdout.readline()) for p in ranks]
        assert [r["path"] for r in reports] == ["shared", "shared"]
        assert sorted(r["filled"] for r in reports) == [False, True]  # one built, one mapped
        assert len(list(tmp_path.iterdir())) == 1
        db = random_database(7, num_tables=4, max_rows=160, num_tasks=3)
        for rank, report in enumerate(reports):
            with Sampler(db, rank, 2, batch_size=3, num_prefetch=0, huge_pages=False,
                         **SMALL) as s:
                assert report["digest"] == batches_digest(s), rank
    finally:
        for p in ranks:
            p.stdin.close()
            p.wait(timeout=60)
    assert [p.returncode for p in ranks] == [0, 0]
    assert list(tmp_path.iterdir()) == []  # the last rank out removed it


MEMORY_SCRIPT = r"""
import sys
import numpy as np
sys.path.insert(0, {root!r})
from dlkit.sampler.shared import SharedSegment
from pathlib import Path

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
before = status("RssAnon:")
segment = SharedSegment.join("mem", 64 << 20, root=Path(sys.argv[1]))
array = segment.empty(64 << 20, np.uint8)
if segment.fill:
    array[:] = 1
    segment.publish()
total = int(array.sum(dtype=np.int64))  # touches every page
shared = status("RssShmem:") + status("RssFile:")  # tmpfs pages, or a disk file's in tests
print(segment.fill, total, status("RssAnon:") - before, shared, flush=True)
sys.stdin.readline()
"""


def test_a_member_that_maps_the_segment_holds_no_private_copy(tmp_path):
    script = MEMORY_SCRIPT.format(root=str(ROOT))
    procs = []
    try:
        for _ in range(2):
            procs.append(subprocess.Popen([sys.executable, "-c", script, str(tmp_path)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          text=True, cwd=ROOT))
        lines = [p.stdout.readline().split() for p in procs]
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(timeout=60)
    for _filled, total, anon, shmem in lines:
        assert int(total) == 64 << 20
        # 64 MiB read through the mapping: shared pages, not this process's anonymous memory
        assert int(anon) < 16 << 20, anon
        assert int(shmem) >= 60 << 20, shmem
    assert sorted(line[0] for line in lines) == ["False", "True"]
