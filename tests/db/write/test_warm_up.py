"""The build's kernel warm-up calls every kernel it names with the arguments they take now."""

from __future__ import annotations

import threading

from dlkit.db.write.embed import load_embedder
from dlkit.db.write.writer import _warm_up


def test_the_warm_up_calls_every_kernel_without_error():
    done = threading.Event()
    _warm_up(load_embedder(None), done, strict=True)  # raises if a call no longer fits
    assert done.is_set()
