"""`dlkit manifest`, `dlkit batches`, `dlkit show` end to end on the bundled example."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pytest

from dlkit.db import open_database, preprocess
from dlkit.nextbatch import load_manifest
from dlkit.sampler import BATCH_KEYS, Sampler
from dlkit.sampler.splits import SPLITS

EXAMPLE = Path(__file__).resolve().parents[2] / "fixtures" / "example_db"
V2_MODE = "SHUFFLE_WITHOUT_REPLACEMENT_BLOCK_AFFINE_V1"
V3_MODE = "SHUFFLE_WITHOUT_REPLACEMENT_FEISTEL_V3"


@pytest.fixture(scope="module")
def db_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "db"
    preprocess(EXAMPLE, path, fsync=False)
    return path


def test_manifest_lists_every_task_and_split(dlkit, db_path, tmp_path):
    out = tmp_path / "run.json"
    result = dlkit("manifest", db_path, "--seed", 42, "--global-batch-size", 16, "--out", out,
                   "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    manifest = load_manifest(out)
    with open_database(db_path) as db:
        assert set(manifest.datasets) == {f"{db.database_id}/{t.name}/{s}" for t in db.tasks
                                          for s in SPLITS}
        for task in db.tasks:
            total = sum(manifest.datasets[f"{db.database_id}/{task.name}/{s}"].cardinality
                        for s in SPLITS)
            assert total == task.num_seeds
        assert all(e.hash == db.database_hash for e in manifest.datasets.values())
    assert manifest.seed == 42 and manifest.global_batch_size == 16 and manifest.data.drop_last
    assert manifest.data.sampling_mode == V3_MODE and summary["sampling_mode"] == "v3"
    assert summary["manifest_hash"] == manifest.manifest_hash.hex()
    # Ready for `dlkit sample`.
    key = next(iter(manifest.datasets))
    sample = dlkit("sample", out, "-d", key.replace("/test", "/train"), "--steps", 1)
    assert sample.returncode == 0, sample.stderr
    assert len(sample.stdout.split()) == 16


def test_manifest_sampling_mode_v2_writes_a_v2_manifest(dlkit, db_path, tmp_path):
    v2, v3 = tmp_path / "v2.json", tmp_path / "v3.json"
    for out, extra in ((v2, ["--sampling-mode", "v2"]), (v3, [])):
        result = dlkit("manifest", db_path, "--seed", 1, "-g", 8, "--out", out, *extra)
        assert result.returncode == 0, result.stderr
    assert "sampling_mode" not in json.loads(v2.read_text())["data"]
    assert json.loads(v3.read_text())["data"]["sampling_mode"] == V3_MODE
    assert load_manifest(v2).data.sampling_mode == V2_MODE
    key = next(k for k in load_manifest(v2).datasets if k.endswith("/train"))
    orders = [dlkit("sample", path, "-d", key, "--steps", 2).stdout for path in (v2, v3)]
    assert orders[0] != orders[1]


def test_manifest_warns_of_each_train_split_smaller_than_the_global_batch(dlkit, db_path,
                                                                         tmp_path):
    result = dlkit("manifest", db_path, "--seed", 1, "-g", 200, "--out", tmp_path / "run.json")
    assert result.returncode == 0, result.stderr
    manifest = load_manifest(tmp_path / "run.json")
    short = sorted(k for k, e in manifest.datasets.items() if e.cardinality < 200
                   and k.endswith("/train"))
    assert len(short) == 2  # review_rating and user_premium, not order_status (239 seeds)
    warned = sorted(line.split("'")[1] for line in result.stderr.splitlines()
                    if line.startswith("warning: dataset"))
    assert warned == short
    assert "fewer than the global batch size 200: it yields no train step" in result.stderr
    quiet = dlkit("manifest", db_path, "--seed", 1, "-g", 16, "--out", tmp_path / "run.json",
                  "--overwrite")
    assert quiet.returncode == 0 and "warning" not in quiet.stderr
    empty = dlkit("manifest", db_path, "--seed", 1, "-g", 16, "--split-ratios", "1,0,0",
                  "--out", tmp_path / "run.json", "--overwrite")
    assert empty.returncode == 0, empty.stderr
    warned = sorted(line.split("'")[1] for line in empty.stderr.splitlines()
                    if line.endswith("has no seed: it yields no step"))
    assert warned == sorted(k for k in load_manifest(tmp_path / "run.json").datasets
                            if not k.endswith("/train")) and len(warned) == 6


def test_manifest_help_says_to_sample_val_and_test_with_stage_eval(dlkit):
    text = " ".join(dlkit("manifest", "--help").stdout.split())
    assert "dlkit sample --stage eval" in text and "in order either way" not in text


@pytest.mark.parametrize("policy", [None, "recent", "quota"])
def test_batches_writes_the_sampler_batches_as_npz(dlkit, db_path, tmp_path, policy):
    out = tmp_path / "batches"
    extra = ["--bfs-child-width", 1, "--bfs-child-policy", policy] if policy else []
    result = dlkit("batches", db_path, "--task", "order_status", "--split", "train", "--steps", 3,
                   "--out", out, "--seed", 7, "-b", 4, "-S", 128, "-R", 16, "--json", *extra)
    assert result.returncode == 0, result.stderr
    files = sorted(out.glob("step_*.npz"))
    assert len(files) == 3
    index = json.loads((out / "index.json").read_text())
    # The index records a policy other than the default (and nothing for the default).
    assert index["request"].get("bfs_child_policy") == policy
    assert "context_examples" not in index["request"]
    assert "context_example_policy" not in index["request"]
    # The multi-task Sampler yields the same batches for this task, in the same order.
    knobs = dict(bfs_child_width=1, bfs_child_policy=policy) if policy else {}
    with Sampler(db_path, 0, 1, seed=7, batch_size=4, sequence_length=128, max_rows=16,
                 num_prefetch=0, **knobs) as s:
        ours = []
        while len(ours) < 3:
            built = s.next_built_batch("train")
            if built.task == "order_status":
                ours.append(built)
    for path, entry, built in zip(files, index["batches"], ours):
        with np.load(path) as npz:
            assert tuple(npz.files) == BATCH_KEYS
            for key in BATCH_KEYS:
                assert np.array_equal(npz[key], built.arrays[key])
                assert npz[key].dtype == built.arrays[key].dtype
        assert entry["anchor_rows"] == built.anchor_rows.tolist()


def test_batches_with_context_examples_are_the_sampler_batches(dlkit, db_path, tmp_path):
    out = tmp_path / "batches"
    result = dlkit("batches", db_path, "--task", "order_status", "--split", "train", "--steps",
                   2, "--out", out, "--seed", 7, "-b", 4, "-S", 256, "-R", 32, "--json",
                   "--bfs-child-width", 1, "--context-examples", 3,
                   "--context-example-policy", "random")
    assert result.returncode == 0, result.stderr
    index = json.loads((out / "index.json").read_text())
    assert index["request"]["context_examples"] == 3
    assert index["request"]["context_example_policy"] == "random"
    with Sampler(db_path, 0, 1, seed=7, batch_size=4, sequence_length=256, max_rows=32,
                 bfs_child_width=1, context_examples=3, context_example_policy="random",
                 num_prefetch=0) as s:
        ours = []
        while len(ours) < 2:
            built = s.next_built_batch("train")
            if built.task == "order_status":
                ours.append(built)
    files = sorted(out.glob("step_*.npz"))
    assert sum(int(b.arrays["is_context_example"].sum()) for b in ours) > 0
    for path, built in zip(files, ours, strict=True):
        with np.load(path) as npz:
            for key in BATCH_KEYS:
                assert np.array_equal(npz[key], built.arrays[key]), key


def _batches(dlkit, db_path, out, steps, *extra):
    return dlkit("batches", db_path, "--task", "order_status", "--steps", steps, "--out", out,
                 "--seed", 1, "-b", 2, "-S", 64, "-R", 8, *extra)


def _step_files(out: Path) -> list[str]:
    return sorted(p.name for p in out.glob("step_*.npz"))


def test_batches_refuses_an_existing_output_unless_overwrite(dlkit, db_path, tmp_path):
    out = tmp_path / "out"
    assert _batches(dlkit, db_path, out, 3).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    refused = _batches(dlkit, db_path, out, 1)
    assert refused.returncode == 6
    assert f"{out}: already exists (pass --overwrite to replace it)" in refused.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    replaced = _batches(dlkit, db_path, out, 1, "--overwrite")
    assert replaced.returncode == 0, replaced.stderr
    index = json.loads((out / "index.json").read_text())
    assert _step_files(out) == [b["file"] for b in index["batches"]] and len(index["batches"]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary or lock left
    assert "wrote 1 batch (2 sequences, " in replaced.stderr


def test_batches_takes_an_existing_empty_directory_with_overwrite_as_preprocess_does(
        dlkit, db_path, tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    refused = _batches(dlkit, db_path, out, 2)
    assert refused.returncode == 6 and "--overwrite" in refused.stderr
    result = _batches(dlkit, db_path, out, 2, "--overwrite")
    assert result.returncode == 0, result.stderr
    assert _step_files(out) == ["step_000000.npz", "step_000001.npz"]
    assert (out / "index.json").is_file() and "wrote 2 batches (4 sequences, " in result.stderr
    link = tmp_path / "link"
    link.symlink_to(out)
    linked = _batches(dlkit, db_path, link, 1, "--overwrite")
    assert linked.returncode == 6 and "is a symbolic link" in linked.stderr


def test_a_terminated_batches_run_leaves_nothing_beside_its_output(dlkit, db_path, tmp_path,
                                                                   monkeypatch):
    import signal
    import threading

    from dlkit.sampler import batch_files

    real, calls = batch_files.npz_bytes, []

    def terminated_after_one(arrays):
        calls.append(1)
        if len(calls) == 2:  # a batch is on disk in the build directory by now
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
        return real(arrays)

    def not_taken(signum, frame):  # without the CLI's handler SIGTERM would end pytest
        raise AssertionError("the CLI did not take SIGTERM")

    monkeypatch.setattr(batch_files, "npz_bytes", terminated_after_one)
    previous = signal.signal(signal.SIGTERM, not_taken)
    try:
        result = _batches(dlkit, db_path, tmp_path / "out", 3)
        assert signal.getsignal(signal.SIGTERM) is not_taken  # the CLI put it back
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert result.returncode == 130 and len(calls) == 2  # as for Ctrl-C
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no build dir, lock or output


def test_batches_overwrite_never_replaces_other_data(dlkit, db_path, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    result = _batches(dlkit, db_path, out, 1, "--overwrite")
    assert result.returncode == 6
    assert f"{out}: exists and is not a dlkit batches directory" in result.stderr
    assert [p.name for p in out.iterdir()] == ["precious.txt"]


def test_batches_overwrite_refuses_a_file_added_to_an_earlier_output(dlkit, db_path, tmp_path):
    """An earlier `dlkit batches` output with a file someone put in it is not replaced (the
    file would go with it): one line naming the first such file, and nothing changes."""
    out = tmp_path / "out"
    assert _batches(dlkit, db_path, out, 2).returncode == 0
    (out / "notes").mkdir()
    (out / "notes" / "result.csv").write_text("epoch,loss\n")
    (out / "zz.txt").write_text("mine")
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    refused = _batches(dlkit, db_path, out, 1, "--overwrite")
    assert refused.returncode == 6 and len(refused.stderr.strip().splitlines()) == 1
    assert f"{out}: holds notes/, which no dlkit batches directory has" in refused.stderr
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    (out / "notes" / "result.csv").unlink()
    (out / "notes").rmdir()
    refused = _batches(dlkit, db_path, out, 1, "--overwrite")
    assert "holds zz.txt, which" in refused.stderr
    (out / "zz.txt").unlink()
    assert _batches(dlkit, db_path, out, 1, "--overwrite").returncode == 0


def test_a_failed_batches_run_leaves_the_old_output(dlkit, db_path, tmp_path):
    out = tmp_path / "out"
    assert _batches(dlkit, db_path, out, 2).returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    failed = dlkit("batches", db_path, "--task", "user_premium", "-b", 1000, "--out", out,
                   "--overwrite")
    assert failed.returncode == 2 and "has no train batch" in failed.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_show_renders_the_sequence_with_the_masked_target(dlkit, db_path):
    result = dlkit("show", db_path, "--task", "review_rating", "--anchor", 3, "-S", 64, "--json")
    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    assert view["rows"][0]["reached"] == "seed" and view["rows"][0]["table"] == "reviews"
    targets = [c for r in view["rows"] for c in r["cells"] if c["is_target"]]
    assert [(t["column"], t["value"]) for t in targets] == [("rating", None)]
    assert sum(len(r["cells"]) for r in view["rows"]) == view["num_cells"] <= 64
    text = dlkit("show", db_path, "--task", "review_rating", "--anchor", 3)
    assert text.returncode == 0 and "[MASKED]" in text.stdout and "reviews" in text.stdout


@pytest.mark.parametrize("policy", ["uniform", "recent", "quota"])
def test_show_says_what_the_context_took_of_each_child_table(dlkit, db_path, policy):
    """Per child table, the distinct visible children of the visited rows and how many of
    them the sequence holds, recomputed here from the graph; the fill and why it stopped."""
    args = ("show", db_path, "--task", "review_rating", "--anchor", 3, "-S", 60,
            "--bfs-child-width", 1, "--bfs-child-policy", policy)
    view = json.loads(dlkit(*args, "--json").stdout)
    assert view["bfs_child_policy"] == policy and view["bfs_child_width"] == 1
    with open_database(db_path) as db:
        g = db.graph
        visited = {db.table(r["table"]).row_offset + r["local_row"] for r in view["rows"]}
        seen: dict[str, set[int]] = {}
        obs = view["observation_time"]
        for row in visited:
            for e in range(int(g.child_offsets[row]), int(g.child_offsets[row + 1])):
                child = int(g.child_ids[e])
                t = int(g.child_times[e])
                if obs != "-" and t != -(1 << 63) and t > _micros(obs):
                    continue
                seen.setdefault(db.row_of(child)[0].name, set()).add(child)
        names = [t.name for t in db.tables]
    want = [{"table": name, "visible": len(rows), "taken": len(rows & visited)}
            for name, rows in sorted(seen.items(), key=lambda kv: names.index(kv[0]))]
    assert view["children"] == want and want
    assert any(c["taken"] < c["visible"] for c in want)  # width 1 cuts something
    stopped = ("cells" if view["num_cells"] == 60 else
               "rows" if len(view["rows"]) == view["max_rows"] else "exhausted")
    assert view["stopped"] == stopped
    text = dlkit(*args).stdout
    assert f"context: {view['num_cells']} of 60 cells" in text
    for c in want:
        assert f"{c['table']}: {c['taken']} of {c['visible']} visible" in text


def test_show_marks_the_context_examples_rows_as_the_sampler_does(dlkit, db_path):
    """The rows `dlkit show` marks as context examples are the rows whose cells the batch
    flags ``is_context_example`` (built here by the builder the Sampler uses), and their seed
    rows are other reviews observed no later than the seed."""
    args = ("show", db_path, "--task", "review_rating", "--anchor", 3, "-S", 64, "-R", 12,
            "--bfs-child-width", 0)
    plain_view = json.loads(dlkit(*args, "--json").stdout)
    assert not any(r["context_example"] for r in plain_view["rows"])
    view = json.loads(dlkit(*args, "--context-examples", 2, "--json").stdout)
    with Sampler(db_path, 0, 1, sequence_length=64, max_rows=12, bfs_child_width=0,
                 context_examples=2, num_prefetch=0) as s:
        task = s.builder.task("review_rating")
        position = int(np.flatnonzero(task.anchor_row == 3)[0])
        built = s.builder.build(task, np.array([position]), 0)
    a = built.arrays
    cells = int(built.cell_counts[0])
    flagged = set(a["seq_row_ids"][0, :cells][a["is_context_example"][0, :cells] == 1].tolist())
    assert flagged and {r["index"] for r in view["rows"] if r["context_example"]} == flagged
    assert [r["reached"] == "context example" for r in view["rows"]] == \
        [int(v) == 3 for v in built.visited_via[0, :len(view["rows"])]]
    seeds = [r for r in view["rows"] if r["reached"] == "context example"]
    assert all(r["table"] == "reviews" and r["time"] <= view["observation_time"] for r in seeds)
    text = dlkit(*args, "--context-examples", 2).stdout
    assert f"filled with {len(seeds)} context examples ({len(flagged)} of the rows)" in text


def _micros(iso: str) -> int:
    moment = dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return (moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def test_show_counts_in_the_singular(dlkit, db_path):
    # S is one users row's cells, so the sequence is the seed row alone
    result = dlkit("show", db_path, "--task", "user_premium", "--anchor", 0, "-S", 5)
    assert result.returncode == 0, result.stderr
    assert "; 1 row, 5/5 cells" in result.stdout


@pytest.mark.parametrize("args,code,needle", [
    (("show", "{db}", "--task", "nope", "--anchor", 0), 2, "no task 'nope'"),
    (("show", "{db}", "--task", "review_rating", "--anchor", 100000), 2, "not a seed"),
    (("batches", "{db}", "--task", "review_rating", "--split", "holdout", "--out", "{tmp}"), 2,
     "split must be one of"),
    (("manifest", "{tmp}/nothing", "--seed", 1, "-g", 4, "--out", "{tmp}/m.json"), 5, "nothing"),
    (("manifest", "{db}", "--seed", 1, "-g", 4, "--split-ratios", "0.5,0.5", "--out",
      "{tmp}/m.json"), 2, "split ratios need 3 values"),
    (("batches", "{db}", "--task", "review_rating", "--split-ratios", "0.5,0.6,0", "--out",
      "{tmp}/b"), 2, "split ratios must sum to 1"),
    (("manifest", "{db}", "--seed", 1, "-g", 4, "--sampling-mode", "v1", "--out",
      "{tmp}/m.json"), 2, "sampling mode must be v3"),
    (("batches", "{db}", "--task", "review_rating", "--sampling-mode", "x", "--out", "{tmp}"),
     2, "sampling mode must be v3"),
    (("show", "{db}", "--task", "user_premium", "--anchor", 0, "-S", 4), 2,
     "sequence_length 4 is shorter than the 5 cells of a row of table 'users' (task "
     "'user_premium')"),
    (("batches", "{db}", "--task", "review_rating", "--bfs-child-width", 2**31, "--out",
      "{tmp}/b"), 2, "bfs_child_width must be an integer in"),
    (("show", "{db}", "--task", "review_rating", "--anchor", 3, "--bfs-child-policy", "old"),
     2, "bfs_child_policy must be one of uniform, recent, quota"),
    (("batches", "{db}", "--task", "review_rating", "--context-examples", 2,
      "--context-example-policy", "latest", "--out", "{tmp}/b"), 2,
     "context_example_policy must be one of recent, random"),
])
def test_errors_are_one_line_with_an_exit_code(dlkit, db_path, tmp_path, args, code, needle):
    argv = [str(a).format(db=db_path, tmp=tmp_path) for a in args]
    result = dlkit(*argv)
    assert result.returncode == code, result.stderr
    assert needle in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_every_option_has_help(dlkit):
    for command in ("manifest", "batches", "show"):
        result = dlkit(command, "--help")
        assert result.returncode == 0
        assert "Example" in result.stdout


def _corrupt_copy(db_path: Path, tmp_path: Path, rel: str, edit) -> Path:
    import shutil

    copy = tmp_path / "db"
    shutil.copytree(db_path, copy)
    data = bytearray((copy / rel).read_bytes())
    edit(data)
    (copy / rel).write_bytes(bytes(data))
    return copy


@pytest.mark.parametrize("rel,edit,task,needle", [
    ("texts.data", lambda b: b.__setitem__(slice(None), b"\xff" * len(b)), "review_rating",
     "texts.data: text"),
    ("tables/users/key.values", lambda b: b.__setitem__(0, 0xFF), "user_premium",
     "tables/users/key.values: key of row 0"),
])
def test_show_names_stored_text_that_is_not_utf8(dlkit, db_path, tmp_path, rel, edit, task,
                                                  needle):
    """Opening checks structure, not every string: bytes that are not UTF-8 are the
    database's error when a string is read, never a traceback."""
    copy = _corrupt_copy(db_path, tmp_path, rel, edit)
    result = dlkit("show", copy, "--task", task, "--anchor", 0 if task == "user_premium" else 3)
    assert result.returncode == 5 and "DATABASE_CORRUPT" in result.stderr
    assert needle in result.stderr and "not valid UTF-8" in result.stderr


