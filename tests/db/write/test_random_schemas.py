"""Random relational schemas: the stored graph equals a plain-Python adjacency of the input."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from dlkit.db import NO_TIME, open_database, preprocess, verify_database

from ..conftest import write_db


@st.composite
def schemas(draw):
    num_tables = draw(st.integers(1, 4))
    tables = []
    for t in range(num_tables):
        n = draw(st.integers(0, 25))
        key_kind = draw(st.sampled_from(["int", "sparse", "str"]))
        if key_kind == "int":
            keys = draw(st.permutations(list(range(n))))
        elif key_kind == "sparse":
            keys = draw(st.lists(st.integers(-(2**62), 2**62), min_size=n, max_size=n, unique=True))
        else:
            keys = draw(st.lists(st.text(min_size=0, max_size=4), min_size=n, max_size=n, unique=True))
        has_time = draw(st.booleans())
        times = draw(st.lists(st.one_of(st.none(), st.integers(-5, 5)), min_size=n, max_size=n))
        tables.append({"name": f"t{t}", "n": n, "kind": key_kind, "keys": list(keys),
                       "time": times if has_time else None, "fks": []})
    for table in tables:
        for k in range(draw(st.integers(0, 3))):
            parent = draw(st.integers(0, num_tables - 1))
            pkeys = tables[parent]["keys"]
            string = tables[parent]["kind"] == "str"
            choices = [st.none(), st.sampled_from(pkeys)] if pkeys else [st.none()]
            choices.append(st.just("??") if string else st.just(2**63 - 1))  # dangling
            values = draw(st.lists(st.one_of(*choices), min_size=table["n"], max_size=table["n"]))
            table["fks"].append((f"fk{k}", parent, values))
    return tables


def _materialise(root: Path, tables) -> None:
    parquet = {}
    toml = []
    for table in tables:
        cols = {"key": pa.array(table["keys"], pa.string() if table["kind"] == "str" else pa.int64())}
        if table["time"] is not None:
            cols["when"] = pa.array(table["time"], pa.timestamp("us"))
        for column, parent, values in table["fks"]:
            string = tables[parent]["kind"] == "str"
            cols[column] = pa.array(values, pa.string() if string else pa.int64())
        parquet[table["name"]] = pa.table(cols) if cols else pa.table({})
        toml.append(f'[tables.{table["name"]}]\nprimary_key = "key"')
        if table["time"] is not None:
            toml.append('time_column = "when"')
        if table["fks"]:
            fks = ", ".join(f'{c} = "t{p}"' for c, p, _ in table["fks"])
            toml.append(f"foreign_keys = {{ {fks} }}")
    write_db(root, parquet, "\n".join(toml) + "\n")


@settings(max_examples=40)
@given(schemas())
def test_graph_matches_python_adjacency(tables):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _materialise(root / "in", tables)
        report = preprocess(root / "in", root / "db", fsync=False, batch_rows=7)
        # plain-Python reference over global row ids
        offsets, base = [], 0
        for table in tables:
            offsets.append(base)
            base += table["n"]
        row_time = []
        for table in tables:
            for r in range(table["n"]):
                t = table["time"][r] if table["time"] is not None else None
                row_time.append(NO_TIME if t is None else t)
        parents = [[] for _ in range(base)]
        dangling = 0
        for t, table in enumerate(tables):
            for column, parent, values in table["fks"]:
                where = {k: i for i, k in enumerate(tables[parent]["keys"])}
                for r, v in enumerate(values):
                    if v is None:
                        continue
                    if v not in where:
                        dangling += 1
                        continue
                    parents[offsets[t] + r].append((column, offsets[parent] + where[v]))
        # parents in foreign-key column order
        fk_order = {}
        for table in tables:
            for k, (column, _, _) in enumerate(table["fks"]):
                fk_order[(table["name"], column)] = k
        children = [[] for _ in range(base)]
        for v, lst in enumerate(parents):
            for _column, p in lst:
                children[p].append((row_time[v], v))
        assert sum(report.dangling.values()) == dangling
        with open_database(root / "db") as db:
            g = db.graph
            assert g.num_rows == base
            assert g.row_times.tolist() == row_time
            assert g.row_table.tolist() == [t for t, tb in enumerate(tables) for _ in range(tb["n"])]
            for v in range(base):
                assert g.parents(v).tolist() == [p for _c, p in parents[v]]
                kids = g.children(v)
                assert list(zip(g.child_times[g.child_offsets[v]:g.child_offsets[v + 1]].tolist(),
                                kids.tolist())) == sorted(children[v])
                # temporal cut-off is a binary search: children visible at T are a prefix
                for cutoff in (-3, 0, 4):
                    visible = g.children(v, before=cutoff).tolist()
                    assert visible == [c for tm, c in sorted(children[v]) if tm <= cutoff]
            for t, table in enumerate(tables):
                td = db.tables[t]
                assert [td.key(i) for i in range(td.num_rows)] == table["keys"]
        assert verify_database(root / "db").ok
