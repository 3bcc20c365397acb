"""What a task predicts: the label of each seed, and how to read it in the column's own units.

A label is what the seed's hidden target cell would have shown (docs/batch_format.md §7):
numbers and times z-scored with the column's statistics, booleans 0/1, categories as the
class index within the target column's categories. ``LabelInfo`` carries what it takes to
turn predictions back into the column's units (``mean``/``std``) or names (``categories``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dlkit.core.codes import BOOLEAN, CATEGORICAL, NUMERIC, STYPE_NAMES, TEXT, TIMESTAMP

# Class indices are int64, what torch's cross-entropy takes; every other label is a float32 in
# the units of the target's input cell (z-scored numbers and times, 0/1 for booleans). A text
# target (preprocess refuses them; other writers may not) is labelled by its text id, the row
# of the database's text embeddings.
LABEL_DTYPES: dict[int, np.dtype] = {NUMERIC: np.dtype(np.float32), BOOLEAN: np.dtype(np.float32),
                TIMESTAMP: np.dtype(np.float32), CATEGORICAL: np.dtype(np.int64),
                TEXT: np.dtype(np.int64)}


def labels_of(values: np.ndarray, stype: int, mean: float, std: float) -> np.ndarray:
    """Labels of target cells whose stored values are ``values`` (a column of type ``stype``)."""
    if stype in (NUMERIC, TIMESTAMP):
        # The input cell's own formula (float64, then float32): a z-scored number, or the
        # timestamp's last feature.
        return ((values.astype(np.float64) - mean) / std).astype(np.float32)
    return values.astype(LABEL_DTYPES[stype])


@dataclass(frozen=True)
class LabelInfo:
    """A task's target: its semantic type, z-score statistics and categories.

    ``mean`` and ``std`` are the column's (numeric and timestamp targets; 0 and 1 otherwise):
    a prediction ``p`` in label units is ``p * std + mean`` in the column's units (numbers, or
    microseconds since the epoch for timestamps). ``num_classes`` is the number of classes of
    a categorical target (0 otherwise) and ``categories`` their names (label ``k`` is
    ``categories[k]``), where the database has them.
    """

    task: str
    task_index: int
    table: str
    column: str
    stype: int
    mean: float
    std: float
    num_classes: int
    categories: tuple[str, ...] | None
    dtype: np.dtype

    @property
    def stype_name(self) -> str:
        return STYPE_NAMES[self.stype]

    def to_units(self, labels: Any) -> np.ndarray:
        """Labels (or predictions in label units) of a numeric or timestamp target in the
        column's own units, as float64."""
        if self.stype not in (NUMERIC, TIMESTAMP):
            raise ValueError(f"task {self.task!r} has a {self.stype_name} target: only numeric "
                             "and timestamp labels have units")
        return np.asarray(labels, dtype=np.float64) * self.std + self.mean

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "task_index": self.task_index, "table": self.table,
                "column": self.column, "stype": self.stype_name, "dtype": str(self.dtype),
                "mean": self.mean, "std": self.std,
                "num_classes": self.num_classes,
                "categories": list(self.categories) if self.categories is not None else None}
