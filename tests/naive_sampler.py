"""A plain-Python reference of the relational sampler's semantics (docs/batch_format.md).

Written from the specification, not from the kernels: its own Philox4x32-10, dicts and lists
instead of CSR scans and hash tables, Python's ``datetime`` for the calendar features. Tests
compare the Numba kernels against it, value for value.

``db`` is anything with the reader API of ``docs/database_format.md`` (the real database or
the in-memory double of ``tests/sampler/fakedb.py``).
"""

from __future__ import annotations

import bisect
import datetime as dt
import math

import numpy as np

NO_TIME = -(1 << 63)
INT64_MAX = (1 << 63) - 1
M32 = 0xFFFFFFFF
M64 = (1 << 64) - 1
SEQUENCE_TAG = 0x53455131
TASK_TAG = 0x5441534B
EXAMPLE_TAG = 0x43545831
NUMERIC, BOOLEAN, TIMESTAMP, CATEGORICAL, TEXT = range(5)


# --- Philox4x32-10 (Random123) ------------------------------------------------------------


def philox(c0: int, c1: int, c2: int, c3: int, k0: int, k1: int) -> tuple[int, int, int, int]:
    for _ in range(10):
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (((p1 >> 32) ^ c1 ^ k0) & M32, p1 & M32,
                          ((p0 >> 32) ^ c3 ^ k1) & M32, p0 & M32)
        k0 = (k0 + 0x9E3779B9) & M32
        k1 = (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


def split_of(anchor: int, task: int, split_seed: int, ratios: tuple[float, float, float]) -> int:
    r = philox(anchor & M32, anchor >> 32, task, 0, split_seed & M32, split_seed >> 32)
    bucket = r[0] % 1000
    if bucket < round(1000 * ratios[0]):
        return 0
    if bucket < round(1000 * (ratios[0] + ratios[1])):
        return 1
    return 2


class Stream:
    """The draws of one sequence: key from (seed, epoch, task); draw i is half i % 2 of block
    i // 2, counter (block, anchor)."""

    def __init__(self, seed: int, epoch: int, task: int, anchor: int):
        r = philox(epoch & M32, epoch >> 32, task, SEQUENCE_TAG, seed & M32, seed >> 32)
        self.key = (r[0], r[1])
        self.anchor = anchor
        self.draw = 0

    @classmethod
    def of_examples(cls, seed: int, epoch: int, task: int, anchor: int) -> Stream:
        """The stream of the random choice of a sequence's context examples: its own key
        (tag EXAMPLE_TAG), the sequence's anchor."""
        stream = cls(seed, epoch, task, anchor)
        r = philox(epoch & M32, epoch >> 32, task, EXAMPLE_TAG, seed & M32, seed >> 32)
        stream.key = (r[0], r[1])
        return stream

    def next_u64(self) -> int:
        j, a = self.draw // 2, self.anchor
        r = philox(j & M32, j >> 32, a & M32, a >> 32, *self.key)
        half = self.draw % 2
        self.draw += 1
        return r[2 * half] | (r[2 * half + 1] << 32)

    def below(self, n: int) -> int:
        limit = (1 << 64) - ((1 << 64) % n)
        while True:
            x = self.next_u64()
            if x < limit:
                return x % n


def task_pick(seed: int, step: int, weights: list[float]) -> int:
    """Index into ``weights`` (tasks of weight 0 already removed) of train step ``step``."""
    r = philox(step & M32, step >> 32, 0, TASK_TAG, seed & M32, seed >> 32)
    u = ((r[0] | (r[1] << 32)) >> 11) / float(1 << 53)
    cumulative = [float(c) for c in np.cumsum(np.asarray(weights, dtype=np.float64))]
    x = u * cumulative[-1]
    for t, c in enumerate(cumulative):
        if x < c:
            return t
    return len(weights) - 1


# --- temporal BFS -------------------------------------------------------------------------


def visible(t: int, cutoff: int) -> bool:
    return t == NO_TIME or t <= cutoff


UNIFORM, RECENT, QUOTA = range(3)  # child policies


def floyd(stream: Stream, population: int, count: int) -> list[int]:
    """``count`` distinct positions of ``range(population)``, ascending (Floyd's algorithm)."""
    chosen: list[int] = []
    for j in range(population - count, population):
        t = stream.below(j + 1)
        chosen.append(j if t in chosen else t)
    return sorted(chosen)


def quotas(counts: dict[int, int], width: int) -> dict[int, int]:
    """Each child table's share of ``width`` (more children than ``width`` in all): a table
    with at most its even share of what is left takes all its children, the rest share what
    they leave, the first tables (by index) taking the remainder one each."""
    out: dict[int, int] = {}
    remaining = width
    open_tables = sorted(counts)
    while open_tables:
        share = remaining // len(open_tables)
        fits = [t for t in open_tables if counts[t] <= share]
        if not fits:
            break
        for t in fits:
            out[t] = counts[t]
            remaining -= counts[t]
        open_tables = [t for t in open_tables if t not in fits]
    for i, t in enumerate(open_tables):
        out[t] = remaining // len(open_tables) + (i < remaining % len(open_tables))
    return out


def choose_children(g, lo: int, k: int, width: int, policy: int, stream: Stream) -> list[int]:
    """Positions (in the visible prefix ``k`` long) of the children a visit queues."""
    if k <= width:
        return list(range(k))
    if policy == RECENT:
        return list(range(k - width, k))
    if policy == UNIFORM:
        return floyd(stream, k, width)
    tables = [int(g.row_table[int(g.child_ids[lo + q])]) for q in range(k)]
    counts: dict[int, int] = {}
    for t in tables:
        counts[t] = counts.get(t, 0) + 1
    chosen: list[int] = []
    for t, quota in sorted(quotas(counts, width).items()):
        mine = [q for q in range(k) if tables[q] == t]
        if quota == len(mine):
            chosen += mine
        elif quota:
            chosen += [mine[r] for r in floyd(stream, len(mine), quota)]
    return sorted(chosen)


def bfs(db, seed_row: int, obs_time: int, width: int, max_cells: int, max_rows: int,
        stream: Stream, strict: bool = False,
        policy: int = UNIFORM) -> list[tuple[int, int, int, int]]:
    """Visited rows as (row, depth, source visit index, via) with via 0 seed, 1 parent, 2 child.
    ``strict``: rows at exactly the observation time are not visible. ``policy``: which
    children over the width are queued (UNIFORM, RECENT or QUOTA)."""
    g = db.graph
    cutoff = INT64_MAX if obs_time == NO_TIME else obs_time - int(strict)
    ncells = {t.index: len(t.columns) for t in db.tables}
    stack: list[tuple[int, int, int]] = []
    levels: dict[int, list[tuple[int, int]]] = {}
    seen: set[int] = set()
    out: list[tuple[int, int, int, int]] = []
    cells = 0
    pending: tuple[int, int, int, int] | None = (seed_row, 0, -1, 0)
    while True:
        if pending is None:
            if stack:
                row, depth, source = stack.pop()
                pending = (row, depth, source, 1)
            else:
                nonempty = sorted(d for d, items in levels.items() if items)
                if not nonempty:
                    break
                depth = nonempty[0]
                items = levels[depth]
                r = stream.below(len(items))
                items[r], items[-1] = items[-1], items[r]
                row, source = items.pop()
                pending = (row, depth, source, 2)
        row, depth, source, via = pending
        pending = None
        if row in seen:
            continue
        seen.add(row)
        me = len(out)
        out.append((row, depth, source, via))
        cells += ncells[int(g.row_table[row])]
        if cells >= max_cells or len(out) >= max_rows:
            break
        parents = [int(p) for p in g.parent_ids[g.parent_offsets[row]:g.parent_offsets[row + 1]]]
        for p in reversed(parents):
            if visible(int(g.row_times[p]), cutoff):
                stack.append((p, depth + 1, me))
        lo, hi = int(g.child_offsets[row]), int(g.child_offsets[row + 1])
        times = [int(t) for t in g.child_times[lo:hi]]
        k = bisect.bisect_right(times, cutoff)
        if k == 0:
            continue
        chosen = choose_children(g, lo, k, width, policy, stream)
        level = levels.setdefault(depth + 1, [])
        for q in chosen:
            level.append((int(g.child_ids[lo + q]), me))
    return out


# --- context examples ---------------------------------------------------------------------

EXAMPLES_RECENT, EXAMPLES_RANDOM, EXAMPLES_PARENT = range(3)
VIA_EXAMPLE = 3


def context_examples(task, seed_index: int, cutoff: int, count: int, policy: int, *,
                     seed: int, epoch: int, db=None, max_scan: int = 0) -> list[int]:
    """Seed indices of the context examples of seed ``seed_index``: the other seeds observed
    at a visible time, in (time, anchor row) order, the last ``count`` of them (latest first)
    or ``count`` chosen by Floyd's algorithm from the example stream (latest first), or
    (EXAMPLES_PARENT, ``db`` given) the seeds among the latest ``max_scan`` visible children
    of each foreign-key parent of the seed's row, then the latest others."""
    times = [int(t) for t in task.obs_time]
    anchors = [int(a) for a in task.anchor_row]
    order = sorted(range(len(times)), key=lambda i: (times[i], anchors[i]))
    candidates = [i for i in order if visible(times[i], cutoff) and i != seed_index]
    count = min(count, len(candidates))
    if policy == EXAMPLES_RECENT:
        return candidates[::-1][:count]
    if policy == EXAMPLES_PARENT:
        g = db.graph
        table = db.table(task.table)
        offset = int(table.row_offset)
        seed_of = {a: i for i, a in enumerate(anchors)}
        row = offset + anchors[seed_index]
        chosen: list[int] = []
        for parent in g.parent_ids[g.parent_offsets[row]:g.parent_offsets[row + 1]]:
            lo, hi = int(g.child_offsets[parent]), int(g.child_offsets[parent + 1])
            k = bisect.bisect_right([int(t) for t in g.child_times[lo:hi]], cutoff)
            for q in range(k - 1, max(0, k - max_scan) - 1, -1):
                child = int(g.child_ids[lo + q])
                if int(g.row_table[child]) != table.index:
                    continue
                i = seed_of.get(child - offset)
                if i is None or i == seed_index or not visible(times[i], cutoff):
                    continue
                if i not in chosen and len(chosen) < count:
                    chosen.append(i)
        return chosen + [i for i in candidates[::-1] if i not in chosen][:count - len(chosen)]
    stream = Stream.of_examples(seed, epoch, task.index, anchors[seed_index])
    return [candidates[p] for p in reversed(floyd(stream, len(candidates), count))]


def with_examples(db, task, seed_index: int, visits, *, seed: int, epoch: int, width: int,
                  S: int, R: int, policy: int, count: int, example_policy: int):
    """``visits`` (the seed's own walk) followed by the rows of its context examples: example
    ``j`` of ``k`` walked like its own sequence with the seed's cutoff, its new rows appended
    until it has a ``ceil`` share of the cells or the rows still free."""
    g = db.graph
    ncells = {t.index: len(t.columns) for t in db.tables}
    rules = getattr(task, "rules", None)
    strict = bool(rules is not None and rules.strict)
    obs_time = int(task.obs_time[seed_index])
    cutoff = INT64_MAX if obs_time == NO_TIME else obs_time - int(strict)
    visits = list(visits)
    cells = sum(ncells[int(g.row_table[row])] for row, _, _, _ in visits)
    if count == 0 or cells >= S or len(visits) >= R:
        return visits
    chosen = context_examples(task, seed_index, cutoff, count, example_policy, seed=seed,
                              epoch=epoch, db=db, max_scan=S)
    index = {row: i for i, (row, _, _, _) in enumerate(visits)}
    row_offset = int(db.table(task.table).row_offset)
    for j, example in enumerate(chosen):
        if cells >= S or len(visits) >= R:
            break
        left = len(chosen) - j
        share_cells = -(-(S - cells) // left)
        share_rows = -(-(R - len(visits)) // left)
        anchor = int(task.anchor_row[example])
        walk = bfs(db, row_offset + anchor, obs_time, width, 1 << 62, R,
                   Stream(seed, epoch, task.index, anchor), strict=strict, policy=policy)
        placed: dict[int, int] = {}
        added_cells = added_rows = 0
        for i, (row, depth, source, via) in enumerate(walk):
            if row in index:
                placed[i] = index[row]
                continue
            placed[i] = index[row] = len(visits)
            visits.append((row, depth, -1 if source < 0 else placed[source],
                           VIA_EXAMPLE if source < 0 else via))
            cells += ncells[int(g.row_table[row])]
            added_cells += ncells[int(g.row_table[row])]
            added_rows += 1
            if added_cells >= share_cells or added_rows >= share_rows:
                break
    return visits


# --- linearisation and collation ----------------------------------------------------------


def time_features(t: int, mean: float, std: float) -> list[float]:
    moment = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=t)
    phases = [moment.second / 60, moment.minute / 60, moment.hour / 24, moment.weekday() / 7,
              (moment.day - 1) / 31, (moment.month - 1) / 12,
              (moment.timetuple().tm_yday - 1) / 366]
    feats = []
    for p in phases:
        feats += [math.sin(2 * math.pi * p), math.cos(2 * math.pi * p)]
    return feats + [(float(t) - mean) / std]


def sequence(db, task, seed_index: int, *, seed: int, epoch: int, width: int, S: int, R: int,
             policy: int = UNIFORM, examples: int = 0, example_policy: int = EXAMPLES_RECENT):
    """One sequence: (visited rows, cells), each cell a dict of the values of every key;
    ``examples`` context examples (chosen by ``example_policy``) fill a short walk."""
    table = db.table(task.table)
    anchor = int(task.anchor_row[seed_index])
    seed_row = int(table.row_offset) + anchor
    stream = Stream(seed, epoch, task.index, anchor)
    obs_time = int(task.obs_time[seed_index])
    rules = getattr(task, "rules", None)
    visits = bfs(db, seed_row, obs_time, width, S, R, stream,
                 strict=bool(rules is not None and rules.strict), policy=policy)
    own = len(visits)
    visits = with_examples(db, task, seed_index, visits, seed=seed, epoch=epoch, width=width,
                           S=S, R=R, policy=policy, count=examples,
                           example_policy=example_policy)
    known_until = INT64_MAX if obs_time == NO_TIME else obs_time
    # A column is lagged by the largest of its own known_after lag and the label lags of the
    # tasks that predict it.
    lags: dict[tuple[str, str], int] = {}
    for t in db.tables:
        for column in t.columns:
            if getattr(column, "known_after_us", 0):
                lags[(t.name, column.name)] = int(column.known_after_us)
    for other in db.tasks:
        lag = other.rules.label_lag_us if getattr(other, "rules", None) is not None else 0
        if lag:
            key = (other.table, other.target_column)
            lags[key] = max(lags.get(key, 0), lag)
    cells = []
    for i, (row, _, _, _) in enumerate(visits):
        t = db.tables[int(db.graph.row_table[row])]
        local = row - int(t.row_offset)
        for column in t.columns:
            if len(cells) == S:
                break
            cell = {"stype": column.stype, "column_id": column.column_id, "row": i,
                    "numeric": 0.0, "ts": [0.0] * 15, "bool": 0, "cat": 0, "text": None,
                    "null": 0, "target": 0, "hidden": 0, "context": int(i >= own)}
            lag = lags.get((t.name, column.name), 0)
            row_time = int(db.graph.row_times[row])
            if i == 0 and t.name == task.table and column.name == task.target_column:
                cell["target"] = 1
            elif lag and row_time != NO_TIME and row_time + lag > known_until:
                cell["hidden"] = 1  # not known yet: no value, not even whether it is null
            elif not bool(column.valid[local]):
                cell["null"] = 1
            else:
                v = column.values[local]
                if column.stype == NUMERIC:
                    cell["numeric"] = float(np.float32((float(v) - column.mean) / column.std))
                elif column.stype == BOOLEAN:
                    cell["bool"] = 1 if v else 0
                elif column.stype == TIMESTAMP:
                    cell["ts"] = time_features(int(v), column.mean, column.std)
                elif column.stype == CATEGORICAL:
                    cell["cat"] = int(column.cat_emb_start) + int(v)
                else:
                    cell["text"] = int(v)
            cells.append(cell)
    return visits, cells


def label(db, task, seed_index: int) -> float | int:
    """The seed's label, from the task's own stored target (``tasks/<task>/target.bin``) and
    the target column's statistics: a z-scored float32 for numbers and times, 0/1 for
    booleans, the class index (or text id) otherwise."""
    column = next(c for c in db.table(task.table).columns if c.name == task.target_column)
    target = float(task.target[seed_index])
    if column.stype in (NUMERIC, TIMESTAMP):
        return float(np.float32((target - column.mean) / column.std))
    if column.stype == BOOLEAN:
        return 1.0 if target else 0.0
    return int(target)


def fk_adjacency(db, visits) -> set[tuple[int, int]]:
    """(i, j) for every visited row j that is a foreign-key parent of visited row i."""
    g = db.graph
    index = {row: i for i, (row, _, _, _) in enumerate(visits)}
    pairs = set()
    for i, (row, _, _, _) in enumerate(visits):
        for p in g.parent_ids[g.parent_offsets[row]:g.parent_offsets[row + 1]]:
            if int(p) in index:
                pairs.add((i, index[int(p)]))
    return pairs


def permutations(db, visits, cells, S: int) -> tuple[list[int], list[int], list[int]]:
    """col_perm, out_perm, in_perm: stable sorts of the cell positions, padding last."""
    g = db.graph
    index = {row: i for i, (row, _, _, _) in enumerate(visits)}
    first_parent = []
    for row, _, _, _ in visits:
        parent_rows = g.parent_ids[g.parent_offsets[row]:g.parent_offsets[row + 1]]
        parents = [index[int(p)] for p in parent_rows
                   if int(p) in index]
        first_parent.append(parents[0] if parents else len(visits))
    n = len(cells)
    padding = list(range(n, S))
    col = sorted(range(n), key=lambda p: cells[p]["column_id"]) + padding
    out = sorted(range(n), key=lambda p: cells[p]["row"]) + padding
    inn = sorted(range(n), key=lambda p: first_parent[cells[p]["row"]]) + padding
    return col, out, inn
