"""Arrow types to semantic types: which semantic types a column of each Arrow type family
may take, and which one inference picks."""

from __future__ import annotations

import pyarrow as pa

# Inference: a string column is categorical when it has at most this many distinct values
# and each value appears at least CATEGORICAL_MIN_REPEAT times on average; text otherwise.
CATEGORICAL_MAX_DISTINCT = 1000
CATEGORICAL_MIN_REPEAT = 2



def type_family(t: pa.DataType) -> str:
    """One of integer, float, decimal, boolean, string, timestamp, date, unsupported."""
    if pa.types.is_dictionary(t):
        return type_family(t.value_type)
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_decimal(t):
        return "decimal"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or _is_string_view(t):
        return "string"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_date(t):
        return "date"
    return "unsupported"


def _is_string_view(t: pa.DataType) -> bool:
    check = getattr(pa.types, "is_string_view", None)
    return bool(check and check(t))


# Which stypes each family may take (first one is the inferred default, except strings).
ALLOWED_STYPES: dict[str, tuple[str, ...]] = {
    "integer": ("numeric", "categorical", "boolean"),
    "float": ("numeric",),
    "decimal": ("numeric",),
    "boolean": ("boolean", "numeric", "categorical"),
    "string": ("categorical", "text"),
    "timestamp": ("timestamp",),
    "date": ("timestamp",),
}

KEY_FAMILIES = ("integer", "string")


def infer_stype(family: str, num_distinct: int | None = None, num_valid: int | None = None) -> str:
    """The inferred semantic type of a column of this Arrow type family.

    Strings need ``num_distinct`` (may be capped at ``CATEGORICAL_MAX_DISTINCT + 1``) and
    ``num_valid``: categorical when ``num_distinct <= CATEGORICAL_MAX_DISTINCT`` and
    ``num_distinct * CATEGORICAL_MIN_REPEAT <= num_valid``, text otherwise.
    """
    if family == "string":
        if num_distinct is None or num_valid is None:
            raise ValueError("string columns need num_distinct and num_valid")
        if (num_distinct <= CATEGORICAL_MAX_DISTINCT
                and num_distinct * CATEGORICAL_MIN_REPEAT <= num_valid):
            return "categorical"
        return "text"
    if family not in ALLOWED_STYPES:
        raise ValueError(f"no semantic type for {family}")
    return ALLOWED_STYPES[family][0]
