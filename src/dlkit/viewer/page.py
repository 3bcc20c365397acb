"""The viewer's page: one self-contained HTML file (its script, styles and data inline; no
network, no server) or the same page served with contexts computed on request.

A written file holds the contexts of the first ``seeds_per_split`` seeds of every task and
split, for every combination of the sampler settings asked for, so the page can switch
between them offline. Its size grows with tasks x splits x seeds x settings x the sequence
length; ``--serve`` instead computes each context when the page asks for it, for any seed
and any setting.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources
from typing import Any

from dlkit.core.codes import STYPE_NAMES
from dlkit.db.read.mapped import Database
from dlkit.sampler.splits import SPLITS
from dlkit.viewer.context import Knobs, build_context, seeds_by_split
from dlkit.viewer.curves import Series, series_svg
from dlkit.viewer.diagram import diagram_of_metadata, graphviz_dot


class Mode(StrEnum):
    STATIC = "static"  # a written file: contexts inline
    SERVE = "serve"    # served on 127.0.0.1: contexts computed on request


@dataclass(frozen=True)
class PageOptions:
    knobs: tuple[Knobs, ...] = (Knobs(),)
    seeds_per_split: int = 5
    seed: int = 0
    split_seed: int = 0
    tasks: tuple[str, ...] | None = None  # None: every task
    max_listed_seeds: int = 500  # seeds a served page lists per split (any anchor is fetched)


def knob_grid(sequence_lengths: Sequence[int], max_rows: Sequence[int],
              widths: Sequence[int]) -> tuple[Knobs, ...]:
    return tuple(Knobs(s, r, w) for s, r, w in itertools.product(sequence_lengths, max_rows,
                                                                  widths))


def context_key(task: str, split: str, anchor: int, knobs: Knobs) -> str:
    return "|".join(str(x) for x in (task, split, anchor, knobs.sequence_length,
                                     knobs.max_rows, knobs.bfs_child_width))


def page_data(db: Database, options: PageOptions, mode: Mode, curves: tuple[Series, ...] = (),
              progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """What the page's script reads: the database, tasks with their seeds per split, the
    settings, the diagram, the curves and (written files only) the contexts."""
    meta = db.metadata_record
    names = options.tasks if options.tasks is not None else tuple(t.name for t in meta.tasks)
    diagram = diagram_of_metadata(meta)
    tasks, contexts = [], {}
    for name in names:
        task = next(t for t in meta.tasks if t.name == name)
        splits = seeds_by_split(db, name, split_seed=options.split_seed)
        listed = options.max_listed_seeds if mode == Mode.SERVE else options.seeds_per_split
        tasks.append({"name": name, "table": task.table, "target": task.target_column,
                      "type": STYPE_NAMES[task.target_stype],
                      "splits": {s: [int(a) for a in splits[s][:listed]] for s in SPLITS}})
        if mode == Mode.STATIC:
            for split in SPLITS:
                for anchor in splits[split][:options.seeds_per_split]:
                    for knobs in options.knobs:
                        contexts[context_key(name, split, int(anchor), knobs)] = build_context(
                            db, name, int(anchor), knobs, seed=options.seed, split=split)
                        if progress is not None:
                            progress(1)
    return {
        "mode": mode,
        "database": {"id": meta.database_id, "hash": db.database_hash.hex(), "path": str(db.path)},
        "knobs": [k.to_json() for k in options.knobs],
        "tasks": tasks,
        "contexts": contexts,
        "diagram": {"mermaid": diagram.to_mermaid(),
                    "svg": _inline_svg(diagram.to_svg()) if graphviz_dot() is not None else None},
        "curves": [series_svg(s) for s in curves],
    }


def _inline_svg(svg: str) -> str:
    """Graphviz's SVG document as an element to put in a page (no XML prolog or DOCTYPE)."""
    return svg[svg.find("<svg"):]


def num_contexts(db: Database, options: PageOptions) -> int:
    """How many contexts a written page holds (for a progress bar)."""
    names = options.tasks if options.tasks is not None else tuple(
        t.name for t in db.metadata_record.tasks)
    total = 0
    for name in names:
        splits = seeds_by_split(db, name, split_seed=options.split_seed)
        total += sum(min(len(splits[s]), options.seeds_per_split) for s in SPLITS)
    return total * len(options.knobs)


def render_page(data: dict[str, Any]) -> str:
    """The HTML page with ``data`` inline. ``</`` is escaped in the JSON so no value (a text
    cell holding ``</script>``, say) can end the script element early."""
    template = resources.files("dlkit.viewer").joinpath("page.html").read_text("utf-8")
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    payload = payload.replace("</", "<\\/").replace("<!--", "<\\u0021--")
    head, tail = template.split("/*DLKIT_DATA*/")
    return head + payload + tail


__all__ = ["Mode", "PageOptions", "context_key", "knob_grid", "num_contexts", "page_data",
           "render_page"]
