from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from spark_jobs.cli.sql_shell import format_rows, split_statements
from spark_jobs.settings import load_settings
from spark_jobs.table_io import split_table, table_location


def test_split_statements_respects_quotes_and_comments() -> None:
    text = "SELECT ';' AS a; -- c; d\nSHOW DATABASES;;  "
    assert split_statements(text) == ["SELECT ';' AS a", "SHOW DATABASES"]


@pytest.mark.parametrize(("text", "expected"), [
    # ';' inside string literals: doubled and backslash-escaped quotes, double quotes
    ("SELECT 'a'';b' AS x; SELECT 'it\\'s; ok' AS y;", ["SELECT 'a'';b' AS x", "SELECT 'it\\'s; ok' AS y"]),
    ('SELECT "x;y" AS z;SELECT 2', ['SELECT "x;y" AS z', "SELECT 2"]),
    # ';' inside backquoted names
    ("SELECT `a;b` FROM `db`.`t;u`; SHOW TABLES", ["SELECT `a;b` FROM `db`.`t;u`", "SHOW TABLES"]),
    # comments: a line comment goes (its line break stays), a block comment and a hint stay, ';' in them splits nothing
    ("SELECT 1 -- one; two\nFROM t;", ["SELECT 1 \nFROM t"]),
    ("SELECT 1; /* x; y */ SELECT 2;", ["SELECT 1", "/* x; y */ SELECT 2"]),
    ("SELECT /*+ BROADCAST(t) */ * FROM t;", ["SELECT /*+ BROADCAST(t) */ * FROM t"]),
    ("SELECT '--not a comment' AS c -- a comment\n;", ["SELECT '--not a comment' AS c"]),
    ("-- only a comment\n;;\n", []),
    # a SQL script's BEGIN ... END block is one statement
    ("BEGIN\n  SELECT 1;\n  SELECT 2;\nEND;\nSELECT 3;", ["BEGIN\n  SELECT 1;\n  SELECT 2;\nEND", "SELECT 3"]),
])
def test_split_statements_keeps_semicolons_inside_literals_names_and_comments(text: str, expected: list[str]) -> None:
    assert split_statements(text) == expected


def test_the_shell_runs_the_statements_read_when_a_line_ends_with_a_semicolon(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from spark_jobs.cli import sql_shell as sql

    ran: list[str] = []

    class Result:
        def __init__(self, statement: str) -> None:
            self.statement, self.columns = statement, ["statement"]

        def collect(self) -> list[tuple[str]]:
            return [(self.statement,)]

    class Session:
        def sql(self, statement: str) -> Result:
            ran.append(statement)
            return Result(statement)

        def stop(self) -> None:
            pass

    lines = iter(["SELECT 'a;b' AS x, -- first;", "2 AS y; SELECT `c;d`;", "USE silver;", "SHOW TABLES"])

    def read(prompt: str) -> str:
        try:
            return next(lines)
        except StopIteration:
            raise EOFError from None

    one_shot: list[bool] = []

    def session(local: bool, one_shot_driver: bool = True) -> Session:
        one_shot.append(one_shot_driver)
        return Session()

    monkeypatch.setattr(sql, "_session", session)
    monkeypatch.setattr("builtins.input", read)
    assert sql.run(None, "csv") == 0
    assert one_shot == [False]  # an interactive --local shell keeps the JVM's defaults (it may run for hours)
    # The first line ends with ';' in a comment: run as read so far, as before (its statement is incomplete).
    # "SHOW TABLES" has no ';' when input ends: not run.
    assert ran == ["SELECT 'a;b' AS x,", "2 AS y", "SELECT `c;d`", "USE silver"]
    # Each batch prints its last statement's result.
    assert capsys.readouterr().out == ('statement\n"SELECT \'a;b\' AS x,"\nstatement\nSELECT `c;d`\n'
                                       "statement\nUSE silver\n")


def test_json_format_is_one_object_per_row() -> None:
    rows = [(1, Decimal("12.30"), datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), None, "ü")]
    out = format_rows(["id", "amount", "ts", "n", "s"], rows, "json")
    assert out.count("\n") == 1
    assert json.loads(out) == {"id": 1, "amount": "12.30", "ts": "2026-01-02T03:04:05+00:00", "n": None, "s": "ü"}


def test_table_and_csv_formats() -> None:
    assert format_rows(["a", "b"], [(1, None)], "csv") == "a,b\n1,\n"
    table = format_rows(["name"], [("x",), ("long",)], "table")
    assert "| long |" in table and table.rstrip().endswith("(2 rows)")
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        format_rows(["a"], [], "xml")


def test_table_locations_derive_from_names(tmp_path) -> None:
    s = load_settings({"LAKE_STATE_DIR": str(tmp_path), "LAKE_S3_BUCKET": "b"})
    assert table_location(s, "ops.smoke") == "s3a://b/warehouse/ops/smoke"
    with pytest.raises(ValueError, match="not a lake layer"):
        split_table("misc.t")
    with pytest.raises(ValueError, match=r"must be <database>\.<table>"):
        split_table("Ops.Smoke")
