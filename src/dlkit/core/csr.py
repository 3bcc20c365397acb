"""CSR kernels for the foreign-key graph: build (counting sort) and cheap structural checks.

The graph of a database is one edge per (child row, foreign-key column) whose key resolved to
a parent row. Two CSR views are stored (``docs/database_format.md``):

* child -> parents (``parent_offsets``/``parent_ids``): row ``v``'s parents in the table's
  foreign-key column order. Built with :func:`append_parent_csr`, one sequential pass per
  batch of rows; rows arrive in ascending global id order, so this is a streaming append.
* parent -> children (``child_offsets``/``child_ids``/``child_times``): the transpose, built by
  :func:`transpose_csr`, a counting sort (O(V + E)). Pass 1 counts every parent's in-degree
  and a prefix sum turns counts into offsets. Scattering every child straight into its
  parent's next free slot would write randomly over ``16 E`` bytes (a cache and TLB miss per
  edge), so the scatter runs in two sweeps instead:

  - parents are cut into *buckets* of consecutive rows holding about ``BUCKET_EDGES`` edges
    (looked up per block of ``2^BLOCK_SHIFT`` parents in a small table); sweep A visits the
    children in id order and appends each edge to its bucket's region of the output, which is
    exactly where that bucket's parents' lists will lie; each region fills sequentially;
  - sweep B takes one bucket at a time (small enough to stay in cache), moves each edge to
    its parent's next free slot within the region, then stable-sorts each of the bucket's
    lists by child time while it is still in cache. Lists already in time order (tables
    exported in time order) cost one check.

  Because both sweeps keep child id order, each list ends sorted by ``(child time, child id)``
  whatever the bucket sizes and thread count: the output bytes depend on the graph only.
  Sweep A runs on several threads over consecutive child ranges (each range's edges of a
  bucket placed after the earlier ranges' ones, counted first); sweep B over disjoint bucket
  ranges, several per thread, each taken by the next thread free. Sweep B keeps its cursors
  apart from ``child_offsets``, which is final (and can be written out) before either sweep
  starts.

Every kernel trusts its inputs (ids in range, offsets monotone): the callers build them or
validate them first with :func:`check_offsets` / :func:`check_ids`, which return the position
of the first violation (``-1`` when none) so the caller can name it.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from dlkit.core.jit import is_interpreted, kernel

# Below this many edges, a pass over both CSR directions (a check, a placement) runs on the
# calling thread: a mixture opens hundreds of small databases, and starting a thread (a
# millisecond or more on a busy machine) would cost more than the work it runs.
THREADED_MIN_EDGES = 1 << 18


def side_by_side(first: Any, second: Any, threaded: bool) -> tuple[Any, Any]:
    """``(first(), second())``: ``second`` on a thread of its own when ``threaded`` (two
    passes of nogil kernels, one per CSR direction, at once), both on this thread otherwise,
    and always when kernels run interpreted (they hold the GIL: a thread would only wait)."""
    if not threaded or is_interpreted():
        return first(), second()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dlkit-csr") as pool:
        later = pool.submit(second)
        return first(), later.result()

# Lists no longer than this are insertion-sorted; longer ones are merge-sorted from
# insertion-sorted runs of MERGE_RUN.
INSERTION_SORT_MAX = 24
MERGE_RUN = 8
# Parents per block of the bucket lookup table (log2), and the bucket sizes.
BLOCK_SHIFT = 6
BUCKET_EDGES = 1 << 15
# A bucket spans at most this many parents, so a parent's position in it fits a uint16.
MAX_BUCKET_PARENTS = 1 << 16
# Graphs with fewer edges are transposed on one thread (threads cost more than they save).
PARALLEL_MIN_EDGES = 1 << 20
# Edges per run of sweep B reported final to ``range_ready`` (4 MiB of int32 ids).
READY_EDGES = 1 << 20
# Sweep B's ranges per thread, taken by the threads as they come free: equal edge counts are
# not equal work (one parent table's lists may need the time sort, another's not), and two
# fixed halves left one core idle at the end (four per thread: transpose 7% faster).
SWEEP_B_RANGES_PER_THREAD = 4


@kernel
def append_parent_csr(fk, row_base, edge_base, parent_offsets, parent_ids):
    """Append rows to the child -> parents CSR.

    ``fk`` is ``int64[K, n]``: for foreign-key column ``k`` and row ``r``, the global parent
    id or ``-1`` (null key or dropped dangling key). Writes ``parent_offsets[row_base + r + 1]``
    for every row and the row's valid parents (in column order ``k``) from
    ``parent_ids[edge_base]`` on. ``parent_offsets[row_base]`` must already hold
    ``edge_base``. Returns the edge count after these rows.
    """
    num_keys = fk.shape[0]
    n = fk.shape[1]
    e = edge_base
    for r in range(n):
        for k in range(num_keys):
            p = fk[k, r]
            if p >= 0:
                parent_ids[e] = p
                e += 1
        parent_offsets[row_base + r + 1] = e
    return e


@kernel
def count_in_degrees(src_ids, child_offsets):
    """Pass 1 of the counting sort: ``child_offsets[p + 1] += 1`` for every edge to ``p``.

    ``child_offsets`` must be zeroed, length ``num_nodes + 1``.
    """
    for e in range(src_ids.shape[0]):
        child_offsets[src_ids[e] + 1] += 1


@kernel
def prefix_sum_inplace(offsets):
    """Counts in ``offsets[1:]`` to exclusive offsets (``offsets[0]`` stays 0)."""
    total = 0
    for i in range(1, offsets.shape[0]):
        total += offsets[i]
        offsets[i] = total
    return total


@kernel
def assign_buckets(child_offsets, block_shift, bucket_edges, max_blocks, bucket_of_block,
                   bucket_first_parent):
    """Cut the parents into buckets of whole blocks; returns the number of buckets.

    A new bucket starts at a block once the current one holds ``bucket_edges`` edges or spans
    ``max_blocks`` blocks. Fills ``bucket_of_block[k]`` for every block and
    ``bucket_first_parent[b]`` for every bucket, plus ``num_nodes`` after the last one.
    """
    num_nodes = child_offsets.shape[0] - 1
    bucket = 0
    start_block = 0
    start_edge = 0
    bucket_first_parent[0] = 0
    for k in range(bucket_of_block.shape[0]):
        edge = child_offsets[k << block_shift]
        if k > start_block and (edge - start_edge >= bucket_edges
                                or k - start_block >= max_blocks):
            bucket += 1
            start_block = k
            start_edge = edge
            bucket_first_parent[bucket] = k << block_shift
        bucket_of_block[k] = bucket
    bucket_first_parent[bucket + 1] = num_nodes
    return bucket + 1


@kernel
def bucket_histogram(src_ids, first_edge, last_edge, block_shift, bucket_of_block, counts):
    """``counts[b]`` += the edges ``first_edge..last_edge-1`` that fall into bucket ``b``."""
    for e in range(first_edge, last_edge):
        counts[bucket_of_block[src_ids[e] >> block_shift]] += 1


@kernel
def sweep_into_buckets(src_offsets, src_ids, row_times, block_shift, bucket_of_block,
                       bucket_first_parent, cursor, child_ids, child_times, local_parent,
                       first_child, last_child):
    """Sweep A for children ``first_child..last_child-1``: every edge, in child order,
    appended to its parent's bucket region.

    ``cursor[b]`` starts where these children's edges of bucket ``b`` go. ``local_parent``
    records each edge's parent relative to its bucket's first parent, for sweep B. Disjoint
    child ranges may run on parallel threads, each with cursors past the earlier ranges' edges.
    """
    for v in range(first_child, last_child):
        t = row_times[v]
        for e in range(src_offsets[v], src_offsets[v + 1]):
            p = src_ids[e]
            b = bucket_of_block[p >> block_shift]
            pos = cursor[b]
            cursor[b] = pos + 1
            child_ids[pos] = v
            child_times[pos] = t
            local_parent[pos] = p - bucket_first_parent[b]


@kernel
def place_buckets(child_offsets, bucket_start, bucket_first_parent, first_bucket, last_bucket,
                  child_ids, child_times, local_parent, scratch_ids, scratch_times,
                  scratch_local, cursor):
    """Sweep B for buckets ``first_bucket..last_bucket-1``; returns how many lists it sorted.

    Each bucket's region is copied to the scratch arrays, then every edge goes to its parent's
    next free slot (``cursor``, one per parent of the bucket: ``child_offsets`` itself is only
    read, so it can be written out while this runs), and each list is sorted by time.
    Disjoint bucket ranges may run on parallel threads: they touch disjoint parents and
    regions.
    """
    unsorted = 0
    for b in range(first_bucket, last_bucket):
        a = bucket_start[b]
        m = bucket_start[b + 1] - a
        if m == 0:
            continue
        p0 = bucket_first_parent[b]
        p1 = bucket_first_parent[b + 1]
        for p in range(p0, p1):
            cursor[p - p0] = child_offsets[p]
        for i in range(m):
            scratch_ids[i] = child_ids[a + i]
            scratch_times[i] = child_times[a + i]
            scratch_local[i] = local_parent[a + i]
        for i in range(m):
            q = np.int64(scratch_local[i])
            pos = cursor[q]
            cursor[q] = pos + 1
            child_ids[pos] = scratch_ids[i]
            child_times[pos] = scratch_times[i]
        unsorted += sort_segments_by_time(child_offsets, child_ids, child_times, p0, p1,
                                          scratch_times, scratch_ids)
    return unsorted


@kernel
def _ascending(values, a, b):
    """Whether ``values[a:b]`` never decreases."""
    for i in range(a + 1, b):
        if values[i] < values[i - 1]:
            return False
    return True


@kernel
def _insertion_sort(times, ids, a, b):
    for i in range(a + 1, b):
        t = times[i]
        c = ids[i]
        j = i - 1
        while j >= a and times[j] > t:
            times[j + 1] = times[j]
            ids[j + 1] = ids[j]
            j -= 1
        times[j + 1] = t
        ids[j + 1] = c


@kernel
def _merge_sort(times, ids, a, b, tmp_times, tmp_ids):
    """Stable sort of ``times[a:b]`` (with ``ids``): insertion-sorted runs of ``MERGE_RUN``,
    then bottom-up merges between the list and ``tmp_*`` (at least ``b - a`` long). The merge
    step selects instead of branching: which side comes next is unpredictable."""
    n = b - a
    for r in range(a, b, MERGE_RUN):
        _insertion_sort(times, ids, r, min(r + MERGE_RUN, b))
    src_t = times[a:b]
    src_i = ids[a:b]
    dst_t = tmp_times[:n]
    dst_i = tmp_ids[:n]
    in_tmp = False
    width = MERGE_RUN
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i = lo
            j = mid
            k = lo
            while i < mid and j < hi:
                right = np.int64(src_t[j] < src_t[i])
                dst_t[k] = src_t[j] if right else src_t[i]
                dst_i[k] = src_i[j] if right else src_i[i]
                # branch-free merge; Numba types i and j as int64 (as plain Python, numpy's)
                j += right
                i += 1 - right  # type: ignore[assignment]
                k += 1
            while i < mid:
                dst_t[k] = src_t[i]
                dst_i[k] = src_i[i]
                i += 1
                k += 1
            while j < hi:
                dst_t[k] = src_t[j]
                dst_i[k] = src_i[j]
                j += 1
                k += 1
        src_t, dst_t = dst_t, src_t
        src_i, dst_i = dst_i, src_i
        in_tmp = not in_tmp
        width *= 2
    if in_tmp:
        for i in range(n):
            times[a + i] = src_t[i]
            ids[a + i] = src_i[i]


@kernel
def sort_segments_by_time(offsets, ids, times, first, last, tmp_times, tmp_ids):
    """Stable-sort segments ``first..last-1`` of a CSR by time (ties keep their id order).

    ``tmp_*`` must be as long as the longest segment. Returns the number of segments that
    needed sorting.
    """
    unsorted = 0
    for v in range(first, last):
        a = offsets[v]
        b = offsets[v + 1]
        if _ascending(times, a, b):
            continue
        unsorted += 1
        if b - a <= INSERTION_SORT_MAX:
            _insertion_sort(times, ids, a, b)
        else:
            _merge_sort(times, ids, a, b, tmp_times, tmp_ids)
    return unsorted


def _split(offsets, first: int, last: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` ranges of ``first..last`` holding about equal numbers of edges."""
    lo_e, hi_e = int(offsets[first]), int(offsets[last])
    bounds = [first]
    for k in range(1, parts):
        # the target in the offsets' own dtype: numpy converts a whole int32 array to compare
        # it with a Python int (0.3 s at 11 M rows)
        target = offsets.dtype.type(lo_e + (hi_e - lo_e) * k // parts)
        at = int(np.searchsorted(offsets[first:last + 1], target)) + first
        bounds.append(max(bounds[-1], min(last, at)))
    bounds.append(last)
    return [(bounds[i], bounds[i + 1]) for i in range(parts) if bounds[i + 1] > bounds[i]]


def _runs(bucket_start, first: int, last: int, edges: int) -> list[tuple[int, int]]:
    """Buckets ``first..last`` cut into consecutive runs of at least ``edges`` edges (the last
    one may hold fewer)."""
    runs = []
    lo = first
    for b in range(first + 1, last + 1):
        if bucket_start[b] - bucket_start[lo] >= edges or b == last:
            runs.append((lo, b))
            lo = b
    return runs


def _parallel(fn, ranges, workers: int | None = None) -> list[Any]:
    """``fn(*r)`` for every range ``r``, on ``workers`` threads (default: one per range)."""
    if len(ranges) <= 1:
        return [fn(a, b) for a, b in ranges]
    with ThreadPoolExecutor(max_workers=workers or len(ranges)) as pool:
        return list(pool.map(lambda r: fn(*r), ranges))


def transpose_csr(src_offsets, src_ids, row_times, child_offsets, child_ids, child_times,
                  threads: int | None = None, bucket_edges: int = BUCKET_EDGES,
                  block_shift: int = BLOCK_SHIFT, empty=None, offsets_ready=None,
                  counted: bool = False, local_parent=None, range_ready=None) -> int:
    """Build the parent -> children CSR from the child -> parents CSR (see the module doc).

    Output arrays are supplied by the caller: ``child_offsets`` [V+1] and ``child_ids`` [E]
    (int32 or int64, like ``src_offsets`` and ``src_ids``) and ``child_times`` int64[E].
    ``empty(dtype, n)`` allocates the temporaries: 2 bytes per edge, plus up to 18 bytes per
    edge of the largest bucket and 8 per parent of the widest bucket per thread. Both sweeps
    run on ``threads`` threads (default: the CPU count, at most 8) once the graph has
    ``PARALLEL_MIN_EDGES`` edges. ``offsets_ready()``, when given, is called as
    soon as ``child_offsets`` holds its final values (before the sweeps, which only read it).
    ``bucket_edges`` and ``block_shift`` only change the speed, never the output. With
    ``counted``, ``child_offsets[p + 1]`` already holds parent ``p``'s in-degree (and
    ``child_offsets[0]`` zero), as :func:`count_in_degrees` over ``src_ids`` leaves it: a
    builder that sees the edges arrive can count them then. ``local_parent`` (uint16, at least
    E long) is the 2-bytes-per-edge temporary, when the caller has it ready. Returns the
    number of lists that needed the time sort. ``range_ready(first_edge, last_edge)``, when
    given, is called (on the sweep's thread) each time a run of about ``READY_EDGES`` edges of
    ``child_ids`` and ``child_times`` holds its final values, so a caller can write them out
    while the rest is built; the runs cover every edge once.
    """
    if not 0 <= block_shift <= 16 or bucket_edges < 1:
        raise ValueError(f"need 0 <= block_shift <= 16 and bucket_edges >= 1, got "
                         f"{block_shift}, {bucket_edges}")
    if empty is None:
        def empty(dtype, n):
            return np.empty(n, dtype=dtype)
    num_nodes = src_offsets.shape[0] - 1
    num_edges = src_ids.shape[0]
    threads = threads or min(8, os.cpu_count() or 1)
    if not counted:
        child_offsets[:] = 0
        count_in_degrees(src_ids, child_offsets)
    prefix_sum_inplace(child_offsets)
    if offsets_ready is not None:
        offsets_ready()
    if num_edges == 0:
        return 0
    num_blocks = (num_nodes >> block_shift) + 1
    bucket_of_block = np.empty(num_blocks, dtype=np.int32)
    first_parent = np.empty(num_blocks + 1, dtype=np.int64)
    max_blocks = max(1, MAX_BUCKET_PARENTS >> block_shift)
    num_buckets = assign_buckets(child_offsets, block_shift, bucket_edges, max_blocks,
                                 bucket_of_block, first_parent)
    first_parent = first_parent[:num_buckets + 1]
    bucket_start = child_offsets[first_parent]
    local_parent = (empty(np.uint16, num_edges) if local_parent is None
                    else local_parent[:num_edges])
    parts = threads if num_edges >= PARALLEL_MIN_EDGES else 1

    # Sweep A over consecutive child ranges; each range's edges of a bucket go after those
    # of the earlier ranges, so every region ends in child id order, as one sweep leaves it.
    child_ranges = _split(src_offsets, 0, num_nodes, parts)
    counts = np.zeros((max(1, len(child_ranges)), num_buckets), dtype=np.int64)
    if len(child_ranges) > 1:
        _parallel(lambda i, _: bucket_histogram(src_ids, int(src_offsets[child_ranges[i][0]]),
                                                int(src_offsets[child_ranges[i][1]]),
                                                block_shift, bucket_of_block, counts[i]),
                  [(i, 0) for i in range(len(child_ranges) - 1)])
    cursors = np.cumsum(counts, axis=0) - counts + bucket_start[:-1]

    def sweep(i: int, _) -> None:
        first, last = child_ranges[i]
        sweep_into_buckets(src_offsets, src_ids, row_times, block_shift, bucket_of_block,
                           first_parent, cursors[i], child_ids, child_times, local_parent,
                           first, last)

    _parallel(sweep, [(i, 0) for i in range(len(child_ranges))])
    largest = int(np.diff(bucket_start).max())
    widest = int(np.diff(first_parent).max())

    per_thread = threading.local()

    def place(first: int, last: int) -> int:
        scratch = getattr(per_thread, "scratch", None)
        if scratch is None:
            scratch = per_thread.scratch = (
                empty(child_ids.dtype, largest), empty(np.int64, largest),
                empty(np.uint16, largest), empty(np.int64, widest))
        unsorted = 0
        runs = _runs(bucket_start, first, last, READY_EDGES) if range_ready else [(first, last)]
        for lo, hi in runs:
            unsorted += place_buckets(child_offsets, bucket_start, first_parent, lo, hi,
                                      child_ids, child_times, local_parent, *scratch)
            if range_ready is not None:
                range_ready(int(bucket_start[lo]), int(bucket_start[hi]))
        return unsorted

    ranges = _split(bucket_start, 0, num_buckets,
                    parts * SWEEP_B_RANGES_PER_THREAD if parts > 1 else 1)
    return int(sum(_parallel(place, ranges, parts)))


def argsort_transpose(src_offsets, src_ids, row_times):
    """Reference build with numpy only (``np.lexsort``): the baseline of the benchmark."""
    num_nodes = src_offsets.shape[0] - 1
    degrees = np.diff(src_offsets)
    children = np.repeat(np.arange(num_nodes, dtype=np.int64), degrees)
    times = row_times[children]
    order = np.lexsort((children, times, src_ids))
    child_ids = children[order]
    child_times = times[order]
    offsets = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(src_ids, minlength=num_nodes), out=offsets[1:])
    return offsets, child_ids, child_times