def test_show_takes_each_row_s_table_from_the_table_offsets(dlkit, db_path, tmp_path):
    from dlkit.db import format as fmt

    with open_database(db_path) as db:
        layout, _ = fmt.graph_layout(db.num_rows, db.graph.num_edges,
                                     db.graph.parent_ids.dtype, db.graph.parent_offsets.dtype)
    at, _dtype, count = layout["row_table"]
    copy = _corrupt_copy(db_path, tmp_path, "graph.bin",
                         lambda b: b.__setitem__(slice(at, at + 4 * count), bytes(4 * count)))
    args = ("--task", "review_rating", "--anchor", 3, "-S", 64, "--json")
    assert dlkit("show", copy, *args).stdout == dlkit("show", db_path, *args).stdout


def test_the_sequence_length_is_checked_against_the_task_asked_for_only(dlkit, db_path, tmp_path):
    # a reviews row has 4 cells, a users row 5 (user_premium's table is not asked for)
    shown = dlkit("show", db_path, "--task", "review_rating", "--anchor", 1, "-S", 4)
    assert shown.returncode == 0, shown.stderr
    assert "1 row, 4/4 cells" in shown.stdout
    built = dlkit("batches", db_path, "--task", "order_status", "-S", 3, "-n", 1, "--out",
                  tmp_path / "b", "-q")
    assert built.returncode == 0, built.stderr
