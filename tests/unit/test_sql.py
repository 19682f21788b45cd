from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from spark_jobs.settings import load_settings
from spark_jobs.sql import format_rows, split_statements
from spark_jobs.table_io import split_table, table_location


def test_split_statements_respects_quotes_and_comments() -> None:
    text = "SELECT ';' AS a; -- c; d\nSHOW DATABASES;;  "
    assert split_statements(text) == ["SELECT ';' AS a", "SHOW DATABASES"]


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
