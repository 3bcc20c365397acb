"""The kernels' on-disk cache: keyed by every kernel source, switchable off, written where told.

The end-to-end checks run a copy of the package in fresh interpreters (the cache is chosen when
``dlkit.core.jit`` is imported) with the JIT on, whatever this process runs with.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dlkit
from dlkit.core.jit import (
    CACHE_SWITCH,
    cache_switch,
    choose_cache_dir,
    sources_key,
    user_cache_root,
)
from dlkit.errors import InvalidArgumentError

PACKAGE = Path(dlkit.__file__).resolve().parent

CALLEE = "from dlkit.core.jit import kernel\n\n@kernel\ndef bump(x):\n    return x + {step}\n"
CALLER = ("from dlkit.core._probe_callee import bump\nfrom dlkit.core.jit import kernel\n\n"
          "@kernel\ndef doubled_bump(x):\n    return 2 * bump(x)\n")
# Prints the result and the caller's cache statistics (hits: loaded from disk, misses: compiled).
RUN = """
import json
from dlkit.core._probe_caller import doubled_bump
from dlkit.core.jit import cache_dir
value = doubled_bump(3)
stats = doubled_bump.dispatcher.stats
print(json.dumps({"value": int(value), "hits": sum(stats.cache_hits.values()),
                  "misses": sum(stats.cache_misses.values()), "cache_dir": str(cache_dir())}))
"""


def _package_with_probes(root: Path, step: int) -> Path:
    """A copy of dlkit whose core holds a caller kernel and, in another file, its callee."""
    core = root / "src" / "dlkit" / "core"
    if not core.exists():
        shutil.copytree(PACKAGE, core.parent, ignore=shutil.ignore_patterns("__pycache__"))
        (core / "_probe_caller.py").write_text(CALLER)
    (core / "_probe_callee.py").write_text(CALLEE.format(step=step))
    return root / "src"


def _run(src: Path, cache_home: Path, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith("NUMBA_") and k != CACHE_SWITCH}
    environ.update(PYTHONPATH=str(src), XDG_CACHE_HOME=str(cache_home), **env)
    done = subprocess.run([sys.executable, "-c", RUN], env=environ, capture_output=True,
                          text=True, timeout=300, check=True)
    return json.loads(done.stdout)


def _cache_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.suffix in (".nbi", ".nbc")]


def test_a_changed_callee_in_another_file_reaches_its_caller(tmp_path):
    cache_home = tmp_path / "cache"
    src = _package_with_probes(tmp_path / "tree", step=1)
    first = _run(src, cache_home)
    assert (first["value"], first["misses"], first["hits"]) == (8, 1, 0)
    # The cache is in use: a fresh process loads the caller from disk instead of compiling.
    again = _run(src, cache_home)
    assert (again["value"], again["misses"], again["hits"]) == (8, 0, 1)
    # ... from the directory chosen under XDG_CACHE_HOME, and nowhere in the package.
    assert Path(first["cache_dir"]).parent == cache_home / "dlkit" / "numba"
    assert any("_probe_caller.doubled_bump" in p.name for p in _cache_files(cache_home))
    assert _cache_files(src) == []
    # Only the callee's file changes; the caller's file (all numba itself checks) does not.
    _package_with_probes(tmp_path / "tree", step=10)
    changed = _run(src, cache_home)
    assert changed["value"] == 2 * (3 + 10)
    assert changed["misses"] == 1
    assert changed["cache_dir"] != first["cache_dir"]


def test_the_switch_off_writes_no_cache_file(tmp_path):
    cache_home = tmp_path / "cache"
    src = _package_with_probes(tmp_path / "tree", step=1)
    for _ in range(2):
        result = _run(src, cache_home, **{CACHE_SWITCH: "0"})
        assert (result["value"], result["cache_dir"], result["hits"]) == (8, "None", 0)
    assert _cache_files(tmp_path) == []
    assert not (cache_home / "dlkit").exists()


def test_the_key_covers_every_kernel_file_and_the_versions_only(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    for package in (one, two):
        (package / "sub").mkdir(parents=True)
        (package / "a.py").write_text("x = 1\n")
        (package / "sub" / "b.py").write_text("y = 2\n")
        (package / "notes.txt").write_text("not a source\n")
    key = sources_key(one)
    assert re.fullmatch(r"[0-9a-f]{20}", key)
    assert sources_key(two) == key  # where the package lies does not matter
    (two / "notes.txt").write_text("changed\n")
    assert sources_key(two) == key
    (two / "sub" / "b.py").write_text("y = 3\n")
    assert sources_key(two) != key
    (two / "sub" / "b.py").write_text("y = 2\n")
    (two / "c.py").write_text("")
    assert sources_key(two) != key


def test_the_cache_falls_back_when_a_place_is_not_writable(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a directory cannot be made below a file, even by root
    fallback = tmp_path / "pkg" / "__pycache__" / "numba"
    assert choose_cache_dir("k1", [blocker / "numba", fallback]) == fallback / "k1"
    assert (fallback / "k1").is_dir()
    assert choose_cache_dir("k1", [blocker / "numba"]) is None


def test_the_user_cache_root_honours_xdg():
    assert user_cache_root({"XDG_CACHE_HOME": "/x/y"}) == Path("/x/y/dlkit/numba")
    assert user_cache_root({}) == Path.home() / ".cache" / "dlkit" / "numba"


@pytest.mark.parametrize(("value", "on"), [("1", True), ("0", False), (" Off", False),
                                           ("yes", True)])
def test_the_switch_reads_on_and_off(value, on):
    assert cache_switch({CACHE_SWITCH: value}) is on
    assert cache_switch({}) is True


def test_a_bad_switch_value_names_the_variable():
    with pytest.raises(InvalidArgumentError, match=r"DLKIT_NUMBA_CACHE='maybe': expected 1"):
        cache_switch({CACHE_SWITCH: "maybe"})


def test_only_the_kernel_package_defines_kernels():
    # The cache key hashes dlkit.core only; a kernel anywhere else could go stale again.
    decorator = re.compile(r"^\s*@(kernel|numba\.n?jit|n?jit)\b|numba\.n?jit\(", re.MULTILINE)
    outside = [p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py")
               if "core" not in p.relative_to(PACKAGE).parts[:1]
               and decorator.search(p.read_text())]
    assert outside == []
    assert decorator.search((PACKAGE / "core" / "philox.py").read_text())


# --- compiled on first use, interpreted when asked -----------------------------------------

# Imports every kernel module, runs a kernel that calls kernels in another module (the
# database checks' edge screen) interpreted, then compiled, and reports whether numba was
# loaded after each step.
LAZY = """
import importlib, json, pkgutil, sys
import numpy as np
import dlkit.core
from dlkit.core import integrity, jit
for module in pkgutil.iter_modules(dlkit.core.__path__):
    importlib.import_module("dlkit.core." + module.name)
