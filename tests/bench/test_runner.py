"""The bench runner: index orders (sample and trace), timings, the torch option."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import pytest

from dlkit.bench.report import TORCH_MISSING
from dlkit.bench.request import BenchRequest
from dlkit.bench.runner import run_bench
from dlkit.bench.workloads import sample_order, trace_order, write_row_file
from dlkit.errors import InvalidArgumentError, ReplayMismatchError
from dlkit.nextbatch import Cursor, SamplingPlan, load_manifest
from dlkit.nextbatch.trace import TraceWriter
from dlkit.prefetch import PrefetchConfig

SMALL = dict(steps=12, batch_size=16, rows=3000, row_bytes=64)


def write_manifest(path, cardinality=500, gbs=20):
    path.write_text(json.dumps({
        "seed": 7, "global_batch_size": gbs,
        "data": {"sampler_block_size": 64, "drop_last": False},
        "datasets": {"toy/train": {"id": "toy", "version": "1", "cardinality": cardinality,
                                   "hash": "ab" * 32}}}))
    return path


def write_trace(path, manifest_path, steps=6, world_size=2, rank=1):
    plan = SamplingPlan.create(load_manifest(manifest_path), "toy/train", world_size, rank, "train")
    cursor = Cursor(0, 0)
    with TraceWriter(path, plan, cursor) as trace:
        for _ in range(steps):
            result = plan.next_batch(cursor)
            trace.record(result.indices, cursor, result.cursor)
            cursor = result.cursor
    return plan


@pytest.mark.parametrize("policy", ["strict", "best-effort"])
@pytest.mark.parametrize("mode", ["interleaved", "contiguous"])
def test_gather_bench_delivers_the_sequential_batches(policy, mode):
    report = run_bench(BenchRequest(**SMALL, compare_torch=False, prefetch=PrefetchConfig(
        num_workers=3, buffer_size=2, policy=policy, shard_mode=mode)))
    assert report.identical
    for run in (report.sequential, report.engine):
        assert run.batches == 12 and run.samples == 12 * 16 and run.bytes == 12 * 16 * 64
        assert run.seconds > 0 and run.wait_p99_us >= run.wait_p50_us >= 0
    assert report.speedup > 0
    assert report.workload["order"] == "sample" and report.workload["temporary_data"]
    data = report.to_dict()
    assert data["prefetch"]["policy"] == policy and data["engine"]["mb_per_s"] > 0
    json.dumps(data)


def test_drop_remainder_times_fewer_steps():
    report = run_bench(BenchRequest(**{**SMALL, "steps": 11}, compare_torch=False,
                                    prefetch=PrefetchConfig(num_workers=3, drop_remainder=True)))
    assert report.sequential.batches == report.engine.batches == 9 and report.identical


def test_synthetic_bench_with_costs():
    report = run_bench(BenchRequest(workload="synthetic", steps=8, compute_ms=0.2,
                                    consumer_ms=0.1, compare_torch=False,
                                    prefetch=PrefetchConfig(num_workers=2)))
    assert report.identical and report.engine.batches == 8 and report.engine.bytes == 0
    assert report.workload["compute_ms"] == 0.2


def test_madvise_path_runs(tmp_path):
    report = run_bench(BenchRequest(**SMALL, madvise=True, compare_torch=False))
    assert report.identical and report.workload["madvise"] is True


def test_a_given_data_file_too_small_for_the_order_is_rejected(tmp_path):
    write_row_file(tmp_path / "rows.bin", 100, 64)
    with pytest.raises(InvalidArgumentError, match="reaches row .* holds only 100 rows"):
        run_bench(BenchRequest(**SMALL, data=str(tmp_path / "rows.bin"), compare_torch=False))


def test_bench_on_a_manifest_uses_dlkit_sample_order(tmp_path):
    manifest = write_manifest(tmp_path / "run.json")
    report = run_bench(BenchRequest(steps=5, manifest=str(manifest), world_size=2, rank=1,
                                    rows=500, row_bytes=32, compare_torch=False))
    assert report.identical and report.engine.batches == 5
    assert report.engine.samples == 5 * 10  # global batch 20 over 2 ranks
    assert report.workload["dataset"] == "toy/train" and report.workload["rank"] == 1


def test_trace_replay_gives_the_traced_steps(tmp_path):
    manifest_path = write_manifest(tmp_path / "run.json")
    plan = write_trace(tmp_path / "t.cbor", manifest_path, steps=6)
    order = trace_order(tmp_path / "t.cbor", load_manifest(manifest_path))
    expected = [plan.next_batch(c).indices for c in _cursors(plan, 6)]
    assert order.num_steps == 6 and order.source["order"] == "trace"
    for s in range(6):
        np.testing.assert_array_equal(order.indices[order.offsets[s]:order.offsets[s + 1]],
                                      expected[s])
    direct = sample_order(plan, Cursor(0, 0), 6)
    np.testing.assert_array_equal(direct.indices, order.indices)
    report = run_bench(BenchRequest(manifest=str(manifest_path), trace=str(tmp_path / "t.cbor"),
                                    rows=500, row_bytes=32, compare_torch=False))
    assert report.identical and report.engine.batches == 6 and report.workload["order"] == "trace"


def test_a_trace_from_another_manifest_is_refused(tmp_path):
    write_trace(tmp_path / "t.cbor", write_manifest(tmp_path / "a.json"))
    other = write_manifest(tmp_path / "b.json", cardinality=600)
    with pytest.raises(ReplayMismatchError):
        run_bench(BenchRequest(manifest=str(other), trace=str(tmp_path / "t.cbor"),
                               compare_torch=False))


def _cursors(plan, steps):
    cursor = Cursor(0, 0)
    for _ in range(steps):
        yield cursor
        cursor = plan.advance(cursor)


# --- the optional torch comparison ------------------------------------------------------------


def _beside_the_slower_note(report):
    """The report's notes but the one explaining a speedup below 1, there exactly then (its
    wording: tests/cli/test_bench_cli.py)."""
    slower = [n for n in report.notes if n.startswith("the engine was slower than the "
                                                      "sequential loop")]
    assert len(slower) == (report.speedup < 1)
    return tuple(n for n in report.notes if n not in slower)


def test_without_torch_the_comparison_is_skipped_with_a_note(without_torch):
    report = run_bench(BenchRequest(**SMALL))
    assert report.torch is None and _beside_the_slower_note(report) == (TORCH_MISSING,)
    assert report.to_dict()["torch"] is None


def test_the_torch_comparison_drives_a_dataloader(monkeypatch):
    """Our side of the DataLoader comparison, against a stand-in with DataLoader's interface
    (torch itself is an optional extra that the test environment does not install)."""
    calls = {}

    class DataLoader:
        def __init__(self, dataset, *, batch_size, sampler, num_workers, prefetch_factor,
                     multiprocessing_context):
            calls.update(batch_size=batch_size, num_workers=num_workers,
                         prefetch_factor=prefetch_factor, context=multiprocessing_context)
            self.dataset, self.sampler = dataset, sampler

        def __iter__(self):
            return (self.dataset[step] for step in self.sampler)

    torch = types.ModuleType("torch")
    torch.utils = types.ModuleType("torch.utils")
    torch.utils.data = types.ModuleType("torch.utils.data")
    torch.utils.data.DataLoader = DataLoader
    for name, module in (("torch", torch), ("torch.utils", torch.utils),
                         ("torch.utils.data", torch.utils.data)):
        monkeypatch.setitem(sys.modules, name, module)
    report = run_bench(BenchRequest(**SMALL, prefetch=PrefetchConfig(num_workers=3, buffer_size=4)))
    assert calls == {"batch_size": None, "num_workers": 3, "prefetch_factor": 4, "context": "fork"}
    assert report.torch is not None and report.torch.batches == 12 and report.identical
    assert _beside_the_slower_note(report) == () and report.to_dict()["torch_speedup"] > 0
