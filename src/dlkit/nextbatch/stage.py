"""The stage a stream is sampled for: it picks the epoch order (shuffled for train only)."""

from __future__ import annotations

import enum


class Stage(str, enum.Enum):
    TRAIN = "train"
    EVAL = "eval"
    INFER = "infer"

    @property
    def is_shuffled(self) -> bool:
        return self is Stage.TRAIN
