"""The preprocessed relational database: build (``preprocess``), open, verify.

See ``docs/database_format.md`` for the on-disk contract and the reader API.
"""

from dlkit.db.embed import Embedder, HashedNgramEmbedder, load_embedder
from dlkit.db.format import NO_TIME, STYPE_NAMES
from dlkit.db.reader import (
    ColumnData,
    Database,
    Failure,
    Graph,
    TableData,
    TaskData,
    check_database,
    open_database,
)
from dlkit.db.schema import Schema, load_schema, parse_schema
from dlkit.db.verify import VerifyReport, verify_database
from dlkit.db.writer import PreprocessReport, Progress, preprocess

__all__ = [
    "NO_TIME", "STYPE_NAMES", "ColumnData", "Database", "Embedder", "Failure", "Graph",
    "HashedNgramEmbedder", "PreprocessReport", "Progress", "Schema", "TableData", "TaskData",
    "VerifyReport", "check_database", "load_embedder", "load_schema", "open_database",
    "parse_schema", "preprocess", "verify_database",
]
