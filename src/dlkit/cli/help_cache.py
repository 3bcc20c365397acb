"""``--help`` as rendered last time, when nothing it depends on has changed.

Rendering help costs typer and rich about a quarter of a second (importing them, then laying
out the panels): many times what the answer costs once rendered. The text is a function of the
argument words, the environment (terminal width, colour settings), whether standard output is a
terminal, the interpreter, and the code that renders it. So each rendering is kept in
``$XDG_CACHE_HOME/dlkit/help/`` (default ``~/.cache``) and printed again while all of those are
the same:

- an entry is found by a hash of the words, the environment, the terminal and the interpreter,
  and holds them in full (a hash collision is a miss, not another command's help);
- it lists every module file that took part in the rendering (dlkit's, typer's, rich's, the
  standard library's) with its size and modification time: editing, upgrading or removing any
  of them makes it a miss;
- it carries the SHA-256 of its text: a changed byte is a miss.

A miss renders the help as before and writes the entry atomically (a temporary file renamed
over it). A cache that cannot be read or written is never an error: the help is rendered and
printed as if there were none. ``DLKIT_HELP_CACHE=0`` turns it off. Only standard-library
modules are imported here: a hit loads neither typer nor rich.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

SWITCH = "DLKIT_HELP_CACHE"
FORMAT = 1
MAX_ENTRIES = 64  # renderings kept; the oldest go first
HELP_WORDS = ("-h", "--help")
# Variables that differ between two shells started the same way and no help reads
_VOLATILE = frozenset({"_", "OLDPWD", "SHLVL"})


def is_help_request(words: Sequence[str]) -> bool:
    """``dlkit``, ``dlkit --help`` or ``dlkit COMMAND [SUBCOMMAND] --help``: words that only
    ask for help. Anything else (a flag before ``--help``, an argument) runs as usual."""
    if not words:
        return True
    *path, last = words
    return last in HELP_WORDS and all(w[:1].isalpha() and w.replace("-", "").isalnum()
                                      for w in path)


def enabled(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    return environ.get(SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir(environ: dict[str, str] | os._Environ[str] = os.environ) -> str:
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dlkit", "help")


def _terminal_sizes() -> list[list[int] | None]:
    """What rich reads to choose a width: the size of whichever standard stream is a terminal."""
    sizes: list[list[int] | None] = []
    for fd in (0, 1, 2):
        try:
            sizes.append(list(os.get_terminal_size(fd)))
        except OSError:
            sizes.append(None)
    return sizes


def request_key(words: Sequence[str]) -> dict[str, Any]:
    """Everything the rendered text may depend on, besides the code that renders it."""
    from dlkit import __version__

    try:
        stdout_is_terminal = os.isatty(sys.stdout.fileno())
    except (AttributeError, ValueError, OSError):
        stdout_is_terminal = False
    return {
        "format": FORMAT,
        "words": list(words),
        "dlkit": __version__,
        "python": [sys.executable, sys.version],
        "terminal": [stdout_is_terminal, _terminal_sizes()],
        "cwd": os.getcwd(),
        "environ": sorted([k, v] for k, v in os.environ.items() if k not in _VOLATILE),
    }


def _entry_path(key: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return os.path.join(cache_dir(), f"{digest[:32]}.help")


def _file_stamp(path: str) -> list[Any] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [path, st.st_size, st.st_mtime_ns]


def _module_files() -> list[str]:
    files = {getattr(m, "__file__", None) for m in list(sys.modules.values())}
    return sorted(f for f in files if isinstance(f, str))


def lookup(key: dict[str, Any]) -> tuple[bytes, int] | None:
    """The text and exit status rendered for ``key``, when every check holds; else None."""
    try:
        with open(_entry_path(key), "rb") as f:
            data = f.read()
        header_bytes, _, text = data.partition(b"\n")
        header = json.loads(header_bytes)
        if (not isinstance(header, dict) or header.get("key") != key
                or header.get("sha256") != hashlib.sha256(text).hexdigest()
                or not isinstance(header.get("status"), int)
                or not isinstance(header.get("files"), list) or not header["files"]):
            return None
        for stamp in header["files"]:
            if not isinstance(stamp, list) or not stamp or _file_stamp(str(stamp[0])) != stamp:
                return None
        return text, header["status"]
    except (OSError, ValueError, RecursionError):  # unreadable, or not JSON: a miss
        return None


def store(key: dict[str, Any], text: bytes, status: int) -> None:
    """Keep ``text`` for ``key``; any failure leaves the cache as it was."""
    stamps = [s for s in map(_file_stamp, _module_files()) if s is not None]
    header = {"key": key, "status": status, "sha256": hashlib.sha256(text).hexdigest(),
              "files": stamps}
    import tempfile

    target = _entry_path(key)
    directory = os.path.dirname(target)
    try:
        os.makedirs(directory, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=directory, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(json.dumps(header).encode() + b"\n" + text)
            os.replace(temp, target)
        except BaseException:
            os.unlink(temp)
            raise
        _prune(directory)
    except OSError:
        pass


def _prune(directory: str) -> None:
    with os.scandir(directory) as scan:
        entries = sorted((e for e in scan if e.name.endswith(".help")),
                         key=lambda e: e.stat().st_mtime_ns)
    for old in entries[:-MAX_ENTRIES]:
        try:
            os.unlink(old.path)
        except FileNotFoundError:  # another dlkit pruned it first
            pass


class _Captured(io.TextIOBase):
    """Standard output while help renders: kept in memory (text and bytes alike, as click
    writes both), but a terminal when the real one is (rich chooses colours and width from
    that)."""

    def __init__(self, real: Any):
        self._real = real
        self.buffer = io.BytesIO()

    def write(self, s: str | bytes) -> int:
        self.buffer.write(s if isinstance(s, bytes) else s.encode(self.encoding, "replace"))
        return len(s)

    def isatty(self) -> bool:
        try:
            return bool(self._real.isatty())
        except (AttributeError, ValueError, OSError):
            return False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._real, "encoding", None) or "utf-8"

    def fileno(self) -> int:  # no descriptor: nothing waits for a reader while rendering
        raise io.UnsupportedOperation("fileno")


class _Watched(io.TextIOBase):
    """Standard error while help renders: passed through, noting whether anything came."""

    def __init__(self, real: Any):
        self._real = real
        self.written = False

    def write(self, s: str) -> int:
        self.written = self.written or bool(s)
        return int(self._real.write(s))

    def flush(self) -> None:
        self._real.flush()

    def isatty(self) -> bool:
        return bool(self._real.isatty())

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._real, "encoding", None) or "utf-8"

    def fileno(self) -> int:
        return int(self._real.fileno())


def render(run: Callable[[list[str]], None], words: list[str]) -> tuple[bytes, int, bool]:
    """Run ``run(words)`` with standard output captured: its text, exit status, and whether
    it wrote to standard error (an error, not help: never kept)."""
    out, err = _Captured(sys.stdout), _Watched(sys.stderr)
    real_out, real_err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    status = 0
    try:
        run(words)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.stdout, sys.stderr = real_out, real_err
    return out.buffer.getvalue(), status, err.written


def answer(run: Callable[[list[str]], None], words: list[str]) -> tuple[bytes, int]:
    """The help ``words`` ask for and its exit status, from the cache or rendered by ``run``
    (kept for next time when it rendered cleanly)."""
    if not enabled():
        return render(run, words)[:2]
    key = request_key(words)
    found = lookup(key)
    if found is not None:
        return found
    text, status, wrote_error = render(run, words)
    if status in (0, 2) and not wrote_error:
        store(key, text, status)
    return text, status
