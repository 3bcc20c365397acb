"""A bench request validates itself: one readable error per bad argument."""

from __future__ import annotations

import pytest

from dlkit.bench.request import BenchRequest
from dlkit.errors import InvalidArgumentError


@pytest.mark.parametrize("kwargs, message", [
    ({"workload": "video"}, "workload must be gather or synthetic"),
    ({"trace": "t.cbor"}, "--trace needs --manifest"),
    ({"workload": "synthetic", "data": "rows.bin"}, "the synthetic workload reads no data"),
    ({"steps": 0}, "steps must be at least 1"),
    ({"row_bytes": 4}, "row_bytes must be at least 8"),
    ({"compute_ms": -1.0}, "compute_ms must be from 0 to 60000 ms, got -1.0"),
    ({"compute_ms": float("inf")}, "compute_ms must be from 0 to 60000 ms, got inf"),
    ({"consumer_ms": float("nan")}, "consumer_ms must be from 0 to 60000 ms, got nan"),
])
def test_bench_request_validates(kwargs, message):
    with pytest.raises(InvalidArgumentError, match=message):
        BenchRequest(**kwargs)
