"""Composite primary and foreign keys: matched exactly, against plain-Python references."""

from __future__ import annotations

import ast
import json
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlkit.db import open_database, preprocess, verify_database
from dlkit.db.keys import decode_key, encode_key
from dlkit.db.write.composite import encode_keys
from dlkit.errors import DataError, SchemaError

from ..conftest import write_db

BASEBALL_TOML = """
[tables.Teams]
primary_key = ["yearID", "teamID"]
[tables.Batting]
primary_key = ["playerID", "yearID", "stint"]
[tables.Batting.foreign_keys]
team = { columns = ["yearID", "teamID"], table = "Teams" }
"""


def _baseball() -> dict[str, pa.Table]:
    teams = pa.table({"yearID": pa.array([1871, 1871, 1872], pa.int16()),
                      "teamID": ["BS1", "CH1", "BS1"], "W": [20, 19, 39]})
    batting = pa.table({
        "playerID": ["abercda01", "addybo01", "abercda01", "allisar01", "allisar01"],
        "yearID": pa.array([1871, 1871, 1872, 1872, 1872], pa.int64()),
        "stint": [1, 1, 1, 1, 2],
        "teamID": pa.array(["BS1", "CH1", "BS1", None, "XX9"]).dictionary_encode(),
        "H": [0, 32, 40, 11, 3]})
    return {"Teams": teams, "Batting": batting}


def test_baseball_teams_and_batting(tmp_path):
    write_db(tmp_path / "in", _baseball(), BASEBALL_TOML)
    report = preprocess(tmp_path / "in", tmp_path / "db", fsync=False, batch_rows=2)
    assert report.dangling == {"Batting.team": 1}
    assert any("foreign key 'team' (yearID, teamID): 1 dangling foreign key to "
               "Teams.(yearID, teamID) (first: row 4, value (1872, 'XX9'))" in w
               for w in report.warnings)
    with open_database(tmp_path / "db") as db:
        teams, batting = db.tables
        assert [teams.key(r) for r in range(3)] == [(1871, "BS1"), (1871, "CH1"), (1872, "BS1")]
        assert batting.key(4) == ("allisar01", 1872, 2)
        # row 3's teamID is null: no edge; row 4 dangles: no edge
        assert [db.graph.parents(3 + r).tolist() for r in range(5)] == [[0], [1], [2], [], []]
        assert [c.name for c in batting.columns] == ["H"]  # key columns are no features
    meta = json.loads((tmp_path / "db" / "metadata.json").read_text())
    t_meta, b_meta = meta["tables"]
    assert t_meta["primary_key"] == ["yearID", "teamID"]
    assert t_meta["primary_key_type"] == "composite"
    assert t_meta["primary_key_part_types"] == ["integer", "string"]
    assert b_meta["foreign_keys"] == [{
        "column": "team", "columns": ["yearID", "teamID"], "parent_table": "Teams",
        "num_edges": 3, "num_null": 1, "num_dangling": 1}]
    assert verify_database(tmp_path / "db").ok


def test_single_column_metadata_has_no_new_keys(tmp_path):
    toml = '[tables.a]\nprimary_key = "id"\n[tables.b]\nforeign_keys = { a_id = "a" }\n'
    write_db(tmp_path / "in", {"a": pa.table({"id": [1, 2]}),
                               "b": pa.table({"a_id": [2, 1, 3]})}, toml)
    preprocess(tmp_path / "in", tmp_path / "db", fsync=False)
    meta = json.loads((tmp_path / "db" / "metadata.json").read_text())
    a, b = meta["tables"]
    assert "primary_key_part_types" not in a and a["primary_key"] == "id"
    assert list(b["foreign_keys"][0]) == ["column", "parent_table", "num_edges", "num_null",
                                          "num_dangling"]


def test_duplicate_and_null_composite_keys_are_errors(tmp_path):
    tables = _baseball()
    teams = tables["Teams"]
    tables["Teams"] = pa.table({"yearID": [1871, 1872, 1871], "teamID": ["BS1", "BS1", "BS1"],
                                "W": [1, 2, 3]})
    write_db(tmp_path / "dup", tables, BASEBALL_TOML)
    with pytest.raises(DataError, match=r"table 'Teams', key \(yearID, teamID\): duplicate "
                                        r"primary key \(1871, 'BS1'\) \(rows 0 and 2\)"):
        preprocess(tmp_path / "dup", tmp_path / "db1", fsync=False)
    tables["Teams"] = teams.set_column(1, "teamID", pa.array(["BS1", None, "BS1"]))
    write_db(tmp_path / "null", tables, BASEBALL_TOML)
    with pytest.raises(DataError, match=r"key \(yearID, teamID\): null primary key at row 1"):
        preprocess(tmp_path / "null", tmp_path / "db2", fsync=False)