# --- cheap structural checks (used on open and by verify) -------------------------------


# Elements per block of the range checks: each block is checked without a branch (so the
# compiler vectorises it, 2-3x faster), and only a block that fails is searched for the first
# failing position.
CHECK_BLOCK = 1024


@kernel
def check_offsets(offsets, total):
    """First index ``i`` where CSR offsets break the rules, or -1.

    Rules: ``offsets[0] == 0``, non-decreasing, ``offsets[-1] == total``. Returns the failing
    position (``len(offsets) - 1`` when only the final total is wrong).
    """
    n = offsets.shape[0]
    if n == 0:
        return 0
    if offsets[0] != 0:
        return 0
    for a in range(1, n, CHECK_BLOCK):
        b = min(a + CHECK_BLOCK, n)
        bad = False
        for i in range(a, b):
            bad |= offsets[i] < offsets[i - 1]
        if bad:
            for i in range(a, b):
                if offsets[i] < offsets[i - 1]:
                    return i
    if offsets[n - 1] != total:
        return n - 1
    return -1


@kernel
def check_ids(ids, lo, hi):
    """First index whose value lies outside ``[lo, hi)``, or -1."""
    n = ids.shape[0]
    for a in range(0, n, CHECK_BLOCK):
        b = min(a + CHECK_BLOCK, n)
        bad = False
        for i in range(a, b):
            v = ids[i]
            bad |= (v < lo) | (v >= hi)
        if bad:
            for i in range(a, b):
                v = ids[i]
                if v < lo or v >= hi:
                    return i
    return -1


