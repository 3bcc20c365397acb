"""`dlkit preprocess`, `dlkit verify`, `dlkit schema infer` through the real entry point."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pytest

from dlkit.db import load_schema, open_database, preprocess
from tests.db.conftest import EXAMPLE, write_db


def test_preprocess_json_and_verify(dlkit, tmp_path):
    r = dlkit("preprocess", EXAMPLE, tmp_path / "db", "--json", "--no-fsync")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["database_id"] == "example-shop"
    assert report["num_tables"] == 4 and report["num_edges"] == 958
    assert report["dangling"]["orders.user_id"] == 1
    assert [s["name"] for s in report["stages"]] == [
        "scan", "keys", "tables", "graph", "embeddings", "manifest", "commit"]
    for stage in report["stages"]:
        assert set(stage) == {"name", "seconds", "rows", "edges", "columns", "bytes", "spilled"}
    v = dlkit("verify", tmp_path / "db", "--json")
    assert v.returncode == 0
    verdict = json.loads(v.stdout)
    assert verdict["ok"] and verdict["database_hash"] == report["database_hash"]
    on_disk = [p for p in (tmp_path / "db").rglob("*") if p.is_file()]
    assert verdict["num_files"] == len(on_disk)  # manifest.json included, as in the bytes
    assert verdict["size_bytes"] == report["size_bytes"] == sum(p.stat().st_size for p in on_disk)


def test_preprocess_human_summary(dlkit, tmp_path):
    r = dlkit("preprocess", EXAMPLE, tmp_path / "db")  # a summary for people: on stderr
    assert r.returncode == 0 and r.stdout == "", r.stderr
    for word in ("stages", "keys", "graph", "manifest", "total", "database hash", "dangling"):
        assert word in r.stderr
    v = dlkit("verify", tmp_path / "db")
    assert v.returncode == 0 and "OK" in v.stderr and v.stdout == ""


def test_verify_failure_names_file_and_check(dlkit, tmp_path, example_db):
    db = tmp_path / "db"
    shutil.copytree(example_db, db)
    path = db / "tables" / "orders" / "1.values"
    data = bytearray(path.read_bytes())
    data[3] ^= 0x10
    path.write_bytes(bytes(data))
    r = dlkit("verify", db)
    assert r.returncode == 3
    assert "tables/orders/1.values" in r.stderr and "file.sha256" in r.stderr
    assert "VERIFICATION_FAILED" in r.stderr
    j = dlkit("verify", db, "--json")
    assert j.returncode == 3
    failures = json.loads(j.stdout)["failures"]
    assert failures[0] == {"file": "tables/orders/1.values", "check": "file.sha256",
                           "message": failures[0]["message"]}


def test_long_lines_are_not_wrapped_off_a_terminal(dlkit, tmp_path, example_db):
    db = tmp_path / ("a-database-whose-name-takes-more-than-eighty-columns-" * 2)
    shutil.copytree(example_db, db)
    r = dlkit("verify", db)
    assert r.returncode == 0, r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith(f"OK {db}: ") and first.endswith(" s)")


def test_a_missing_database_or_one_never_built_says_so(dlkit, tmp_path):
    r = dlkit("verify", tmp_path / "nowhere")
    assert r.returncode == 5 and "not a dlkit database: no such directory" in r.stderr
    r = dlkit("manifest", EXAMPLE, "--seed", 1, "-g", 4, "--out", tmp_path / "run.json")
    assert r.returncode == 5 and "error NOT_A_DATABASE: " in r.stderr  # as verify says
    assert "not a dlkit database: it holds no manifest.json" in r.stderr
    assert "`dlkit preprocess` makes one" in r.stderr


def test_an_error_before_the_first_stage_leaves_no_empty_progress_line(dlkit, tmp_path):
    (tmp_path / "db").mkdir()
    (tmp_path / "db" / "mine.txt").write_text("not a database")
    r = dlkit("preprocess", EXAMPLE, tmp_path / "db")  # progress bars on
    assert r.returncode == 6 and r.stderr.startswith("error OUTPUT_ERROR: ")


def test_preprocess_errors_are_one_line(dlkit, tmp_path):
    src = write_db(tmp_path / "in", {"a": pa.table({"k": [1, 1]})}, '[tables.a]\nprimary_key = "k"\n')
    r = dlkit("preprocess", src, tmp_path / "db", "-q")
    assert r.returncode == 5
    assert "DATA_INVALID" in r.stderr and "table 'a', column 'k'" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "db").exists()
    r = dlkit("preprocess", EXAMPLE, tmp_path / "db2", "--on-dangling", "error", "-q")
    assert r.returncode == 5 and "dangling" in r.stderr
    assert dlkit("preprocess", EXAMPLE, tmp_path / "db3", "--on-dangling", "maybe").returncode == 2
    ok = dlkit("preprocess", EXAMPLE, tmp_path / "db4", "-q")
    assert ok.returncode == 0
    again = dlkit("preprocess", EXAMPLE, tmp_path / "db4", "-q")
    assert again.returncode == 6 and "--overwrite" in again.stderr
    assert dlkit("preprocess", EXAMPLE, tmp_path / "db4", "-q", "--overwrite").returncode == 0


def test_preprocess_overwrite_refuses_a_file_added_to_the_database(dlkit, tmp_path):
    """`preprocess --overwrite` replaces a database, not what a user added to its directory:
    one line naming the first file its manifest does not list; the database stays."""
    db = tmp_path / "db"
    assert dlkit("preprocess", EXAMPLE, db, "-q", "--no-fsync").returncode == 0
    (db / "experiments").mkdir()
    (db / "experiments" / "result.csv").write_text("auc\n0.7\n")
    manifest = (db / "manifest.json").read_bytes()
    refused = dlkit("preprocess", EXAMPLE, db, "-q", "--no-fsync", "--overwrite")
    assert refused.returncode == 6 and len(refused.stderr.strip().splitlines()) == 1
    assert "OUTPUT_ERROR" in refused.stderr
    assert f"{db}: holds experiments/, which no dlkit database has" in refused.stderr
    assert (db / "experiments" / "result.csv").read_text() == "auc\n0.7\n"
    assert (db / "manifest.json").read_bytes() == manifest
    (db / "experiments" / "result.csv").rename(db / "tables" / "result.csv")
    (db / "experiments").rmdir()
    refused = dlkit("preprocess", EXAMPLE, db, "-q", "--no-fsync", "--overwrite")
    assert "holds tables/result.csv, which" in refused.stderr
    (db / "tables" / "result.csv").unlink()
    assert dlkit("preprocess", EXAMPLE, db, "-q", "--no-fsync", "--overwrite").returncode == 0


def test_user_text_with_brackets_is_printed_as_it_is(dlkit, tmp_path):
    """Names, keys and paths are user data: ``[/x]`` in them is text, not rich markup (which
    raised on an unmatched closing tag, after the database was already committed)."""
    toml = ('[tables.p]\nprimary_key = "k"\n[tables.c]\nprimary_key = "id"\n'
            'foreign_keys = { p = "p" }\n')
    src = write_db(tmp_path / "in[/x]", {
        "p": pa.table({"k": ["a", "b"]}),
        "c": pa.table({"id": [1, 2, 3], "p": ["a", "[/oops]", "b"]}),
    }, toml)
    out = tmp_path / "db[/y]"
    r = dlkit("preprocess", src, out, "--no-fsync")
    assert r.returncode == 0, r.stderr
    assert "in[/x]" in r.stderr and "db[/y]" in r.stderr
    assert "warning" in r.stderr and "[/oops]" in r.stderr  # warnings go to stderr
    assert dlkit("verify", out).returncode == 0
    failed = dlkit("preprocess", src, tmp_path / "db2", "-q", "--on-dangling", "error")
    assert failed.returncode == 5 and "[/oops]" in failed.stderr
    assert "Traceback" not in failed.stderr
    bad = write_db(tmp_path / "bad", {"p": pa.table({"k": [1]})},
                   '[tables.p]\nprimary_key = "[/k]"\n')
    r = dlkit("preprocess", bad, tmp_path / "db3", "-q")
    assert r.returncode == 5 and "SCHEMA_INVALID" in r.stderr and "[/k]" in r.stderr
    assert "Traceback" not in r.stderr


def test_schema_infer_drafts_a_working_schema(dlkit, tmp_path):
    r = dlkit("schema", "infer", EXAMPLE)
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert '[tables.users]' in text and 'primary_key = "user_id"' in text
    assert 'primary_key = "product_id"' in text
    assert 'user_id = "users"' in text and 'product_id = "products"' in text
    assert 'time_column = "ordered_at"' in text and 'time_column = "signup_time"' in text
    assert 'review_text = "text"' in text and 'status = "categorical"' in text
    draft = tmp_path / "in" / "dlkit.toml"
    shutil.copytree(EXAMPLE, tmp_path / "in")
    draft.unlink()
    w = dlkit("schema", "infer", tmp_path / "in", "--out", draft)
    assert w.returncode == 0 and draft.exists()
    assert "--schema" not in w.stderr  # preprocess finds INPUT_DIR/dlkit.toml itself
    elsewhere = tmp_path / "draft.toml"
    e = dlkit("schema", "infer", tmp_path / "in", "--out", elsewhere)
    assert e.returncode == 0 and f"OUT --schema {elsewhere}`" in e.stderr
    assert dlkit("schema", "infer", tmp_path / "in", "--out", draft).returncode == 6
    schema = load_schema(draft)
    assert {t.name for t in schema.tables} == {"orders", "products", "reviews", "users"}
    preprocess(tmp_path / "in", tmp_path / "db", fsync=False)
    with open_database(tmp_path / "db") as db:
        assert db.graph.num_edges == 958


def test_custom_embedder_plugin(tmp_path, monkeypatch):
    import sys
    import types

    import numpy as np

    module = types.ModuleType("toy_embedder")

    class Toy:
        name = "toy"

        def __init__(self, dim):
            self.dim = dim

        def config(self):
            return {"dim": self.dim}

        def embed(self, texts):
            return np.array([[len(t)] * self.dim for t in texts], dtype=np.float32)

    module.make = lambda dim: Toy(dim)
    monkeypatch.setitem(sys.modules, "toy_embedder", module)
    from dlkit.db import load_embedder

    emb = load_embedder("toy_embedder:make", dim=3)
    preprocess(EXAMPLE, tmp_path / "db", fsync=False, embedder=emb)
    with open_database(tmp_path / "db") as db:
        assert db.text_embeddings().shape == (db.num_texts, 3)
        assert db.text_embeddings()[0, 0] == len(db.text(0))
        assert db.metadata.embeddings.embedder == "toy"


def test_a_failing_embedder_plugin_is_an_argument_error_and_writes_nothing(tmp_path,
                                                                           monkeypatch):
    import sys
    import types

    from dlkit.db import load_embedder
    from dlkit.errors import InvalidArgumentError

    class Broken:
        name = "broken"
        dim = 4

        def config(self):
            return {}

        def embed(self, texts):
            raise RuntimeError("model weights missing")

    module = types.ModuleType("broken_embedder")
    module.make = lambda dim: Broken()
    module.fails = lambda dim: [][dim]
    monkeypatch.setitem(sys.modules, "broken_embedder", module)
    with pytest.raises(InvalidArgumentError, match="its factory failed: IndexError"):
        load_embedder("broken_embedder:fails")
    with pytest.raises(InvalidArgumentError,
                       match="embedder 'broken' failed: RuntimeError: model weights missing"):
        preprocess(EXAMPLE, tmp_path / "db", fsync=False,
                   embedder=load_embedder("broken_embedder:make"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("budget", ["nan", "inf", "-1G", "1e30", "1e18T"])
def test_memory_budget_must_be_a_plain_size(dlkit, tmp_path, budget):
    r = dlkit("preprocess", EXAMPLE, tmp_path / "db", "-q", "--memory-budget", budget)
    assert r.returncode == 2 and "INVALID_ARGUMENT" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "db").exists()


def test_the_progress_display_skips_a_stage_with_nothing_to_do():
    from dlkit.cli.db import RichProgress

    with RichProgress() as sink:
        sink.begin("keys", 0)  # keys read in the tables pass: not a "0/0" bar
        sink.end()
        assert not sink.started  # nor an empty display line yet
        sink.begin("scan", 4, "tables")
        sink.advance(4)
        sink.end()
        assert [(t.description, t.completed) for t in sink.bar.tasks] == [("scan", 4)]


def test_a_small_budget_spills_and_says_so(dlkit, tmp_path):
    ram = dlkit("preprocess", EXAMPLE, tmp_path / "ram", "--json", "--no-fsync")
    small = dlkit("preprocess", EXAMPLE, tmp_path / "small", "--json", "--no-fsync",
                  "--memory-budget", "0")
    assert ram.returncode == 0 and small.returncode == 0, small.stderr
    ram_report, small_report = json.loads(ram.stdout), json.loads(small.stdout)
    assert ram_report["spilled_bytes"] == 0 and small_report["spilled_bytes"] > 0
    assert small_report["memory_budget"] == 0
    assert small_report["database_hash"] == ram_report["database_hash"]
    shown = dlkit("preprocess", EXAMPLE, tmp_path / "shown", "--no-fsync",
                  "--memory-budget", "0")
    assert shown.returncode == 0
    assert "spilled to scratch files" in shown.stderr  # the summary; the progress bar's
    assert "spilled to disk" not in shown.stderr        # column shows only on a terminal


def test_the_progress_display_shows_bytes_spilled():
    from dlkit.cli.db import RichProgress

    with RichProgress() as sink:
        sink.begin("tables", 10)
        sink.spilled(3 << 20)
        assert sink.bar.tasks[0].fields["spill"] == "3.0 MiB spilled to disk"
        sink.end()
