"""``dlkit view --serve``: the viewer's page on 127.0.0.1, each context computed when the page
asks for it (``GET /api/context?task=&split=&anchor=&S=&R=&W=``), so any seed and any sampler
setting can be looked at; a seed of another split than the one asked for is refused, so the
page never labels a context with the wrong split. One database, opened once; requests are answered one at a time (the
Sampler's batch builder is not shared between threads), and the server listens on the
loopback address only.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np

from dlkit.db.read.mapped import Database
from dlkit.errors import DlkitError
from dlkit.sampler.batch import ChildPolicy, ContextExamplePolicy
from dlkit.sampler.inspect import is_member
from dlkit.sampler.splits import SPLITS
from dlkit.viewer.context import Knobs, build_context, seeds_by_split

MAX_KNOB = 65536


def _int(query: dict[str, list[str]], name: str, low: int, high: int) -> int:
    try:
        value = int(query[name][0])
    except (KeyError, IndexError, ValueError):
        raise ValueError(f"{name} must be an integer") from None
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
    return value


def make_server(db: Database, page: str, *, port: int = 0, seed: int = 0, split_seed: int = 0,
                log: Callable[[str], None] | None = None) -> ThreadingHTTPServer:
    """A server on 127.0.0.1:``port`` (0: any free port) for ``page`` and its contexts
    (``split_seed``: the split rule's seed, for hash splits)."""
    lock = threading.Lock()
    tasks = {t.name for t in db.tasks}
    body = page.encode("utf-8")
    splits_of: dict[str, dict[str, np.ndarray]] = {}  # task -> split -> ascending anchors

    def check_split(task: str, split: str, anchor: int) -> None:
        """A seed of another split is refused; a row that is no seed at all is left to
        build_context, which says so."""
        if task not in splits_of:
            splits_of[task] = seeds_by_split(db, task, split_seed=split_seed)
        anchors = np.array([anchor], dtype=np.int64)
        if bool(is_member(anchors, splits_of[task][split])[0]):
            return
        other = next((s for s in SPLITS if bool(is_member(anchors, splits_of[task][s])[0])),
                     None)
        if other is not None:
            raise ValueError(f"row {anchor} is a seed of task {task!r}'s {other} split, "
                             f"not of its {split} split")

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, kind: str, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def _json(self, status: int, value: Any) -> None:
            self._send(status, "application/json", json.dumps(value, default=str).encode())

        def do_GET(self) -> None:  # noqa: N802 - the http.server interface
            url = urlsplit(self.path)
            if url.path in ("/", "/index.html"):
                self._send(HTTPStatus.OK, "text/html; charset=utf-8", body)
                return
            if url.path == "/favicon.ico":  # browsers ask on their own: no icon, no error
                self.send_response(HTTPStatus.NO_CONTENT)
                self.send_header("Cache-Control", "max-age=86400")
                self.end_headers()
                return
            if url.path != "/api/context":
                self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {url.path}"})
                return
            query = parse_qs(url.query)
            try:
                task = query.get("task", [""])[0]
                if task not in tasks:
                    raise ValueError(f"no task {task!r}")
                split = query.get("split", ["train"])[0]
                if split not in SPLITS:
                    raise ValueError(f"split must be one of {', '.join(SPLITS)}")
                anchor = _int(query, "anchor", 0, 2**62)
                knobs = Knobs(_int(query, "S", 1, MAX_KNOB), _int(query, "R", 1, MAX_KNOB),
                              _int(query, "W", 0, MAX_KNOB),
                              ChildPolicy.parse(query.get("P", ["uniform"])[0]),
                              _int(query, "E", 0, MAX_KNOB) if "E" in query else 0,
                              ContextExamplePolicy.parse(query.get("EP", ["recent"])[0]))
                epoch = _int(query, "epoch", 0, 2**62) if "epoch" in query else 0
                with lock:
                    check_split(task, split, anchor)
                    context = build_context(db, task, anchor, knobs, seed=seed, split=split,
                                            epoch=epoch)
            except (ValueError, DlkitError) as exc:
                self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
                return
            self._json(HTTPStatus.OK, context)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            if log is not None:
                log(format % args)

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


__all__ = ["make_server"]
