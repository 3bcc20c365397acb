"""The training examples' process plumbing, whatever the framework: no numpy, no model.

``train_torch.py``, ``train_jax.py`` and ``pretrain.py`` import this module (it sits beside
them), and so do the other shared modules. It holds

* the error boundary: :class:`UsageError` (a bad flag, variable or checkpoint) and
  :func:`run`, which makes it, or a ``dlkit`` error, one line on stderr and an exit code;
  logging to stderr (:func:`log`);
* checkpoint files: a payload sealed with its SHA-256 (:func:`sealed`, :func:`unsealed`);
* the world of a torchrun launch (:func:`world_from_env`);
* the ``--record`` writer (:class:`Recorder`).

Beside it: ``options.py`` (the command line), ``transforms.py`` (the batch as the models read
it) and ``metrics.py`` (losses, metrics, the baseline and the result line).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


class UsageError(Exception):
    """A bad flag, environment variable or checkpoint: one line on stderr, exit code 2."""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(main: Callable[[], int]) -> int:
    """Call ``main``; a ``UsageError`` or a ``dlkit`` error is one line and a non-zero exit."""
    try:
        return main()
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        from dlkit.errors import DlkitError

        if isinstance(exc, DlkitError):  # the code and exit status `dlkit` itself gives
            from dlkit.cli.app import exit_code_for

            print(f"error {exc.code}: {exc}", file=sys.stderr)
            return exit_code_for(exc)
        raise


# --- checkpoint files -----------------------------------------------------------------------

# A checkpoint file is its payload (torch.save's or np.savez's bytes), then this marker, then
# the SHA-256 of the payload: any byte changed, cut or added refuses the file whole, before
# anything in it is unpickled or loaded.
CHECKSUM_MARKER = b"\ndlkit-example-checkpoint-sha256\n"
_TRAILER = len(CHECKSUM_MARKER) + 32


def sealed(payload: bytes) -> bytes:
    """``payload`` with its checksum trailer: the bytes a checkpoint file holds."""
    return payload + CHECKSUM_MARKER + hashlib.sha256(payload).digest()


def unsealed(path: Path) -> bytes:
    """The payload of the checkpoint file ``path`` once its checksum matches, or a
    ``CheckpointError`` (``CHECKPOINT_INVALID``) naming the file."""
    from dlkit.errors import CheckpointError

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"cannot read: {exc.strerror or exc}", path=path) from None
    if len(data) < _TRAILER or data[-_TRAILER:-32] != CHECKSUM_MARKER:
        raise CheckpointError("no checksum trailer: truncated, or not a checkpoint written by "
                              "this example", path=path)
    payload = data[:-_TRAILER]
    if hashlib.sha256(payload).digest() != data[-32:]:
        raise CheckpointError("checksum mismatch: the file was changed or corrupted after it "
                              "was written", path=path)
    return payload


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (torch.load's run to a dozen)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --- the world, the record ------------------------------------------------------------------


def world_from_env() -> tuple[int, int]:
    """(rank, world size) from torchrun's $RANK / $WORLD_SIZE, else (0, 1)."""
    try:
        rank = int(os.environ.get("RANK") or 0)
        world = int(os.environ.get("WORLD_SIZE") or 1)
    except ValueError:
        raise UsageError(f"$RANK / $WORLD_SIZE must be integers, got "
                         f"{os.environ.get('RANK')!r} / {os.environ.get('WORLD_SIZE')!r}") \
            from None
    if world < 1 or not 0 <= rank < world:
        raise UsageError(f"$RANK {rank} is not in [0, $WORLD_SIZE {world})")
    return rank, world


class Recorder:
    """``--record``: one JSON object per line, appended and flushed as each step ends (a
    resumed run appends to the same file)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close)

    def write(self, record: Mapping[str, Any]) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()
