"""``[aggregates]`` in dlkit.toml: what parses, and one readable error for what does not."""

from __future__ import annotations

import pytest

from dlkit.db.schema.spec import AggregateSpec, parse_schema
from dlkit.errors import SchemaError

TABLES = """
[tables.users]
primary_key = "id"
[tables.orders]
foreign_keys = { user = "users" }
"""


def test_absent_asks_for_nothing():
    spec = parse_schema(TABLES).aggregates
    assert spec == AggregateSpec() and not spec.any


def test_counts_and_columns():
    spec = parse_schema(TABLES + '[aggregates]\ncounts = true\ncolumns = { orders = ["amount", '
                        '"paid"] }\n').aggregates
    assert spec.counts and spec.columns == (("orders", ("amount", "paid")),) and spec.any
    assert not spec.recency


def test_recency_alone_asks_for_cells():
    spec = parse_schema(TABLES + "[aggregates]\nrecency = true\n").aggregates
    assert spec == AggregateSpec(recency=True) and spec.any
    assert not parse_schema(TABLES + "[aggregates]\nrecency = false\n").aggregates.any


@pytest.mark.parametrize("section, message", [
    ("[aggregates]\ncount = true\n", "unknown key"),
    ("[aggregates]\ncounts = 1\n", "true or false"),
    ('[aggregates]\nrecency = "yes"\n', "aggregates.recency must be true or false"),
    ("[aggregates]\nrecent = true\n", r"unknown key\(s\) \['recent'\]; allowed: \['columns', "
                                        r"'counts', 'recency'\]"),
    ('[aggregates]\ncolumns = ["orders"]\n', "must be a table"),
    ('[aggregates]\ncolumns = { shops = ["a"] }\n', "not in the schema"),
    ('[aggregates]\ncolumns = { users = ["a"] }\n', "no foreign key"),
    ('[aggregates]\ncolumns = { orders = [] }\n', "non-empty list"),
    ('[aggregates]\ncolumns = { orders = ["a", "a"] }\n', "twice"),
    ('[aggregates]\ncolumns = { orders = ["user"] }\n', "key column"),
])
def test_malformed_sections_are_one_schema_error(section, message):
    with pytest.raises(SchemaError, match=message) as error:
        parse_schema(TABLES + section)
    assert "\n" not in str(error.value) and "dlkit.toml" in str(error.value)


def test_a_section_that_is_no_table_is_refused():
    with pytest.raises(SchemaError, match="must be a table"):
        parse_schema("aggregates = 3\n" + TABLES)
