"""Text embedders: the default hashed character n-gram embedder and the plug-in interface.

An embedder turns strings into fixed-size vectors. ``dlkit preprocess`` uses one embedder for
three tables of the database, all float16 with the embedder's ``dim`` columns:

* ``text_embeddings.bin``: one row per distinct text value (row = global text id);
* ``column_embeddings.bin``: one row per feature column, embedding ``"<column> of <table>"``;
* ``categorical_embeddings.bin``: one row per category of every categorical column,
  embedding ``"<column> is <category>"`` (booleans as ``true``/``false``).

Plug-in interface (for a real sentence-embedding model)
-------------------------------------------------------
Any object with these members works::

    class MyEmbedder:
        name: str                      # identity, recorded in metadata.json
        dim: int                       # vector size
        def config(self) -> dict: ...  # JSON-able parameters (model name, revision, ...),
                                       # recorded in metadata.json so the database hash
                                       # changes when the model does
        def embed(self, texts: list[str]) -> numpy.ndarray: ...
            # [len(texts), dim] float16/float32, one row per text, same order;
            # must be deterministic (same texts -> same bytes) for reproducible databases

Pass it as ``preprocess(..., embedder=MyEmbedder())`` or on the command line as
``--embedder package.module:factory`` where ``factory(dim=...)`` returns the embedder
(``--embedding-dim`` is passed as ``dim``). Calls come in chunks of at most
:data:`EMBED_CHUNK` texts. An embedder may also provide ``embed_arrow(array)`` taking a
``pyarrow.LargeStringArray`` without nulls (the default does, to avoid Python strings).
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa

from dlkit.core.ngram import embed_ngrams
from dlkit.errors import InvalidArgumentError

EMBED_CHUNK = 8192
DEFAULT_DIM = 64


@runtime_checkable
class Embedder(Protocol):
    name: str
    dim: int

    def config(self) -> dict[str, Any]: ...

    def embed(self, texts: list[str]) -> np.ndarray: ...


class HashedNgramEmbedder:
    """Deterministic, download-free: signed hashing of character n-grams (``dlkit.core.ngram``)."""

    name = "hashed-char-ngram"

    def __init__(self, dim: int = DEFAULT_DIM, n_min: int = 2, n_max: int = 4, seed: int = 0):
        if not 1 <= dim <= 65536:
            raise InvalidArgumentError(f"embedding dim must lie in [1, 65536], got {dim}")
        if not 1 <= n_min <= n_max <= 16:
            raise InvalidArgumentError(f"need 1 <= n_min <= n_max <= 16, got {n_min}, {n_max}")
        if not 0 <= seed < 2**63:
            raise InvalidArgumentError(f"seed must lie in [0, 2^63), got {seed}")
        self.dim = dim
        self.n_min = n_min
        self.n_max = n_max
        self.seed = seed

    def config(self) -> dict[str, Any]:
        return {"dim": self.dim, "n_min": self.n_min, "n_max": self.n_max, "seed": self.seed,
                "hash": "fnv1a64-splitmix64", "lowercase": "ascii"}

    def embed_arrow(self, array: pa.Array) -> np.ndarray:
        array = array.cast(pa.large_string())
        n = len(array)
        out = np.zeros((n, self.dim), dtype=np.float32)
        if n:
            offsets = np.frombuffer(array.buffers()[1], dtype=np.int64)[array.offset:array.offset + n + 1]
            data_buf = array.buffers()[2]
            data = (np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None
                    else np.zeros(0, dtype=np.uint8))
            embed_ngrams(data, offsets, self.dim, self.n_min, self.n_max, self.seed, out)
        return out.astype(np.float16)

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.embed_arrow(pa.array(texts, type=pa.large_string()))


def embed_texts(embedder: Embedder, texts: list[str] | pa.Array) -> np.ndarray:
    """``[n, dim]`` float16 embeddings, checking the embedder's output shape."""
    n = len(texts)
    try:
        if isinstance(texts, pa.Array):
            if hasattr(embedder, "embed_arrow"):
                out = embedder.embed_arrow(texts)
            else:
                out = embedder.embed(texts.to_pylist())
        else:
            out = embedder.embed(list(texts))
        out = np.asarray(out)
    except MemoryError:
        raise
    except Exception as exc:  # a plug-in's own failure: nothing is written, say whose it is
        raise InvalidArgumentError(f"embedder {getattr(embedder, 'name', embedder)!r} failed: "
                                   f"{type(exc).__name__}: {exc}") from None
    if out.shape != (n, embedder.dim):
        raise InvalidArgumentError(
            f"embedder {embedder.name!r} returned shape {out.shape}, expected {(n, embedder.dim)}")
    if out.dtype != np.float16:
        out = out.astype(np.float16)
    return np.ascontiguousarray(out)


def load_embedder(spec: str | None, dim: int | None = None) -> Embedder:
    """The embedder named by ``spec``: None / ``hashed`` for the default, ``minilm`` for the
    sentence encoder of the ``text`` extra (:mod:`dlkit.db.write.sentence`), else
    ``module:factory``. ``dim`` None: the embedder's own width (64 for the default)."""
    if spec in (None, "", "hashed", HashedNgramEmbedder.name):
        return HashedNgramEmbedder(dim=DEFAULT_DIM if dim is None else dim)
    from dlkit.db.write.sentence import ALIASES, SentenceEmbedder

    if spec in ALIASES:
        return SentenceEmbedder(dim)
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise InvalidArgumentError(f"--embedder must be 'hashed', 'minilm' or 'module:factory', "
                                   f"got {spec!r}")
    dim = DEFAULT_DIM if dim is None else dim
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise InvalidArgumentError(f"cannot load embedder {spec!r}: {exc}") from None
    try:
        embedder: Embedder = factory(dim=dim)
    except MemoryError:
        raise
    except Exception as exc:  # a plug-in's own failure, reported as the argument's
        raise InvalidArgumentError(f"embedder {spec!r}: its factory failed: "
                                   f"{type(exc).__name__}: {exc}") from None
    check_embedder(embedder)
    return embedder


def check_embedder(embedder: Any) -> None:
    for member in ("name", "dim", "config", "embed"):
        if not hasattr(embedder, member):
            raise InvalidArgumentError(f"embedder {embedder!r} lacks {member!r} (see dlkit.db.write.embed)")
    if not isinstance(embedder.dim, int) or embedder.dim < 1:
        raise InvalidArgumentError(f"embedder dim must be a positive integer, got {embedder.dim!r}")
