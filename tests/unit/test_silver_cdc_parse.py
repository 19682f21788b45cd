"""parse_records (driver side): raw Debezium records -> typed changes + rejects (one named test per edge case)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from spark_jobs.hot.windows import from_epoch_micros
from spark_jobs.silver.cdc import UNAVAILABLE_VALUE, added_columns
from spark_jobs.silver.cdc_parse import TOO_DEEP, Change, Parsed, parse_batches, parse_output_schema, parse_records
from tests.unit.cdc_records import KAFKA_TS, KEYS, ORDERS, ROWS, TOPIC, UTC_US, Record, change, key_bytes, raw, row, tombstone


def parse(records: list[Record], rows: pa.Schema = ROWS) -> Parsed:
    return parse_records(raw(records), rows, KEYS)


def shown(changes: list[Change], *columns: str) -> list[tuple[Any, ...]]:
    """Selected row-image columns (by name) and metadata (``op``, ``pos``, ``offset``, ``extra``) per change."""
    out = []
    for c in changes:
        values = dict(zip(ROWS.names, c.values, strict=False))
        out.append(tuple(getattr(c, name) if name in ("op", "pos", "offset", "extra") else values[name]
                         for name in columns))
    return out


def test_parse_create_types_every_column_and_position() -> None:
    parsed = parse([change("c", {"id": 1}, after=row(1, amount="1234.50"), commit=90, lsn=120)])
    assert parsed.rejects == [] and len(parsed.changes) == 1
    c = parsed.changes[0]
    assert c.values[:3] == [1, "new", Decimal("1234.50")]
    assert from_epoch_micros(c.values[3]) == datetime(2024, 3, 1, 10, 15, 30, 123456, tzinfo=UTC)
    assert c.values[4:] == ["n", '{"gift": true}']
    assert (c.op, c.pos, c.partition, c.offset, c.extra) == ("c", (1, 90, 120), 0, 0, None)
    assert from_epoch_micros(c.source_ts or 0) == datetime(2024, 3, 1, 10, 46, 40, tzinfo=UTC)


def test_parse_date_and_binary_wire_formats() -> None:
    # io.debezium.time.Date is days since the epoch; bytea is base64 (binary.handling.mode=base64).
    rows = pa.schema([("id", pa.int32()), ("born", pa.date32()), ("blob", pa.binary())])
    parsed = parse([change("c", {"id": 1}, after={"id": 1, "born": 19783, "blob": "aGk="})], rows)
    assert parsed.changes[0].values == [1, 19783, b"hi"]
    assert pa.array([19783], pa.int32()).cast(pa.date32()).to_pylist() == [date(2024, 3, 1)]


def test_parse_delete_takes_row_image_from_before_and_key() -> None:
    # REPLICA IDENTITY DEFAULT: 'before' holds only the key, the rest null.
    parsed = parse([change("d", {"id": 7}, before={"id": 7, "status": None, "amount": None, "placed_at": None,
                                                   "notes": None, "attrs": None}, commit=300, lsn=310),
                    change("d", {"id": 8}, before=None, commit=300, lsn=320)])
    assert parsed.rejects == []
    assert shown(parsed.changes, "id", "status", "op", "pos") == [(7, None, "d", (1, 300, 310)),
                                                                  (8, None, "d", (1, 300, 320))]


def test_tombstone_skipped_not_rejected() -> None:
    parsed = parse([change("d", {"id": 7}, before={"id": 7}, commit=300, lsn=310), tombstone({"id": 7})])
    assert shown(parsed.changes, "id", "op", "offset") == [(7, "d", 0)]
    assert (parsed.rejects, parsed.tombstones) == ([], 1)


def test_primary_key_change_is_a_delete_and_a_create() -> None:
    # UPDATE orders SET id = 2 WHERE id = 1: Debezium sends delete(1), tombstone(1), create(2), same WAL record.
    parsed = parse([change("d", {"id": 1}, before={"id": 1}, commit=400, lsn=410), tombstone({"id": 1}),
                    change("c", {"id": 2}, after=row(2, "paid"), commit=400, lsn=410)])
    assert shown(parsed.changes, "id", "status", "op", "pos") == [(1, None, "d", (1, 400, 410)),
                                                                  (2, "paid", "c", (1, 400, 410))]
    assert parsed.rejects == []


def test_snapshot_read_is_flagged_and_ranked_below_stream() -> None:
    parsed = parse([change("r", {"id": 1}, after=row(1), commit=None, lsn=500, snapshot="true"),
                    change("r", {"id": 2}, after=row(2), commit=None, lsn=500, snapshot="last"),
                    change("u", {"id": 1}, after=row(1, "paid"), commit=200, lsn=210),
                    change("c", {"id": 3}, after=row(3), commit=None, lsn=520, snapshot="incremental")])
    assert shown(parsed.changes, "id", "op", "pos") == [(1, "r", (0, 500, 500)), (2, "r", (0, 500, 500)),
                                                        (1, "u", (1, 200, 210)), (3, "c", (0, 520, 520))]


def test_position_falls_back_to_source_lsn_without_sequence() -> None:
    key, value = change("u", {"id": 1}, after=row(1), commit=100, lsn=130)
    assert value is not None
    envelope = json.loads(value)
    del envelope["payload"]["source"]["sequence"]
    garbled = json.loads(value)
    garbled["payload"]["source"]["sequence"] = "not a list"
    parsed = parse([(key, json.dumps(envelope).encode()), (key, json.dumps(garbled).encode())])
    assert [c.pos for c in parsed.changes] == [(1, 130, 130), (1, 130, 130)]


def test_toast_placeholder_passes_through_parse() -> None:
    parsed = parse([change("u", {"id": 1}, after=row(1, "paid", notes=UNAVAILABLE_VALUE), commit=200, lsn=210)])
    assert shown(parsed.changes, "id", "status", "notes") == [(1, "paid", UNAVAILABLE_VALUE)]
    assert parsed.rejects == []


def test_added_column_lands_in_extra_and_is_reported() -> None:
    # ALTER TABLE orders ADD COLUMN coupon text, discount numeric: the payload grows before the contract does.
    records = [change("c", {"id": 1}, after=row(1)),
               change("u", {"id": 1}, after=row(1, coupon="SPRING", discount="2.50", meta={"a": [1]}), commit=200,
                      lsn=210)]
    parsed = parse(records)
    assert shown(parsed.changes, "id", "op", "extra") == [
        (1, "c", None), (1, "u", '{"coupon":"SPRING","discount":"2.50","meta":"{\\"a\\":[1]}"}')]
    assert parsed.rejects == []
    assert parsed.extra_columns == ["coupon", "discount", "meta"]
    assert added_columns(ORDERS, ["id", "Status", "coupon", "discount", "coupon"]) == ["coupon", "discount"]
    assert added_columns(ROWS.names, ["id", "coupon"]) == ["coupon"]

    # Once the table is widened, re-parsing the same raw records types the new columns; nothing was lost.
    wider = pa.schema([*ROWS, ("coupon", pa.string()), ("discount", pa.decimal128(6, 2))])
    again = parse_records(raw(records), wider, KEYS)
    assert [(c.values[0], c.values[6], c.values[7], c.extra) for c in again.changes] == [
        (1, None, None, None), (1, "SPRING", Decimal("2.50"), '{"meta":"{\\"a\\":[1]}"}')]


def test_rejects_carry_raw_record_coordinates_and_reason() -> None:
    no_payload = json.dumps({"schema": {}, "before": None}).encode()
    good_key, good_value = change("u", {"id": 1}, after=row(1), commit=200, lsn=210)
    assert good_value is not None
    no_op = json.loads(good_value)
    del no_op["payload"]["op"]
    no_position = json.loads(good_value)
    del no_position["payload"]["source"]["lsn"], no_position["payload"]["source"]["sequence"]
    records: list[Record] = [
        (key_bytes({"id": 1}), b'{"schema": {}, "payload": {"op": "c", '),
        (key_bytes({"id": 1}), no_payload),
        (good_key, json.dumps(no_op).encode()),
        change("x", {"id": 1}, after=row(1)),
        change("t", {"id": 1}),
        change("u", {"id": 1}, after=None),
        (None, change("c", {"id": 1}, after={**row(1), "id": None})[1]),
        change("c", {"id": 1}, after=row(1, amount="12,50")),
        change("c", {"id": 1}, after=row(1, amount=UNAVAILABLE_VALUE, placed_at="yesterday")),
        change("c", {"id": 1}, after={**row(1), "id": "one"}),
        (good_key, json.dumps(no_position).encode()),
        (good_key, b"\xff\xfe not utf-8"),
        (good_key, b"[1, 2]"),
        change("c", {"id": 1}, after=row(1, amount="123456789.00")),
        (good_key, good_value),
    ]
    not_json = "value is not a JSON object (not UTF-8 JSON, truncated, or not written by the JsonConverter)"
    reasons = [
        not_json,
        "envelope has 'schema' but no 'payload': expected Debezium JsonConverter output",
        "payload has no 'op'",
        "unknown op 'x' (expected one of c, u, d, r)",
        "op 't' (truncate) removes every row and has no key: truncate the silver table by hand or re-snapshot",
        "op 'u' has no 'after' row image",
        "missing key column(s) id in the row image and the Kafka key",
        "column 'amount': cannot convert '12,50' to decimal(10,2)",
        f"column 'amount': cannot convert '{UNAVAILABLE_VALUE}' to decimal(10,2); "
        "column 'placed_at': cannot convert 'yesterday' to timestamp",
        "column 'id': a JSON string does not fit int; the row image does not match the table schema (id int, "
        "status string, amount decimal(10,2), placed_at timestamp, notes string, attrs string)",
        "source has neither 'sequence' nor 'lsn': the change cannot be ordered",
        not_json,
        not_json,
        "column 'amount': cannot convert '123456789.00' to decimal(10,2)",
    ]
    parsed = parse(records)
    assert [(r.offset, r.error) for r in parsed.rejects] == list(enumerate(reasons))
    assert [(r.key, r.value, r.topic, r.partition, r.kafka_timestamp) for r in parsed.rejects] == [
        (k, v, TOPIC, 0, KAFKA_TS) for k, v in records[:-1]]
    assert [c.offset for c in parsed.changes] == [len(records) - 1]
    # Counts reconcile: in = changes + rejects + tombstones.
    assert len(parsed.changes) + len(parsed.rejects) + parsed.tombstones == len(records)
    # What the executors hand back (mapInArrow rows): the rejects with their raw record, reason and coordinates.
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    silver = pa.schema([*ROWS, ("_op", pa.string()), ("_snapshot_rank", pa.int32()), ("_commit_lsn", pa.int64()),
                        ("_change_lsn", pa.int64()), ("_source_ts", UTC_US), ("_extra", pa.string())])
    out = to_arrow_schema(parse_output_schema(from_arrow_schema(silver)))
    batches = list(parse_batches(iter(raw(records).to_batches()), silver, out, KEYS))
    rows = pa.Table.from_batches(batches, schema=out).to_pylist()
    assert [r["_offset"] for r in rows if r["_error"] is None] == [len(records) - 1]
    assert [(r["_offset"], r["_value"], r["_kafka_timestamp"], r["_error"]) for r in rows if r["_error"]] == [
        (i, v, KAFKA_TS, reasons[i]) for i, (_k, v) in enumerate(records[:-1])]


def test_missing_key_falls_back_to_kafka_key() -> None:
    parsed = parse([change("c", {"id": 5}, after={**row(5), "id": None})])
    assert shown(parsed.changes, "id", "status") == [(5, "new")]
    assert parsed.rejects == []


def test_parse_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="key_columns is empty"):
        parse_records(raw([]), ROWS, [])
    with pytest.raises(ValueError, match=r"key column\(s\) \['order_id'\] are not in the table schema"):
        parse_records(raw([]), ROWS, ["order_id"])
    with pytest.raises(ValueError, match=r"column 'at': silver type timestamp.*not supported"):
        parse_records(raw([]), pa.schema([("id", pa.int32()), ("at", pa.timestamp("us"))]), KEYS)


def test_json_the_fast_parser_refuses_is_still_read() -> None:
    # orjson refuses integers beyond 64 bits; the stdlib parser reads them, so the record is not lost.
    key, value = change("u", {"id": 1}, after=row(1), commit=200, lsn=210)
    assert value is not None
    envelope = json.loads(value)
    envelope["payload"]["source"]["huge"] = 2**70
    parsed = parse([(key, json.dumps(envelope).encode())])
    assert (len(parsed.changes), parsed.rejects) == (1, [])


def _schemaless(record: Record) -> Record:
    """The same record as the connector sends it (``schemas.enable=false``): payloads without the envelope."""
    key, value = record
    return (None if key is None else json.dumps(json.loads(key)["payload"]).encode(),
            None if value is None else json.dumps(json.loads(value)["payload"]).encode())


def test_schemaless_records_parse_like_envelopes() -> None:
    records = [change("c", {"id": 1}, after=row(1, amount="1234.50"), commit=90, lsn=120),
               change("d", {"id": 2}, before=None, commit=300, lsn=320), tombstone({"id": 2}),
               (key_bytes({"id": 5}), change("c", {"id": 5}, after={**row(5), "id": None})[1]),
               change("r", {"id": 3}, after=row(3, coupon="X"), commit=None, lsn=500, snapshot="true"),
               change("c", {"id": 4}, after=row(4, amount="12,50"))]
    enveloped, bare = parse(records), parse([_schemaless(r) for r in records])
    assert bare.changes == enveloped.changes and len(bare.changes) == 4
    assert [(r.offset, r.error) for r in bare.rejects] == [(r.offset, r.error) for r in enveloped.rejects]
    assert bare.rejects[0].error == "column 'amount': cannot convert '12,50' to decimal(10,2)"
    assert (bare.tombstones, bare.extra_columns) == (1, ["coupon"])


def test_added_column_types_from_the_postgresql_catalog() -> None:
    from spark_jobs.streaming.cdc import spark_type_for

    assert spark_type_for("numeric", 12, 2) == "DECIMAL(12,2)"
    assert spark_type_for("numeric", None, None) == "STRING"  # unbounded NUMERIC: kept as its exact text
    assert spark_type_for("integer", 32, 0) == "INT"
    assert spark_type_for("bigint", 64, 0) == "BIGINT"
    assert spark_type_for("timestamp with time zone", None, None) == "TIMESTAMP"
    assert spark_type_for("jsonb", None, None) == "STRING"
    assert spark_type_for("date", None, None) == "DATE"
    assert spark_type_for("bytea", None, None) == "BINARY"
    assert spark_type_for("USER-DEFINED", None, None) == "STRING"


def _nested(depth: int) -> str:
    """JSON text of an object ``depth`` levels deep (built as text: json.dumps itself would recurse)."""
    return '{"n":' * depth + '"bottom"' + "}" * depth


@pytest.mark.parametrize("depth", [1_100, 5_000])
def test_deeply_nested_record_is_rejected_not_raised(depth: int) -> None:
    # orjson refuses >1,024 levels and the stdlib fallback hit RecursionError, which failed the batch on every
    # replay (the whole streaming app crash-looped). Now that record is quarantined and its neighbours apply.
    deep = ('{"payload": {"op": "c", "after": {"id": 2, "attrs": ' + _nested(depth) + "}}}").encode()
    parsed = parse([change("c", {"id": 1}, after=row(1)), (key_bytes({"id": 2}), deep),
                    change("c", {"id": 3}, after=row(3), lsn=101)])
    assert [c.values[0] for c in parsed.changes] == [1, 3]
    assert [(r.offset, r.error) for r in parsed.rejects] == [(1, TOO_DEEP)]
    assert parsed.rejects[0].value == deep


def test_deeply_nested_value_the_fast_parser_reads_is_rejected() -> None:
    # 1,000 levels: within orjson's limit, so no fallback parse; turning the object into the string column's
    # JSON text (json.dumps) recurses past Python's limit.
    value = ('{"payload": {"op": "c", "source": {"lsn": 5}, "after": {"id": 2, "attrs": ' + _nested(1_000)
             + "}}}").encode()
    parsed = parse([(key_bytes({"id": 2}), value)])
    assert parsed.changes == []
    assert [r.error for r in parsed.rejects] == [TOO_DEEP]


def test_added_column_with_a_name_delta_refuses_is_rejected_with_the_fix() -> None:
    parsed = parse([change("c", {"id": 1}, after={**row(1), "gift note": "x"}),
                    change("c", {"id": 2}, after={**row(2), "we`ird": "y"}, lsn=101)])
    # A space is not a Delta name without column mapping; a backtick breaks Delta's MERGE with the change data feed.
    assert parsed.changes == [] and parsed.extra_columns == []
    assert len(parsed.rejects) == 2
    assert "'gift note'" in parsed.rejects[0].error and "rename the column" in parsed.rejects[0].error
    assert "'we`ird'" in parsed.rejects[1].error and "backtick" in parsed.rejects[1].error
