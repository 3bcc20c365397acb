"""The schema's names: drafts render any column name as TOML that reads back the same, and
table/task names that would not stay one directory level are refused."""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlkit.db.format import path_name_problem
from dlkit.db.schema.render import toml_key, toml_str

# Parquet names are UTF-8: any text but lone surrogates
NAMES = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20)


@given(NAMES, NAMES)
def test_any_name_renders_as_toml_that_reads_back(key, value):
    assert tomllib.loads(f"{toml_key(key)} = {toml_str(value)}\n") == {key: value}


@pytest.mark.parametrize("name", ["orders", "a.b-c_1", "_x", "9"])
def test_safe_names_pass(name):
    assert path_name_problem(name) is None


@pytest.mark.parametrize("name", ["orders\n", "a\nb", "", ".hidden", "-x", "a/b", "..", "é",
                                  "x" * 129])
def test_names_that_are_not_one_plain_directory_level_are_refused(name):
    assert path_name_problem(name) is not None


def test_a_database_name_longer_than_open_accepts_is_refused():
    from dlkit.db.metadata_records import MAX_DATABASE_ID
    from dlkit.db.schema.spec import parse_schema
    from dlkit.errors import SchemaError

    tables = '\n[tables.a]\nprimary_key = "id"\n'
    assert parse_schema(f'name = "{"x" * MAX_DATABASE_ID}"' + tables).name == "x" * 1024
    with pytest.raises(SchemaError, match="at most 1024"):
        parse_schema(f'name = "{"x" * (MAX_DATABASE_ID + 1)}"' + tables)


def test_a_database_name_with_a_slash_is_refused():
    # DATABASE_ID/TASK/SPLIT names a dataset: "a/b c" would make "a/b c/task/train" ambiguous
    from dlkit.db.schema.spec import parse_schema
    from dlkit.errors import SchemaError

    tables = '\n[tables.a]\nprimary_key = "id"\n'
    assert parse_schema('name = "shop b é"' + tables).name == "shop b é"
    with pytest.raises(SchemaError, match="name 'a/b c' holds '/'"):
        parse_schema('name = "a/b c"' + tables)
