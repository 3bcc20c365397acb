"""``dlkit info``, ``dlkit view`` and ``dlkit curves`` from the shell: output, --json, and one
clean line for each bad input."""

from __future__ import annotations

import json

from tests.cli.helpers import assert_clean_failure, run_dlkit


def test_info_prints_tables_keys_and_tasks(example_db):
    text = run_dlkit("info", example_db)
    assert text.returncode == 0, text.stderr.decode()
    out = text.stdout.decode()
    for word in ("example-shop", "users", "review_rating", "hashed-char-ngram"):
        assert word in out
    doc = json.loads(run_dlkit("info", example_db, "--json").stdout)
    rating = next(t for t in doc["tasks"] if t["name"] == "review_rating")
    assert sum(rating["seeds_per_split"].values()) == rating["num_seeds"]
    other = json.loads(run_dlkit("info", example_db, "--json", "--split-seed", "7").stdout)
    moved = next(t for t in other["tasks"] if t["name"] == "review_rating")
    assert moved["seeds_per_split"] != rating["seeds_per_split"]  # the split seed is used


def test_info_of_a_directory_that_is_no_database(tmp_path):
    assert_clean_failure(run_dlkit("info", tmp_path), "NOT_A_DATABASE")


def test_view_refuses_an_unknown_task_with_a_suggestion(example_db, tmp_path):
    err = assert_clean_failure(
        run_dlkit("view", example_db, "-o", tmp_path / "v.html", "--task", "review_ratin"),
        "INVALID_ARGUMENT")
    assert "did you mean 'review_rating'" in err
    assert not (tmp_path / "v.html").exists()
    assert_clean_failure(run_dlkit("view", example_db, "-S", "12,x"), "USAGE")


def test_view_json_and_no_overwrite(example_db, tmp_path):
    out = tmp_path / "v.html"
    done = json.loads(run_dlkit("view", example_db, "-o", out, "--seeds", "1", "-S", "32",
                                "--json").stdout)
    assert done["output"] == str(out) and done["contexts"] > 0
    assert out.stat().st_size == done["size_bytes"]
    assert_clean_failure(run_dlkit("view", example_db, "-o", out), "OUTPUT_ERROR")


def test_curves_plots_every_numeric_series(tmp_path):
    record = tmp_path / "run.jsonl"
    record.write_text("".join(json.dumps({"step": k, "task_idx": 0, "loss": 2.0 / (k + 1),
                                          "params": ["x"], "metric": k * 0.1}) + "\n"
                              for k in range(30)))
    out = tmp_path / "c.svg"
    result = run_dlkit("curves", record, "-o", out)
    assert result.returncode == 0, result.stderr.decode()
    svg = out.read_text()
    assert 'data-series="loss"' in svg and 'data-series="metric"' in svg
    assert 'data-series="step"' not in svg and 'data-series="task_idx"' not in svg
    record.write_text('{"step": 0, "loss": 1.0, "database_idx": 0}\n'
                      '{"step": 1, "loss": NaN, "database_idx": 1}\n'
                      '{"step": 2, "loss": Infinity}\n{"step": 3, "loss": 0.5}\n')
    diverged = run_dlkit("curves", record, "-o", tmp_path / "n.svg")
    assert diverged.returncode == 0, diverged.stderr.decode()
    assert f"warning: {record}: loss is not finite at 2 steps, from step 1" in (
        diverged.stderr.decode())
    svg = (tmp_path / "n.svg").read_text()
    assert "not finite at 2 steps, from step 1" in svg and 'data-series="database_idx"' not in svg
    strict = tmp_path / "strict.jsonl"  # the examples write a loss that is not finite as null
    strict.write_text('{"step": 0, "loss": 1.0, "params": ["x"]}\n'
                      '{"step": 1, "loss": null, "params": ["y"]}\n')
    nulls = run_dlkit("curves", strict, "-o", tmp_path / "s.svg")
    assert nulls.returncode == 0, nulls.stderr.decode()
    assert f"warning: {strict}: loss is not finite at 1 step, from step 1" in (
        nulls.stderr.decode())
    assert "not finite at 1 step, from step 1" in (tmp_path / "s.svg").read_text()
    other = tmp_path / "other.jsonl"
    other.write_text('{"step": 0, "loss": 1.0}\n{"step": 1, "loss": 2.0}\n')
    as_json = json.loads(run_dlkit("curves", record, other, "-o", tmp_path / "j.svg",
                                   "--json").stdout)
    assert [(s["name"], s["record"], s["title"]) for s in as_json["series"]] == [
        ("loss", "run", "run: loss"), ("loss", "other", "other: loss")]  # one per record
    assert [s["not_finite"] for s in as_json["series"]] == [[1, 2], []]
    kept = record.read_bytes()
    err = assert_clean_failure(run_dlkit("curves", record, "-o", record, "--overwrite"),
                               "INVALID_ARGUMENT")
    assert "same file as the record" in err and record.read_bytes() == kept
    record.write_text('{"step": 0, "loss": 1}\nnot json\n')
    err = assert_clean_failure(run_dlkit("curves", record, "-o", tmp_path / "d.svg"),
                               "INPUT_INVALID")
    assert "line 2" in err


