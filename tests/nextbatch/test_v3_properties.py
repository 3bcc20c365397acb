"""NextBatch_v3 properties beyond the shared ones in test_properties.py (run for v2 and v3)."""

import numpy as np

from dlkit.nextbatch import Cursor, SamplingPlan
from tests import naive_feistel as naive
from tests.nextbatch.helpers import manifest_of
from tests.nextbatch.v3_helpers import v3_dict


def test_large_n_is_world_size_independent_without_materialising_the_epoch():
    """N = 10^12 (64-bit path): rank slices of a step equal the single-rank step."""
    doc = v3_dict(10**12, 4096, seed=99)
    m = manifest_of(doc)
    cursor = Cursor(2, 10**12 - 3 * 4096 - 100)
    whole = SamplingPlan.create(m, "ds", 1, 0, "train").next_batch(cursor).indices.tolist()
    parts = sum((SamplingPlan.create(m, "ds", 8, r, "train").next_batch(cursor).indices.tolist()
                 for r in range(8)), [])
    assert parts == whole
    epoch = naive.Epoch(doc, "ds", 2)
    first = cursor.global_index
    assert whole[:64] == [epoch.index(p) for p in range(first, first + 64)]
    assert len(set(whole)) == len(whole) and max(whole) < 10**12
    assert np.ptp(np.array(whole, dtype=np.float64)) > 10**11  # one batch spans the dataset
