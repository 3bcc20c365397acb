"""Key index kernels: dense and hash indexes, string keys, forced hash collisions."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.core import keys as kk
from dlkit.db.write.convert import to_string_buffers
from dlkit.db.write.primary_keys import KeyIndex
from dlkit.errors import DataError


def _buffers(strings):
    arr = pa.array(strings, type=pa.large_string())
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[: len(arr) + 1]
    buf = arr.buffers()[2]
    data = np.frombuffer(buf, dtype=np.uint8) if buf is not None else np.zeros(0, np.uint8)
    return arr, data, offsets


@given(st.lists(st.integers(-(2**63), 2**63 - 1), unique=True, max_size=50),
       st.lists(st.integers(-(2**63), 2**63 - 1), max_size=50))
def test_int_index_lookup_matches_dict(pk, fk):
    keys = np.array(pk, dtype=np.int64)
    index = KeyIndex.build_int(keys, "t")
    probe = pk[: len(pk) // 2] + fk
    out = np.empty(len(probe), dtype=np.int64)
    valid, dangling, first = index.lookup(pa.array(probe, pa.int64()), 100, out, "t")
    where = {k: i for i, k in enumerate(pk)}
    expect = [100 + where[k] if k in where else -1 for k in probe]
    assert out.tolist() == expect
    assert dangling == expect.count(-1) and valid == len(probe)


@pytest.mark.parametrize("row_dtype", [np.int32, np.int64])
@given(st.lists(st.integers(-50, 200), unique=True, max_size=60),
       st.lists(st.integers(-(2**63), 2**63 - 1), unique=True, max_size=30),
       st.lists(st.integers(-60, 210), max_size=60))
def test_both_slot_widths_resolve_alike(row_dtype, dense_pk, sparse_pk, fk):
    """Slots are int32 below 2^31 rows, int64 beyond: both widths of both index kinds."""
    from unittest import mock

    with mock.patch("dlkit.db.keys.row_dtype", lambda n: np.dtype(row_dtype)):
        for pk in (dense_pk, sparse_pk):
            index = KeyIndex.build_int(np.array(pk, dtype=np.int64), "t")
            assert index.slots.dtype == row_dtype
            # dense exactly when the keys' range is small (the module's documented rule)
            assert (index.kmin is not None) == (len(pk) > 0
                                                and max(pk) - min(pk) < 4 * len(pk) + 1024)
            probe = pk[::3] + fk
            out = np.empty(len(probe), dtype=np.int64)
            index.lookup(pa.array(probe, pa.int64()), 7, out, "t")
            where = {k: i for i, k in enumerate(pk)}
            assert out.tolist() == [7 + where[k] if k in where else -1 for k in probe]


@pytest.mark.parametrize("keys", [list(range(10)), [10**15, 3, -7, 2**62]])
def test_int_duplicate_named(keys):
    with pytest.raises(DataError, match=r"duplicate primary key 3 \(rows 1 and 4\)|"
                                        r"duplicate primary key 1 \(rows 1 and 4\)"):
        k = list(keys)
        k.insert(4, k[1])
        KeyIndex.build_int(np.array(k, dtype=np.int64), "t")


@given(st.lists(st.text(max_size=12), unique=True, max_size=40),
       st.lists(st.text(max_size=12), max_size=40))
def test_string_index_lookup_matches_dict(pk, fk):
    index = KeyIndex.build_str(*to_string_buffers(pa.array(pk, pa.string()))[:2], "t")
    probe = pk[::2] + fk + [None]
    out = np.empty(len(probe), dtype=np.int64)
    valid, dangling, _ = index.lookup(pa.array(probe, pa.string()), 0, out, "t")
    where = {k: i for i, k in enumerate(pk)}
    expect = [where.get(k, -1) if k is not None else -1 for k in probe]
    assert out.tolist() == expect
    assert valid == len(probe) - 1
    assert dangling == sum(1 for k in probe if k is not None and k not in where)


def test_forced_hash_collisions_never_link_wrong_rows():
    pk = ["alpha", "beta", "gamma", "delta"]
    _, data, offsets = _buffers(pk)
    hashes = np.zeros(len(pk), dtype=np.int64)  # every key collides
    slots = np.empty((kk.table_size(len(pk)), kk.STRING_SLOT), np.int64)
    dup, _ = kk.hash_index_strings(hashes, data, offsets, slots)
    assert dup == -1
    probe = ["gamma", "epsilon", "alpha", "delta"]
    _, pdata, poffsets = _buffers(probe)
    out = np.empty(len(probe), dtype=np.int64)
    dangling, first = kk.hash_lookup_strings(np.zeros(4, np.int64), np.ones(4, bool), pdata,
                                             poffsets, slots, data, 0, out)
    assert out.tolist() == [2, -1, 0, 3]
    assert (dangling, first) == (1, 1)


# Keys that agree in everything a slot holds but the bytes after the eighth, or that differ
# only by trailing zero bytes or length: with every hash forced equal, only the comparison
# can tell them apart.
_LOOKALIKES = ["customer-0001", "customer-0002", "customer-000", "customer", "custome",
               "ab", "ab\x00", "ab\x00\x00", "", "\x00", "\x00" * 9, "\x00" * 8 + "\x01",
               "ünïcødé-kéy-1", "ünïcødé-kéy-2"]


@pytest.mark.parametrize("forced", [False, True])
def test_lookalike_keys_resolve_to_their_own_rows(forced):
    arr, data, offsets = _buffers(_LOOKALIKES)
    n = len(_LOOKALIKES)
    hashes = np.zeros(n, np.int64)
    if not forced:
        kk.hash_strings(data, offsets, hashes)
    slots = np.full((kk.table_size(n), kk.STRING_SLOT), 7, np.int64)  # any contents
    dup, _ = kk.hash_index_strings(hashes, data, offsets, slots)
    assert dup == -1
    probe = list(reversed(_LOOKALIKES)) + ["customer-0003", "ab\x00\x00\x00", "\x00" * 10]
    _, pdata, poffsets = _buffers(probe)
    phashes = np.zeros(len(probe), np.int64)
    if not forced:
        kk.hash_strings(pdata, poffsets, phashes)
    out = np.empty(len(probe), dtype=np.int64)
    dangling, first = kk.hash_lookup_strings(phashes, np.ones(len(probe), bool), pdata, poffsets,
                                             slots, data, 1000, out)
    expect = [1000 + n - 1 - i for i in range(n)] + [-1, -1, -1]
    assert out.tolist() == expect
    assert (dangling, first) == (3, n)


def test_string_hash_depends_on_every_byte_and_the_length():
    keys = ["", "\x00", "\x00" * 8, "\x00" * 9, "a" * 8, "a" * 8 + "b", "b" + "a" * 8,
            "a" * 16, "a" * 15 + "b", "a" * 7 + "b" + "a" * 8]
    _, data, offsets = _buffers(keys)
    hashes = np.empty(len(keys), np.int64)
    kk.hash_strings(data, offsets, hashes)
    assert len(set(hashes.tolist())) == len(keys)


def test_forced_collision_duplicate_detected():
    pk = ["x", "y", "x"]
    _, data, offsets = _buffers(pk)
    dup, first = kk.hash_index_strings(np.zeros(3, np.int64), data, offsets,
                                       np.empty((16, kk.STRING_SLOT), np.int64))
    assert (dup, first) == (2, 0)


def test_string_duplicate_error_names_value():
    with pytest.raises(DataError, match=r"duplicate primary key 'b' \(rows 1 and 3\)"):
        KeyIndex.build_str(*to_string_buffers(pa.array(["a", "b", "c", "b"]))[:2],
                           "table 't', column 'k'")


def test_sparse_int_keys_use_hash_index():
    keys = np.array([0, 2**40, -(2**50), 17], dtype=np.int64)
    index = KeyIndex.build_int(keys, "t")
    assert index.kmin is None
    out = np.empty(3, dtype=np.int64)
    index.lookup(pa.array([17, 2**40, 5]), 10, out, "t")
    assert out.tolist() == [13, 11, -1]
