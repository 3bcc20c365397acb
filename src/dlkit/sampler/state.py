"""Where one of the sampler's channels stands, as ``Sampler.state_dict()`` holds it.

A channel's state is the next step and every dataset's cursor after the last *consumed*
batch; val and test (walked in order, one dataset after another) also name the dataset the
next step starts from (``current``). Its JSON form, per channel::

    {"step": 7, "cursors": {"<db>/<task>/train": {"epoch": 0, "global_index": 28}, ...}}
    {"step": 5, "cursors": {...}, "current": "<db>/<task>/val"}   # val and test

``from_json`` is the one place a state from outside (a checkpoint) is checked for its shape;
whether it fits the live sampler (its datasets, its cursors' range) is the schedule's check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dlkit.encoding import UINT64_MAX
from dlkit.errors import CheckpointError
from dlkit.nextbatch import Cursor
from dlkit.sampler.arguments import is_integer

if TYPE_CHECKING:
    from dlkit.sampler.schedule import Job

TRAIN = "train"
INT64_MAX = (1 << 63) - 1  # a step beyond is out of any run's reach (and of the kernels' range)


@dataclass(frozen=True)
class ChannelState:
    """The state of channel ``channel`` ("train", "val" or "test"): ``step`` is the next
    step, ``cursors`` every dataset's cursor before it, ``current`` (val and test only) the
    dataset the next step starts from, or None (the first)."""

    channel: str
    step: int = 0
    cursors: Mapping[str, Cursor] = field(default_factory=dict)
    current: str | None = None

    @property
    def walks_in_order(self) -> bool:
        """Val and test walk their datasets one after another (and record which is current)."""
        return self.channel != TRAIN

    @classmethod
    def initial(cls, channel: str, keys: list[str]) -> ChannelState:
        """Before any batch: every dataset at epoch 0, position 0; val and test at the first
        dataset."""
        current = keys[0] if keys and channel != TRAIN else None
        return cls(channel, 0, {key: Cursor() for key in keys}, current)

    def after(self, job: Job) -> ChannelState:
        """The state once ``job``'s batch is consumed."""
        cursors = dict(self.cursors)
        cursors[job.stream.key] = job.cursor_after
        current = job.current_after if self.walks_in_order else None
        return ChannelState(self.channel, job.step + 1, cursors, current)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step": self.step,
                               "cursors": {key: cursor.to_value() for key, cursor in
                                           sorted(self.cursors.items())}}
        if self.walks_in_order:
            out["current"] = self.current
        return out

    @classmethod
    def from_json(cls, channel: str, value: Any) -> ChannelState:
        """The state ``to_json`` gave, or a ``CheckpointError`` naming the channel and the
        problem."""
        def bad(why: str) -> CheckpointError:
            return CheckpointError(f"sampler state {channel!r}: {why}")

        if not isinstance(value, Mapping):
            raise bad("missing or not a mapping")
        step = value.get("step")
        if not is_integer(step, 0, INT64_MAX):
            raise bad(f"step must be an integer from 0 to 2^63-1, got {step!r}")
        items = value.get("cursors")
        if not isinstance(items, Mapping):
            raise bad("cursors must be a mapping of dataset key to cursor")
        cursors = {}
        for key, item in items.items():
            if not isinstance(item, Mapping) or set(item) != {"epoch", "global_index"} or not \
                    all(is_integer(v, 0, UINT64_MAX) for v in item.values()):
                raise bad(f"cursor of {key!r} must be {{epoch, global_index}} integers >= 0")
            cursors[key] = Cursor(int(item["epoch"]), int(item["global_index"]))
        current = None
        if channel != TRAIN:
            current = value.get("current")
            if current is not None and not isinstance(current, str):
                raise bad(f"current must be a dataset key or null, got {current!r}")
        return cls(channel, int(step), cursors, current)
