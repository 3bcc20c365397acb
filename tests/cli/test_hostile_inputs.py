"""Hostile inputs found by fault injection (issue 28): each one is one error line with the
documented exit code, never a traceback nor a run without end."""

from __future__ import annotations

import pytest

from dlkit.cli.app import main

HUGE = str(2**64)


def run_main(capsys, *argv: object) -> tuple[int, str, str]:
    """``dlkit ARGV`` in this process: (exit status, stdout, stderr)."""
    with pytest.raises(SystemExit) as info:
        main([str(a) for a in argv])
        raise SystemExit(0)
    out, err = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 1), out, err


def assert_one_line(err: str, code: str | None = None) -> None:
    assert "Traceback" not in err, err
    assert len([line for line in err.splitlines() if line.strip()]) == 1, err
    if code is not None:
        assert err.startswith(f"error {code}:"), err


@pytest.mark.parametrize("argv", [
    ["sample", "run.json", "-d", "ds", "--steps", HUGE],
    ["batches", "db", "--task", "t", "--steps", HUGE, "--out", "o"],
    ["batches", "db", "--task", "t", "--batch-size", HUGE, "--out", "o"],
    ["bench", "--steps", HUGE],
    ["bench", "--workers", HUGE],
    ["bench", "--batch-size", HUGE],
    ["bench", "--rows", HUGE],
    ["bench", "--row-bytes", HUGE],
])
def test_a_huge_count_is_a_usage_error(capsys, tmp_path, argv):
    (tmp_path / "run.json").write_text("{}")
    status, out, err = run_main(capsys, *(str(tmp_path / a) if a in ("run.json", "db", "o")
                                          else a for a in argv))
    assert status == 2, err
    assert_one_line(err)
    assert out == ""


def test_an_error_quoting_a_multi_line_library_message_is_one_line():
    from dlkit.errors import DataError

    error = DataError("corrupt Parquet data: Couldn't deserialize thrift: Invalid data\n"
                      "Deserializing page header failed.\n", path="/in/t.parquet")
    assert str(error) == ("/in/t.parquet: corrupt Parquet data: Couldn't deserialize thrift: "
                          "Invalid data Deserializing page header failed.")
