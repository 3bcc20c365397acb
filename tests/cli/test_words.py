"""Words that match: one code and exit for one kind of mistake in every command and in the
examples (docs/cli.md, "Usage errors and input errors"), a "did you mean" for a mistyped
task, table or column name, and flags whose help says they take no value."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dlkit.db import open_database
from tests.cli.helpers import assert_clean_failure, run_dlkit
from tests.db.conftest import example_db  # noqa: F401 - the session fixture

REPO = Path(__file__).resolve().parents[2]
TRAIN_TORCH = REPO / "examples" / "train_torch.py"
EXAMPLE_SCHEMA = REPO / "fixtures" / "example_db" / "dlkit.toml"


def _torch_example(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TRAIN_TORCH), *map(str, args)],
                          capture_output=True, timeout=300, cwd=REPO)


def test_overwrite_is_a_flag_in_help_and_in_use(tmp_path):
    help_text = run_dlkit("sample", "--help").stdout.decode()
    line = next(line for line in help_text.splitlines() if "--overwrite" in line)
    assert "<bool>" not in line and "bool" not in line.split("Replace")[0]
    result = run_dlkit("sample", REPO / "fixtures" / "example_manifest.json", "-d",
                       "example/train", "-n", "1", "--out", tmp_path / "i.txt", "--overwrite",
                       "--quiet")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "i.txt").read_text().count("\n") == 1


@pytest.mark.parametrize("kind", ["empty directory", "parquet input", "missing"])
def test_a_path_that_is_no_database_is_not_a_database_everywhere(tmp_path, kind):
    path = {"empty directory": tmp_path / "empty", "parquet input": REPO / "fixtures" /
            "example_db", "missing": tmp_path / "missing"}[kind]
    if kind == "empty directory":
        path.mkdir()
    runs = {
        "verify": run_dlkit("verify", path),
        "show": run_dlkit("show", path, "-t", "review_rating", "-a", "0"),
        "batches": run_dlkit("batches", path, "-t", "review_rating", "-s", "1", "-b", "2",
                             "-o", tmp_path / "b"),
        "manifest": run_dlkit("manifest", path, "-s", "1", "-g", "8", "-o", tmp_path / "m.json"),
        "train_torch.py": _torch_example("--db", path, "--task", "review_rating", "--steps", "1"),
    }
    lines = set()
    for name, result in runs.items():
        err = assert_clean_failure(result, "NOT_A_DATABASE")
        assert result.returncode == 5, (name, err)
        lines.add(err)
    assert len(lines) == 1, lines  # word for word the same


def test_an_unknown_task_is_invalid_argument_with_a_suggestion_everywhere(example_db,  # noqa: F811
                                                                          tmp_path):
    runs = {
        "show": run_dlkit("show", example_db, "-t", "review_ratin", "-a", "0"),
        "batches": run_dlkit("batches", example_db, "-t", "review_ratin", "-s", "1", "-b",
                             "2", "-o", tmp_path / "b"),
        "view": run_dlkit("view", example_db, "-t", "review_ratin", "-o", tmp_path / "v.html"),
        "train_torch.py": _torch_example("--db", example_db, "--task", "review_ratin",
                                         "--steps", "1"),
    }
    for name, result in runs.items():
        err = assert_clean_failure(result, "INVALID_ARGUMENT")
        assert result.returncode == 2, (name, err)
        assert err.rstrip().endswith("no task 'review_ratin' in the database (tasks: "
                                     "review_rating, order_status, user_premium); did you mean "
                                     "'review_rating'?"), (name, err)
    relbench = run_dlkit("import", "relbench", REPO / "fixtures" / "relbench_fake",
                         tmp_path / "rb", "--task", "user-chrun")
    err = assert_clean_failure(relbench, "INVALID_ARGUMENT")
    assert relbench.returncode == 2 and err.rstrip().endswith("did you mean 'user-churn'?")


def test_the_example_names_no_internal_parameter(example_db):  # noqa: F811
    result = _torch_example("--db", example_db, "--task", "hall", "--steps", "1")
    err = assert_clean_failure(result, "INVALID_ARGUMENT")
    assert "task_weights" not in err and "no task 'hall'" in err
    assert "did you mean" not in err  # nothing is close to it


def test_a_mistyped_table_or_column_name_gets_a_suggestion(example_db):  # noqa: F811
    with open_database(example_db) as db:
        with pytest.raises(KeyError, match="no table 'user' in .*; did you mean 'users'"):
            db.table("user")
        with pytest.raises(KeyError, match=r"no column 'contry' in table 'users' .*; did you "
                                           r"mean 'country'\?"):
            db.table("users").column("contry")
        with pytest.raises(KeyError) as missing:
            db.task("zzz")
        assert str(missing.value.args[0]).endswith(
            "(tasks: review_rating, order_status, user_premium)")  # nothing close: no guess


def test_a_mistyped_table_in_the_schema_gets_a_suggestion():
    from dlkit.db.schema.spec import parse_schema
    from dlkit.errors import SchemaError

    text = (EXAMPLE_SCHEMA.read_text().replace('table = "reviews"', 'table = "review"'))
    assert 'table = "review"' in text
    with pytest.raises(SchemaError, match=r"table 'review' is not in the schema; did you mean "
                                          r"'reviews'\?"):
        parse_schema(text)