@pytest.mark.parametrize("toml, message", [
    ('[tables.T]\nprimary_key = []\n', "non-empty list"),
    ('[tables.T]\nprimary_key = ["a", "a"]\n', "names a column twice"),
    ('[tables.T]\nprimary_key = ["a", 3]\n', "non-empty list of column names"),
    ('[tables.T]\nprimary_key = ["a", "b"]\n[tables.C]\nforeign_keys = { a = "T" }\n',
     r"1 column\(s\) \['a'\], but the primary key \(a, b\) of table 'T' has 2"),
    ('[tables.T]\nprimary_key = "a"\n[tables.C.foreign_keys]\n'
     'x = { columns = ["a", "b"], table = "T" }\n', "2 column"),
    ('[tables.T]\nprimary_key = ["a", "b"]\n[tables.C.foreign_keys]\n'
     'x = { columns = ["a", "b"], parent = "T" }\n', "must be"),
    ('[tables.T]\nprimary_key = "a"\n[tables.C.foreign_keys]\n'
     'x = { columns = ["a"], table = "T" }\n', "of one column is written a = "),
    ('[tables.T]\nprimary_key = ["a", "b"]\n[tables.T.foreign_keys]\n'
     'x = { columns = ["a", "b"], table = "T" }\n', "cannot also be a foreign key"),
    ('[tables.T]\nprimary_key = ["a", "b"]\nexclude = ["b"]\n', "cannot be excluded"),
])
def test_malformed_composite_keys_are_one_schema_error(toml, message):
    from dlkit.db.schema.spec import parse_schema

    with pytest.raises(SchemaError, match=message):
        parse_schema(toml)


def test_composite_schema_renders_and_parses_back():
    from dlkit.db.schema.render import render_schema
    from dlkit.db.schema.spec import parse_schema

    schema = parse_schema(BASEBALL_TOML + '[tables.People]\nprimary_key = ["playerID"]\n'
                          '[tables.Fielding.foreign_keys]\nplayerID = "People"\n'
                          'team = { columns = ["yearID", "teamID"], table = "Teams" }\n')
    assert schema.table("People").primary_key == "playerID"  # a list of one is the column
    fielding = schema.table("Fielding")
    assert fielding.foreign_keys == (("playerID", "People"), ("team", "Teams"))
    assert fielding.fk_columns("team") == ("yearID", "teamID")
    assert fielding.key_column_set() == {"playerID", "yearID", "teamID"}
    text = render_schema(schema)
    assert 'primary_key = ["yearID", "teamID"]' in text
    assert 'team = { columns = ["yearID", "teamID"], table = "Teams" }' in text
    assert parse_schema(text) == schema


# --- the encoding against its plain-Python reference ---------------------------------------

_part = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=6))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_encode_keys_matches_the_python_encoding(data):
    families = tuple(data.draw(st.lists(st.sampled_from(["integer", "string"]), min_size=1,
                                        max_size=4)))
    n = data.draw(st.integers(0, 12))
    columns = []
    for family in families:
        value = st.integers(-(2**63), 2**63 - 1) if family == "integer" else st.text(max_size=5)
        columns.append(data.draw(st.lists(st.one_of(st.none(), value), min_size=n, max_size=n)))
    arrays = [pa.array(c, pa.int64() if f == "integer" else pa.string())
              for c, f in zip(columns, families)]
    enc = encode_keys(arrays, families, "t")
    for r in range(n):
        row = tuple(c[r] for c in columns)
        got = bytes(enc.data[enc.offsets[r]:enc.offsets[r + 1]])
        if any(v is None for v in row):
            assert not enc.valid[r] and got == b""
        else:
            assert enc.valid[r] and got == encode_key(row)
            assert decode_key(got, families) == row


@settings(max_examples=100, deadline=None)
@given(st.lists(_part, min_size=1, max_size=3), st.lists(_part, min_size=1, max_size=3))
def test_the_encoding_is_injective(a, b):
    """Equal bytes exactly when equal tuples (same part types): no false match."""
    families = tuple("string" if isinstance(v, str) else "integer" for v in a)
    if tuple("string" if isinstance(v, str) else "integer" for v in b) != families:
        return
    assert (encode_key(tuple(a)) == encode_key(tuple(b))) == (tuple(a) == tuple(b))


# --- random schemas against a plain-Python adjacency -----------------------------------------