def test_curves_of_several_records_name_each_file(tmp_path):
    """Two runs' loss are two panels, each titled with its file (the stem; the path when
    two stems are the same), in the SVG and the JSON; one file keeps the plain name."""
    (tmp_path / "x").mkdir()
    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "x" / "a.jsonl"]
    for k, path in enumerate(paths):
        path.write_text("".join(json.dumps({"step": s, "loss": k + 1.0 / (s + 1)}) + "\n"
                                for s in range(5)))
    out = tmp_path / "c.svg"
    done = run_dlkit("curves", *paths[:2], "-o", out, "--json")
    assert done.returncode == 0, done.stderr.decode()
    titles = [s["title"] for s in json.loads(done.stdout)["series"]]
    assert titles == ["a: loss", "b: loss"]
    svg = out.read_text()
    assert ">a: loss (moving average" in svg and ">b: loss (moving average" in svg
    assert 'data-record="a"' in svg and 'data-record="b"' in svg
    clash = run_dlkit("curves", paths[0], paths[2], "-o", tmp_path / "d.svg", "--json")
    assert [s["record"] for s in json.loads(clash.stdout)["series"]] == [
        str(paths[0]), str(paths[2])]
    assert f">{paths[2]}: loss (moving average" in (tmp_path / "d.svg").read_text()
    single = run_dlkit("curves", paths[1], "-o", tmp_path / "e.svg", "--json")
    assert json.loads(single.stdout)["series"][0]["title"] == "loss"
    assert ">loss (moving average" in (tmp_path / "e.svg").read_text()


def test_a_task_without_seeds_is_named_in_one_warning_line(tmp_path):
    from tests.db.conftest import example_without_reviews

    out = tmp_path / "page.html"
    result = run_dlkit("view", example_without_reviews(tmp_path), "-o", out, "--seeds", "1", "-S", "64", "-q")
    assert result.returncode == 0, result.stderr.decode()
    assert result.stderr.decode().splitlines() == [
        "warning: task 'review_rating' has no seeds in train/val/test: the page lists none "
        "there"]
    assert out.exists()


def test_a_served_page_warns_before_it_serves(tmp_path):
    import subprocess
    import sys

    from tests.db.conftest import example_without_reviews

    server = subprocess.Popen([sys.executable, "-m", "dlkit", "view",
                               str(example_without_reviews(tmp_path)), "--serve", "-q"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert server.stdout.readline().decode().startswith("http://127.0.0.1:")
        # printed before the URL: not held until the server stops
        assert server.stderr.readline().decode() == (
            "warning: task 'review_rating' has no seeds in train/val/test: the page lists "
            "none there\n")
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert server.returncode == 0
