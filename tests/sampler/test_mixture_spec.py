"""dlkit-mixture.toml: what a malformed file is told, and the check against real databases
(seeds per split as `dlkit info` counts them, weights, one embedding model, distinct ids)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dlkit.db import preprocess
from dlkit.db.write.embed import HashedNgramEmbedder
from dlkit.nextbatch.mixture import mixture_hash, weights_from_counts
from dlkit.sampler import Sampler
from dlkit.sampler.mixture import (
    MixtureError,
    Weighting,
    check_mixture,
    load_mixture,
    parse_mixture,
)
from tests.cli.helpers import assert_clean_failure, run_dlkit
from tests.db.conftest import EXAMPLE, example_db  # noqa: F401 - the session fixture

TASKS = ("review_rating", "order_status", "user_premium")


@pytest.mark.parametrize("text, problem", [
    ("[mixture\n", "not valid TOML"),
    ("[mixtures]\n", "unknown table 'mixtures'"),
    ("[mixture]\nweight = 'seeds'\n", "unknown key 'weight' in [mixture]"),
    ("[mixture]\nweights = 'rows'\n[[component]]\ndatabase='a'\ntask='t'\n", "weights must be"),
    ("[mixture]\ntotal_weight = 0\n", "total_weight must be an integer"),
    ("[mixture]\n", "at least one [[component]]"),
    ("[[component]]\ntask = 't'\n", "database must be a path"),
    ("[[component]]\ndatabase = 'a'\n", "give task or tasks"),
    ("[[component]]\ndatabase = 'a'\ntask = 't'\ntasks = ['u']\n", "give task or tasks"),
    ("[[component]]\ndatabase = 'a'\ntasks = []\n", "non-empty list"),
    ("[[component]]\ndatabase = 'a'\ntask = 't'\ntrain = 'no'\n", "train must be true or false"),
    ("[[component]]\ndatabase = 'a'\ntask = 't'\nweight = 2\n", "only with weights = \"given\""),
    ("[mixture]\nweights = 'given'\n[[component]]\ndatabase = 'a'\ntask = 't'\n",
     "component 1: weights = \"given\" needs a weight for every training component"),
    ("[mixture]\nweights = 'given'\n[[component]]\ndatabase = 'a'\ntask = 't'\nweight = 0\n",
     "weight must be an integer in [1, "),
    ("[[component]]\ndatabase = 'a'\ntask = 't'\ncolour = 1\n", "unknown key 'colour'"),
])
def test_a_malformed_mixture_is_one_named_error(text, problem):
    with pytest.raises(MixtureError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        parse_mixture(text, source="m.toml")


def test_paths_are_read_from_the_file_and_tasks_spread_into_components(tmp_path):
    path = tmp_path / "pretrain" / "dlkit-mixture.toml"
    path.parent.mkdir()
    path.write_text("[mixture]\nweights = 'given'\n"
                    "[[component]]\ndatabase = '../dbs/a'\ntasks = ['x', 'y']\nweight = 2\n"
                    "[[component]]\ndatabase = '/abs/b'\ntask = 'z'\ntrain = false\n")
    spec = load_mixture(path)
    assert spec.weighting is Weighting.GIVEN
    assert [(c.database, c.task, c.weight, c.train) for c in spec.components] == [
        (path.parent / "../dbs/a", "x", 2, True), (path.parent / "../dbs/a", "y", 2, True),
        (Path("/abs/b"), "z", None, False)]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "dlkit-mixture.toml"
    path.write_text(text)
    return path


def _info_seeds(db: Path) -> dict[str, dict[str, int]]:
    result = run_dlkit("info", db, "--json")
    assert result.returncode == 0, result.stderr
    return {t["name"]: t["seeds_per_split"] for t in json.loads(result.stdout)["tasks"]}


@pytest.mark.parametrize("weighting", list(Weighting))
def test_a_mixture_of_real_tasks_is_checked_and_weighted(example_db, tmp_path,  # noqa: F811
                                                         weighting):
    given = "\nweight = 3" if weighting is Weighting.GIVEN else ""
    path = _write(tmp_path, f"[mixture]\nweights = '{weighting.value}'\n"
                            f"[[component]]\ndatabase = '{example_db}'\n"
                            f"tasks = ['review_rating', 'order_status']{given}\n"
                            f"[[component]]\ndatabase = '{example_db}'\ntask = 'user_premium'\n"
                            "train = false\n")
    checked = check_mixture(load_mixture(path))
    assert [c.name for c in checked.components] == [f"example-shop/{t}" for t in TASKS]
    expected_seeds = _info_seeds(example_db)  # counted by the viewer's own split code
    for c in checked.components:
        assert c.seeds_per_split == expected_seeds[c.task]
    train_seeds = [expected_seeds[t]["train"] for t in TASKS[:2]]
    expected = {Weighting.SEEDS: weights_from_counts(train_seeds),
                Weighting.TASKS: (1, 1), Weighting.GIVEN: (3, 3)}[weighting]
    assert tuple(c.weight for c in checked.training) == expected
    assert checked.components[2].weight == 0 and not checked.components[2].train
    assert checked.block_size == sum(expected)
    assert checked.mixture_hash == mixture_hash(
        [f"example-shop/{t}" for t in TASKS[:2]], expected).hex()


@pytest.fixture(scope="module")
def other_databases(tmp_path_factory) -> dict[str, Path]:
    """The example under another id, and under its own id but embedded 32 wide."""
    root = tmp_path_factory.mktemp("mixture")
    renamed = root / "src"
    shutil.copytree(EXAMPLE, renamed)
    toml = renamed / "dlkit.toml"
    toml.write_text(toml.read_text().replace('name = "example-shop"', 'name = "shop-two"'))
    preprocess(renamed, root / "two", fsync=False)
    preprocess(EXAMPLE, root / "narrow", fsync=False, embedder=HashedNgramEmbedder(dim=32))
    return {"two": root / "two", "narrow": root / "narrow"}


def test_two_databases_make_one_mixture(example_db, other_databases, tmp_path):  # noqa: F811
    path = _write(tmp_path, f"[mixture]\nweights = 'tasks'\n"
                            f"[[component]]\ndatabase = '{example_db}'\ntask = 'review_rating'\n"
                            f"[[component]]\ndatabase = '{other_databases['two']}'\n"
                            "task = 'review_rating'\n")
    checked = check_mixture(load_mixture(path))
    # the named components, then the tasks the file leaves out, held out as the Sampler holds
    # them: the check and the Sampler list the same components with the same weights
    assert [c.name for c in checked.components] == [
        "example-shop/review_rating", "shop-two/review_rating",
        *(f"{db}/{t}" for db in ("example-shop", "shop-two") for t in TASKS[1:])]
    assert [c.named for c in checked.components] == [True, True] + [False] * 4
    assert all(not c.train and c.weight == 0 for c in checked.components[2:])
    assert checked.embedder == "hashed-char-ngram"
    with Sampler(path, batch_size=4, num_prefetch=0) as sampler:
        assert {c.name: c.weight for c in sampler.components} == \
            {c.name: c.weight for c in checked.components}


@pytest.mark.parametrize("second, task, problem", [
    ("narrow", "review_rating", "databases embedded by different models"),
    ("same", "review_rating", "is named twice"),
    ("same", "review_ratin", "no task 'review_ratin'.*did you mean 'review_rating'"),
])
def test_a_mixture_that_cannot_be_trained_on_is_refused(example_db, other_databases,  # noqa: F811
                                                        tmp_path, second, task, problem):
    other = example_db if second == "same" else other_databases[second]
    path = _write(tmp_path, f"[[component]]\ndatabase = '{example_db}'\ntask = 'review_rating'\n"
                            f"[[component]]\ndatabase = '{other}'\ntask = '{task}'\n")
    with pytest.raises(MixtureError, match=problem):
        check_mixture(load_mixture(path))


def test_two_databases_of_one_id_are_refused(example_db, other_databases, tmp_path):  # noqa: F811
    copy = tmp_path / "copy"
    shutil.copytree(example_db, copy)
    path = _write(tmp_path, f"[[component]]\ndatabase = '{example_db}'\ntask = 'review_rating'\n"
                            f"[[component]]\ndatabase = '{copy}'\ntask = 'order_status'\n")
    with pytest.raises(MixtureError, match="two databases have the id 'example-shop'"):
        check_mixture(load_mixture(path))


def test_a_mixture_with_nothing_to_train_on_is_refused(example_db, tmp_path):  # noqa: F811
    path = _write(tmp_path, f"[[component]]\ndatabase = '{example_db}'\n"
                            "task = 'review_rating'\ntrain = false\n")
    with pytest.raises(MixtureError, match="no component is trained on"):
        check_mixture(load_mixture(path))


def test_the_command_prints_the_check_and_refuses_in_one_line(example_db, tmp_path):  # noqa: F811
    path = _write(tmp_path, f"[[component]]\ndatabase = '{example_db}'\n"
                            "tasks = ['review_rating', 'order_status']\n")
    result = run_dlkit("mixture", "check", path, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == check_mixture(load_mixture(path)).to_json()
    text = run_dlkit("mixture", "check", path)
    assert text.returncode == 0 and b"example-shop/order_status" in text.stdout
    assert b"mixture hash" in text.stdout
    missing = run_dlkit("mixture", "check", tmp_path / "nope.toml")
    assert_clean_failure(missing, "MIXTURE_INVALID")
    assert missing.returncode == 5 and b"no such mixture file" in missing.stderr
    bad = run_dlkit("mixture", "check", _write(tmp_path, f"[[component]]\ndatabase = "
                                                         f"'{tmp_path}'\ntask = 't'\n"))
    err = assert_clean_failure(bad, "MIXTURE_INVALID")
    assert "NOT_A_DATABASE" not in err and "not a dlkit database" in err
