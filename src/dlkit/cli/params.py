"""Parsers for option values the commands share."""

from __future__ import annotations

import typer

from dlkit.nextbatch.cbor import UINT64_MAX


def _integer_from(text: str | int, minimum: int) -> int:
    """A decimal integer from ``minimum`` to 2^64 - 1, the range of the sampler's seeds,
    epochs, ranks and positions. (An ``IntRange`` would print the 20-digit bound in every
    ``--help``.)"""
    try:
        number = int(str(text).strip(), 10)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not an integer.") from None
    if not minimum <= number <= UINT64_MAX:
        raise typer.BadParameter(f"{number} is not in the range {minimum} to 2^64-1.")
    return number


def uint64(text: str | int) -> int:
    return _integer_from(text, 0)


def positive_uint64(text: str | int) -> int:
    return _integer_from(text, 1)