@st.composite
def composite_schemas(draw):
    num_tables = draw(st.integers(1, 3))
    tables = []
    for t in range(num_tables):
        families = tuple(draw(st.lists(st.sampled_from(["integer", "string"]), min_size=2,
                                       max_size=3)))
        n = draw(st.integers(0, 15))
        small = [st.integers(-3, 3) if f == "integer" else st.sampled_from(["a", "b", "", "é"])
                 for f in families]
        keys = draw(st.lists(st.tuples(*small), min_size=n, max_size=n, unique=True))
        tables.append({"name": f"t{t}", "families": families, "keys": keys, "fks": []})
    for table in tables:
        n = len(table["keys"])
        for k in range(draw(st.integers(0, 2))):
            parent = tables[draw(st.integers(0, num_tables - 1))]
            pkeys = parent["keys"]
            dangling = tuple(9 if f == "integer" else "zz" for f in parent["families"])
            choices = [st.just(dangling), st.just(None)]
            if pkeys:
                choices.append(st.sampled_from(pkeys))
            values = draw(st.lists(st.one_of(*choices), min_size=n, max_size=n))
            # a null in one part only: no edge either
            values = [v if v is None or not draw(st.booleans()) or len(v) < 2
                      else (None,) + v[1:] for v in values]
            table["fks"].append((f"fk{k}", parent, values))
    return tables


def _materialise(root: Path, tables) -> None:
    parquet, toml = {}, []
    for table in tables:
        cols = {}
        for i, family in enumerate(table["families"]):
            typ = pa.int32() if family == "integer" else pa.string()
            cols[f"k{i}"] = pa.array([key[i] for key in table["keys"]], typ)
        toml.append(f'[tables.{table["name"]}]')
        toml.append(f"primary_key = {json.dumps(list(cols))}")
        fk_lines = []
        for name, parent, values in table["fks"]:
            parts = []
            for i, family in enumerate(parent["families"]):
                column = f"{name}_{i}"
                typ = pa.int64() if family == "integer" else pa.large_string()
                cols[column] = pa.array([None if v is None else v[i] for v in values], typ)
                parts.append(column)
            fk_lines.append(f"{name} = {{ columns = {json.dumps(parts)}, "
                            f"table = \"{parent['name']}\" }}")
        if fk_lines:
            toml.append(f'[tables.{table["name"]}.foreign_keys]')
            toml.extend(fk_lines)
        parquet[table["name"]] = pa.table(cols)
    write_db(root, parquet, "\n".join(toml) + "\n")


@settings(max_examples=30, deadline=None)
@given(composite_schemas())
def test_composite_graph_matches_python_adjacency(tables):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _materialise(root / "in", tables)
        report = preprocess(root / "in", root / "db", fsync=False, batch_rows=4)
        offsets, base = {}, 0
        for table in tables:
            offsets[table["name"]] = base
            base += len(table["keys"])
        parents: list[list[int]] = [[] for _ in range(base)]
        dangling = 0
        for table in tables:
            for _name, parent, values in table["fks"]:
                rows = {key: r for r, key in enumerate(parent["keys"])}
                for r, value in enumerate(values):
                    if value is None or any(v is None for v in value):
                        continue
                    if value not in rows:
                        dangling += 1
                        continue
                    parents[offsets[table["name"]] + r].append(offsets[parent["name"]] +
                                                               rows[value])
        assert sum(report.dangling.values()) == dangling
        with open_database(root / "db") as db:
            assert [db.graph.parents(v).tolist() for v in range(base)] == parents
            for t, table in enumerate(tables):
                td = db.tables[t]
                assert [td.key(r) for r in range(td.num_rows)] == table["keys"]
        assert verify_database(root / "db").ok


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["x", "y"])), min_size=2,
                max_size=8))
def test_a_repeated_tuple_is_a_clear_error(keys):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        table = pa.table({"a": [k[0] for k in keys], "b": [k[1] for k in keys]})
        write_db(root / "in", {"t": table}, '[tables.t]\nprimary_key = ["a", "b"]\n')
        seen: dict[tuple, int] = {}
        first_pair = None
        for r, key in enumerate(keys):
            if key in seen and first_pair is None:
                first_pair = (seen[key], r, key)
            seen.setdefault(key, r)
        if first_pair is None:
            preprocess(root / "in", root / "db", fsync=False)
            return
        with pytest.raises(DataError, match="duplicate primary key") as info:
            preprocess(root / "in", root / "db", fsync=False)
        value = info.value.message.split("duplicate primary key ")[1].split(" (rows")[0]
        assert keys.count(ast.literal_eval(value)) > 1
        assert not (root / "db").exists()


# --- verify: composite keys re-checked from their bytes --------------------------------------

