"""The viewer's page: one self-contained HTML file (its script, styles and data inline; no
network, no server) or the same page served with contexts computed on request.

A written file holds the contexts of the first ``seeds_per_split`` seeds of every task and
split, for every combination of the sampler settings asked for, so the page can switch
between them offline. Its size grows with tasks x splits x seeds x settings x the sequence
length; ``--serve`` instead computes each context when the page asks for it, for any seed
and any setting.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources
from typing import Any

from dlkit.core.codes import STYPE_NAMES
from dlkit.db.read.mapped import Database
from dlkit.errors import InvalidArgumentError
from dlkit.nextbatch.tokens import TrainOrder
from dlkit.sampler.batch import ChildPolicy, ContextExamplePolicy
from dlkit.sampler.schedule import SamplerWarning
from dlkit.sampler.splits import DEFAULT_TRAIN_ORDER, SPLITS
from dlkit.viewer.context import Knobs, build_context, seeds_by_split, step_seeds
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
    # seeds a served page lists per split; its "any seed" field fetches any other one
    max_listed_seeds: int = 500
    # A step of the run: each (task, split) shows the seeds of that step of its stream, with
    # the run's global batch size and train order (as `dlkit batches` builds them)
    step: int | None = None
    batch_size: int = 32
    sampling_mode: TrainOrder = DEFAULT_TRAIN_ORDER


def knob_grid(sequence_lengths: Sequence[int], max_rows: Sequence[int], widths: Sequence[int],
              policies: Sequence[ChildPolicy] = (ChildPolicy.UNIFORM,),
              examples: Sequence[int] = (0,),
              example_policies: Sequence[ContextExamplePolicy] = (ContextExamplePolicy.RECENT,),
              ) -> tuple[Knobs, ...]:
    """Every combination of the settings (one example policy without examples: it changes
    nothing there)."""
    grid = (Knobs(*values) for values in itertools.product(
        sequence_lengths, max_rows, widths, policies, examples, example_policies))
    return tuple(dict.fromkeys(k if k.context_examples else
                               dataclasses.replace(k, context_example_policy=example_policies[0])
                               for k in grid))


def context_key(task: str, split: str, anchor: int, knobs: Knobs) -> str:
    return "|".join(str(x) for x in (task, split, anchor, knobs.sequence_length,
                                     knobs.max_rows, knobs.bfs_child_width,
                                     knobs.bfs_child_policy.value, knobs.context_examples,
                                     knobs.context_example_policy.value))


def page_data(db: Database, options: PageOptions, mode: Mode, curves: tuple[Series, ...] = (),
              progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """What the page's script reads: the database, tasks with their seeds per split, the
    settings, the diagram, the curves and (written files only) the contexts."""
    meta = db.metadata
    names = options.tasks if options.tasks is not None else tuple(t.name for t in meta.tasks)
    diagram = diagram_of_metadata(meta)
    tasks, contexts = [], {}
    for name in names:
        task = next(t for t in meta.tasks if t.name == name)
        listed = options.max_listed_seeds if mode == Mode.SERVE else options.seeds_per_split
        seeds, epochs, totals = _seeds(db, name, options, listed)
        empty = [split for split in SPLITS if not seeds[split]]
        if empty and options.step is None:  # (a step's empty batch the sampler warns of)
            warnings.warn(f"task {name!r} has no seeds in {'/'.join(empty)}: the page lists "
                          "none there", SamplerWarning, stacklevel=2)
        tasks.append({"name": name, "table": task.table, "target": task.target_column,
                      "type": STYPE_NAMES[task.target_stype], "splits": seeds,
                      "num_seeds": totals, "epochs": epochs, "step": options.step})
        if mode == Mode.STATIC:
            for split in SPLITS:
                for anchor in seeds[split]:
                    for knobs in options.knobs:
                        contexts[context_key(name, split, anchor, knobs)] = build_context(
                            db, name, anchor, knobs, seed=options.seed, split=split,
                            epoch=epochs[split])
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


def _seeds(db: Database, task: str, options: PageOptions, listed: int
           ) -> tuple[dict[str, list[int]], dict[str, int], dict[str, int]]:
    """Per split: the anchor rows to list, the epoch their contexts are drawn at (a step's
    epoch, else 0) and how many seeds there are to list from (the split's, or the step's
    batch). A split with no batch at that step lists none."""
    if options.step is None:
        splits = seeds_by_split(db, task, split_seed=options.split_seed)
        return ({s: [int(a) for a in splits[s][:listed]] for s in SPLITS},
                dict.fromkeys(SPLITS, 0), {s: int(splits[s].size) for s in SPLITS})
    seeds: dict[str, list[int]] = {}
    epochs: dict[str, int] = {}
    for split in SPLITS:
        try:
            found = step_seeds(db, task, split, options.step, seed=options.seed,
                               split_seed=options.split_seed, batch_size=options.batch_size,
                               sampling_mode=options.sampling_mode)
        except InvalidArgumentError:  # too few seeds for one batch of this split
            seeds[split], epochs[split] = [], 0
            continue
        seeds[split], epochs[split] = list(found.anchors), found.epoch
    return seeds, epochs, {s: len(seeds[s]) for s in SPLITS}


def num_contexts(db: Database, options: PageOptions) -> int:
    """How many contexts a written page holds (for a progress bar)."""
    names = options.tasks if options.tasks is not None else tuple(
        t.name for t in db.metadata.tasks)
    total = sum(len(anchors) for name in names
                for anchors in _seeds(db, name, options, options.seeds_per_split)[0].values())
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
