"""Help printed from dlkit's help cache is the help typer renders, byte for byte; anything
that changed (a module, a byte of the entry, the terminal width) is a miss that renders
afresh; errors are never kept; a cache that cannot be written still answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlkit.cli import help_cache

REPO = Path(__file__).resolve().parents[2]
DLKIT = [sys.executable, "-m", "dlkit"]
# typer alone, without dlkit's entry point and its cache: the independent rendering
DIRECT = [sys.executable, "-c", "import sys; from dlkit.cli.app import main; main(sys.argv[1:])"]


def _env(cache: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "XDG_CACHE_HOME": str(cache), "COLUMNS": "100", **extra}


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, env=env, cwd=REPO, timeout=300)


def _entries(cache: Path) -> list[Path]:
    directory = cache / "dlkit" / "help"
    return sorted(directory.glob("*.help")) if directory.is_dir() else []


@pytest.mark.parametrize("words", [["--help"], [], ["sample", "--help"], ["verify", "-h"],
                                   ["schema", "infer", "--help"], ["import", "sql", "--help"]])
def test_help_from_the_cache_is_the_help_typer_renders(tmp_path, words):
    env = _env(tmp_path)
    direct = _run([*DIRECT, *words], env)
    first = _run([*DLKIT, *words], env)
    assert len(_entries(tmp_path)) == 1  # the first answer was kept...
    second = _run([*DLKIT, *words], env)
    uncached = _run([*DLKIT, *words], _env(tmp_path / "off", DLKIT_HELP_CACHE="0"))
    assert b" Usage: dlkit" in direct.stdout
    for result in (first, second, uncached):  # ...and every answer is typer's, exit included
        assert (result.returncode, result.stdout, result.stderr) == (
            direct.returncode, direct.stdout, b"")
    assert direct.returncode == (2 if not words else 0)
    assert not (tmp_path / "off").exists()


def test_a_hit_loads_neither_typer_nor_rich(tmp_path):
    probe = ("import atexit, json, runpy, sys\n"
             "atexit.register(lambda: sys.stderr.write('MODULES ' + json.dumps(sorted("
             "m.split('.')[0] for m in sys.modules))))\n"
             "sys.argv = ['dlkit', 'sample', '--help']\n"
             "runpy.run_module('dlkit', run_name='__main__')\n")
    loaded = []
    for _ in range(2):
        result = _run([sys.executable, "-c", probe], _env(tmp_path))
        assert result.returncode == 0, result.stderr
        loaded.append(set(json.loads(result.stderr.decode().rsplit("MODULES ", 1)[1])))
    assert {"typer", "rich"} <= loaded[0]  # rendered the first time
    assert not {"typer", "rich", "click", "numpy"} & loaded[1]


def test_a_changed_byte_of_an_entry_is_a_miss_and_the_entry_is_written_again(tmp_path):
    env = _env(tmp_path)
    expected = _run([*DLKIT, "sample", "--help"], env).stdout
    (entry,) = _entries(tmp_path)
    data = bytearray(entry.read_bytes())
    data[-10] ^= 0x20  # a letter of the text changes case: the checksum no longer holds
    entry.write_bytes(bytes(data))
    again = _run([*DLKIT, "sample", "--help"], env)
    assert (again.returncode, again.stdout) == (0, expected)
    assert entry.read_bytes() != bytes(data)  # rendered and kept afresh


def test_a_changed_module_is_a_miss(tmp_path):
    """An entry lists every module file of its rendering; one that differs (here: its
    recorded modification time, as after an edit or an upgrade) makes the entry unusable."""
    env = _env(tmp_path)
    expected = _run([*DLKIT, "sample", "--help"], env).stdout
    (entry,) = _entries(tmp_path)
    header_bytes, _, text = entry.read_bytes().partition(b"\n")
    header = json.loads(header_bytes)
    files = [stamp[0] for stamp in header["files"]]
    assert any(f.endswith(os.path.join("dlkit", "cli", "sample.py")) for f in files)
    assert any(os.sep + "typer" + os.sep in f for f in files)
    assert any(os.sep + "rich" + os.sep in f for f in files)
    sample_py = next(i for i, f in enumerate(files) if f.endswith("sample.py"))
    header["files"][sample_py][2] -= 1
    entry.write_bytes(json.dumps(header).encode() + b"\n" + text.replace(b"Usage", b"Usagf"))
    again = _run([*DLKIT, "sample", "--help"], env)
    assert (again.returncode, again.stdout) == (0, expected)
    assert b"Usagf" not in entry.read_bytes()


def test_another_width_is_another_entry(tmp_path):
    narrow = _run([*DLKIT, "sample", "--help"], _env(tmp_path, COLUMNS="60"))
    wide = _run([*DLKIT, "sample", "--help"], _env(tmp_path, COLUMNS="100"))
    assert narrow.stdout != wide.stdout
    # COLUMNS sets the layout's width; off a terminal it widens only where a word would be
    # cut (sample's widest option row needs a little more than 60 columns)
    narrow_width = max(map(len, narrow.stdout.decode().splitlines()))
    assert narrow_width < max(map(len, wide.stdout.decode().splitlines()))
    assert "\u2026" not in narrow.stdout.decode()
    assert len(_entries(tmp_path)) == 2
    assert _run([*DLKIT, "sample", "--help"], _env(tmp_path, COLUMNS="60")).stdout == (
        narrow.stdout)


def test_an_error_is_never_kept(tmp_path):
    result = _run([*DLKIT, "samlpe", "--help"], _env(tmp_path))
    assert result.returncode == 2
    assert b"Did you mean 'sample'" in result.stderr and result.stdout == b""
    assert _entries(tmp_path) == []


def test_a_cache_that_cannot_be_written_still_answers(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    result = _run([*DLKIT, "sample", "--help"], _env(blocker))
    assert (result.returncode, result.stderr) == (0, b"")
    assert b"Usage: dlkit sample" in result.stdout


@pytest.mark.parametrize("cached", [False, True])
def test_help_left_unread_exits_141(tmp_path, cached):
    env = _env(tmp_path)
    if cached:
        _run([*DLKIT, "--help"], env)
        assert len(_entries(tmp_path)) == 1
    process = subprocess.Popen([*DLKIT, "--help"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env, cwd=REPO)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader leaves before reading anything
    assert (process.wait(timeout=300), process.stderr.read()) == (141, b"")


@pytest.mark.parametrize("words, expected", [
    ([], True), (["--help"], True), (["-h"], True), (["sample", "--help"], True),
    (["schema", "infer", "-h"], True), (["verify-golden", "--help"], True),
    (["sample"], False), (["sample", "x.json", "--help"], False),
    (["--debug", "--help"], False), (["sample", "--steps", "3", "--help"], False),
    (["../x", "--help"], False),
])
def test_only_words_that_ask_for_help_alone_are_help_requests(words, expected):
    assert help_cache.is_help_request(words) is expected


def test_the_cache_keeps_the_newest_entries_only(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for i in range(help_cache.MAX_ENTRIES + 6):
        key = help_cache.request_key([f"command{i}", "--help"])
        help_cache.store(key, f"help {i}\n".encode(), 0)
        os.utime(help_cache._entry_path(key), ns=(i * 10**9, i * 10**9))  # i: its age
    kept = _entries(tmp_path)
    assert len(kept) == help_cache.MAX_ENTRIES
    newest = help_cache.request_key([f"command{help_cache.MAX_ENTRIES + 5}", "--help"])
    assert help_cache.lookup(newest) == (f"help {help_cache.MAX_ENTRIES + 5}\n".encode(), 0)
    assert help_cache.lookup(help_cache.request_key(["command0", "--help"])) is None
