"""A build under a small memory budget spills its working arrays and writes the same bytes.

Random relational databases, large enough that the working arrays (row times, both CSRs,
primary keys, key indexes, category ids, task targets, distinct texts) exceed a page and so
can spill, are built with every array in memory and with budgets that spill some or all of
them; the databases must match file for file, byte for byte.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from dlkit.db import preprocess, verify_database
from dlkit.db.format import MANIFEST_FILE

from ..conftest import write_db


@st.composite
def databases(draw):
    """``(tables, toml)``: 1-3 tables of 600-3000 rows with integer or string keys, times,
    a categorical, a numeric and a text column, and foreign keys (some null, some
    dangling)."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    num_tables = draw(st.integers(1, 3))
    sizes = [draw(st.integers(600, 3000)) for _ in range(num_tables)]
    string_keys = [draw(st.booleans()) for _ in range(num_tables)]
    tables, specs = {}, []
    for t, n in enumerate(sizes):
        ids = rng.permutation(n * 3)[:n]  # sparse integer keys: the hash index as well
        keys = (pa.array([f"k{i}" for i in ids]) if string_keys[t]
                else pa.array(ids.astype(np.int64)))
        columns = {
            "key": keys,
            "when": pa.array(rng.integers(0, 50, n), pa.timestamp("us"),
                             mask=rng.random(n) < 0.05),
            "kind": pa.array(rng.choice(["a", "b", "c", "d"], n), mask=rng.random(n) < 0.1),
            "amount": pa.array(rng.normal(size=n), mask=rng.random(n) < 0.1),
            # texts shared between tables, more of them than a page of the text index holds
            "note": pa.array([f"note {int(i)}" for i in rng.integers(0, 2000, n)],
                             mask=rng.random(n) < 0.1),
        }
        fks = []
        for k in range(draw(st.integers(0, 2))):
            parent = int(rng.integers(0, num_tables))
            fks.append((f"fk{k}", parent, rng.integers(0, sizes[parent] + 5, n)))  # m..: dangling
        tables[f"t{t}"] = columns
        specs.append((t, fks))
    # the foreign keys' values, once every table's keys are known
    parquet, lines = {}, []
    for t, fks in specs:
        columns = dict(tables[f"t{t}"])
        for column, parent, refs in fks:
            pkeys = tables[f"t{parent}"]["key"]
            dangling = "zz" if string_keys[parent] else -1
            values = [pkeys[int(r)].as_py() if r < sizes[parent] else dangling for r in refs]
            values = [None if i % 17 == 0 else v for i, v in enumerate(values)]
            columns[column] = pa.array(values, pa.string() if string_keys[parent] else pa.int64())
        parquet[f"t{t}"] = pa.table(columns)
        lines += [f"[tables.t{t}]", 'primary_key = "key"', 'time_column = "when"',
                  'types = { kind = "categorical", note = "text" }']
        if fks:
            lines.append("foreign_keys = { " + ", ".join(f'{c} = "t{p}"' for c, p, _ in fks)
                         + " }")
    lines += ["[tasks.amount]", 'table = "t0"', 'target = "amount"',
              "[tasks.kind]", 'table = "t0"', 'target = "kind"']
    return parquet, "\n".join(lines) + "\n"


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@settings(max_examples=12, deadline=None)
@given(databases(), st.sampled_from([0, 1 << 13, 1 << 15]))
def test_spilled_build_writes_the_same_bytes(database, budget):
    parquet, toml = database
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_db(root / "in", parquet, toml)
        in_memory = preprocess(root / "in", root / "ram", fsync=False, batch_rows=500)
        spilled = preprocess(root / "in", root / "spill", fsync=False, batch_rows=500,
                             memory_budget=budget)
        assert in_memory.spilled_bytes == 0
        # every working array (they are over a page here) or some of them spilled
        assert spilled.spilled_bytes > 0 or budget > 0
        assert spilled.memory_budget == budget
        assert sum(s.spilled for s in spilled.stages) == spilled.spilled_bytes
        assert spilled.database_hash == in_memory.database_hash
        assert _files(root / "spill") == _files(root / "ram")
        assert (root / "spill" / MANIFEST_FILE).exists()
        assert not (root / "spill" / "_scratch").exists()
        assert verify_database(root / "spill").ok


def test_dangling_and_duplicate_keys_fail_the_same_way_when_spilled(tmp_path):
    n = 2000
    users = pa.table({"key": pa.array(np.arange(n, dtype=np.int64))})
    keys = np.arange(n, dtype=np.int64)
    keys[1500] = 7  # a duplicate primary key far into the table
    orders = pa.table({"key": pa.array(keys), "user": pa.array(np.arange(n, dtype=np.int64))})
    toml = ('[tables.users]\nprimary_key = "key"\n'
            '[tables.orders]\nprimary_key = "key"\nforeign_keys = { user = "users" }\n')
    write_db(tmp_path / "in", {"users": users, "orders": orders}, toml)
    messages = []
    for budget in (None, 0):
        try:
            preprocess(tmp_path / "in", tmp_path / f"db{budget}", fsync=False,
                       memory_budget=budget)
        except Exception as exc:  # noqa: BLE001 - the message is what is compared
            messages.append((type(exc).__name__, str(exc)))
    assert len(messages) == 2 and messages[0] == messages[1]
    assert "duplicate primary key 7 (rows 7 and 1500)" in messages[0][1]
