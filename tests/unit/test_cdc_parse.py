"""parse_changes: Debezium envelopes in bronze -> typed changes + rejects (one named test per edge case)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql.types import (
    BinaryType,
    DateType,
    DecimalType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from pyspark.testing import assertDataFrameEqual

from spark_jobs.silver.cdc import (
    REJECT_SCHEMA,
    UNAVAILABLE_VALUE,
    added_columns,
    extra_column_names,
    parse_changes,
)

TOPIC = "shop.public.orders"
KEYS = ["id"]
ORDERS = StructType(
    [
        StructField("id", IntegerType()),
        StructField("status", StringType()),
        StructField("amount", DecimalType(10, 2)),
        StructField("placed_at", TimestampType()),
        StructField("notes", StringType()),  # large TEXT, TOAST-able
        StructField("attrs", StringType()),  # JSONB, arrives as JSON text
    ]
)
BRONZE_DDL = (
    "key binary, value binary, topic string, partition int, offset long, kafka_timestamp timestamp, ingest_time timestamp"
)
KAFKA_TS = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
POS = "_op string, _commit_lsn long, _change_lsn long, _snapshot boolean"

Record = tuple[bytes | None, bytes | None]


def row(id: int, status: str = "new", amount: str | None = "10.00", **more: Any) -> dict[str, Any]:
    """An ``orders`` row image as Debezium sends it (NUMERIC as string, timestamptz as ISO-8601)."""
    return {"id": id, "status": status, "amount": amount, "placed_at": "2024-03-01T10:15:30.123456Z",
            "notes": "n", "attrs": '{"gift": true}', **more}


def key_bytes(key: dict[str, Any]) -> bytes:
    schema = {"type": "struct", "optional": False, "name": "shop.public.orders.Key",
              "fields": [{"field": k, "type": "int32", "optional": False} for k in key]}
    return json.dumps({"schema": schema, "payload": key}).encode()


def change(op: str, key: dict[str, Any], *, before: dict[str, Any] | None = None,
           after: dict[str, Any] | None = None, commit: int | None = 100, lsn: int = 100,
           snapshot: str = "false", ts_ms: int = 1_709_290_000_000) -> Record:
    """A Debezium JsonConverter (schemas.enable=true) record for ``shop.public.orders``."""
    sequence = json.dumps([None if commit is None else str(commit), str(lsn)])
    source = {"version": "3.1.0.Final", "connector": "postgresql", "name": "shop", "db": "shop", "schema": "public",
              "table": "orders", "lsn": lsn, "txId": 700, "sequence": sequence, "snapshot": snapshot, "ts_ms": ts_ms}
    payload = {"before": before, "after": after, "source": source, "op": op, "ts_ms": ts_ms + 5}
    value = {"schema": {"type": "struct", "name": "shop.public.orders.Envelope", "fields": []}, "payload": payload}
    return key_bytes(key), json.dumps(value).encode()


def tombstone(key: dict[str, Any]) -> Record:
    return key_bytes(key), None


def bronze(spark: Any, records: list[Record], first_offset: int = 0) -> Any:
    """Bronze rows for ``records``: partition 0, consecutive offsets."""
    rows = [(k, v, TOPIC, 0, first_offset + i, KAFKA_TS, KAFKA_TS) for i, (k, v) in enumerate(records)]
    return spark.createDataFrame(rows, BRONZE_DDL)


def test_parse_create_types_every_column_and_position(spark: Any) -> None:
    src = bronze(spark, [change("c", {"id": 1}, after=row(1, amount="1234.50"), commit=90, lsn=120)])
    changes, rejects = parse_changes(src, ORDERS, KEYS)
    want = spark.createDataFrame(
        [(1, "new", Decimal("1234.50"), datetime(2024, 3, 1, 10, 15, 30, 123456, tzinfo=UTC), "n", '{"gift": true}',
          "c", 90, 120, False, 1, (1, 90, 120), datetime(2024, 3, 1, 10, 46, 40, tzinfo=UTC), None, TOPIC, 0, 0)],
        "id int, status string, amount decimal(10,2), placed_at timestamp, notes string, attrs string, "
        f"{POS}, _snapshot_rank int, _pos struct<_snapshot_rank:int,_commit_lsn:long,_change_lsn:long>, "
        "_source_ts timestamp, _extra string, _topic string, _partition int, _offset long",
    )
    assertDataFrameEqual(changes, want)
    assert rejects.count() == 0


def test_parse_date_and_binary_wire_formats(spark: Any) -> None:
    # io.debezium.time.Date is days since the epoch; bytea is base64 (binary.handling.mode=base64).
    schema = StructType([StructField("id", IntegerType()), StructField("born", DateType()),
                         StructField("blob", BinaryType())])
    src = bronze(spark, [change("c", {"id": 1}, after={"id": 1, "born": 19783, "blob": "aGk="})])
    changes, _ = parse_changes(src, schema, KEYS)
    assertDataFrameEqual(changes.select("id", "born", "blob"),
                         spark.createDataFrame([(1, date(2024, 3, 1), bytearray(b"hi"))], "id int, born date, blob binary"))


def test_parse_delete_takes_row_image_from_before_and_key(spark: Any) -> None:
    # REPLICA IDENTITY DEFAULT: 'before' holds only the key, the rest null.
    src = bronze(spark, [change("d", {"id": 7}, before={"id": 7, "status": None, "amount": None, "placed_at": None,
                                                        "notes": None, "attrs": None}, commit=300, lsn=310),
                         change("d", {"id": 8}, before=None, commit=300, lsn=320)])
    changes, rejects = parse_changes(src, ORDERS, KEYS)
    assertDataFrameEqual(changes.select("id", "status", "_op", "_commit_lsn", "_change_lsn", "_snapshot"),
                         spark.createDataFrame([(7, None, "d", 300, 310, False), (8, None, "d", 300, 320, False)],
                                               f"id int, status string, {POS}"))
    assert rejects.count() == 0


def test_tombstone_skipped_not_rejected(spark: Any) -> None:
    src = bronze(spark, [change("d", {"id": 7}, before={"id": 7}, commit=300, lsn=310), tombstone({"id": 7})])
    changes, rejects = parse_changes(src, ORDERS, KEYS)
    assertDataFrameEqual(changes.select("id", "_op", "_offset"), spark.createDataFrame([(7, "d", 0)],
                                                                                        "id int, _op string, _offset long"))
    assert rejects.count() == 0


def test_primary_key_change_is_a_delete_and_a_create(spark: Any) -> None:
    # UPDATE orders SET id = 2 WHERE id = 1: Debezium sends delete(1), tombstone(1), create(2), same WAL record.
    src = bronze(spark, [change("d", {"id": 1}, before={"id": 1}, commit=400, lsn=410),
                         tombstone({"id": 1}),
                         change("c", {"id": 2}, after=row(2, "paid"), commit=400, lsn=410)])
    changes, rejects = parse_changes(src, ORDERS, KEYS)
    assertDataFrameEqual(changes.select("id", "status", "_op", "_commit_lsn", "_change_lsn", "_snapshot"),
                         spark.createDataFrame([(1, None, "d", 400, 410, False), (2, "paid", "c", 400, 410, False)],
                                               f"id int, status string, {POS}"))
    assert rejects.count() == 0


def test_snapshot_read_is_flagged_and_ranked_below_stream(spark: Any) -> None:
    src = bronze(spark, [change("r", {"id": 1}, after=row(1), commit=None, lsn=500, snapshot="true"),
                         change("r", {"id": 2}, after=row(2), commit=None, lsn=500, snapshot="last"),
                         change("u", {"id": 1}, after=row(1, "paid"), commit=200, lsn=210)])
    changes, _ = parse_changes(src, ORDERS, KEYS)
    assertDataFrameEqual(changes.select("id", "_op", "_commit_lsn", "_change_lsn", "_snapshot", "_snapshot_rank"),
                         spark.createDataFrame([(1, "r", 500, 500, True, 0), (2, "r", 500, 500, True, 0),
                                                (1, "u", 200, 210, False, 1)], f"id int, {POS}, _snapshot_rank int"))


def test_position_falls_back_to_source_lsn_without_sequence(spark: Any) -> None:
    key, value = change("u", {"id": 1}, after=row(1), commit=100, lsn=130)
    assert value is not None
    envelope = json.loads(value)
    del envelope["payload"]["source"]["sequence"]
    src = bronze(spark, [(key, json.dumps(envelope).encode())])
    changes, _ = parse_changes(src, ORDERS, KEYS)
    assertDataFrameEqual(changes.select("_commit_lsn", "_change_lsn"),
                         spark.createDataFrame([(130, 130)], "_commit_lsn long, _change_lsn long"))


def test_toast_placeholder_passes_through_parse(spark: Any) -> None:
    src = bronze(spark, [change("u", {"id": 1}, after=row(1, "paid", notes=UNAVAILABLE_VALUE), commit=200, lsn=210)])
    changes, rejects = parse_changes(src, ORDERS, KEYS)
    assertDataFrameEqual(changes.select("id", "status", "notes"),
                         spark.createDataFrame([(1, "paid", UNAVAILABLE_VALUE)], "id int, status string, notes string"))
    assert rejects.count() == 0


def test_added_column_lands_in_extra_and_is_reported(spark: Any) -> None:
    # ALTER TABLE orders ADD COLUMN coupon text, discount numeric: the payload grows before the contract does.
    src = bronze(spark, [change("c", {"id": 1}, after=row(1)),
                         change("u", {"id": 1}, after=row(1, coupon="SPRING", discount="2.50"), commit=200, lsn=210)])
    changes, rejects = parse_changes(src, ORDERS, KEYS)
    assertDataFrameEqual(changes.select("id", "_op", "_extra"), spark.createDataFrame(
        [(1, "c", None), (1, "u", '{"coupon":"SPRING","discount":"2.50"}')], "id int, _op string, _extra string"))
    assert rejects.count() == 0
    assertDataFrameEqual(extra_column_names(changes),
                         spark.createDataFrame([("coupon",), ("discount",)], "column string"))
    assert added_columns(ORDERS, ["id", "Status", "coupon", "discount", "coupon"]) == ["coupon", "discount"]

    # Once the contract is widened, re-parsing the same bronze rows types the new columns; nothing was lost.
    wider = StructType([*ORDERS.fields, StructField("coupon", StringType()), StructField("discount", DecimalType(6, 2))])
    changes2, _ = parse_changes(src, wider, KEYS)
    assertDataFrameEqual(changes2.select("id", "_op", "coupon", "discount", "_extra"), spark.createDataFrame(
        [(1, "c", None, None, None), (1, "u", "SPRING", Decimal("2.50"), None)],
        "id int, _op string, coupon string, discount decimal(6,2), _extra string"))


def test_rejects_carry_raw_record_coordinates_and_reason(spark: Any) -> None:
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
        (good_key, good_value),
    ]
    src = bronze(spark, records)
    changes, rejects = parse_changes(src, ORDERS, KEYS)
    schema_text = ("row image does not match the table schema (id int, status string, amount decimal(10,2), "
                   "placed_at timestamp, notes string, attrs string)")
    reasons = [
        "value is not a JSON object (not UTF-8 JSON, truncated, or not written by the JsonConverter)",
        "envelope has no 'payload': expected Debezium JsonConverter output with schemas.enable=true",
        "payload has no 'op'",
        "unknown op 'x' (expected one of c, u, d, r)",
        "op 't' (truncate) removes every row and has no key: truncate the silver table by hand or re-snapshot",
        "op 'u' has no 'after' row image",
        "missing key column(s) id in the row image and the Kafka key",
        "column 'amount': cannot convert '12,50' to decimal(10,2)",
        f"column 'amount': cannot convert '{UNAVAILABLE_VALUE}' to decimal(10,2); "
        "column 'placed_at': cannot convert 'yesterday' to timestamp",
        schema_text,
        "source has neither 'sequence' nor 'lsn': the change cannot be ordered",
    ]
    want = spark.createDataFrame(
        [(k, v, TOPIC, 0, i, reasons[i], KAFKA_TS) for i, (k, v) in enumerate(records[:-1])], REJECT_SCHEMA
    )
    assertDataFrameEqual(rejects, want)
    assertDataFrameEqual(changes.select("id", "_offset"), spark.createDataFrame([(1, 11)], "id int, _offset long"))
    # Counts reconcile: in = changes + rejects + tombstones.
    assert changes.count() + rejects.count() == src.count()


def test_missing_key_falls_back_to_kafka_key(spark: Any) -> None:
    src = bronze(spark, [change("c", {"id": 5}, after={**row(5), "id": None})])
    changes, rejects = parse_changes(src, ORDERS, KEYS)
    assertDataFrameEqual(changes.select("id", "status"), spark.createDataFrame([(5, "new")], "id int, status string"))
    assert rejects.count() == 0


def test_parse_rejects_bad_arguments(spark: Any) -> None:
    src = bronze(spark, [])
    with pytest.raises(ValueError, match="key_columns is empty"):
        parse_changes(src, ORDERS, [])
    with pytest.raises(ValueError, match=r"key column\(s\) \['order_id'\] are not in the table schema"):
        parse_changes(src, ORDERS, ["order_id"])
