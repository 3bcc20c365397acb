"""examples/pretrain.py on tiny planted databases (fixtures/make_planted_mixture.py): the
result line, the held-out database never trained on, identical re-runs and exact resume of
the pretraining from a checkpoint."""

from __future__ import annotations

import json
import math
import sys

import pytest

from tests.examples.launch import EXAMPLES

sys.path.insert(0, str(EXAMPLES))
import common  # noqa: E402
import pretrain  # noqa: E402

import dlkit  # noqa: E402

HELD_OUT = "churn-club"
TINY = ["--batch-size", "8", "--sequence-length", "64", "--d-model", "32",
        "--finetune-steps", "3"]
KEYS = ("framework", "world_size", "databases", "held_out", "task", "target", "metric",
        "val_count", "pretrain_steps", "finetune_steps", "zero_shot", "fine_tuned", "scratch",
        "baseline", "zero_shot_loss", "fine_tuned_loss", "scratch_loss", "baseline_loss",
        "pretrain_loss_first", "pretrain_loss_last", "pretrained", "seed", "resumed_from")


@pytest.fixture(autouse=True)
def _single_process(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


def _run(capsys, databases, *flags: str) -> tuple[str, dict]:
    argv = ["--db", *map(str, databases), "--held-out", HELD_OUT, *TINY, *flags]
    assert pretrain.main(argv) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    return line, json.loads(line)


def test_result_line_reports_the_three_metrics_on_the_held_out_database(capsys, mixture_dbs):
    _, result = _run(capsys, mixture_dbs, "--pretrain-steps", "4")
    assert set(KEYS) <= set(result)
    assert (result["held_out"], result["task"], result["metric"]) == \
        ("planted-churn-club", "lapse", "auc")
    assert (result["pretrain_steps"], result["finetune_steps"]) == (4, 3)
    assert result["resumed_from"] is None
    for key in ("zero_shot", "fine_tuned", "scratch", "baseline", "zero_shot_loss",
                "fine_tuned_loss", "scratch_loss", "baseline_loss", "pretrain_loss_first",
                "pretrain_loss_last"):
        assert isinstance(result[key], float) and math.isfinite(result[key]), key
    # every val seed of the held-out task once
    with dlkit.Sampler(mixture_dbs[-1], batch_size=8, sequence_length=64) as sampler:
        assert result["val_count"] == len(sampler.splits[0].of("val"))
    # the components pretrained on, each scored; the held-out one is not among them
    assert sorted(result["pretrained"]) == ["planted-churn-bank/dormancy",
                                            "planted-churn-shop/churn",
                                            "planted-grand-retail/revenue"]
    assert all(math.isfinite(v) for v in result["pretrained"].values())


def test_the_held_out_database_is_never_trained_on(capsys, mixture_dbs, tmp_path):
    record = tmp_path / "steps.jsonl"
    _run(capsys, mixture_dbs, "--pretrain-steps", "12", "--record", str(record))
    steps = [json.loads(line) for line in record.read_text().splitlines()]
    assert [s["step"] for s in steps] == list(range(12))
    served = {s["database_idx"] for s in steps}
    assert 3 not in served and len(served) >= 2  # the held-out one is last in --db


def test_a_rerun_prints_the_same_line(capsys, mixture_dbs):
    first, _ = _run(capsys, mixture_dbs, "--pretrain-steps", "3")
    second, _ = _run(capsys, mixture_dbs, "--pretrain-steps", "3")
    assert first == second
    other, _ = _run(capsys, mixture_dbs, "--pretrain-steps", "3", "--seed", "1")
    assert other != first


def test_resumed_pretraining_ends_where_an_uninterrupted_one_does(capsys, mixture_dbs, tmp_path):
    whole, first, rest = (tmp_path / f"{n}.jsonl" for n in ("whole", "first", "rest"))
    _, uninterrupted = _run(capsys, mixture_dbs, "--pretrain-steps", "5", "--record", str(whole))
    ckpt = tmp_path / "ckpt"
    _run(capsys, mixture_dbs, "--pretrain-steps", "2", "--checkpoint-dir", str(ckpt),
         "--record", str(first))
    _, resumed = _run(capsys, mixture_dbs, "--pretrain-steps", "5", "--checkpoint-dir",
                      str(ckpt), "--resume", "--record", str(rest))
    assert resumed.pop("resumed_from") == 2
    uninterrupted.pop("resumed_from")
    # pretrain_loss_first too: the first two steps' losses come with the checkpoint
    assert resumed == uninterrupted
    pieced = [json.loads(line) for path in (first, rest) for line in path.read_text().split()]
    steps = [json.loads(line) for line in whole.read_text().split()]
    assert pieced == steps  # the same batches, parameters and losses, step by step


def test_resume_refuses_another_held_out_database(capsys, mixture_dbs, tmp_path):
    ckpt = tmp_path / "ckpt"
    _run(capsys, mixture_dbs, "--pretrain-steps", "1", "--checkpoint-dir", str(ckpt))
    argv = ["--db", *map(str, mixture_dbs), "--held-out", "churn-shop", *TINY,
            "--pretrain-steps", "2", "--checkpoint-dir", str(ckpt), "--resume"]
    with pytest.raises(dlkit.errors.CheckpointError,
                       match="taken with other settings .*held_out: checkpoint "
                             "'planted-churn-club', now 'planted-churn-shop'"):
        pretrain.main(argv)


@pytest.mark.parametrize("flags, message", [
    (["--held-out", "nowhere"], "--held-out 'nowhere' is not one of --db"),
    (["--held-out", HELD_OUT, "--context", "anchor-only"], "ablation"),
])
def test_bad_flags_are_one_line(capsys, mixture_dbs, flags, message):
    argv = ["--db", *map(str, mixture_dbs), "--pretrain-steps", "1", "--finetune-steps", "1",
            *flags]
    assert common.run(lambda: pretrain.main(argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error USAGE: ") and message in err and err.count("\n") == 1


def test_a_categorical_task_gets_a_class_head_of_its_own(capsys, mixture_dbs,
                                                         planted_db_factory):
    """Pretrained on, the majority database's segment task trains its own class head (an
    accuracy among the pretrained components); held out, its head is untrained and the
    example still reports every metric."""
    majority, _ = planted_db_factory("majority", 0, 0.1)
    shop, club = mixture_dbs[0], mixture_dbs[-1]
    _, result = _run(capsys, [shop, majority, club], "--pretrain-steps", "4")
    assert set(result["pretrained"]) == {"planted-churn-shop/churn", "planted-majority/segment"}
    assert 0 <= result["pretrained"]["planted-majority/segment"] <= 1
    argv = ["--db", str(shop), str(majority), "--held-out", majority.name, *TINY,
            "--pretrain-steps", "2"]
    assert pretrain.main(argv) == 0
    held = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (held["task"], held["metric"]) == ("segment", "accuracy")
    for key in ("zero_shot", "fine_tuned", "scratch", "baseline"):
        assert 0 <= held[key] <= 1, key
    assert math.isfinite(held["zero_shot_loss"])


def test_an_unknown_task_is_the_words_of_every_command(capsys, mixture_dbs):
    argv = ["--db", *map(str, mixture_dbs), "--held-out", HELD_OUT, *TINY,
            "--pretrain-steps", "1", "--task", "laps"]
    assert common.run(lambda: pretrain.main(argv)) == 2
    assert capsys.readouterr().err == (
        "error INVALID_ARGUMENT: no task 'laps' in the held-out database planted-churn-club "
        "(tasks: lapse); did you mean 'lapse'?\n")
