"""One composed configuration: every knob's default declared once (``dlkit.sampler.knobs``),
``SamplerSettings`` parsed once and read, never rebuilt, and the seeds checked in one place."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlkit.cli import relational, view
from dlkit.errors import InvalidArgumentError
from dlkit.nextbatch.tokens import TrainOrder
from dlkit.sampler import Sampler, knobs
from dlkit.sampler.batch import MAX_U16_EXTENT, BatchConfig, ChildPolicy
from dlkit.sampler.batch_files import BatchRequest, _request_json
from dlkit.sampler.config import SamplerConfig, SamplerSettings
from dlkit.sampler.inspect import describe_sequence
from dlkit.sampler.run_manifest import make_run_manifest, write_run_manifest
from dlkit.sampler.run_plan import RunConfig
from dlkit.sampler.splits import DEFAULT_TRAIN_ORDER, SplitRatios
from dlkit.sampler.world import World

# The defaults every entry point had before they were declared once (the public contract).
EXPECTED = dict(seed=0, split_seed=0, split_ratios=(0.8, 0.1, 0.1), batch_size=32,
                sequence_length=1024, max_rows=256, bfs_child_width=16, num_prefetch=3,
                num_threads=1)


def _defaults(function: object) -> dict[str, object]:
    return {name: p.default for name, p in inspect.signature(function).parameters.items()  # type: ignore[arg-type]
            if p.default is not inspect.Parameter.empty}


def test_the_knobs_hold_the_documented_defaults():
    assert {name: getattr(knobs, name.upper()) for name in EXPECTED} == EXPECTED
    assert knobs.SPLIT_RATIOS_TEXT == "0.8,0.1,0.1"
    assert SplitRatios.parse(knobs.SPLIT_RATIOS_TEXT) == SplitRatios()
    assert TrainOrder.parse(knobs.TRAIN_ORDER) is DEFAULT_TRAIN_ORDER is TrainOrder.V3
    assert ChildPolicy.parse(knobs.CHILD_POLICY) is ChildPolicy.UNIFORM
    assert knobs.MAX_EXTENT == MAX_U16_EXTENT == 65536


@pytest.mark.parametrize("function", [Sampler.__init__, BatchRequest, describe_sequence,
                                      make_run_manifest, write_run_manifest, SamplerSettings.parse,
                                      RunConfig.parse])
def test_every_entry_point_takes_the_knobs_defaults(function):
    defaults = _defaults(function)
    shared = {k: v for k, v in defaults.items() if k in EXPECTED}
    assert shared, defaults
    assert shared == {k: EXPECTED[k] for k in shared}
    if "bfs_child_policy" in defaults:
        assert ChildPolicy.parse(defaults["bfs_child_policy"]) is ChildPolicy.UNIFORM
    if "sampling_mode" in defaults:
        assert TrainOrder.parse(defaults["sampling_mode"]) is TrainOrder.V3


def test_batch_config_defaults_are_the_knobs():
    config = BatchConfig()
    assert (config.sequence_length, config.max_rows, config.bfs_child_width) == (1024, 256, 16)
    assert config.bfs_child_policy is ChildPolicy.UNIFORM


@pytest.mark.parametrize("command", [relational.batches, relational.show, relational.manifest,
                                     view.view])
def test_the_cli_options_default_to_the_knobs(command):
    options = {name: getattr(info, "default", info) for name, info in _defaults(command).items()}
    texts = {"split_ratios": "0.8,0.1,0.1", "sampling_mode": "v3", "bfs_child_policy": "uniform"}
    for name, value in options.items():
        if value is ...:  # required (dlkit manifest's --seed)
            continue
        if name in texts:
            assert value == texts[name], name
        elif name in EXPECTED and name != "split_ratios":
            assert str(value) == str(EXPECTED[name]), name  # view takes lists as text


shapes = st.fixed_dictionaries(dict(
    seed=st.integers(0, 2**64 - 1), split_seed=st.integers(0, 2**64 - 1),
    batch_size=st.integers(1, 1 << 20), sequence_length=st.integers(1, 65536),
    max_rows=st.integers(1, 65536), bfs_child_width=st.integers(0, 1 << 30),
    bfs_child_policy=st.sampled_from(["uniform", "recent", "quota"]),
    sampling_mode=st.sampled_from(["v2", "v3"]),
    split_ratios=st.sampled_from(["0.8,0.1,0.1", (0.5, 0.25, 0.25), "1,0,0"])))


@settings(max_examples=60, deadline=None)
@given(shapes, st.integers(1, 4), st.data())
def test_settings_are_the_records_of_their_arguments(args, world_size, data):
    rank = data.draw(st.integers(0, world_size - 1))
    parsed = SamplerSettings.parse(**args, world=World(rank, world_size))
    # the reference: each record built field by field from the arguments
    assert parsed.run == RunConfig(
        seed=args["seed"], batch_size=args["batch_size"], world=World(rank, world_size),
        split_seed=args["split_seed"], split_ratios=SplitRatios.parse(args["split_ratios"]),
        sampling_mode=TrainOrder.parse(args["sampling_mode"]))
    assert parsed.batch == BatchConfig(args["sequence_length"], args["max_rows"],
                                       args["bfs_child_width"], False,
                                       ChildPolicy.parse(args["bfs_child_policy"]))
    request = BatchRequest(task="t", split="val", steps=1, rank=rank, world_size=world_size,
                           **args)
    assert request.settings == parsed
    # index.json records the arguments as given (never the parsed settings)
    index = _request_json(request)
    assert "settings" not in index
    assert index["split_ratios"] == str(parsed.run.split_ratios)
    assert index["sampling_mode"] == args["sampling_mode"]
    assert ("bfs_child_policy" in index) == (args["bfs_child_policy"] != "uniform")


def test_records_are_made_once_and_read_back():
    request = BatchRequest(task="t", split="train", steps=2)
    assert request.run is request.run and request.batch_config is request.batch_config
    config = SamplerConfig.create(["a", "b"], rank=1, world_size=2, local_rank=0,
                                  local_world_size=1, task_weights={"b": 2.0}, num_prefetch=0,
                                  num_threads=2, batch_size=np.int64(4), max_rows=8)
    assert config.run is config.run and config.batch_config is config.batch_config
    assert config.task_weights == (0.0, 2.0)
    assert (config.rank, config.world_size, config.global_batch_size) == (1, 2, 8)
    assert type(config.batch_size) is int and type(config.run.batch_size) is int
    assert (config.max_rows, config.sequence_length) == (8, 1024)


def test_the_composed_records_are_typed():
    with pytest.raises(InvalidArgumentError, match="settings must be SamplerSettings"):
        SamplerConfig(settings=None, task_weights=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="run must be a RunConfig"):
        SamplerSettings(run=None, batch=BatchConfig())  # type: ignore[arg-type]


BAD_SEEDS = [-1, 2**64, True, 1.5]


@pytest.mark.parametrize("bad", BAD_SEEDS)
def test_every_entry_point_refuses_a_bad_seed_with_one_message(db, bad):
    message = f"seed must be an integer in \\[0, 2\\^64-1\\], got {bad!r}"
    with pytest.raises(InvalidArgumentError, match=message):
        Sampler(db, seed=bad, num_prefetch=0)
    with pytest.raises(InvalidArgumentError, match=message):
        BatchRequest(task="task1", split="train", steps=1, seed=bad)
    with pytest.raises(InvalidArgumentError, match=message):
        describe_sequence(db, "task1", 0, seed=bad)
    with pytest.raises(InvalidArgumentError, match=message):
        make_run_manifest(db, seed=bad, global_batch_size=4)
    with pytest.raises(InvalidArgumentError, match="split_" + message):
        make_run_manifest(db, seed=0, split_seed=bad, global_batch_size=4)
