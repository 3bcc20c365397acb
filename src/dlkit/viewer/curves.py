"""Training curves as SVG: the examples' ``--record`` JSONL (one object per step) drawn as one
small chart per numeric series (``loss``, and any other number a record carries), with a
moving average over the noise. Plain SVG text: no plotting library, nothing to install, and
the same markup goes inline into the viewer's page or into a file of its own.
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dlkit.errors import InputFormatError
from dlkit.files import read_regular

# numbers that are positions, not measurements
_SKIP = frozenset({"step", "task_idx", "database_idx"})
WIDTH, HEIGHT, PAD = 560, 180, 44


@dataclass(frozen=True)
class Series:
    name: str
    steps: tuple[int, ...]
    values: tuple[float, ...]
    # steps whose value was NaN or infinite: not drawn, but said (a diverged run must not look
    # like one that stopped)
    not_finite: tuple[int, ...] = ()
    # the record file it was read from, as told apart from the others drawn with it (its
    # stem, or its path when stems collide); "" when it is the only one
    record: str = ""

    @property
    def title(self) -> str:
        """``"run_a: loss"``: the series, and its file when there are several."""
        return f"{self.record}: {self.name}" if self.record else self.name

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "record": self.record, "title": self.title,
                "not_finite": list(self.not_finite)}

    def not_finite_note(self) -> str:
        """``"not finite at 3 steps, from step 40"``, or "" when every value is finite."""
        if not self.not_finite:
            return ""
        n = len(self.not_finite)
        return f"not finite at {n} step{'s' if n != 1 else ''}, from step {self.not_finite[0]}"


def read_record(path: str | Path) -> tuple[Series, ...]:
    """The numeric series of a ``--record`` file, in the order their keys first appear."""
    try:
        data = read_regular(path)
    except OSError as exc:
        raise InputFormatError(f"cannot read the record: {exc.strerror or exc}",
                               path=str(path)) from None
    points: dict[str, list[tuple[int, float]]] = {}
    not_finite: dict[str, list[int]] = {}
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise InputFormatError(f"line {number} is not JSON", path=str(path)) from None
        if not isinstance(record, dict):
            raise InputFormatError(f"line {number} is not a JSON object", path=str(path))
        step = record.get("step", number - 1)
        if not isinstance(step, int) or isinstance(step, bool):
            raise InputFormatError(f"line {number}: step is not an integer", path=str(path))
        for key, value in record.items():
            # null is a number that was not finite, as strict JSON writes one (the examples'
            # records do); Python's own NaN and Infinity are read too
            if key in _SKIP or isinstance(value, bool) or \
                    not (value is None or isinstance(value, int | float)):
                continue
            series = points.setdefault(key, [])
            if value is not None and math.isfinite(value):
                series.append((step, float(value)))
            else:
                not_finite.setdefault(key, []).append(step)
    if not points:
        raise InputFormatError("no numeric series (such as loss) in any line", path=str(path))
    return tuple(Series(k, tuple(s for s, _ in v), tuple(x for _, x in v),
                        tuple(not_finite.get(k, ()))) for k, v in points.items())


def record_labels(paths: Sequence[str | Path]) -> list[str]:
    """How each of several record files is named beside its series: its stem, or the path
    as given when two stems are the same; nothing ("") for a single file."""
    if len(paths) < 2:
        return [""] * len(paths)
    stems = [Path(p).stem for p in paths]
    return stems if len(set(stems)) == len(stems) else [str(p) for p in paths]


def read_records(paths: Sequence[str | Path]) -> tuple[tuple[Path, Series], ...]:
    """The series of every record file in turn, with the file each came from, labelled
    with it when there are several (two runs' ``loss`` must not look like one series drawn
    twice)."""
    return tuple((Path(path), dataclasses.replace(one, record=label))
                 for path, label in zip(paths, record_labels(paths), strict=True)
                 for one in read_record(path))


def moving_average(values: tuple[float, ...], window: int) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def series_svg(series: Series) -> str:
    """One chart: the raw values faint, their moving average bold, axes with the ranges, and
    in red the steps whose value was not finite."""
    name, title = html.escape(series.name), html.escape(series.title)
    tags = f'data-series="{name}"' + (f' data-record="{html.escape(series.record)}"'
                                      if series.record else "")
    warning = (f'<text x="{WIDTH - 10}" y="14" text-anchor="end" fill="#c0392b">'
               f'{html.escape(series.not_finite_note())}</text>' if series.not_finite else "")
    if not series.values:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" class="curve" {tags} '
                f'width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
                f'font-family="sans-serif" font-size="11">'
                f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>{warning}'
                f'<text x="{WIDTH / 2:.0f}" y="{HEIGHT / 2:.0f}" text-anchor="middle" '
                f'font-weight="bold">{title}: no finite value</text></svg>')
    lo, hi = min(series.values), max(series.values)
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    s0, s1 = series.steps[0], series.steps[-1]
    span = max(s1 - s0, 1)

    def xy(step: int, value: float) -> str:
        x = PAD + (step - s0) / span * (WIDTH - PAD - 10)
        y = 10 + (hi - value) / (hi - lo) * (HEIGHT - PAD)
        return f"{x:.1f},{y:.1f}"

    raw = " ".join(xy(s, v) for s, v in zip(series.steps, series.values, strict=True))
    window = max(1, len(series.values) // 20)
    smooth = " ".join(xy(s, v) for s, v in zip(
        series.steps, moving_average(series.values, window), strict=True))
    bottom = HEIGHT - PAD + 10
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="curve" {tags} '
        f'width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'font-family="sans-serif" font-size="11">'
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>'
        f'<line x1="{PAD}" y1="{bottom}" x2="{WIDTH - 10}" y2="{bottom}" stroke="#999"/>'
        f'<line x1="{PAD}" y1="10" x2="{PAD}" y2="{bottom}" stroke="#999"/>'
        f'<text x="{PAD - 4}" y="14" text-anchor="end">{hi:.4g}</text>'
        f'<text x="{PAD - 4}" y="{bottom}" text-anchor="end">{lo:.4g}</text>'
        f'<text x="{PAD}" y="{bottom + 14}">step {s0}</text>'
        f'<text x="{WIDTH - 10}" y="{bottom + 14}" text-anchor="end">{s1}</text>'
        f'<text x="{WIDTH / 2:.0f}" y="{bottom + 28}" text-anchor="middle" font-weight="bold">'
        f'{title} (moving average over {window} step{"s" if window > 1 else ""})</text>'
        f'{warning}'
        f'<polyline points="{raw}" fill="none" stroke="#3498db" stroke-opacity="0.35"/>'
        f'<polyline points="{smooth}" fill="none" stroke="#2c3e50" stroke-width="2"/>'
        "</svg>")


def curves_svg(series: tuple[Series, ...]) -> str:
    """Every series' chart stacked in one SVG document."""
    body = "".join(f'<g transform="translate(0,{i * HEIGHT})">{series_svg(s)}</g>'
                   for i, s in enumerate(series))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
            f'height="{HEIGHT * len(series)}">{body}</svg>\n')


__all__ = ["Series", "curves_svg", "moving_average", "read_record", "read_records",
           "record_labels", "series_svg"]
