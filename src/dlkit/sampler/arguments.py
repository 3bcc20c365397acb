"""The sampler's one rule for what counts as an integer or a number argument.

An integer is a Python or NumPy integer and never a bool (``True`` is an ``int`` to Python,
but ``batch_size=True`` is a mistake); a number is an ``int`` or a ``float``, never a bool,
and finite. Bounds are compared before any conversion, so ``10**400`` is refused by its
bound rather than overflowing a float.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypeGuard

import numpy as np

from dlkit.errors import DlkitError, InvalidArgumentError


def is_integer(value: Any, minimum: int | None = None,
               maximum: int | None = None) -> TypeGuard[int | np.integer]:
    """Whether ``value`` is an integer (not a bool) in ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        return False
    return bool((minimum is None or value >= minimum) and (maximum is None or value <= maximum))


def integer(value: Any, name: str, minimum: int = 0, maximum: int | None = None, *,
            expected: str | None = None,
            error: type[DlkitError] = InvalidArgumentError) -> int:
    """``value`` as an ``int``, or ``error("<name> must be <expected>, got <value>")``;
    ``expected`` defaults to "an integer >= <minimum>"."""
    if not is_integer(value, minimum, maximum):
        raise error(f"{name} must be {expected or f'an integer >= {minimum}'}, got {value!r}")
    return int(value)


def is_number(value: Any, minimum: float = -math.inf, maximum: float = math.inf) -> bool:
    """Whether ``value`` is a finite ``int`` or ``float`` (not a bool) in ``[minimum,
    maximum]`` (NaN fails the comparison)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if not minimum <= value <= maximum:
        return False
    return isinstance(value, int) or math.isfinite(value)


def is_probability(value: Any) -> bool:
    """A number from 0 to 1 (a share of the seeds)."""
    return is_number(value, 0, 1)


def weights(kind: str, names: Sequence[str], values: Sequence[Any], listed: str,
            all_zero: str) -> tuple[float, ...]:
    """One finite weight >= 0 per name (``kind`` says of what: "task", "database"), not all
    zero, as floats; ``listed`` names the things counted and ``all_zero`` says what zeros
    would mean, in the messages."""
    if len(values) != len(names):
        raise InvalidArgumentError(f"{kind}_weights has {len(values)} values for "
                                   f"{len(names)} {listed}")
    for name, value in zip(names, values):
        if not is_number(value, 0):
            raise InvalidArgumentError(f"{kind} weight of {name!r} must be a finite number "
                                       f">= 0, got {value!r}")
    if not any(values):
        raise InvalidArgumentError(f"{kind}_weights are all zero: {all_zero}")
    return tuple(float(v) for v in values)
