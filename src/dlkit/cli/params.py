"""Parsers for option values the commands share."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from dlkit.encoding import UINT64_MAX

# Bounds of count options: far beyond any real run, yet a mistyped 2**64 is a usage error
# rather than a run without end or a failure deep inside a kernel.
MAX_STEPS = 1 << 32        # --steps (sample, batches, bench)
MAX_BATCH = 1 << 31        # --batch-size
MAX_THREADS = 1024         # --workers, --buffers-ahead, --max-lead
MAX_ROWS = 1 << 40         # bench --rows
MAX_ROW_BYTES = 1 << 20    # bench --row-bytes

# The help of sampler options that more than one command takes (show, batches, view)
CONTEXT_EXAMPLES_HELP = ("Fill a sequence whose walk stops short with the walks of up to this "
                         "many other seeds of the task observed no later than it (0: off, the "
                         "default); their cells have is_context_example = 1.")
CONTEXT_POLICY_HELP = ("Which seeds are the context examples: recent (the latest, the default), "
                       "random (drawn from the seed, the epoch and the sequence's seed) or "
                       "parent (those sharing a foreign-key parent with the seed's row first, "
                       "then the latest).")


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


def check_output_file(out: Path, overwrite: bool, *, inside: Path | None = None,
                      inside_what: str = "", inputs: dict[str, Path] | None = None) -> None:
    """Refuse an output file that would lose data: an existing file without --overwrite, a
    symbolic link (see :func:`dlkit.outputs.output_kind`), a file inside the input directory
    ``inside`` (a database: writing into it changes it), or one of ``inputs``."""
    from dlkit.errors import InvalidArgumentError
    from dlkit.outputs import output_kind, refuse_overlap

    if str(out) == "-":  # a file named "-" would be written where a stream was meant
        raise InvalidArgumentError("--out -: this command writes a file; name one (it does "
                                   "not write to standard output)", code="USAGE")
    if inside is not None:
        parent = out.absolute().parent
        try:
            same = any(os.path.samefile(folder, inside) for folder in (parent, *parent.parents)
                       if folder.exists())
        except OSError:
            same = False
        if same:
            raise InvalidArgumentError(f"--out {out} is inside {inside_what} {inside}: writing "
                                       "there would change it; write it elsewhere")
    if inputs:
        refuse_overlap({"--out": out}, dict(inputs))
    output_kind(out, overwrite)


def check_rank(rank: int, world_size: int) -> None:
    """A rank is 0 to world size - 1: anything else is a usage error (exit 2)."""
    from dlkit.errors import InvalidArgumentError

    if rank >= world_size:
        raise InvalidArgumentError(f"--rank {rank} is out of range: ranks are 0 to "
                                   f"{world_size - 1} for --world-size {world_size}",
                                   code="USAGE")
