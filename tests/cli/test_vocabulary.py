"""One vocabulary across commands: a short flag means one thing everywhere; every command takes
--quiet and --json with one meaning (data and JSON only on stdout, progress and summaries on
stderr, -q hides those and never data); one name per concept in JSON."""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest

from tests.cli.test_help import commands
from tests.nextbatch.helpers import manifest_dict, one_case_golden

EXAMPLE = Path(__file__).resolve().parents[2] / "fixtures" / "example_db"


def test_a_short_flag_means_one_thing_in_every_command():
    meanings = defaultdict(set)
    for _name, command in commands():
        for param in command.params:
            longs = [o for o in param.opts if o.startswith("--")]
            for short in (o for o in param.opts if not o.startswith("--")):
                meanings[short].add(longs[0] if longs else param.name)
    assert meanings["-s"] == {"--seed"}
    assert {flag: names for flag, names in meanings.items() if len(names) > 1} == {}


def test_every_command_takes_quiet_and_json():
    for name, command in commands():
        opts = {o for p in command.params for o in p.opts}
        assert {"--json", "--quiet", "-q"} <= opts, f"dlkit {name} lacks --json or --quiet"


@pytest.fixture(scope="module")
def db_path(tmp_path_factory):
    from dlkit.db import preprocess

    path = tmp_path_factory.mktemp("vocab") / "db"
    preprocess(EXAMPLE, path, fsync=False)
    return path


def _commands(db: Path, tmp: Path) -> dict[str, list]:
    """One successful run of every command, minus --json and --quiet."""
    manifest = tmp / "m.json"
    manifest.write_text(json.dumps(manifest_dict(70, 8, 16)))
    golden = one_case_golden(tmp / "g.json")
    record = tmp / "run.jsonl"
    record.write_text('{"step": 0, "loss": 1.5}\n{"step": 1, "loss": 1.25}\n')
    sqlite = tmp / "shop.sqlite"
    with contextlib.closing(sqlite3.connect(sqlite)) as con:
        con.executescript("CREATE TABLE u (id INTEGER PRIMARY KEY, x REAL);"
                          "CREATE TABLE o (uid INTEGER REFERENCES u (id));"
                          "INSERT INTO u VALUES (1, 0.5), (2, 1.5); INSERT INTO o VALUES (1);")
    collection = tmp / "collection"
    shutil.copytree(EXAMPLE, collection / "shop")
    mixture = tmp / "dlkit-mixture.toml"
    mixture.write_text(f"[[component]]\ndatabase = '{db}'\ntask = 'review_rating'\n")
    return {
        "sample": ["sample", manifest, "-d", "ds", "--steps", 2, "--out", tmp / "i{n}.txt",
                   "--trace", tmp / "t{n}.cbor"],
        "replay": ["replay", tmp / "t0.cbor", "--manifest", manifest],
        "verify-golden": ["verify-golden", golden],
        "preprocess": ["preprocess", EXAMPLE, tmp / "db{n}", "--no-fsync"],
        "verify": ["verify", db],
        "schema infer": ["schema", "infer", EXAMPLE, "--out", tmp / "s{n}.toml"],
        "manifest": ["manifest", db, "--seed", 1, "-g", 4, "--out", tmp / "r{n}.json"],
        "batches": ["batches", db, "--task", "review_rating", "--steps", 1, "-b", 2, "-S", 64,
                    "--out", tmp / "b{n}"],
        "show": ["show", db, "--task", "review_rating", "--anchor", 3, "-S", 32],
        "bench": ["bench", "--workload", "gather", "--steps", 8, "--rows", 4096, "--no-torch"],
        "import sql": ["import", "sql", f"sqlite:///{sqlite}", tmp / "sq{n}", "--no-fsync"],
        "info": ["info", db],
        "schema diagram": ["schema", "diagram", db, "--format", "dot"],
        "view": ["view", db, "-o", tmp / "v{n}.html", "--seeds", 1, "-S", 32],
        "curves": ["curves", record, "-o", tmp / "c{n}.svg"],
        "preprocess-many": ["preprocess-many", collection, tmp / "dbs{n}", "--no-fsync"],
        "mixture check": ["mixture", "check", mixture],
    }


def _unwarned(stderr: str) -> str:
    """stderr without warnings and notes: those are not summaries, -q keeps them."""
    return "".join(line for line in stderr.splitlines(keepends=True)
                   if not line.startswith(("warning: ", "note: ")))


