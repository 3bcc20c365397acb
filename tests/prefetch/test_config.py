"""Sharding and the strict baseline order against naive list-based references."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.errors import InvalidArgumentError
from dlkit.prefetch import (
    IteratorConfig,
    Policy,
    PrefetchConfig,
    ShardConfig,
    ShardMode,
    strict_order,
)


def ident(p):
    return p


def naive_shard(positions: list[int], i: int, n: int, mode: ShardMode, drop: bool) -> list[int]:
    if drop:
        positions = positions[:len(positions) // n * n]
    if mode is ShardMode.INTERLEAVED:
        return positions[i::n]
    sizes = [len(positions) // n + (1 if k < len(positions) % n else 0) for k in range(n)]
    first = sum(sizes[:i])
    return positions[first:first + sizes[i]]


def naive_round_robin(shards: list[list[int]]) -> list[int]:
    out = []
    for k in range(max(map(len, shards), default=0)):
        out.extend(s[k] for s in shards if k < len(s))
    return out


bases = st.builds(lambda start, stride, count: IteratorConfig(ident, start, start + stride * count, stride),
                  st.integers(0, 50), st.integers(1, 4), st.integers(0, 60))
modes = st.sampled_from(list(ShardMode))


@given(bases, st.integers(1, 7), modes, st.booleans())
def test_shards_match_naive_reference(base, n, mode, drop):
    positions = list(base.positions())
    shards = [base.shard(ShardConfig(i, n, mode, drop)) for i in range(n)]
    for i, shard in enumerate(shards):
        assert list(shard.positions()) == naive_shard(positions, i, n, mode, drop)
        assert shard.length == len(naive_shard(positions, i, n, mode, drop))
    covered = sorted(itertools.chain.from_iterable(s.positions() for s in shards))
    assert covered == (positions[:len(positions) // n * n] if drop else positions)
    lengths = [s.length for s in shards]
    assert max(lengths) - min(lengths) <= (0 if drop else 1)


@given(bases, st.integers(1, 7), modes, st.booleans())
def test_strict_order_is_naive_round_robin(base, n, mode, drop):
    config = PrefetchConfig(num_workers=n, shard_mode=mode, drop_remainder=drop)
    positions = list(base.positions())
    expected = naive_round_robin([naive_shard(positions, i, n, mode, drop) for i in range(n)])
    assert list(strict_order(base, config)) == expected


def test_interleaved_strict_order_is_base_order():
    base = IteratorConfig(ident, start=3, stop=40)
    assert list(strict_order(base, PrefetchConfig(num_workers=3))) == list(range(3, 40))


def test_unbounded_interleaved_sharding():
    base = IteratorConfig(ident, start=5)
    shard = base.shard(ShardConfig(1, 3))
    assert shard.length is None
    assert list(itertools.islice(shard.positions(), 4)) == [6, 9, 12, 15]
    assert list(itertools.islice(strict_order(base, PrefetchConfig(num_workers=3)), 7)) == \
        list(range(5, 12))


def test_unbounded_contiguous_sharding_is_rejected():
    with pytest.raises(InvalidArgumentError, match="contiguous sharding needs a bounded"):
        IteratorConfig(ident).shard(ShardConfig(0, 2, ShardMode.CONTIGUOUS))


def test_stop_is_normalised_so_equal_sequences_compare_equal():
    assert IteratorConfig(ident, 0, 10, 3).stop == 12
    assert list(IteratorConfig(ident, 0, 10, 3).positions()) == [0, 3, 6, 9]
    assert IteratorConfig(ident, 7, 3).length == 0


@pytest.mark.parametrize("kwargs, message", [
    ({"num_workers": 0}, "num_workers must be an integer >= 1, got 0"),
    ({"buffer_size": 0}, "buffer_size must be an integer >= 1"),
    ({"max_lead": 0}, "max_lead must be an integer >= 1"),
    ({"max_held": True}, "max_held must be an integer >= 1, got True"),
    ({"policy": "fastest"}, "policy must be one of strict, best-effort, got 'fastest'"),
    ({"shard_mode": "striped"}, "shard_mode must be one of interleaved, contiguous"),
    ({"join_timeout": 0}, "join_timeout must be > 0"),
])
def test_prefetch_config_validates(kwargs, message):
    with pytest.raises(InvalidArgumentError, match=message):
        PrefetchConfig(**kwargs)
    assert issubclass(InvalidArgumentError, ValueError)


def test_prefetch_config_accepts_strings():
    config = PrefetchConfig(policy="best-effort", shard_mode="contiguous")
    assert config.policy is Policy.BEST_EFFORT and config.shard_mode is ShardMode.CONTIGUOUS


@pytest.mark.parametrize("kwargs, message", [
    ({"produce": 3}, "produce must be callable"),
    ({"produce": ident, "start": -1}, "start must be an integer >= 0"),
    ({"produce": ident, "stride": 0}, "stride must be an integer >= 1"),
    ({"produce": ident, "advise": "x"}, "advise must be callable"),
    ({"produce": ident, "buffers": {"x": ((1,), "u1")}}, "buffers must be a BufferSpec"),
])
def test_iterator_config_validates(kwargs, message):
    with pytest.raises(InvalidArgumentError, match=message):
        IteratorConfig(**kwargs)


def test_shard_config_validates():
    with pytest.raises(InvalidArgumentError, match="shard index 2 is not below num_shards 2"):
        ShardConfig(2, 2)
    with pytest.raises(InvalidArgumentError, match="mode must be one of interleaved, contiguous"):
        ShardConfig(0, 2, "striped")
