"""Poison CDC records (issue 32): each shape that once failed the parse task on every replay, or let a forged
payload key reach silver, is now a reject with a reason naming the field or column; its neighbours apply."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from spark_jobs.silver.cdc_parse import (
    PARSE_COLUMNS,
    Parsed,
    parse_batches,
    parse_output_schema,
    parse_records,
    reserved_name,
)
from tests.unit.cdc_records import KEYS, ROWS, UTC_US, Record, change, key_bytes, raw, row

#: The silver table of ``ROWS`` (row image + metadata), as the app hands it to ``parse_batches``.
SILVER = pa.schema([*ROWS, ("_op", pa.string()), ("_snapshot_rank", pa.int32()), ("_commit_lsn", pa.int64()),
                    ("_change_lsn", pa.int64()), ("_source_ts", UTC_US), ("_extra", pa.string())])


def _out() -> pa.Schema:
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    return to_arrow_schema(parse_output_schema(from_arrow_schema(SILVER)))


def parse(records: list[Record], rows: pa.Schema = ROWS, refused: tuple[str, ...] = ()) -> Parsed:
    return parse_records(raw(records), rows, KEYS, refused)


def rows_out(records: list[Record], refused: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """What the executors hand back for ``records`` (the real mapInArrow body, without Spark)."""
    out = _out()
    batches = list(parse_batches(iter(raw(records).to_batches()), SILVER, out, KEYS, refused))
    rows: list[dict[str, Any]] = pa.Table.from_batches(batches, schema=out).to_pylist()
    return rows


def _with(value: bytes | None, edit: Any) -> bytes:
    assert value is not None
    doc = json.loads(value)
    edit(doc["payload"])
    return json.dumps(doc).encode()


def _good(i: int) -> Record:
    return change("c", {"id": i}, after=row(i), commit=100 + i, lsn=100 + i)


def _only_rejected(parsed: Parsed, expected_offsets: list[int]) -> list[str]:
    assert [r.offset for r in parsed.rejects] == expected_offsets
    return [r.error for r in parsed.rejects]


def test_position_past_64_bits_is_quarantined_not_an_overflow() -> None:
    # The issue's OverflowError: a commit LSN of 2^70 reached pa.array(int64) and failed the task on every replay.
    key, value = _good(2)
    huge = _with(value, lambda p: p["source"].update(sequence=json.dumps([str(2**70), "5"]), lsn=2**80))
    records = [_good(1), (key, huge), _good(3)]
    errors = _only_rejected(parse(records), [1])
    assert "commit LSN 1180591620717411303424 is outside the bigint range" in errors[0]
    rows = rows_out(records)
    assert [r["id"] for r in rows if r["_error"] is None] == [1, 3]
    assert [r["_offset"] for r in rows if r["_error"]] == [1]


def test_source_time_past_64_bits_is_quarantined() -> None:
    key, value = _good(2)
    records = [(key, _with(value, lambda p: p["source"].update(ts_ms=2**66))), _good(3)]
    # orjson reads an integer past 64 bits as a float: the reason shows what it read.
    assert _only_rejected(parse(records), [0]) == [
        "source.ts_ms 7.378697629483821e+19 is not milliseconds in the timestamp range (years 1 to 9999)"]
    assert [r["id"] for r in rows_out(records) if r["_error"] is None] == [3]


@pytest.mark.parametrize(("column", "value", "reason"), [
    ("id", 2**31, "column 'id': cannot convert '2147483648' to int (outside the int range)"),
    ("id", -(2**300), "column 'id': cannot convert '-2.037035976334486e+90' to int (not an integer in the int range)"),
    ("amount", "1e999999999", "column 'amount': cannot convert '1e999999999' to decimal(10,2)"),
    ("placed_at", "0001-01-01T00:00:00+01:00", "column 'placed_at': cannot convert '0001-01-01T00:00:00+01:00' "
                                               "to timestamp"),
])
def test_number_outside_the_column_type_is_quarantined_naming_it(column: str, value: Any, reason: str) -> None:
    records = [change("c", {"id": 1}, after={**row(1), column: value}), _good(2)]
    assert _only_rejected(parse(records), [0]) == [reason]


def test_float_columns_refuse_what_their_type_cannot_hold() -> None:
    rows = pa.schema([("id", pa.int32()), ("d", pa.float64()), ("f", pa.float32())])
    records = [change("c", {"id": 1}, after={"id": 1, "d": 10**400, "f": 1.0}),
               change("c", {"id": 2}, after={"id": 2, "d": 1.0, "f": 1e300}),
               change("c", {"id": 3}, after={"id": 3, "d": 2.5, "f": 0.5})]
    parsed = parse(records, rows)
    assert [c.values for c in parsed.changes] == [[3, 2.5, 0.5]]
    errors = _only_rejected(parsed, [0, 1])
    assert "column 'd'" in errors[0] and "outside the double range" in errors[0]
    assert errors[1] == "column 'f': cannot convert '1e+300' to float (outside the float range)"


def test_non_finite_floats_apply_as_postgresql_has_them() -> None:
    # PostgreSQL's double precision holds NaN and +-Infinity; the stdlib reads them (orjson refuses NaN).
    rows = pa.schema([("id", pa.int32()), ("d", pa.float64())])
    value = (b'{"op": "c", "source": {"lsn": 5}, "after": {"id": 1, "d": NaN}}')
    parsed = parse([(key_bytes({"id": 1}), value)], rows)
    assert parsed.rejects == [] and parsed.changes[0].values[1] != parsed.changes[0].values[1]


@pytest.mark.parametrize("name", [*PARSE_COLUMNS, "_ERROR", "_Offset", "_op", "_commit_lsn", "_extra", "_n",
                                  "_count", "_deleted_at", "_fill_notes", "_t0_1", "_change_type", "_commit_version",
                                  "_commit_timestamp", "_metadata", "_row_id", "__delta_internal_row_index",
                                  "__debezium_unavailable_value"])
def test_reserved_column_name_never_reaches_silver(name: str) -> None:
    records = [change("c", {"id": 1}, after={**row(1), name: "x"}), _good(2)]
    parsed = parse(records)
    assert parsed.extra_columns == [] and [c.values[0] for c in parsed.changes] == [2]
    error = _only_rejected(parsed, [0])[0]
    assert f"column name {name!r} is reserved" in error and "rename the column in PostgreSQL" in error


def test_names_like_reserved_ones_but_not_reserved_flow_through() -> None:
    for name in ("_legacy_id", "topic", "error", "_total", "t0_1", "_t0", "fill_x", "_fill", "Überweisung", "名前"):
        assert not reserved_name(name), name
    parsed = parse([change("c", {"id": 1}, after={**row(1), "_legacy_id": 7, "名前": "x"})])
    assert parsed.rejects == [] and parsed.extra_columns == ["_legacy_id", "名前"]


@pytest.mark.parametrize(("name", "reason"), [
    ("", "an empty column name"),
    ("x" * 64, "is 64 bytes; PostgreSQL names have at most 63"),
    ("é" * 32, "is 64 bytes; PostgreSQL names have at most 63"),
    ("\ud800", "is not valid Unicode (a lone surrogate)"),
])
def test_column_names_postgresql_cannot_have_are_quarantined(name: str, reason: str) -> None:
    # json.dumps escapes the surrogate; the stdlib fallback (orjson refuses it) reads it back.
    records = [change("c", {"id": 1}, after={**row(1), name: 1}), _good(2)]
    assert reason in _only_rejected(parse(records), [0])[0]
    assert [r["id"] for r in rows_out(records) if r["_error"] is None] == [2]


def test_row_image_wider_than_any_postgresql_table_is_quarantined() -> None:
    wide = {**row(1), **{f"c{i}": i for i in range(1_600)}}
    error = _only_rejected(parse([change("c", {"id": 1}, after=wide)]), [0])[0]
    assert error.startswith("'after' has 1606 columns; a PostgreSQL table has at most 1600")


def test_payload_column_the_driver_refused_is_quarantined() -> None:
    # The driver found no such column in PostgreSQL's table (a forged key): the record is a reject, not a column.
    records = [change("c", {"id": 1}, after={**row(1), "forged": 1}),
               change("c", {"id": 2}, after={**row(2), "coupon": "X"}, lsn=101)]
    parsed = parse(records, refused=("forged",))
    assert parsed.extra_columns == ["coupon"] and [c.values[0] for c in parsed.changes] == [2]
    error = _only_rejected(parsed, [0])[0]
    assert error.startswith("column(s) 'forged' are not in the source table in PostgreSQL")
    assert [r["_offset"] for r in rows_out(records, refused=("forged",)) if r["_error"]] == [0]


@pytest.mark.parametrize(("after", "reason"), [
    ([1, 2], "'after' is a JSON array, not an object"),
    ("text", "'after' is a JSON string, not an object"),
    (7, "'after' is a JSON number, not an object"),
])
def test_row_image_that_is_not_an_object_is_quarantined(after: Any, reason: str) -> None:
    key, value = _good(1)
    records: list[Record] = [(key, _with(value, lambda p: p.update(after=after)))]
    assert _only_rejected(parse(records), [0])[0].startswith(reason)


def test_unencodable_string_value_is_quarantined_naming_the_column() -> None:
    # A lone surrogate (legal JSON escape, not UTF-8) in a string column: Arrow cannot store it; it failed the task.
    records = [change("c", {"id": 1}, after=row(1, status="\ud83d")), _good(2)]
    rows = rows_out(records)
    assert [r["id"] for r in rows if r["_error"] is None] == [2]
    [bad] = [r for r in rows if r["_error"]]
    assert bad["_offset"] == 0 and bad["_error"].startswith("column 'status': its value cannot be stored as string")


def test_unencodable_text_in_a_reason_is_escaped() -> None:
    key, value = _good(1)
    records: list[Record] = [(key, _with(value, lambda p: p.update(op="\udfff")))]
    [bad] = rows_out(records)
    assert bad["_error"] == "unknown op '\\udfff' (expected one of c, u, d, r)"


def test_the_issues_nine_records_are_quarantined_and_the_rest_apply() -> None:
    """The shapes of the records that crash-looped the stream: positions and times past 64 bits, reserved
    names, deep nesting, forged keys; every one a reject with its reason, every good record a change."""
    def forged(i: int, **edit: Any) -> Record:
        key, value = change("u", {"id": i}, after=row(i), commit=500 + i, lsn=500 + i)
        doc = json.loads(value or b"{}")
        doc["payload"]["source"].update(edit.pop("source", {}))
        doc["payload"]["after"].update(edit)
        return key, json.dumps(doc).encode()

    deep = ('{"op": "c", "source": {"lsn": 1}, "after": {"id": 9, "attrs": ' + '{"n":' * 1_100 + "1"
            + "}" * 1_100 + "}}").encode()
    poison: list[Record] = [
        forged(1, source={"sequence": json.dumps([str(2**64), str(2**64 + 1)])}),
        forged(2, source={"lsn": 2**65, "sequence": None}),
        forged(3, source={"ts_ms": 2**64}),
        forged(4, _error="x"), forged(5, _offset=1), forged(6, _topic="t", _key="k"), forged(7, _value="v"),
        forged(8, id=2**64),
        (key_bytes({"id": 9}), deep),
    ]
    good = [_good(i) for i in range(10, 14)]
    records = [r for pair in zip(poison, good, strict=False) for r in pair] + poison[len(good):]
    rows = rows_out(records)
    assert len(rows) == len(records)  # in = good + quarantined
    assert sorted(r["id"] for r in rows if r["_error"] is None) == [10, 11, 12, 13]
    bad = {r["_offset"]: r["_error"] for r in rows if r["_error"]}
    assert len(bad) == len(poison) and all(bad.values())
    assert sorted(bad) == sorted(records.index(p) for p in poison)
