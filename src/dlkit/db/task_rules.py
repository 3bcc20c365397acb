"""A task's rules about time and splits, as ``metadata.json`` states them.

Each rule is an optional key of a task's entry, written only when it differs from the
default, so a database whose schema uses none of them has the same bytes and hash as before
the rules existed:

- ``label_lag_us``: a row's target becomes known that many microseconds after the row's time
  (default 0: at the row's time);
- ``boundary``: ``"strict"`` when rows at exactly the observation time are not visible
  (default: they are);
- ``static``: true when the task's table has no time column on purpose;
- ``split``: ``{"kind": "time", "val_from": us, "test_from": us}`` or
  ``{"kind": "given", "rows": [train, val, test]}`` (row counts of the task's table, whose
  rows are the train rows, then val, then test); absent: hash splits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeGuard

from dlkit.db import format as fmt

OPTIONAL_TASK_KEYS = frozenset({"label_lag_us", "boundary", "static", "split"})
MAX_LAG_US = 1 << 62


def timeless_warning(task: str, table: str) -> str:
    """What preprocess and ``dlkit manifest`` say of a task on a table without a time
    column whose schema does not say it is static."""
    return (f"task {task!r}: table {table!r} has no time column, so its sequences see every "
            "row whatever its time (set static = true in the schema if that is meant)")


def rules_of(task: Any) -> TaskRules:
    """A task's rules: its ``rules`` (an opened database's task), else the defaults."""
    rules = getattr(task, "rules", None)
    return rules if rules is not None else TaskRules()


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class TaskRules:
    label_lag_us: int = 0
    strict: bool = False
    static: bool = False
    split: str = "hash"
    val_from: int | None = None
    test_from: int | None = None
    split_rows: tuple[int, int, int] | None = None

    @classmethod
    def from_schema(cls, task: Any, location_rows: tuple[int, ...]) -> TaskRules:
        """The rules of a ``dlkit.db.schema.spec.TaskSpec`` whose table has ``location_rows``."""
        split_rows = None
        if task.split == "given":  # the table has one location per split
            train, val, test = location_rows
            split_rows = (train, val, test)
        return cls(label_lag_us=int(task.label_lag_us), strict=bool(task.strict),
                   static=bool(task.static), split=task.split, val_from=task.val_from_us,
                   test_from=task.test_from_us, split_rows=split_rows)

    def to_metadata(self) -> dict[str, Any]:
        rules: dict[str, Any] = {}
        if self.label_lag_us:
            rules["label_lag_us"] = int(self.label_lag_us)
        if self.strict:
            rules["boundary"] = "strict"
        if self.static:
            rules["static"] = True
        if self.split == "time":
            rules["split"] = {"kind": "time", "val_from": int(self.val_from or 0),
                              "test_from": int(self.test_from or 0)}
        elif self.split == "given":
            rules["split"] = {"kind": "given", "rows": list(self.split_rows or ())}
        return rules

    @classmethod
    def from_metadata(cls, task: dict[str, Any], table: dict[str, Any]) -> TaskRules:
        """The rules of a task entry of ``metadata.json`` whose table entry is ``table``;
        ``ValueError`` saying what is wrong."""
        lag = task.get("label_lag_us", 0)
        if "label_lag_us" in task and (not _is_int(lag) or not 0 < lag <= MAX_LAG_US):
            raise ValueError(f"label_lag_us must be an integer in [1, 2^62], got {lag!r}")
        boundary = task.get("boundary", "inclusive")
        if "boundary" in task and boundary != "strict":
            raise ValueError(f"boundary must be \"strict\" when present, got {boundary!r}")
        static = task.get("static", False)
        if "static" in task and static is not True:
            raise ValueError(f"static must be true when present, got {static!r}")
        has_time = table.get("time_column") is not None
        if static and has_time:
            raise ValueError("static needs a table without a time column")
        if lag and not has_time:
            raise ValueError("label_lag_us needs a table with a time column")
        split = task.get("split")
        if split is None:
            return cls(lag, boundary == "strict", static)
        if not isinstance(split, dict) or split.get("kind") not in ("time", "given"):
            raise ValueError(f"split must be {{kind: time|given, ...}}, got {split!r}")
        if split["kind"] == "time":
            val_from, test_from = split.get("val_from"), split.get("test_from")
            if set(split) != {"kind", "val_from", "test_from"} or not _is_int(val_from) \
                    or not _is_int(test_from) or not val_from <= test_from \
                    or val_from == fmt.NO_TIME or not has_time:
                raise ValueError("a time split needs integer val_from <= test_from and a table "
                                 f"with a time column, got {split!r}")
            return cls(lag, boundary == "strict", static, "time", val_from, test_from)
        rows = split.get("rows")
        if set(split) != {"kind", "rows"} or not isinstance(rows, list) or len(rows) != 3 \
                or not all(_is_int(n) and n >= 0 for n in rows) \
                or sum(rows) != table.get("num_rows"):
            raise ValueError(f"a given split needs rows [train, val, test] adding up to the "
                             f"table's {table.get('num_rows')} rows, got {split!r}")
        return cls(lag, boundary == "strict", static, "given", split_rows=tuple(rows))