def _fill(args: list, n: int) -> list:
    return [str(a).replace("{n}", str(n)) for a in args]


def test_json_and_quiet_have_one_meaning_in_every_command(dlkit, db_path, tmp_path):
    """--json: stdout is one JSON document and nothing else; adding -q keeps its fields and
    leaves nothing but warnings on stderr; -q alone leaves stdout as it is without -q (data is
    never hidden)."""
    runs = _commands(db_path, tmp_path)
    covered = {name for name, _ in commands()} - {"import relbench"}
    assert covered <= set(runs), covered - set(runs)
    for name, args in runs.items():
        plain = dlkit(*_fill(args, 0))
        assert plain.returncode == 0, (name, plain.stderr)
        as_json = dlkit(*_fill(args, 1), "--json")
        assert as_json.returncode == 0, (name, as_json.stderr)
        json.loads(as_json.stdout)  # the whole of stdout is one JSON document
        quiet_json = dlkit(*_fill(args, 2), "--json", "-q")
        assert quiet_json.returncode == 0 and _unwarned(quiet_json.stderr) == "", name
        assert json.loads(quiet_json.stdout).keys() == json.loads(as_json.stdout).keys()
        quiet = dlkit(*_fill(args, 3), "-q")
        assert quiet.returncode == 0 and _unwarned(quiet.stderr) == "", (name, quiet.stderr)
        if name not in ("bench",):  # bench's table holds timings
            assert quiet.stdout == plain.stdout.replace("0.txt", "3.txt"), name


def test_human_summaries_go_to_stderr(dlkit, db_path, tmp_path):
    result = dlkit("verify", db_path)
    assert result.stdout == "" and result.stderr.startswith(f"OK {db_path}: ")
    result = dlkit("manifest", db_path, "--seed", 1, "-g", 4, "--out", tmp_path / "r.json")
    assert result.stdout == "" and "manifest hash" in result.stderr
    result = dlkit("preprocess", EXAMPLE, tmp_path / "db", "--no-fsync")
    assert result.stdout == "" and "database hash" in result.stderr


def test_one_name_per_concept_in_json(dlkit, db_path, tmp_path):
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps(manifest_dict(70, 8, 16)))
    sample = json.loads(dlkit("sample", manifest, "-d", "ds", "--steps", 2, "--json", "--out",
                              tmp_path / "i.txt", "--trace", tmp_path / "t.cbor").stdout)
    replay = json.loads(dlkit("replay", tmp_path / "t.cbor", "-m", manifest, "--json").stdout)
    assert replay["cursor_end"] == sample["cursor_end"] and "final_cursor" not in replay
    full = "SHUFFLE_WITHOUT_REPLACEMENT_FEISTEL_V3"
    made = json.loads(dlkit("manifest", db_path, "--seed", 1, "-g", 4, "--json",
                            "--sampling-mode", full, "--out", tmp_path / "r.json").stdout)
    assert made["output"] == str(tmp_path / "r.json") and made["sampling_mode"] == "v3"
    assert "path" not in made
    batches = json.loads(dlkit("batches", db_path, "--task", "review_rating", "--json",
                               "--out", tmp_path / "b", "-S", 64, "-b", 2).stdout)
    assert batches["output"] == str(tmp_path / "b") and "out_dir" not in batches


# Names that said a concept another command names otherwise (CHANGELOG.md lists the renames)
RETIRED = {"out_dir": "output", "obs_time": "observation_time", "indices": "total_samples_seen",
           "records": "steps", "seeds": "seeds_per_split"}


