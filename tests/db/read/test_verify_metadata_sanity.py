"""A metadata.json whose embedding widths disagree with the embedder's config, or that
claims absurd sizes, is refused by open_database and by verify."""

from __future__ import annotations

import pytest

from dlkit.db import open_database, verify_database
from dlkit.errors import DatabaseError
from tests.db.read.test_verify_content import meta_of, write_meta

EDITS = {
    "config dim narrower than the vectors": (
        "metadata.consistency", "the embedder's config says dim 32",
        lambda m: m["embeddings"]["config"].__setitem__("dim", 32)),
    "config dim not a number": (
        "metadata.consistency", "says dim '64'",
        lambda m: m["embeddings"]["config"].__setitem__("dim", "64")),
    "a 10 MB database id": (
        "metadata.schema", "database_id is 10,000,000 characters long",
        lambda m: m.__setitem__("database_id", "x" * 10_000_000)),
    "an empty database id": (
        "metadata.schema", "database_id is 0 characters long",
        lambda m: m.__setitem__("database_id", "")),
    "an absurd embedding width": (
        "metadata.schema", "text_dim is 1,000,000,000",
        lambda m: (m["embeddings"].__setitem__("text_dim", 10**9),
                   m["embeddings"]["config"].pop("dim"))),
}


@pytest.mark.parametrize("case", sorted(EDITS))
def test_absurd_or_inconsistent_metadata_is_refused(db, case):
    check, fragment, edit = EDITS[case]
    meta = meta_of(db)
    edit(meta)
    write_meta(db, meta)
    with pytest.raises(DatabaseError, match=check) as caught:
        open_database(db)
    assert fragment in str(caught.value)
    report = verify_database(db)
    assert not report.ok
    assert [(f.file, f.check) for f in report.failures] == [("metadata.json", check)]
    assert fragment in report.failures[0].message
