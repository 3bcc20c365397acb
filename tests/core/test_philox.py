"""Philox4x32-10 against the Random123 known-answer vectors and the naive reference."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from dlkit.core.philox import philox4x32_10, philox_draw
from tests import naive_nextbatch as naive

U32 = st.integers(0, 2**32 - 1)

# Random123's kat_vectors for philox4x32_10 (counter, key, expected output).
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def test_random123_known_answers():
    for counter, key, expected in KNOWN_ANSWERS:
        assert tuple(int(w) for w in philox4x32_10(*counter, *key)) == expected
        assert naive.philox(counter, key) == expected


@given(U32, U32, U32, U32, U32, U32)
def test_kernel_matches_reference(c0, c1, c2, c3, k0, k1):
    got = tuple(int(w) for w in philox4x32_10(c0, c1, c2, c3, k0, k1))
    assert got == naive.philox((c0, c1, c2, c3), (k0, k1))


@given(st.binary(min_size=16, max_size=16), st.integers(0, 2**64 - 1))
def test_draw_uses_profile_counter_layout(seed, v):
    words = np.frombuffer(seed, dtype="<u4").astype(np.uint64)
    assert tuple(int(w) for w in philox_draw(words, np.uint64(v))) == naive.draw(seed, v)
