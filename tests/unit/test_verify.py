"""spark_jobs.verify: rows from Spark normalised for comparison, and the silver-vs-PostgreSQL diff (no services)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from spark_jobs.verify import MAX_DIFF_LINES, diff_tables, normalise_spark_rows


def test_normalise_naive_datetime_is_utc_and_aware_is_converted():
    naive = datetime(2024, 5, 1, 12, 0, 0, 123456)
    aware = datetime(2024, 5, 1, 14, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    rows = normalise_spark_rows([{"a": naive, "b": aware}], [])
    assert rows[0]["a"] == rows[0]["b"] == datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
    assert rows[0]["a"].tzinfo is UTC and rows[0]["b"].tzinfo is UTC


def test_normalise_parses_json_strings_keeps_nulls_and_non_ascii():
    rows = normalise_spark_rows(
        [{"profile": '{"city": "東京", "langs": ["de"]}', "shipping": None, "name": "Zoë Ångström 🚀"}],
        ["profile", "shipping"])
    assert rows == [{"profile": {"city": "東京", "langs": ["de"]}, "shipping": None, "name": "Zoë Ångström 🚀"}]


def test_normalise_rejects_bad_json_with_column_name():
    with pytest.raises(ValueError, match="column 'profile' is not valid JSON"):
        normalise_spark_rows([{"profile": "{nope"}], ["profile"])


def test_diff_equal_tables_with_decimal_scale_and_json_key_order():
    expected = [{"id": 1, "price": Decimal("18.90"), "attrs": {"a": 1, "b": [1, 2]}, "note": None}]
    actual = normalise_spark_rows([{"id": 1, "price": Decimal("18.9"), "attrs": json.dumps({"b": [1, 2], "a": 1}),
                                    "note": None}], ["attrs"])
    assert diff_tables(expected, actual, ["id"], ["price", "attrs", "note"]) == []


def test_diff_reports_missing_extra_and_mismatches_with_both_values():
    ts = datetime(2024, 1, 1, tzinfo=UTC)
    expected = [{"id": 1, "name": "Zoë", "ts": ts, "n": None}, {"id": 2, "name": "東京", "ts": ts, "n": 1}]
    actual = [{"id": 2, "name": "東京", "ts": ts + timedelta(microseconds=1), "n": None},
              {"id": 3, "name": "x", "ts": ts, "n": 1}]
    out = diff_tables(expected, actual, ["id"], ["name", "ts", "n"])
    assert out[0] == "missing (id=1): in expected, not in actual"
    assert out[1].startswith("(id=2) ts: expected datetime.datetime(2024, 1, 1, 0, 0, tzinfo=datetime.timezone.utc), "
                             "actual datetime.datetime(2024, 1, 1, 0, 0, 0, 1")
    assert out[2] == "(id=2) n: expected 1, actual None"
    assert out[3] == "extra (id=3): in actual, not in expected"
    assert len(out) == 4


def test_diff_null_is_not_empty_string_and_bool_is_not_int():
    out = diff_tables([{"id": 1, "a": None, "b": True}], [{"id": 1, "a": "", "b": 1}], ["id"], ["a", "b"])
    assert out == ["(id=1) a: expected None, actual ''", "(id=1) b: expected True, actual 1"]


def test_diff_composite_key_and_long_text_shows_where():
    big = "Röstung " * 2000
    out = diff_tables([{"o": 1, "l": 2, "t": big}], [{"o": 1, "l": 2, "t": big[:-1] + "X"}], ["o", "l"], ["t"])
    assert len(out) == 1
    assert out[0].startswith("(o=1, l=2) t: expected 'Röstung") and out[0].endswith(
        f"(first difference at character {len(big) - 1})")
    assert len(out[0]) < 400


def test_diff_duplicate_keys_and_missing_columns():
    out = diff_tables([{"id": 1, "a": 1}], [{"id": 1}, {"id": 1}], ["id"], ["a"])
    assert out == ["actual has key (id=1) more than once", "(id=1) a: column missing in actual (expected 1)"]


def test_diff_output_is_capped():
    expected = [{"id": i, "v": i} for i in range(200)]
    out = diff_tables(expected, [], ["id"], ["v"])
    assert len(out) == MAX_DIFF_LINES
    assert out[-1] == f"... and {200 - MAX_DIFF_LINES + 1} more differences"


def test_diff_requires_a_key():
    with pytest.raises(ValueError, match="key"):
        diff_tables([], [], [], ["a"])
