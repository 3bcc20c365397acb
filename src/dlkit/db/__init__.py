"""The preprocessed relational database: build (``preprocess``), open, verify.

See ``docs/database_format.md`` for the on-disk contract and the reader API. The public
names are imported on first use (:mod:`dlkit._lazy`): ``dlkit verify`` starts hashing the
files before the reader's kernels load numba.

Its rooms import in one direction, each only the rooms below it (``tests/test_layering.py``):

1. the format, the modules directly in ``dlkit.db`` (``format``, ``metadata_records``,
   ``manifest``, ``keys``, ``task_rules``, ``time_units``, ``failures``, ...): what is on disk
   and its records;
2. ``schema`` (``dlkit.toml``: parse, render) and ``read`` (open and verify a database), side
   by side: neither imports the other;
3. ``write``: the preprocess pipeline, and schema inference from the source data it reads.

This namespace itself sits above them all.
"""

from typing import TYPE_CHECKING

from dlkit._lazy import lazy_attributes

if TYPE_CHECKING:
    from dlkit.db.format import NO_TIME as NO_TIME
    from dlkit.db.format import STYPE_NAMES as STYPE_NAMES
    from dlkit.db.read.reader import ColumnData as ColumnData
    from dlkit.db.read.reader import Database as Database
    from dlkit.db.read.reader import Failure as Failure
    from dlkit.db.read.reader import Graph as Graph
    from dlkit.db.read.reader import TableData as TableData
    from dlkit.db.read.reader import TaskData as TaskData
    from dlkit.db.read.reader import check_database as check_database
    from dlkit.db.read.reader import open_database as open_database
    from dlkit.db.read.verify import VerifyReport as VerifyReport
    from dlkit.db.read.verify import verify_database as verify_database
    from dlkit.db.schema.spec import Schema as Schema
    from dlkit.db.schema.spec import load_schema as load_schema
    from dlkit.db.schema.spec import parse_schema as parse_schema
    from dlkit.db.write.embed import Embedder as Embedder
    from dlkit.db.write.embed import HashedNgramEmbedder as HashedNgramEmbedder
    from dlkit.db.write.embed import load_embedder as load_embedder
    from dlkit.db.write.writer import PreprocessReport as PreprocessReport
    from dlkit.db.write.writer import Progress as Progress
    from dlkit.db.write.writer import preprocess as preprocess

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
