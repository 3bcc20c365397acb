"""The preprocessed relational database: build (``preprocess``), open, verify.

See ``docs/database_format.md`` for the on-disk contract and the reader API. The public
names are imported on first use (:mod:`dlkit._lazy`): ``dlkit verify`` starts hashing the
files before the reader's kernels load numba.
"""

from typing import TYPE_CHECKING

from dlkit._lazy import lazy_attributes

if TYPE_CHECKING:
    from dlkit.db.write.embed import Embedder, HashedNgramEmbedder, load_embedder
    from dlkit.db.write.writer import PreprocessReport, Progress, preprocess
    from dlkit.db.format import NO_TIME, STYPE_NAMES
    from dlkit.db.read.reader import (
        ColumnData,
        Database,
        Failure,
        Graph,
        TableData,
        TaskData,
        check_database,
        open_database,
    )
    from dlkit.db.read.verify import VerifyReport, verify_database
    from dlkit.db.schema.spec import Schema, load_schema, parse_schema

# imported on first use: the reader's and writer's kernels load numba (see dlkit._lazy)
__getattr__, __dir__, __all__ = lazy_attributes(__name__, {
    "dlkit.db.write.embed": ("Embedder", "HashedNgramEmbedder", "load_embedder"),
    "dlkit.db.format": ("NO_TIME", "STYPE_NAMES"),
    "dlkit.db.read.reader": ("ColumnData", "Database", "Failure", "Graph", "TableData", "TaskData",
                        "check_database", "open_database"),
    "dlkit.db.schema.spec": ("Schema", "load_schema", "parse_schema"),
    "dlkit.db.read.verify": ("VerifyReport", "verify_database"),
    "dlkit.db.write.writer": ("PreprocessReport", "Progress", "preprocess"),
})
