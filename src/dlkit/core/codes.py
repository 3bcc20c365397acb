"""The codes every layer shares: semantic types and the time of a row without one.

The kernels compare against these, the database format stores them (``metadata.json``'s
``stype``, ``graph.bin``'s ``row_times``), and the sampler decodes them: one definition.
"""

from __future__ import annotations

import numpy as np

# Semantic types of a column (metadata.json's ``stype``; docs/database_format.md).
NUMERIC, BOOLEAN, TIMESTAMP, CATEGORICAL, TEXT = 0, 1, 2, 3, 4
STYPE_NAMES = ("numeric", "boolean", "timestamp", "categorical", "text")

# The row time of a row without one (a table without a time column, or a null time): before
# every observation time, so such rows are always visible.
NO_TIME = np.iinfo(np.int64).min