def _items(value, top=True):
    """(key, value, at the top level) of every object member in a JSON document."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield key, inner, top
            yield from _items(inner, False)
    elif isinstance(value, list):
        for inner in value:
            yield from _items(inner, False)


def test_every_command_names_each_concept_one_way_in_json(dlkit, db_path, tmp_path):
    """In every command's --json: the path of what it wrote is `output` (and a command that
    writes one output names it so); a count of files and a size of them are `num_files` and
    `size_bytes` (`files` is always a list); no retired name is left."""
    runs = _commands(db_path, tmp_path)
    runs["schema diagram"] += ["-o", tmp_path / "d{n}.mmd"]
    for name, args in runs.items():
        filled = _fill(args, 0)  # in order: replay reads the trace sample wrote
        written = {a for a, raw in zip(filled, map(str, args), strict=True) if "{n}" in raw}
        result = dlkit(*filled, "--json")
        assert result.returncode == 0, (name, result.stderr)
        doc = json.loads(result.stdout)
        for key, value, top in _items(doc):
            assert key not in RETIRED, f"dlkit {name} --json says {key}, not {RETIRED[key]}"
            if key == "files":
                assert isinstance(value, list), f"dlkit {name}: files is a count"
            if top and key == "bytes":
                raise AssertionError(f"dlkit {name}: a size is size_bytes")
            if isinstance(value, str) and value in written:
                assert key == "output", f"dlkit {name} names what it wrote {key!r}"
        if len(written) == 1:
            assert doc.get("output") == next(iter(written)), f"dlkit {name} has no output"
    verify = json.loads(dlkit("verify", db_path, "--json").stdout)
    info = json.loads(dlkit("info", db_path, "--json").stdout)
    assert (verify["num_files"], verify["size_bytes"]) == (info["num_files"], info["size_bytes"])


def test_split_ratios_are_printed_in_the_syntax_they_are_given_in():
    from dlkit.sampler.splits import SplitRatios

    assert str(SplitRatios.parse("0.7,0.2,0.1")) == "0.7,0.2,0.1"


@pytest.mark.parametrize("argv, renamed", [
    (["sample", "{m}", "-d", "ds", "-s", "eval", "--steps", "1"], "--stage"),
    (["sample", "{m}", "-d", "ds", "-seval", "--steps", "1"], "--stage"),
    (["bench", "--workload", "gather", "--steps", "4", "--rows", "512", "--no-torch", "-q",
      "-s", "eval"], "--stage"),
])
def test_old_short_flags_still_work_with_a_note(dlkit, tmp_path, argv, renamed):
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps(manifest_dict(70, 8, 16)))
    result = dlkit(*[a.replace("{m}", str(manifest)) for a in argv])
    assert result.returncode == 0, result.stderr
    assert f"note: -s is the old spelling of {renamed}" in result.stderr
    if argv[0] == "sample":
        assert result.stdout == "0 1 2 3 4 5 6 7\n"  # eval: in order


def test_preprocess_old_schema_flag_still_works(dlkit, tmp_path):
    result = dlkit("preprocess", EXAMPLE, tmp_path / "db", "-s", EXAMPLE / "dlkit.toml", "-q",
                   "--no-fsync")
    assert result.returncode == 0 and "old spelling of --schema" in result.stderr


def test_bench_picks_the_train_dataset_or_asks(dlkit, tmp_path):
    doc = manifest_dict(4096, 64, 512, key="x/test")
    doc["datasets"]["x/train"] = dict(doc["datasets"]["x/test"])
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps(doc))
    result = dlkit("bench", "--manifest", manifest, "--steps", 4, "--no-torch", "--json", "-q")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["workload"]["dataset"] == "x/train"
    doc["datasets"]["y/train"] = dict(doc["datasets"]["x/test"])
    manifest.write_text(json.dumps(doc))
    result = dlkit("bench", "--manifest", manifest, "--steps", 4, "--no-torch", "-q")
    assert result.returncode == 2
    assert "name one with --dataset: x/train, y/train" in result.stderr


def test_show_json_values_are_typed_with_one_time_format(dlkit, db_path):
    from dlkit.db import open_database

    result = dlkit("show", db_path, "--task", "review_rating", "--anchor", 3, "--json")
    view = json.loads(result.stdout)
    iso = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$"
    import re

    assert re.match(iso, view["observation_time"])
    assert all(re.match(iso, row["time"]) or row["time"] == "-" for row in view["rows"])
    by_stype = defaultdict(list)
    for row in view["rows"]:
        for cell in row["cells"]:
            if not (cell["is_target"] or cell["is_hidden"]):
                by_stype["null" if cell["is_null"] else cell["stype"]].append(cell["value"])
    assert by_stype["numeric"] and all(type(v) is float for v in by_stype["numeric"])
    assert by_stype["boolean"] and all(type(v) is bool for v in by_stype["boolean"])
    assert all(re.match(iso, v) for v in by_stype["timestamp"])
    assert all(v is None for v in by_stype["null"])
    assert type(view["target"]) is float  # the review's rating
    with open_database(db_path) as db:  # the seed row's key, as the database holds it
        assert view["rows"][0]["key"] == db.table("reviews").key(3)
