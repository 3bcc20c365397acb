"""Every sampler knob's default and bounds, declared once (no kernel is loaded here).

The ``Sampler``'s keywords, ``RunConfig``, ``BatchConfig``, ``BatchRequest`` (``dlkit
batches``), ``describe_sequence`` (``dlkit show``), ``make_run_manifest`` (``dlkit
manifest``) and the CLI's options all take their defaults from here, so a default changes in
one place. This module imports nothing heavy: the CLI reads it to declare its options without
loading numba.
"""

from __future__ import annotations

from typing import Final

# The run: which seeds each step takes (``RunConfig``).
SEED: Final = 0
SPLIT_SEED: Final = 0
SPLIT_RATIOS: Final = (0.8, 0.1, 0.1)
SPLIT_RATIOS_TEXT: Final = ",".join(f"{share:g}" for share in SPLIT_RATIOS)  # "0.8,0.1,0.1"
BATCH_SIZE: Final = 32
TRAIN_ORDER: Final = "v3"  # ``TrainOrder.V3``'s short name

# One sequence's walk (``BatchConfig``).
MAX_EXTENT: Final = 1 << 16  # the largest S and R: positions and rows are stored as uint16 + 1
SEQUENCE_LENGTH: Final = 1024
MAX_ROWS: Final = 256
BFS_CHILD_WIDTH: Final = 16
MAX_CHILD_WIDTH: Final = 1 << 30
CHILD_POLICY: Final = "uniform"  # ``ChildPolicy.UNIFORM``'s name
CONTEXT_EXAMPLES: Final = 0  # other seeds' neighbourhoods filling a short sequence (0: off)
MAX_CONTEXT_EXAMPLES: Final = MAX_EXTENT
CONTEXT_EXAMPLE_POLICY: Final = "recent"  # ``ContextExamplePolicy.RECENT``'s name

# The Sampler's prefetching (never changes a batch).
NUM_PREFETCH: Final = 3
NUM_THREADS: Final = 1