@pytest.mark.parametrize("change, check", [
    # Teams' keys are (1871, "BS1"), (1871, "CH1"), (1872, "BS1"): make the second the first
    (lambda raw: raw.replace(b"CH1", b"BS1"), "key.unique"),
    # a string part's length that runs past the key's end
    (lambda raw: raw.replace(b"\x00\x00\x00\x03CH1", b"\x00\x00\x00\x04CH1"), "key.composite"),
    # a string part that is not UTF-8
    (lambda raw: raw.replace(b"CH1", b"C\xff1"), "key.composite"),
    ])
def test_verify_rechecks_composite_keys(tmp_path, change, check):
    from dlkit.db import check_database
    from dlkit.db.manifest import database_hash, hash_files, list_files, render_manifest

    write_db(tmp_path / "in", _baseball(), BASEBALL_TOML)
    db = tmp_path / "db"
    preprocess(tmp_path / "in", db, fsync=False)
    assert check_database(db) == []
    values = db / "tables" / "Teams" / "key.values"
    values.write_bytes(change(values.read_bytes()))
    file_map = hash_files(db, list_files(db))
    (db / "manifest.json").write_bytes(render_manifest(file_map, database_hash(file_map)))
    found = {(f.file, f.check) for f in check_database(db)}
    assert ("tables/Teams/key.values", check) in found


def test_composite_keys_spill_to_the_same_bytes(tmp_path):
    """Composite keys and their index in the memory budget: the same database, spilled."""
    rng = np.random.default_rng(5)
    n = 3000
    years, codes = rng.integers(1900, 2000, n), rng.choice(["BS1", "CH1", "NY2", "PH1"], n)
    seen, parent_rows = set(), []
    for r in range(n):
        if (int(years[r]), str(codes[r])) not in seen:
            seen.add((int(years[r]), str(codes[r])))
            parent_rows.append(r)
    teams = pa.table({"yearID": years[parent_rows], "teamID": codes[parent_rows],
                      "W": rng.integers(0, 100, len(parent_rows))})
    picks = rng.integers(0, len(parent_rows), 2 * n)
    batting = pa.table({"yearID": teams["yearID"].take(picks),
                        "teamID": pa.array(teams["teamID"].take(picks).to_pylist(),
                                           mask=rng.random(2 * n) < 0.05),
                        "H": rng.integers(0, 200, 2 * n)})
    toml = ('[tables.Teams]\nprimary_key = ["yearID", "teamID"]\n[tables.Batting.foreign_keys]\n'
            'team = { columns = ["yearID", "teamID"], table = "Teams" }\n')
    write_db(tmp_path / "in", {"Batting": batting, "Teams": teams}, toml)
    in_memory = preprocess(tmp_path / "in", tmp_path / "ram", fsync=False, batch_rows=500)
    spilled = preprocess(tmp_path / "in", tmp_path / "spill", fsync=False, batch_rows=500,
                         memory_budget=0)
    assert spilled.spilled_bytes > 0
    assert spilled.database_hash == in_memory.database_hash
    with open_database(tmp_path / "spill") as db:
        teams_t, batting_t = db.tables
        row_of = {teams_t.key(r): teams_t.row_offset + r for r in range(teams_t.num_rows)}
        for r in range(0, 2 * n, 97):
            team = batting["teamID"][r].as_py()
            want = [] if team is None else [row_of[(batting["yearID"][r].as_py(), team)]]
            assert db.graph.parents(batting_t.row_offset + r).tolist() == want


def test_notes_with_control_characters_stay_comments():
    from dlkit.db.schema.render import render_schema
    from dlkit.db.schema.spec import parse_schema

    schema = parse_schema(BASEBALL_TOML)
    text = render_schema(schema, {("Teams", "(yearID, teamID)"): "why\nnot = 1"},
                         table_notes={"Batting": ["a\rb\nc = 2"]})
    assert parse_schema(text) == schema
    assert "# why\\x0anot = 1" in text and "# a\\x0db\\x0ac = 2" in text


def test_a_composite_foreign_key_may_be_named_after_a_key_column_not_a_feature(tmp_path):
    tables = _baseball()
    named_as_part = BASEBALL_TOML.replace("team = {", "teamID = {")
    write_db(tmp_path / "ok", tables, named_as_part)
    report = preprocess(tmp_path / "ok", tmp_path / "db", fsync=False)
    assert report.dangling == {"Batting.teamID": 1}
    assert verify_database(tmp_path / "db").ok
    write_db(tmp_path / "bad", tables, BASEBALL_TOML.replace("team = {", "H = {"))
    with pytest.raises(SchemaError, match="foreign key 'H': a composite foreign key's name "
                                          "cannot be a feature column"):
        preprocess(tmp_path / "bad", tmp_path / "db2", fsync=False)
