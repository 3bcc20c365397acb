"""The one exception hierarchy of dlkit.

Every error a user can cause is a :class:`DlkitError` with a stable ``code``. Subclasses also
inherit the builtin that matches their meaning (``ValueError``, ``LookupError``, ...), so
callers that only know Python's builtins still catch them sensibly. The CLI maps each class to
an exit code in one place (``dlkit.cli.app``).

Messages say what was given and what was expected, and name the file when there is one.
"""

from __future__ import annotations

from typing import Any


class DlkitError(Exception):
    """Root of every error dlkit raises on purpose."""

    code: str = "DLKIT_ERROR"

    def __init__(self, message: str, *, path: object | None = None, code: str | None = None):
        # one line, always: a library's message quoted in it may run to several
        # (pyarrow's "...: Invalid data\nDeserializing page header failed.")
        self.message = " ".join(line.strip() for line in str(message).splitlines()
                                if line.strip()) if "\n" in str(message) else message
        self.path = None if path is None else str(path)
        if code is not None:
            self.code = code
        super().__init__(self.__str__())

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class InvalidArgumentError(DlkitError, ValueError):
    """An argument given to a library call or command is out of its domain."""

    code = "INVALID_ARGUMENT"


class OutputError(DlkitError, OSError):
    """An output could not be written (the previous content, if any, is left untouched)."""

    code = "OUTPUT_ERROR"


# --- NextBatch_v2 failure codes (docs/nextbatch_v2.md, "One call": Validation) ----------


class NextBatchError(DlkitError):
    """A NextBatch_v2 failure. Raised before any index of the failing call is emitted.

    ``record`` is the spec's failure record: ``failure_code``, ``failure_operator``,
    ``dataset_key`` and ``data_replay_t`` (hex, or ``None`` when the inputs were too invalid to
    compute it).
    """

    code = "NEXTBATCH_FAILURE"

    def __init__(self, message: str, *, record: dict[str, Any] | None = None, **kwargs: Any):
        super().__init__(message, **kwargs)
        self.record = {"failure_code": self.code, "failure_operator": "UML_OS.Data.NextBatch_v2"}
        if record:
            self.record.update(record)


class InvalidDatasetKeyError(NextBatchError, LookupError):
    code = "INVALID_DATASET_KEY"


class InvalidStageTypeError(NextBatchError, ValueError):
    code = "INVALID_STAGE_TYPE"


class BatchSizeInconsistentError(NextBatchError, ValueError):
    code = "BATCH_SIZE_INCONSISTENT"


class CardinalityMismatchError(NextBatchError, ValueError):
    code = "CARDINALITY_MISMATCH"


class GlobalPositionExceedsCardinalityError(NextBatchError, IndexError):
    code = "GLOBAL_POSITION_EXCEEDS_CARDINALITY"


class ContractViolationError(NextBatchError, ArithmeticError):
    code = "CONTRACT_VIOLATION"


# --- malformed inputs -------------------------------------------------------------------


class InputFormatError(DlkitError, ValueError):
    """A file given to dlkit is malformed: the message names the file and the problem."""

    code = "INPUT_INVALID"


class ManifestError(InputFormatError):
    code = "MANIFEST_INVALID"


class CheckpointError(InputFormatError):
    code = "CHECKPOINT_INVALID"


class TraceError(InputFormatError):
    code = "TRACE_INVALID"


class GoldenFileError(InputFormatError):
    code = "GOLDEN_INVALID"


class SchemaError(InputFormatError):
    """The relational schema (``dlkit.toml``) or the Parquet input disagrees with it."""

    code = "SCHEMA_INVALID"


class DataError(InputFormatError):
    """Relational input data breaks a rule: duplicate/null keys, dangling references, ..."""

    code = "DATA_INVALID"


class DatabaseError(InputFormatError):
    """A preprocessed database directory is corrupt, truncated or inconsistent."""

    code = "DATABASE_CORRUPT"


# --- verification verdicts --------------------------------------------------------------


class VerificationError(DlkitError):
    """A check ran to completion and found a difference (replay, golden, verify)."""

    code = "VERIFICATION_FAILED"


class ReplayMismatchError(VerificationError):
    code = "REPLAY_MISMATCH"


class GoldenMismatchError(VerificationError):
    code = "GOLDEN_MISMATCH"


# --- runtime --------------------------------------------------------------------------


class SourcesFailedError(DlkitError):
    """Sources of a collection failed to build (each is named in the run's report); the
    others were built."""

    code = "SOURCES_FAILED"


class SamplerShutdown(DlkitError, RuntimeError):
    """The sampler or prefetcher was shut down; no further batches will come."""

    code = "SAMPLER_SHUTDOWN"


class PrefetchError(DlkitError, RuntimeError):
    code = "PREFETCH_ERROR"


class MissingExtraError(DlkitError, ImportError):
    """An adapter (``dlkit.torch``, ``dlkit.jax``) was imported without its framework: the
    message names the extra that installs it."""

    code = "MISSING_EXTRA"


class SqlSourceError(DlkitError, OSError):
    """A SQL database (``dlkit import sql``) could not be reached or read: the message names
    the database (its URL, any password masked) and the problem."""

    code = "SQL_SOURCE_ERROR"


class SqlInputError(SqlSourceError, InputFormatError):
    """The SQL database itself is at fault, not the way to it: its file is missing or is no
    database, or a column holds what dlkit cannot read as one type. An input error (exit 5),
    as a malformed input file is; still a :class:`SqlSourceError` for callers catching those."""

    code = "SQL_INPUT_INVALID"


class TooManyOpenFilesError(DlkitError, OSError):
    """The process may open no more files (each mapped file of an open database holds a
    descriptor while its arrays live): the message names the file and the limit."""

    code = "TOO_MANY_OPEN_FILES"


class OutOfMemoryError(DlkitError, MemoryError):
    """The work asked for needs more memory than the machine gives (e.g. a micro-batch of
    billions of indices, which is materialised whole)."""

    code = "OUT_OF_MEMORY"
