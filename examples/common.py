"""The training examples' process plumbing, whatever the framework: no numpy, no model.

``train_torch.py``, ``train_jax.py`` and ``pretrain.py`` import this module (it sits beside
them), and so do the other shared modules. It holds

* the error boundary: :class:`UsageError` (a bad flag or variable) and :func:`run`, which
  makes it, any other ``dlkit`` error (a checkpoint is ``CHECKPOINT_INVALID``) or an
  interrupt one line on stderr and ``dlkit``'s exit code; logging to stderr (:func:`log`);
  a checkpoint's step against ``--steps`` (:func:`check_resume_step`);
* checkpoint files: a payload sealed with its SHA-256 (:func:`sealed`, :func:`unsealed`);
* the world of a torchrun launch (:func:`world_from_env`);
* the ``--record`` writer (:class:`Recorder`) and its strict JSON (:func:`json_line`).

Beside it: ``options.py`` (the command line), ``transforms.py`` (the batch as the models read
it) and ``metrics.py`` (losses, metrics, the baseline and the result line).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dlkit.errors import DlkitError, InvalidArgumentError, OutputError


class UsageError(InvalidArgumentError):
    """A bad flag or environment variable: ``error USAGE: ...``, exit 2, as in ``dlkit``."""

    code = "USAGE"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(main: Callable[[], int]) -> int:
    """Call ``main`` behind the error boundary of ``dlkit``'s own commands: an error is one
    line, ``error CODE: message``, with ``dlkit``'s exit code for it. SIGTERM unwinds like
    Ctrl-C (a checkpoint being written leaves no temporary file or lock behind) and both
    are ``error INTERRUPTED: ...``, exit 130, naming the last checkpoint written."""
    # the `dlkit` command's own boundary, reused: its exit codes, and its SIGTERM handler,
    # which raises KeyboardInterrupt so atomic writes remove their temporary files
    from dlkit.cli.app import INTERRUPTED_EXIT, exit_code_for
    from dlkit.interrupts import recording_commits, sigterm_as_interrupt

    program = Path(sys.argv[0]).name
    with recording_commits() as committed:
        try:
            with sigterm_as_interrupt():
                return main()
        except DlkitError as exc:
            print(f"error {exc.code}: {exc}", file=sys.stderr, flush=True)
            return exit_code_for(exc)
        except KeyboardInterrupt:
            done = (f"its last checkpoint: {committed[-1]} (--resume continues from it)"
                    if committed else "it wrote no checkpoint")
            print(f"error INTERRUPTED: {program} was interrupted; it left no temporary file; "
                  f"{done}", file=sys.stderr, flush=True)
            return INTERRUPTED_EXIT


def check_resume_step(checkpoint_step: int, steps: int, path: Path, flag: str = "--steps"
                      ) -> None:
    """A checkpoint taken after more steps than the run is to take is a mistake (resumed,
    the run would train nothing and report a model of another step count)."""
    if checkpoint_step > steps:
        raise InvalidArgumentError(
            f"{flag} {steps} is behind the checkpoint: {path} was taken after step "
            f"{checkpoint_step}; resume with {flag} {checkpoint_step} or more")


def json_line(record: Mapping[str, Any]) -> str:
    """``record`` as one line of strict JSON: a float that is not finite (a diverged loss)
    becomes null, never the bare ``NaN`` no JSON parser but Python's reads."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
             for k, v in record.items()}
    return json.dumps(clean, separators=(",", ":"), allow_nan=False)


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
    """``--record``: one JSON object per line, flushed as each step ends.

    A fresh run (``resumed_at`` None) starts the file anew. A run resumed from the checkpoint
    taken after step ``k`` first cuts the file to its lines of steps before ``k``: an
    interrupted run may have recorded steps its last checkpoint does not hold, which the
    resumed run takes again. Either way the file is replaced atomically (a temporary file
    renamed over it), then appended to."""

    def __init__(self, path: str | os.PathLike[str], resumed_at: int | None = None):
        from dlkit.atomic import atomic_write_bytes
        from dlkit.interrupts import scratch_outputs

        self.path = Path(path)
        kept = b"" if resumed_at is None else _lines_before(self.path, resumed_at)
        with scratch_outputs():  # not a checkpoint: an interrupt names those
            atomic_write_bytes(self.path, kept)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close)

    def write(self, record: Mapping[str, Any]) -> None:
        self._file.write(json_line(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _lines_before(path: Path, step: int) -> bytes:
    """The lines of the record ``path`` whose step is below ``step`` (none if there is no
    file); a line that is no JSON object with an integer step (cut short by a kill) goes."""
    try:
        lines = path.read_bytes().splitlines(keepends=True)
    except FileNotFoundError:
        return b""
    except OSError as exc:
        raise OutputError(f"cannot read the record to resume it: {exc.strerror or exc}",
                          path=path) from None
    kept = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        at = record.get("step") if isinstance(record, dict) else None
        if isinstance(at, int) and not isinstance(at, bool) and at < step and \
                line.endswith(b"\n"):
            kept.append(line)
    return b"".join(kept)
