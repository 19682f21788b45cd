"""Debezium record builders shared by the CDC tests (parse, MERGE plan, apply): the ``shop.public.orders``
stand-in table, its row images, and keys, changes and tombstones as the JsonConverter sends them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyspark.sql.types import DecimalType, IntegerType, StringType, StructField, StructType, TimestampType

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
UTC_US = pa.timestamp("us", tz="UTC")
#: The same row image as Arrow: the silver table's schema minus metadata, as the app hands it to the parse.
ROWS = pa.schema([("id", pa.int32()), ("status", pa.string()), ("amount", pa.decimal128(10, 2)),
                  ("placed_at", UTC_US), ("notes", pa.string()), ("attrs", pa.string())])
KAFKA_TS = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)

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


def raw(records: list[Record], first_offset: int = 0) -> pa.Table:
    """Raw Kafka rows as the streaming app collects them: partition 0, consecutive offsets."""
    return pa.table({
        "key": pa.array([k for k, _ in records], pa.binary()),
        "value": pa.array([v for _, v in records], pa.binary()),
        "topic": pa.array([TOPIC] * len(records), pa.string()),
        "partition": pa.array([0] * len(records), pa.int32()),
        "offset": pa.array(range(first_offset, first_offset + len(records)), pa.int64()),
        "kafka_timestamp": pa.array([KAFKA_TS] * len(records), UTC_US),
    })
