"""Fault injection on the inputs of preprocess, verify, sample, replay and import relbench
(issue 28): random truncations, bit flips, zeroed and garbage blocks and wrong types, each
seeded. Whatever the damage, the command exits with a code of the documented set for its
kind of failure, and a failure is one line on stderr, never a traceback."""

from __future__ import annotations

import io
import json
import random
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dlkit.cli.app import main

REPO = Path(__file__).resolve().parents[2]
CASES = 20  # per command; every case is its own seed


def run_main(capsys, *argv: object) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in argv])
        raise SystemExit(0)
    _out, err = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 1), err


def damage_bytes(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    kind = rng.choice(["flip", "flips", "truncate", "zero", "garbage"])
    if not b:
        return b"\x00garbage"
    if kind == "flip":
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    elif kind == "flips":
        for _ in range(rng.randint(2, 20)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del b[rng.randrange(len(b)):]
    elif kind == "zero":
        i = rng.randrange(len(b))
        n = len(b[i:i + rng.choice([1, 8, 64, 512])])
        b[i:i + n] = bytes(n)
    else:
        i = rng.randrange(len(b))
        n = len(b[i:i + 16])
        b[i:i + n] = rng.randbytes(n)
    return bytes(b)


def retype_parquet(rng: random.Random, path: Path) -> None:
    """A wrong type: one column rewritten as text (or as a list), metadata kept."""
    table = pq.read_table(path)
    i = rng.randrange(table.num_columns)
    column = table.column(i)
    values = column.to_pylist()
    new = pa.array([None if v is None else [str(v)] for v in values]) if rng.random() < 0.3 \
        else pa.array([None if v is None else str(v) for v in values])
    table = table.set_column(i, table.field(i).name, new)
    pq.write_table(table.replace_schema_metadata(table.schema.metadata), path)


def retype_json(rng: random.Random, path: Path) -> None:
    """A wrong type: one value of the JSON document replaced by a string, list or number."""
    doc = json.loads(path.read_text())
    node = doc
    while isinstance(node, dict) and node:
        key = rng.choice(sorted(node))
        if not isinstance(node[key], dict) or rng.random() < 0.3:
            node[key] = rng.choice(["text", [1, 2], -1, 2**70, 1.5, None, {}])
            break
        node = node[key]
    path.write_text(json.dumps(doc))


def damage(rng: random.Random, root: Path, files: list[Path]) -> None:
    path = root / rng.choice(files)
    if rng.random() < 0.2 and path.suffix in (".parquet", ".json"):
        (retype_parquet if path.suffix == ".parquet" else retype_json)(rng, path)
    else:
        path.write_bytes(damage_bytes(rng, path.read_bytes()))


def check(status: int, err: str, allowed: set[int]) -> None:
    assert "Traceback" not in err, err
    assert status in allowed, (status, err)
    if status:
        lines = [line for line in err.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("error ")]
        assert len(errors) == 1 and lines[-1] == errors[0], err


def _copy(source: Path, tmp_path: Path) -> Path:
    root = tmp_path / "in"
    shutil.copytree(source, root, symlinks=True)
    return root


def _files(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    from dlkit.db import preprocess

    path = tmp_path_factory.mktemp("fault") / "db"
    preprocess(REPO / "fixtures" / "example_db", path, fsync=False)
    return path


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory):
    from tests.nextbatch.helpers import manifest_dict

    base = tmp_path_factory.mktemp("fault_sample")
    (base / "run.json").write_text(json.dumps(manifest_dict(300, 8, 16, seed=3)))
    from dlkit.nextbatch.export import OutputFormat, SampleRequest, run_sample

    request = SampleRequest(manifest_path=str(base / "run.json"), dataset_key="ds", rank=0,
                            world_size=1, steps=2, out=str(base / "i.txt"),
                            trace=str(base / "t.jsonl"), checkpoint_out=str(base / "c.ckpt"),
                            fmt=OutputFormat.TXT)
    run_sample(request, io.BytesIO())
    return base


@pytest.mark.parametrize("seed", range(CASES))
def test_preprocess(capsys, tmp_path, seed):
    rng = random.Random(seed)
    root = _copy(REPO / "fixtures" / "example_db", tmp_path)
    damage(rng, root, _files(root))
    check(*run_main(capsys, "preprocess", root, tmp_path / "out", "-q", "--no-fsync"), {0, 5})


@pytest.mark.parametrize("seed", range(CASES))
def test_import_relbench(capsys, tmp_path, seed):
    rng = random.Random(1000 + seed)
    root = _copy(REPO / "fixtures" / "relbench_fake", tmp_path)
    damage(rng, root, _files(root))
    check(*run_main(capsys, "import", "relbench", root, tmp_path / "out", "--task", "user-ltv",
                    "--task", "user-churn", "-q", "--no-fsync"), {0, 5})


@pytest.mark.parametrize("seed", range(CASES))
def test_verify(capsys, tmp_path, database, seed):
    rng = random.Random(2000 + seed)
    root = _copy(database, tmp_path)
    damage(rng, root, _files(root))
    check(*run_main(capsys, "verify", root, "-q"), {0, 3, 5})


@pytest.mark.parametrize("seed", range(CASES))
def test_sample_resume(capsys, tmp_path, sample_run, seed):
    rng = random.Random(3000 + seed)
    root = _copy(sample_run, tmp_path)
    damage(rng, root, [Path("run.json"), Path("c.ckpt")])
    check(*run_main(capsys, "sample", root / "run.json", "-d", "ds", "--steps", "2", "--resume",
                    root / "c.ckpt", "--out", root / "o.txt", "-q"), {0, 4, 5})


@pytest.mark.parametrize("seed", range(CASES))
def test_replay(capsys, tmp_path, sample_run, seed):
    rng = random.Random(4000 + seed)
    root = _copy(sample_run, tmp_path)
    damage(rng, root, [Path("run.json"), Path("t.jsonl")])
    check(*run_main(capsys, "replay", root / "t.jsonl", "-m", root / "run.json", "-q"),
          {0, 3, 4, 5})


def test_every_damaged_checkpoint_is_refused_by_sample_resume(capsys, tmp_path, sample_run):
    """A checkpoint is a run's bet: no damage to it resumes (exit 5, CHECKPOINT_INVALID)."""
    root = _copy(sample_run, tmp_path)
    good = (root / "c.ckpt").read_bytes()
    rng = random.Random(5)
    for _ in range(40):
        data = damage_bytes(rng, good)
        if data == good:
            continue
        (root / "c.ckpt").write_bytes(data)
        status, err = run_main(capsys, "sample", root / "run.json", "-d", "ds", "--steps", "1",
                               "--resume", root / "c.ckpt", "--out", root / "o.txt",
                               "--overwrite", "-q")
        assert status == 5 and err.startswith(f"error CHECKPOINT_INVALID: {root / 'c.ckpt'}: ")
        assert err.count("\n") == 1