@kernel
def check_ids_where(ids, valid, lo, hi):
    """First index ``i`` with ``valid[i]`` and ``ids[i]`` outside ``[lo, hi)``, or -1."""
    for i in range(ids.shape[0]):
        if valid[i]:
            v = ids[i]
            if v < lo or v >= hi:
                return i
    return -1


@kernel
def check_child_order(offsets, ids, times):
    """First edge position breaking ``(time, id)`` ascending order within a list, or -1."""
    for v in range(offsets.shape[0] - 1):
        for i in range(offsets[v] + 1, offsets[v + 1]):
            if times[i] < times[i - 1] or (times[i] == times[i - 1] and ids[i] < ids[i - 1]):
                return i
    return -1


@kernel
def check_child_times(ids, times, row_times):
    """First edge position whose time is not its child's row time, or -1."""
    for i in range(ids.shape[0]):
        if times[i] != row_times[ids[i]]:
            return i
    return -1


@kernel
def transpose_matches(src_offsets, src_ids, child_offsets, child_ids):
    """True when the child CSR holds exactly the edges of the parent CSR, with multiplicity.

    Recounts every (parent, child) pair by scattering the parent CSR again into a scratch
    array ordered like the stored lists (by parent, then child id), then compares multisets
    per parent. Ids must already be checked in range.
    """
    num_nodes = src_offsets.shape[0] - 1
    if child_offsets[num_nodes] != src_offsets[num_nodes]:
        return False
    counts = np.zeros(num_nodes + 1, dtype=np.int64)
    for e in range(src_ids.shape[0]):
        counts[src_ids[e] + 1] += 1
    for i in range(1, num_nodes + 1):
        counts[i] += counts[i - 1]
    for i in range(num_nodes + 1):
        if counts[i] != child_offsets[i]:
            return False
    scratch = np.empty(src_ids.shape[0], dtype=np.int64)
    cursor = counts[:-1].copy()
    for v in range(num_nodes):
        for e in range(src_offsets[v], src_offsets[v + 1]):
            p = src_ids[e]
            scratch[cursor[p]] = v
            cursor[p] += 1
    for p in range(num_nodes):
        a = child_offsets[p]
        b = child_offsets[p + 1]
        if b - a == 0:
            continue
        if _ascending(child_ids, a, b):
            for i in range(a, b):
                if child_ids[i] != scratch[i]:
                    return False
        else:
            stored = np.sort(child_ids[a:b])
            for i in range(b - a):
                if stored[i] != scratch[a + i]:
                    return False
    return True
