"""The splits of a task's seeds, by name (light: imports nothing that loads numba, so the
framework adapters can name them without loading the sampler)."""

from __future__ import annotations

from enum import StrEnum

from dlkit.errors import InvalidArgumentError


class Split(StrEnum):
    """Which part of a task's seeds: ``train`` (shuffled, endless), ``val`` or ``test`` (in
    order); its ``code`` is the seed's split code (``dlkit.core.streams``)."""

    TRAIN = "train"
    VAL = "val"
    TEST = "test"

    @property
    def code(self) -> int:
        """0 for train, 1 for val, 2 for test (the order of a task's split positions)."""
        return _SPLIT_CODES[self]

    @classmethod
    def parse(cls, value: object) -> Split:
        """``value`` (a ``Split`` or its name) as a ``Split``."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str) and value in _SPLIT_CODES:
            return cls(value)
        raise InvalidArgumentError(f"split must be one of {', '.join(SPLITS)}, got {value!r}")


_SPLIT_CODES = {split: code for code, split in enumerate(Split)}
SPLITS = tuple(split.value for split in Split)
