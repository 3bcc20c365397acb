"""Which component of a mixture each global step serves: a stratified, keyed order.

A mixture has ``C`` components (a component is one database's task) with integer weights
``w_0..w_{C-1} >= 1`` and ``W = sum(w)``. Global steps are cut into blocks of ``W``; block
``b`` serves component ``c`` exactly ``w_c`` times, in an order the v3 Feistel permutation of
``[0, W)`` keyed by the block decides. So every ``W`` consecutive steps (from a block's start)
hold the weights' proportions exactly, the order is a pure function of (seed, mixture, step),
and the component and its own step at any global step cost O(1): no prefix of the run is
replayed. ``docs/mixture.md`` is the normative definition:

- ``block_seed(b) = SHA-256(CBOR(["dlkit_mixture_block_v1", kernel_replay_token,
  mixture_hash, uint64(b)]))[0:16]``; its Philox words give the round keys of v3's §3.1;
- step ``k = b*W + r`` takes slot ``s = pi_b(r)`` (v3's §3 permutation of ``[0, W)``);
- the component is the ``c`` with ``P_c <= s < P_{c+1}`` (``P`` the prefix sums of the
  weights), and its own step is ``j = b*w_c + (s - P_c)``.

For every component, ``k -> j`` over the steps that serve it is a bijection onto 0, 1, 2, ...
(block ``b`` serves its steps ``[b*w_c, (b+1)*w_c)``, in the permuted order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from dlkit.encoding import cbor_sha256, require_uint
from dlkit.errors import InvalidArgumentError

BLOCK_SEED_TAG = "dlkit_mixture_block_v1"
MIXTURE_HASH_TAG = "dlkit_mixture_v1"
MAX_BLOCK = 1 << 24  # W: a block's round keys and slots fit comfortably in 32 bits
DEFAULT_TOTAL_WEIGHT = 1024  # W aimed at when weights come from counts


@dataclass(frozen=True)
class MixtureOrder:
    """The order of one mixture under one run seed (see the module doc)."""

    names: tuple[str, ...]
    weights: tuple[int, ...]
    replay_token: bytes  # kernel_replay_token of the run seed (NextBatch's)

    def __post_init__(self) -> None:
        if not self.names or len(self.names) != len(self.weights):
            raise InvalidArgumentError("a mixture needs one weight per component, and at least "
                                       "one component")
        if len(set(self.names)) != len(self.names):
            raise InvalidArgumentError(f"mixture components must have distinct names: "
                                       f"{list(self.names)}")
        for name, weight in zip(self.names, self.weights, strict=True):
            if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
                raise InvalidArgumentError(
                    f"weight of {name!r} must be a positive integer, got {weight!r}")
        if self.block_size > MAX_BLOCK:
            raise InvalidArgumentError(f"the weights sum to {self.block_size}; at most "
                                       f"{MAX_BLOCK} (scale them down)")

    @classmethod
    def from_seed(cls, names: Sequence[str], weights: Sequence[int], seed: int
                  ) -> MixtureOrder:
        """The order under run seed ``seed`` (NextBatch's ``kernel_replay_token`` of it)."""
        from dlkit.nextbatch.tokens import kernel_replay_token

        return cls(tuple(names), tuple(weights), kernel_replay_token(seed))

    @cached_property
    def block_size(self) -> int:
        return sum(self.weights)

    @cached_property
    def mixture_hash(self) -> bytes:
        # cached: every resolve needs it, and hashing the names costs O(components) under
        # the GIL (0.5 ms a step for 300 components: the producer threads could not scale)
        return mixture_hash(self.names, self.weights)

    def prefix(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.weights)]).astype(np.uint64)

    def resolve(self, first_step: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Component index and the component's own step of each global step in
        ``[first_step, first_step + count)``: two int64 arrays of ``count``."""
        require_uint(first_step, 63, "first_step")
        require_uint(count, 32, "count")
        block_size = self.block_size
        slots = np.empty(count, dtype=np.uint64)
        blocks = np.empty(count, dtype=np.int64)
        done = 0
        while done < count:
            step = first_step + done
            block, offset = divmod(step, block_size)
            run = min(count - done, block_size - offset)
            slots[done:done + run] = _block_slots(self.replay_token, self.mixture_hash,
                                                  block_size, block, offset, run)
            blocks[done:done + run] = block
            done += run
        prefix = self.prefix()
        component = np.searchsorted(prefix, slots, side="right").astype(np.int64) - 1
        weight = np.asarray(self.weights, dtype=np.int64)[component]
        local = blocks * weight + (slots.astype(np.int64) - prefix[component].astype(np.int64))
        return component, local


def mixture_hash(names: Sequence[str], weights: Sequence[int]) -> bytes:
    """``SHA-256(CBOR(["dlkit_mixture_v1", [names...], [weights...]]))``: another name, weight
    or order is another mixture."""
    return cbor_sha256([MIXTURE_HASH_TAG, list(names), list(weights)])


def _block_slots(replay_token: bytes, mixture_hash: bytes, block_size: int, block: int,
                 offset: int, run: int) -> np.ndarray:
    """Slots ``pi_b(offset .. offset + run - 1)`` of block ``block``."""
    from dlkit.core.feistel import resolve_feistel

    keys = _block_keys(replay_token, mixture_hash, block)
    out = np.empty(run, dtype=np.uint64)
    resolve_feistel(keys, np.uint64(block_size), np.array([offset], dtype=np.uint64),
                    np.array([run], dtype=np.uint64), out)
    return out


@lru_cache(maxsize=16)
def _block_keys(replay_token: bytes, mixture_hash: bytes, block: int) -> np.ndarray:
    from dlkit.core.feistel import feistel_round_keys
    from dlkit.nextbatch.tokens import seed_words

    seed = cbor_sha256([BLOCK_SEED_TAG, replay_token, mixture_hash,
                        require_uint(block, 64, "block")])[:16]
    keys: np.ndarray = feistel_round_keys(seed_words(seed))
    keys.setflags(write=False)
    return keys


def weights_from_counts(counts: Sequence[int], total: int = DEFAULT_TOTAL_WEIGHT
                        ) -> tuple[int, ...]:
    """Integer weights proportional to ``counts`` (seeds per component, say) summing to
    ``total``, by largest remainder (ties to the earlier component), then raised to 1 where
    a component would get none: each still appears once a block. Integer arithmetic only."""
    require_uint(total, 32, "total")
    if not counts or total < 1:
        raise InvalidArgumentError("weights need at least one count and a positive total")
    for count in counts:
        require_uint(count, 63, "count")
    whole = sum(counts)
    if whole == 0:
        raise InvalidArgumentError("every count is zero: no weights to derive")
    floors = [count * total // whole for count in counts]
    remainders = [count * total % whole for count in counts]
    short = total - sum(floors)
    for index in sorted(range(len(counts)), key=lambda i: (-remainders[i], i))[:short]:
        floors[index] += 1
    return tuple(max(1, weight) for weight in floors)
