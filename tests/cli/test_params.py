"""The option parsers of ``dlkit.cli.params``."""

import pytest
import typer

from dlkit.cli.params import positive_uint64, uint64


@pytest.mark.parametrize("text, number", [("0", 0), (" 7 ", 7), (str(2**64 - 1), 2**64 - 1),
                                          (12, 12)])
def test_uint64_takes_every_uint64(text, number):
    assert uint64(text) == number


@pytest.mark.parametrize("text", ["-1", str(2**64), "abc", "1.5", "0x10", ""])
def test_uint64_refuses_what_is_not_one(text):
    with pytest.raises(typer.BadParameter):
        uint64(text)


def test_positive_uint64_starts_at_one():
    assert positive_uint64("1") == 1 and positive_uint64(str(2**64 - 1)) == 2**64 - 1
    with pytest.raises(typer.BadParameter, match="range 1 to 2\\^64-1"):
        positive_uint64("0")
