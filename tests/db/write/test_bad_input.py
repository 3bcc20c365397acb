"""Every bad input gets one clear error naming table, column and problem, and nothing written."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dlkit.db import open_database, parse_schema, preprocess
from dlkit.errors import DataError, OutputError, SchemaError

from ..conftest import leftovers, write_db

USERS = pa.table({"uid": pa.array(["a", "b", "c"]), "age": [30, 40, None]})
ORDERS = pa.table({
    "oid": pa.array([1, 2, 3, 4], pa.int64()),
    "uid": pa.array(["a", "c", "zz", None]),
    "t": pa.array([dt.datetime(2024, 1, d) for d in (4, 1, 3, 2)], pa.timestamp("us")),
    "amount": [1.0, 2.0, 3.0, 4.0],
})
GOOD = """
[tables.users]
primary_key = "uid"
[tables.orders]
primary_key = "oid"
time_column = "t"
foreign_keys = { uid = "users" }
"""


def _run(tmp_path, tables, toml, **kw):
    src = write_db(tmp_path / "in", tables, toml)
    out = tmp_path / "out" / "db"
    try:
        return preprocess(src, out, fsync=False, **kw)
    finally:
        parent = out.parent
        if parent.exists():
            assert leftovers(parent) == []


def _fails(tmp_path, tables, toml, error, *patterns, **kw):
    with pytest.raises(error) as info:
        _run(tmp_path, tables, toml, **kw)
    message = str(info.value)
    for pattern in patterns:
        assert pattern in message, message
    out = tmp_path / "out" / "db"
    assert not out.exists(), "nothing may be written"
    return message


def test_good_input_builds(tmp_path):
    report = _run(tmp_path, {"users": USERS, "orders": ORDERS}, GOOD)
    assert report.dangling == {"orders.uid": 1}
    assert report.num_edges == 2


def test_duplicate_primary_key(tmp_path):
    users = pa.table({"uid": ["a", "b", "a"], "age": [1, 2, 3]})
    _fails(tmp_path, {"users": users, "orders": ORDERS}, GOOD, DataError,
           "table 'users', column 'uid'", "duplicate primary key 'a' (rows 0 and 2)")


def test_duplicate_integer_primary_key(tmp_path):
    orders = ORDERS.set_column(0, "oid", pa.array([1, 2, 2, 4], pa.int64()))
    _fails(tmp_path, {"users": USERS, "orders": orders}, GOOD, DataError,
           "table 'orders', column 'oid'", "duplicate primary key 2 (rows 1 and 2)")


def test_null_primary_key(tmp_path):
    users = pa.table({"uid": ["a", None, "c"], "age": [1, 2, 3]})
    _fails(tmp_path, {"users": users, "orders": ORDERS}, GOOD, DataError,
           "table 'users', column 'uid'", "null primary key at row 1")


def test_foreign_key_of_wrong_type(tmp_path):
    orders = ORDERS.set_column(1, "uid", pa.array([1, 2, 3, 4], pa.int64()))
    _fails(tmp_path, {"users": USERS, "orders": orders}, GOOD, SchemaError,
           "table 'orders', column 'uid'", "foreign key has type int64",
           "primary key users.uid", "type string")


def test_primary_key_of_unsupported_type(tmp_path):
    users = pa.table({"uid": [1.5, 2.5, 3.5], "age": [1, 2, 3]})
    _fails(tmp_path, {"users": users, "orders": ORDERS}, GOOD, SchemaError,
           "table 'users', column 'uid'", "must be an integer or a string")


def test_missing_table(tmp_path):
    _fails(tmp_path, {"users": USERS}, GOOD, SchemaError, "table 'orders'", "missing")


def test_missing_columns(tmp_path):
    for toml, pattern in (
        (GOOD.replace('time_column = "t"', 'time_column = "when"'), "column 'when' (time column)"),
        (GOOD.replace('primary_key = "oid"', 'primary_key = "order"'), "column 'order' (primary key)"),
        (GOOD.replace("uid = \"users\"", "user = \"users\""), "column 'user' (foreign key)"),
        (GOOD + '[tables.users.types]\nheight = "numeric"\n', "column 'height' (typed)"),
        (GOOD + "[tasks.x]\ntable = \"orders\"\ntarget = \"total\"\n", "column 'total' (target"),
    ):
        shutil.rmtree(tmp_path, ignore_errors=True)
        tmp_path.mkdir()
        _fails(tmp_path, {"users": USERS, "orders": ORDERS}, toml, SchemaError, pattern, "missing")


def test_corrupt_parquet_footer(tmp_path):
    src = write_db(tmp_path / "in", {"users": USERS, "orders": ORDERS}, GOOD)
    (src / "orders.parquet").write_bytes(b"PAR1 this is not parquet at all")
    with pytest.raises(DataError, match="table 'orders': not a readable Parquet file"):
        preprocess(src, tmp_path / "db", fsync=False)
    assert not (tmp_path / "db").exists() and leftovers(tmp_path) == []


def test_corrupt_parquet_data_pages(tmp_path):
    src = write_db(tmp_path / "in", {"users": USERS}, '[tables.users]\nprimary_key = "uid"\n')
    big = pa.table({"uid": [f"user-{i}" for i in range(5000)], "age": list(range(5000))})
    pq.write_table(big, src / "users.parquet", compression="snappy")
    data = bytearray((src / "users.parquet").read_bytes())
    for i in range(200, 2200):  # scribble over the first data pages, keep the footer
        data[i] = 0xFF
    (src / "users.parquet").write_bytes(bytes(data))
    # the key is read with the other columns (nothing refers to users): all are named
    with pytest.raises(DataError, match="table 'users', columns? .*'uid'.*corrupt Parquet data"):
        preprocess(src, tmp_path / "db", fsync=False)
    assert not (tmp_path / "db").exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize("name", ["../evil", "a/b", "..", ".hidden", "x\\y", "", "-flag", "a b"])
def test_table_name_escaping_output(tmp_path, name):
    toml = f'[tables."{name}"]\nprimary_key = "uid"\n'.replace("\\", "\\\\")
    with pytest.raises(SchemaError, match="table .*name"):
        parse_schema(toml)
    src = write_db(tmp_path / "in", {"users": USERS}, toml)
    with pytest.raises(SchemaError):
        preprocess(src, tmp_path / "db", fsync=False)
    assert not (tmp_path / "db").exists()
    assert not (tmp_path / "evil").exists()


def test_task_name_escaping_output():
    with pytest.raises(SchemaError, match="task '../x': name would escape"):
        parse_schema(GOOD + '[tasks."../x"]\ntable = "orders"\ntarget = "amount"\n')


def test_dangling_error_mode(tmp_path):
    message = _fails(tmp_path, {"users": USERS, "orders": ORDERS}, GOOD, DataError,
                     "table 'orders', column 'uid'", "1 dangling foreign key",
                     "row 2, value 'zz'", on_dangling="error")
    assert "users.uid" in message


def test_dangling_drop_mode_keeps_rows(tmp_path):
    report = _run(tmp_path, {"users": USERS, "orders": ORDERS}, GOOD, on_dangling="drop")
    assert report.warnings and "1 dangling" in report.warnings[0]
    with open_database(tmp_path / "out" / "db") as db:
        orders = db.table("orders")
        assert orders.num_rows == 4
        g = db.graph
        degrees = [len(g.parents(orders.row_offset + r)) for r in range(4)]
        assert degrees == [1, 1, 0, 0]  # 'zz' dangling, None null


@pytest.mark.parametrize("toml,pattern", [
    ("[tables.users]\nprimary_key = 3\n", "primary_key must be a column name or a non-empty list"),
    ("[tables.users]\nprimary_key = \"uid\"\nbogus = 1\n", "unknown key(s) ['bogus']"),
    ("[tables.users]\nprimary_key = \"uid\"\ntypes = { age = \"float\" }\n", "unknown type 'float'"),
    ("[tables.users]\nprimary_key = \"uid\"\nforeign_keys = { x = \"nope\" }\n",
     "refers to table 'nope', which is not in the schema"),
    ("[tables.users]\nprimary_key = \"uid\"\nexclude = [\"uid\"]\n", "a key column cannot be excluded"),
    ("name = \"x\"\n", "no tables"),
    ("[tables.users\n", "not valid TOML"),
    ("[tables.a]\nprimary_key = \"k\"\n[tables.A]\nprimary_key = \"k\"\n", "differ only in case"),
    ("format_version = 1.0\n[tables.a]\nprimary_key = \"k\"\n", "format_version must be 1, got 1.0"),
    ("[tables.a]\nprimary_key = \"k\"\ntypes = { v = [\"numeric\"] }\n", "unknown type ['numeric']"),
    ("[tables.a]\nprimary_key = \"k\"\ntypes = { v = { a = 1 } }\n", "unknown type {'a': 1}"),
    ("[tables.a]\nprimary_key = \"k\"\n[tasks.t]\ntable = \"a\"\ntarget = \"v\"\n"
     "[tasks.T]\ntable = \"a\"\ntarget = \"v\"\n", "tasks 't' and 'T' differ only in case"),
    ("[tables.users]\nprimary_key = \"uid\"\n[tasks.t]\ntable = \"users\"\ntarget = \"uid\"\n",
     "a key column cannot be a target"),
])
def test_schema_file_errors(toml, pattern):
    with pytest.raises(SchemaError) as info:
        parse_schema(toml)
    assert pattern in str(info.value)


def test_type_override_impossible_for_arrow_type(tmp_path):
    message = _fails(tmp_path, {"users": USERS, "orders": ORDERS},
                     GOOD + '[tables.orders.types]\namount = "text"\n', SchemaError,
                     "table 'orders', column 'amount'", "Arrow type double cannot be text")
    # a schema entry only the data refutes still names the schema's file
    assert message.startswith(f"{tmp_path / 'in' / 'dlkit.toml'}: ")


def test_text_target_rejected(tmp_path):
    users = pa.table({"uid": ["a", "b"], "bio": ["x", "y"]})
    _fails(tmp_path, {"users": users},
           '[tables.users]\nprimary_key = "uid"\n[tasks.t]\ntable = "users"\ntarget = "bio"\n',
           SchemaError, "table 'users', column 'bio' is text")


def test_unsupported_column_type_needs_exclusion(tmp_path):
    users = pa.table({"uid": ["a", "b"], "tags": pa.array([["x"], ["y", "z"]])})
    msg = _fails(tmp_path, {"users": users}, '[tables.users]\nprimary_key = "uid"\n', SchemaError,
                 "table 'users', column 'tags'", "not supported")
    assert 'exclude = ["tags"]' in msg
    _run(tmp_path, {"users": users}, '[tables.users]\nprimary_key = "uid"\nexclude = ["tags"]\n')


def test_boolean_override_rejects_other_integers(tmp_path):
    users = pa.table({"uid": ["a", "b"], "flag": pa.array([0, 2], pa.int64())})
    _fails(tmp_path, {"users": users},
           '[tables.users]\nprimary_key = "uid"\ntypes = { flag = "boolean" }\n', DataError,
           "table 'users', column 'flag'", "boolean column holds 2")


def test_parts_with_different_columns(tmp_path):
    parts = [USERS, pa.table({"uid": ["d"], "height": [1.8]})]
    _fails(tmp_path, {"users": parts}, '[tables.users]\nprimary_key = "uid"\n', SchemaError,
           "table 'users': part part-001.parquet has columns")


def test_existing_target_refused_without_overwrite(tmp_path):
    src = write_db(tmp_path / "in", {"users": USERS}, '[tables.users]\nprimary_key = "uid"\n')
    preprocess(src, tmp_path / "db", fsync=False)
    with pytest.raises(OutputError, match="already exists"):
        preprocess(src, tmp_path / "db", fsync=False)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "precious.txt").write_text("keep me")
    with pytest.raises(OutputError, match="not a dlkit database"):
        preprocess(src, tmp_path / "other", fsync=False, overwrite=True)
    assert (tmp_path / "other" / "precious.txt").read_text() == "keep me"
    (tmp_path / "afile").write_text("x")
    with pytest.raises(OutputError, match="not a directory"):
        preprocess(src, tmp_path / "afile", fsync=False, overwrite=True)


def test_duplicate_sparse_integer_key_of_an_unreferenced_table(tmp_path):
    # keys too spread out for a dense index: the hash index finds the duplicate
    orders = ORDERS.set_column(0, "oid", pa.array([10**15, 3, -(10**12), 3], pa.int64()))
    _fails(tmp_path, {"users": USERS, "orders": orders}, GOOD, DataError,
           "table 'orders', column 'oid'", "duplicate primary key 3 (rows 1 and 3)")


@pytest.mark.parametrize("flag_row", [1, 2, 3])
def test_first_bad_row_wins_between_foreign_keys_and_columns(tmp_path, flag_row):
    # foreign keys are resolved on a helper thread that may lag a batch behind the columns:
    # a bad foreign key (row 2) and a bad boolean cell must still be reported in row order,
    # the batch's own column errors first (as they are converted first)
    users = pa.table({"uid": pa.array([1, 2], pa.int64())})
    flags = [0] * 5
    flags[flag_row] = 7
    orders = pa.table({
        "oid": pa.array(range(5), pa.int64()),
        "uid": pa.array([1, 2, 2**63 + 5, 1, 2], pa.uint64()),
        "flag": pa.array(flags, pa.int64()),
    })
    toml = ('[tables.users]\nprimary_key = "uid"\n[tables.orders]\nprimary_key = "oid"\n'
            'foreign_keys = { uid = "users" }\ntypes = { flag = "boolean" }\n')
    if flag_row <= 2:  # an earlier batch, or the same one (batches of one row)
        expect = ("table 'orders', column 'flag'", "boolean column holds 7")
    else:
        expect = ("table 'orders', column 'uid'", "does not fit in int64")
    _fails(tmp_path, {"users": users, "orders": orders}, toml, DataError, *expect, batch_rows=1)


@pytest.mark.parametrize("which", ["table", "schema"])
def test_a_fifo_input_is_refused_not_read(tmp_path, which):
    """A FIFO where a Parquet table or the schema should be: reading it would wait for a
    writer forever. A thread stands by as that writer, so a regression fails (the read ends
    at EOF) instead of hanging the suite."""
    src = write_db(tmp_path / "in", {"users": USERS, "orders": ORDERS}, GOOD)
    fifo = src / ("users.parquet" if which == "table" else "dlkit.toml")
    fifo.unlink()
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: os.close(os.open(fifo, os.O_WRONLY)), daemon=True)
    writer.start()
    try:
        with pytest.raises(SchemaError) as info:
            preprocess(src, tmp_path / "db", fsync=False)
    finally:
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader lets the writer finish
        writer.join()
        os.close(reader)
    message = str(info.value)
    assert str(fifo) in message
    assert ("table 'users'" in message and "neither a Parquet file nor a directory" in message
            if which == "table" else "is not a regular file" in message), message
    assert not (tmp_path / "db").exists()


def _not_utf8(values: list[bytes]) -> pa.Array:
    """A string array holding these bytes as they are (Arrow does not validate on build)."""
    offsets = np.cumsum([0] + [len(v) for v in values]).astype(np.int32)
    return pa.Array.from_buffers(pa.string(), len(values),
                                 [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"".join(values))])


@pytest.mark.parametrize("override", ["", 'types = { city = "text" }\n'])
def test_a_string_column_that_is_not_utf8_is_named(tmp_path, override):
    users = USERS.append_column("city", _not_utf8([b"Oslo", b"Bergen\xff", b"Oslo"]))
    toml = GOOD.replace('primary_key = "uid"\n', 'primary_key = "uid"\n' + override)
    _fails(tmp_path, {"users": users, "orders": ORDERS}, toml, DataError,
           "table 'users', column 'city'", "not valid UTF-8")


def test_a_string_primary_key_that_is_not_utf8_is_named(tmp_path):
    users = USERS.set_column(0, "uid", _not_utf8([b"a", b"b\xfe", b"c"]))
    _fails(tmp_path, {"users": users, "orders": ORDERS}, GOOD, DataError,
           "table 'users', column 'uid'", "not valid UTF-8")


def test_a_foreign_key_that_is_not_utf8_dangles_and_is_shown_as_bytes(tmp_path):
    orders = ORDERS.set_column(1, "uid", _not_utf8([b"a", b"c", b"\xff\xfe", b"b"]))
    _fails(tmp_path, {"users": USERS, "orders": orders}, GOOD, DataError,
           "table 'orders', column 'uid'", "row 2, value b'\\xff\\xfe'", on_dangling="error")
    report = _run(tmp_path, {"users": USERS, "orders": orders}, GOOD, on_dangling="drop")
    assert report.dangling == {"orders.uid": 1}