imported = "numba" in sys.modules
offsets = np.array([0, 2, 3, 3], np.int64)
ids = np.array([1, 2, 2], np.int64)
keys = np.arange(1, 5, dtype=np.uint64)
times = np.zeros(3, np.int64)
with jit.interpreted():
    assert jit.is_interpreted() and jit.cheaper_interpreted(1, 2)
    interpreted = [int(s) for s in integrity.parent_side_sums(offsets, ids, times, 0, 3, keys)]
after_interpreted = "numba" in sys.modules
compiled = [int(s) for s in integrity.parent_side_sums(offsets, ids, times, 0, 3, keys)]
print(json.dumps({"imported": imported, "after_interpreted": after_interpreted,
                  "loaded": "numba" in sys.modules, "same": interpreted == compiled,
                  "cheaper_after": jit.cheaper_interpreted(1, 2)}))
"""


def test_kernels_load_numba_only_when_they_run_compiled():
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    done = subprocess.run([sys.executable, "-c", LAZY], env=environ, capture_output=True,
                          text=True, timeout=300, check=True)
    assert json.loads(done.stdout) == {"imported": False, "after_interpreted": False,
                                       "loaded": True, "same": True, "cheaper_after": False}


def test_interpreted_is_per_thread_and_nests():
    import threading

    from dlkit.core.jit import JIT_DISABLED, interpreted, is_interpreted

    seen = []
    with interpreted():
        with interpreted(False):  # an inner "no" leaves the outer mode as it is
            assert is_interpreted() is True
        thread = threading.Thread(target=lambda: seen.append(is_interpreted()))
        thread.start()
        thread.join()
    assert seen == [JIT_DISABLED]
    assert is_interpreted() is JIT_DISABLED


def test_a_kernel_pickles_as_itself():
    import pickle

    from dlkit.core import csr

    assert pickle.loads(pickle.dumps(csr.check_ids)) is csr.check_ids


def test_interpreting_stops_once_it_has_cost_numbas_set_up():
    """Rent or buy: small pieces of work add up, and once their shares of the set-up reach one
    the rest runs compiled (a fresh process: nothing interpreted or compiled before)."""
    code = ("import json\nfrom dlkit.core.jit import cheaper_interpreted as c\n"
            "print(json.dumps([c(600, 1000), c(300, 1000), c(200, 1000), c(50, 1000), "
            "c(2000, 1000), c(0, 0)]))")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    done = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True,
                          text=True, timeout=120, check=True)
    assert json.loads(done.stdout) == [True, True, False, True, False, False]


def test_a_signal_during_a_kernels_compile_waits_until_it_is_compiled(monkeypatch):
    """The first compiled call compiles: a signal inside numba's compiler would be lost or
    break it, so it is delivered once the compiled code is in place, before the run; a signal
    during a run (the first one included) is not held."""
    import os
    import signal

    from dlkit.core import csr

    kernel = csr.check_ids
    seen: list[str] = []

    class Dispatcher:  # stands for numba's: the signal lands mid-compile, or mid-run
        signal_in = "compile"

        def typeof_pyval(self, value):
            return type(value)

        def compile(self, signature):
            if self.signal_in == "compile":
                os.kill(os.getpid(), signal.SIGINT)
            seen.append("compiled")

        def __call__(self, *args):
            if self.signal_in == "run":
                os.kill(os.getpid(), signal.SIGINT)
            seen.append("ran")
            return -1

    fake = Dispatcher()
    monkeypatch.setattr(kernel, "_dispatcher", fake)
    monkeypatch.setattr(kernel, "_warm", False)
    with pytest.raises(KeyboardInterrupt):
        kernel(None, 0, 1)
    assert seen == ["compiled"] and kernel._warm is True  # held to the end of the compile
    seen.clear()
    monkeypatch.setattr(kernel, "_warm", False)
    fake.signal_in = "run"
    with pytest.raises(KeyboardInterrupt):
        kernel(None, 0, 1)
    assert seen == ["compiled"]  # the run is interrupted where the signal lands


@pytest.mark.parametrize(("value", "disabled"), [("1", True), ("0", False), ("", False),
                                                 ("true", False)])
def test_the_jit_switch_is_read_as_numba_reads_it(value, disabled):
    from dlkit.core.jit import _jit_disabled

    assert _jit_disabled({"NUMBA_DISABLE_JIT": value}) is disabled
    assert _jit_disabled({}) is False
