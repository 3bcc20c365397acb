"""Golden files: pinned digests of index streams that stay small even for N = 10^9.

A golden file is JSON (``format: dlkit_golden_v1``) holding *cases*; a case is a manifest, a
dataset key and a stage, with:

- ``streams``: per (epoch, start position, world size, rank), the SHA-256 of every index the rank
  emits from that cursor to the end of the epoch (``sha256``, ``num_indices``), the same for the
  first ``prefix_steps`` steps (``prefix_sha256``), and the literal ``first_indices``;
- ``positions``: ``[epoch, global position, original index]`` triples at sampled positions
  (world-size independent by construction).

Verification recomputes all of it with the fast path. Full-epoch digests of large streams are
checked only with ``full=True``; everything else always is.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dlkit.encoding import UINT64_MAX
from dlkit.errors import DlkitError, GoldenFileError, GoldenMismatchError
from dlkit.files import read_regular
from dlkit.nextbatch.cursor import Cursor
from dlkit.nextbatch.run_manifest import RunManifest, manifest_from_value
from dlkit.nextbatch.sampler import SamplingPlan, Stage

GOLDEN_FORMAT = "dlkit_golden_v1"
FIRST_INDICES = 16
QUICK_FULL_DIGEST_LIMIT = 1 << 23  # full digests up to this many indices are always checked
MAX_PREFIX_STEPS = 1 << 20  # a prefix digest is a few steps: more would only stall a check
_STREAM_UINTS = ("world_size", "rank", "epoch", "start_index", "num_indices", "prefix_steps",
                 "prefix_num_indices")

Progress = Callable[[int], None]  # called with the number of indices just processed


@dataclass(frozen=True)
class StreamDigest:
    num_indices: int
    sha256: str
    first_indices: tuple[int, ...]


def digest_stream(plan: SamplingPlan, cursor: Cursor, steps: int | None,
                  progress: Progress | None = None) -> StreamDigest:
    """Hash every index ``plan`` emits from ``cursor`` over ``steps`` steps (None: epoch end)."""
    hasher = hashlib.sha256()
    count = 0
    first: list[int] = []
    for chunk in plan.iter_chunks(cursor, steps):
        hasher.update(np.ascontiguousarray(chunk.indices, dtype="<u8").data.cast("B"))
        if len(first) < FIRST_INDICES:
            first.extend(chunk.indices[: FIRST_INDICES - len(first)].tolist())
        count += chunk.indices.shape[0]
        if progress is not None:
            progress(int(chunk.indices.shape[0]))
    return StreamDigest(count, hasher.hexdigest(), tuple(first))


def index_at(plan: SamplingPlan, epoch: int, position: int) -> int:
    """The original index at a global position of an epoch (any rank's plan gives the same)."""
    if not 0 <= position < plan.epoch_limit:
        raise ValueError(f"position {position} outside [0, {plan.epoch_limit})")
    return int(plan.resolve(epoch, np.array([position], dtype=np.uint64),
                            np.array([1], dtype=np.uint64))[0])


# --- generation ---------------------------------------------------------------------------


def make_case(manifest: RunManifest, dataset_key: str, stage: Stage | str, *,
              world_sizes: Sequence[int], starts: Iterable[tuple[int, int]],
              prefix_steps: int, num_positions: int, full_digests: bool = True,
              progress: Progress | None = None) -> dict[str, Any]:
    """Compute one golden case. ``starts`` lists (epoch, global_index) cursors to stream from.

    With ``full_digests=False`` only prefixes, counts and positions are pinned (``sha256`` is
    null), which keeps generating and checking N = 10^9 matrices affordable.
    """
    if not 0 <= prefix_steps <= MAX_PREFIX_STEPS:  # what verification accepts
        raise ValueError(f"prefix_steps must be in [0, {MAX_PREFIX_STEPS}], got {prefix_steps}")
    stage = Stage(stage)
    streams = []
    for epoch, start in starts:
        cursor = Cursor(epoch, start)
        for world_size in world_sizes:
            for rank in range(world_size):
                plan = SamplingPlan.create(manifest, dataset_key, world_size, rank, stage)
                full = digest_stream(plan, cursor, None, progress) if full_digests else None
                prefix = digest_stream(plan, cursor, prefix_steps)
                streams.append({
                    "epoch": epoch, "start_index": start, "world_size": world_size,
                    "rank": rank, "num_indices": plan.count_indices(cursor, None),
                    "sha256": full.sha256 if full else None,
                    "prefix_steps": prefix_steps, "prefix_num_indices": prefix.num_indices,
                    "prefix_sha256": prefix.sha256, "first_indices": list(prefix.first_indices),
                })
    plan = SamplingPlan.create(manifest, dataset_key, 1, 0, stage)
    epochs = sorted({epoch for epoch, _ in starts}) or [0]
    # Evenly spread positions plus both ends: block boundaries and the tail are covered.
    positions: list[list[int]] = []  # [epoch, global position, original index]
    for epoch in epochs:
        picks = np.unique(np.linspace(0, plan.epoch_limit - 1, num_positions, dtype=np.float64)
                          .astype(np.uint64)).tolist()
        positions.extend([epoch, p, index_at(plan, epoch, p)] for p in picks)
    return {"manifest": manifest.to_json_value(), "dataset_key": dataset_key,
            "stage": stage.value, "streams": streams, "positions": positions}


def write_golden(path: str | os.PathLike[str], description: str, generator: str,
                 cases: list[dict[str, Any]]) -> None:
    from dlkit.atomic import atomic_write_bytes

    document = {"format": GOLDEN_FORMAT, "description": description, "generator": generator,
                "cases": cases}
    atomic_write_bytes(path, (json.dumps(document, indent=1) + "\n").encode())


# --- verification -------------------------------------------------------------------------


@dataclass(frozen=True)
class GoldenReport:
    path: str
    cases: int
    streams_checked: int
    full_digests_checked: int
    full_digests_skipped: int
    positions_checked: int
    indices_hashed: int


def load_golden(path: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(path)
    try:
        document = json.loads(read_regular(path).decode("utf-8"))
    except FileNotFoundError:
        raise GoldenFileError("no such file", path=path) from None
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad UTF-8, JSON, digits
        raise GoldenFileError(f"not a golden JSON file ({exc})", path=path) from None
    if not isinstance(document, dict) or document.get("format") != GOLDEN_FORMAT:
        raise GoldenFileError(f"not a {GOLDEN_FORMAT} file", path=path)
    if not isinstance(document.get("cases"), list) or not document["cases"]:
        raise GoldenFileError("has no cases", path=path)
    for number, case in enumerate(document["cases"]):
        _check_case(case, number, path)
    return document


def _check_case(case: Any, number: int, path: Path) -> None:
    """The shape of one case (types and ranges), before any of it is computed."""
    def bad(what: str) -> GoldenFileError:
        return GoldenFileError(f"case {number} is malformed: {what}", path=path)

    def is_uint(value: Any) -> bool:
        return type(value) is int and 0 <= value <= UINT64_MAX

    if not isinstance(case, dict):
        raise bad("not an object")
    streams, positions = case.get("streams", []), case.get("positions", [])
    if not isinstance(streams, list) or not isinstance(positions, list):
        raise bad("streams and positions must be lists")
    for k, stream in enumerate(streams):
        if not isinstance(stream, dict):
            raise bad(f"stream {k} is not an object")
        for field in _STREAM_UINTS:
            if not is_uint(stream.get(field)):
                raise bad(f"stream {k}: {field} must be an unsigned integer, got "
                          f"{stream.get(field)!r}")
        if stream["prefix_steps"] > MAX_PREFIX_STEPS:
            raise bad(f"stream {k}: prefix_steps {stream['prefix_steps']} is above "
                      f"{MAX_PREFIX_STEPS}")
        first = stream.get("first_indices")
        if not isinstance(first, list) or not all(is_uint(v) for v in first):
            raise bad(f"stream {k}: first_indices must be a list of unsigned integers")
    for k, triple in enumerate(positions):
        if not (isinstance(triple, list) and len(triple) == 3 and all(map(is_uint, triple))):
            raise bad(f"position {k} must be [epoch, position, index], unsigned integers")


def golden_work(document: dict[str, Any], full: bool) -> int:
    """Indices the verification will hash (for a progress bar's total)."""
    total = 0
    for case in document["cases"]:
        for stream in case.get("streams", []):
            if stream.get("sha256") is not None and (
                    full or stream.get("num_indices", 0) <= QUICK_FULL_DIGEST_LIMIT):
                total += int(stream.get("num_indices", 0))
    return total


def _case_fields(case: Any, path: Path, number: int) -> tuple[RunManifest, str, Stage]:
    try:
        manifest = manifest_from_value(case["manifest"])
        return manifest, str(case["dataset_key"]), Stage(case["stage"])
    except (KeyError, TypeError, ValueError, DlkitError) as exc:
        raise GoldenFileError(f"case {number} is malformed ({exc})", path=path) from None


def verify_golden(path: str | os.PathLike[str], *, full: bool = False,
                  progress: Progress | None = None,
                  document: dict[str, Any] | None = None) -> GoldenReport:
    """Recompute every digest and sampled index of a golden file (``document``: the file as
    :func:`load_golden` already read it); raise at the first mismatch."""
    path = Path(path)
    if document is None:
        document = load_golden(path)
    streams_checked = full_checked = full_skipped = positions_checked = hashed = 0
    for number, case in enumerate(document["cases"]):
        manifest, dataset_key, stage = _case_fields(case, path, number)

        def fail(what: str, expected: Any, found: Any) -> GoldenMismatchError:
            return GoldenMismatchError(
                f"case {number} ({dataset_key}, {stage.value}, seed {manifest.seed}) {what}: "
                f"expected {expected}, found {found}", path=path)

        for stream in case.get("streams", []):
            try:
                plan = SamplingPlan.create(manifest, dataset_key, stream["world_size"],
                                           stream["rank"], stage)
                cursor = Cursor(stream["epoch"], stream["start_index"])
                where = (f"stream epoch {cursor.epoch} start {cursor.global_index} "
                         f"ws {plan.world_size} rank {plan.rank}")
                expected_count = stream["num_indices"]
                prefix_steps = stream["prefix_steps"]
            except (KeyError, TypeError, ValueError, DlkitError) as exc:
                raise GoldenFileError(f"case {number} has a malformed stream ({exc})",
                                      path=path) from None
            count = plan.count_indices(cursor, None)
            if count != expected_count:
                raise fail(f"{where} num_indices", expected_count, count)
            prefix = digest_stream(plan, cursor, prefix_steps)
            if prefix.sha256 != stream.get("prefix_sha256"):
                raise fail(f"{where} prefix_sha256", stream.get("prefix_sha256"), prefix.sha256)
            if prefix.num_indices != stream.get("prefix_num_indices"):
                raise fail(f"{where} prefix_num_indices", stream.get("prefix_num_indices"),
                           prefix.num_indices)
            first = list(prefix.first_indices)
            if first != stream.get("first_indices"):
                raise fail(f"{where} first_indices", stream.get("first_indices"), first)
            if stream.get("sha256") is not None and (full or expected_count <= QUICK_FULL_DIGEST_LIMIT):
                digest = digest_stream(plan, cursor, None, progress)
                hashed += digest.num_indices
                full_checked += 1
                if digest.sha256 != stream.get("sha256"):
                    raise fail(f"{where} sha256", stream.get("sha256"), digest.sha256)
            elif stream.get("sha256") is not None:
                full_skipped += 1
            streams_checked += 1
        plan = SamplingPlan.create(manifest, dataset_key, 1, 0, stage)
        for triple in case.get("positions", []):
            try:
                epoch, position, expected = triple
                found = index_at(plan, epoch, position)
            except (TypeError, ValueError, DlkitError) as exc:
                raise GoldenFileError(f"case {number} has a malformed position ({exc})",
                                      path=path) from None
            if found != expected:
                raise fail(f"index at epoch {epoch} position {position}", expected, found)
            positions_checked += 1
    return GoldenReport(str(path), len(document["cases"]), streams_checked, full_checked,
                        full_skipped, positions_checked, hashed)


def default_golden_paths(root: str | os.PathLike[str] | None = None) -> list[Path]:
    """The golden files in ``root``; by default the ones bundled with dlkit (package data in
    ``dlkit/nextbatch/goldens/``, found wherever dlkit is installed)."""
    return sorted(Path(root if root is not None else bundled_golden_dir()).glob("*.json"))


def bundled_golden_dir() -> Path:
    """The directory of the golden files that ship with dlkit."""
    from importlib.resources import files

    return Path(str(files("dlkit.nextbatch").joinpath("goldens")))
