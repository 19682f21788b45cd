"""cdc_history: raw Debezium records in bronze -> typed, ordered, de-duplicated change history (Spark parse)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from spark_jobs.contracts.shop import CUSTOMERS, ORDER_ITEMS, PRODUCTS
from spark_jobs.contracts.tables import schema_of
from spark_jobs.gold.history import cdc_history, history_columns
from spark_jobs.silver.cdc import UNAVAILABLE_VALUE

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NOTES = "Nota larga " * 300


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def customer(cid: int, email: str, *, name: str = "Ana", country: str | None = "DE", tier: str | None = "gold",
             notes: Any = "short", updated: str = "2026-03-01T10:00:00Z") -> dict[str, Any]:
    return {"customer_id": cid, "email": email, "full_name": name, "country": country, "loyalty_tier": tier,
            "profile": '{"newsletter":true}', "notes": notes, "created_at": "2026-01-01T00:00:00Z",
            "updated_at": updated}


def payload(op: str, commit: int | None, change: int, *, before: dict[str, Any] | None = None,
            after: dict[str, Any] | None = None, snapshot: str = "false", ts_ms: int = 1772366400000,
            table: str = "customers") -> dict[str, Any]:
    source: dict[str, Any] = {"version": "3.1.0.Final", "connector": "postgresql", "name": "shop", "db": "shop",
                              "schema": "public", "table": table, "snapshot": snapshot, "ts_ms": ts_ms,
                              "txId": 700, "lsn": change, "xmin": None}
    source["sequence"] = json.dumps([None if commit is None else str(commit), str(change)])
    return {"before": before, "after": after, "source": source, "op": op, "ts_ms": ts_ms + 5, "transaction": None}


def envelope(doc: dict[str, Any]) -> dict[str, Any]:
    return {"schema": {"type": "struct", "name": "shop.public.customers.Envelope", "optional": False,
                       "fields": []}, "payload": doc}


def bronze(spark: Any, records: list[tuple[dict[str, Any] | None, Any]]) -> Any:
    """(key dict, value doc | bytes | None) pairs -> bronze rows in that Kafka order (partition 0)."""
    rows = []
    for offset, (key, value) in enumerate(records):
        raw = value if isinstance(value, bytes | type(None)) else json.dumps(value).encode()
        rows.append((json.dumps(key).encode() if key is not None else None, raw, "shop.public.customers", 0, offset,
                     T0, T0, T0.date()))
    return spark.createDataFrame(rows, schema_of("bronze.events__clickstream"))


def cust_row(op: str, cid: int, email: str, commit: int, change: int, *, rank: int = 1, name: str = "Ana",
             notes: str | None = "short", updated: str = "2026-03-01T10:00:00Z", tier: str | None = "gold") -> Row:
    return Row(op=op, customer_id=cid, email=email, full_name=name, country="DE", loyalty_tier=tier,
               profile='{"newsletter":true}', notes=notes, created_at=_ts("2026-01-01T00:00:00Z"),
               updated_at=_ts(updated), _snapshot_rank=rank, _commit_lsn=commit, _change_lsn=change,
               _source_ts=datetime(2026, 3, 1, 12, 0, tzinfo=UTC).replace(tzinfo=None))


def expect(spark: Any, rows: list[Row], contract: Any = CUSTOMERS) -> Any:
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

    schema = StructType([StructField("op", StringType()), *contract.schema.fields,
                         StructField("_snapshot_rank", IntegerType()), StructField("_commit_lsn", LongType()),
                         StructField("_change_lsn", LongType()), StructField("_source_ts", TimestampType())])
    return spark.createDataFrame(rows, schema)


def test_output_columns_and_types(spark: Any) -> None:
    out = cdc_history(bronze(spark, []), CUSTOMERS)
    assert out.columns == history_columns(CUSTOMERS)
    types = {f.name: f.dataType.simpleString() for f in out.schema.fields}
    assert types["customer_id"] == "bigint" and types["updated_at"] == "timestamp"
    assert (types["_snapshot_rank"], types["_commit_lsn"], types["_change_lsn"], types["_source_ts"]) == (
        "int", "bigint", "bigint", "timestamp")


def test_payload_only_and_envelope_records_parse_the_same(spark: Any) -> None:
    a = payload("c", 100, 110, after=customer(1, "a@x"))
    b = payload("u", 200, 210, before=customer(1, "a@x"), after=customer(1, "b@x", updated="2026-03-01T11:00:00Z"))
    out = cdc_history(bronze(spark, [({"customer_id": 1}, a), ({"customer_id": 1}, envelope(b))]), CUSTOMERS)
    assertDataFrameEqual(out, expect(spark, [
        cust_row("c", 1, "a@x", 100, 110),
        cust_row("u", 1, "b@x", 200, 210, updated="2026-03-01T11:00:00Z"),
    ]))


def test_tombstone_and_unparseable_records_are_skipped(spark: Any) -> None:
    good = payload("c", 100, 110, after=customer(1, "a@x"))
    truncate = payload("t", 300, 310)
    no_position = payload("c", None, 1, after=customer(2, "c@x"))
    no_position["source"].pop("sequence")
    no_position["source"]["lsn"] = None
    bad_type = payload("c", 400, 410, after={**customer(3, "d@x"), "updated_at": "yesterday"})
    # A forged commit time past Spark's timestamps (fits a bigint; milliseconds -> microseconds overflows): the
    # stream quarantines it, the history skips it instead of failing the whole read (seen: "long overflow").
    far = payload("c", 500, 510, after=customer(4, "e@x"), ts_ms=9_000_000_000_000_000)
    out = cdc_history(bronze(spark, [
        ({"customer_id": 1}, good), ({"customer_id": 1}, None), (None, b"{not json"), (None, b"[1, 2]"),
        ({"customer_id": 9}, truncate), ({"customer_id": 2}, no_position), ({"customer_id": 3}, bad_type),
        (None, envelope(None)),  # type: ignore[arg-type]
        ({"customer_id": 4}, far),
    ]), CUSTOMERS)
    assertDataFrameEqual(out, expect(spark, [cust_row("c", 1, "a@x", 100, 110)]))


def test_delete_takes_the_before_image_and_the_kafka_key(spark: Any) -> None:
    # REPLICA IDENTITY FULL: the whole old row; DEFAULT would give only the key (here: not even that,
    # so the Kafka key stands in).
    full = payload("d", 200, 210, before=customer(1, "a@x", updated="2026-03-02T00:00:00Z"))
    bare = payload("d", 300, 310, before={"email": None})
    out = cdc_history(bronze(spark, [({"customer_id": 1}, full),
                                     ({"schema": {}, "payload": {"customer_id": 5}}, bare)]), CUSTOMERS)
    rows = sorted(out.collect(), key=lambda r: r.customer_id)
    assert [(r.op, r.customer_id, r.email, r.updated_at) for r in rows] == [
        ("d", 1, "a@x", datetime(2026, 3, 2)), ("d", 5, None, None)]


def test_position_from_sequence_then_lsn_and_snapshot_rank(spark: Any) -> None:
    snap = payload("r", 50, 50, after=customer(1, "a@x"), snapshot="true")
    last = payload("r", 50, 50, after=customer(2, "b@x"), snapshot="last")
    legacy = payload("c", None, 120, after=customer(3, "c@x"))  # first txn after start: sequence [null, lsn]
    legacy["source"]["sequence"] = None
    streamed = payload("c", None, 130, after=customer(4, "d@x"))
    out = cdc_history(bronze(spark, [({"customer_id": 1}, snap), ({"customer_id": 2}, last),
                                     ({"customer_id": 3}, legacy), ({"customer_id": 4}, streamed)]), CUSTOMERS)
    got = sorted((r.customer_id, r.op, r._snapshot_rank, r._commit_lsn, r._change_lsn) for r in out.collect())
    assert got == [(1, "r", 0, 50, 50), (2, "r", 0, 50, 50), (3, "c", 1, 120, 120), (4, "c", 1, 130, 130)]


def test_resent_change_appears_once(spark: Any) -> None:
    a = payload("c", 100, 110, after=customer(1, "a@x"))
    b = payload("u", 200, 210, before=customer(1, "a@x"), after=customer(1, "b@x"))
    out = cdc_history(bronze(spark, [({"customer_id": 1}, a), ({"customer_id": 1}, b),
                                     ({"customer_id": 1}, envelope(a)), ({"customer_id": 1}, b)]), CUSTOMERS)
    assert sorted((r.op, r._commit_lsn, r.email) for r in out.collect()) == [("c", 100, "a@x"), ("u", 200, "b@x")]


def test_toast_placeholder_takes_the_previous_value_by_position(spark: Any) -> None:
    created = payload("c", 100, 110, after=customer(1, "a@x", notes=NOTES))
    touched = payload("u", 200, 210, after=customer(1, "b@x", notes=UNAVAILABLE_VALUE))
    nulled = payload("u", 300, 310, after=customer(1, "c@x", notes=None))
    again = payload("u", 400, 410, after=customer(1, "d@x", notes=UNAVAILABLE_VALUE))
    orphan = payload("u", 500, 510, after=customer(2, "e@x", notes=UNAVAILABLE_VALUE))
    # Kafka order differs from the source order: the fill follows the position.
    out = cdc_history(bronze(spark, [({"customer_id": 1}, again), ({"customer_id": 1}, touched),
                                     ({"customer_id": 1}, created), ({"customer_id": 1}, nulled),
                                     ({"customer_id": 2}, orphan)]), CUSTOMERS)
    got = sorted((r.customer_id, r._commit_lsn, r.notes) for r in out.collect())
    assert got == [(1, 100, NOTES), (1, 200, NOTES), (1, 300, None), (1, 400, None), (2, 500, UNAVAILABLE_VALUE)]


def test_numbers_booleans_and_json_are_typed_from_text(spark: Any) -> None:
    product = {"product_id": 10, "sku": "SKU-10", "name": "Kaffee", "description": "Röstung", "price": "18.90",
               "attributes": '{"origin": "Perú"}', "active": False, "updated_at": "2026-03-01T10:00:00.123456Z"}
    item = {"order_id": 100, "line_no": 2, "product_id": 10, "quantity": 3, "unit_price": "0.35",
            "discount": "0.5000"}
    p = cdc_history(bronze(spark, [({"product_id": 10}, payload("c", 1, 2, after=product, table="products"))]),
                    PRODUCTS).collect()
    i = cdc_history(bronze(spark, [({"order_id": 100, "line_no": 2},
                                    payload("c", 1, 2, after=item, table="order_items"))]), ORDER_ITEMS).collect()
    assert (p[0].price, p[0].active, p[0].attributes, p[0].updated_at) == (
        Decimal("18.90"), False, '{"origin": "Perú"}', datetime(2026, 3, 1, 10, 0, 0, 123456))
    assert (i[0].order_id, i[0].line_no, i[0].quantity, i[0].unit_price, i[0].discount) == (
        100, 2, 3, Decimal("0.35"), Decimal("0.5000"))


@pytest.mark.parametrize("flag", ["true", "incremental", "last"])
def test_snapshot_flag_other_than_false_ranks_as_snapshot(spark: Any, flag: str) -> None:
    doc = payload("c", 100, 110, after=customer(1, "a@x"), snapshot=flag)
    out = cdc_history(bronze(spark, [({"customer_id": 1}, doc)]), CUSTOMERS).collect()
    assert [r._snapshot_rank for r in out] == [0]


def test_a_forged_empty_sequence_falls_back_to_the_lsn_or_is_skipped(spark: Any) -> None:
    # "sequence": "[]" from a principal allowed to write the topic: getItem(0) failed the whole read under ANSI.
    with_lsn = payload("c", 100, 110, after=customer(1, "a@x"))
    with_lsn["source"]["sequence"] = "[]"
    without = payload("c", 200, 210, after=customer(2, "b@x"))
    without["source"].update(sequence="[]", lsn=None)
    out = cdc_history(bronze(spark, [({"customer_id": 1}, with_lsn), ({"customer_id": 2}, without)]), CUSTOMERS)
    assert [(r.customer_id, r._commit_lsn, r._change_lsn) for r in out.collect()] == [(1, 110, 110)]


def test_fuzzed_bronze_never_fails_the_history_or_the_dimension(spark: Any) -> None:
    """Whatever a principal allowed to write the topic sends, the gold read of bronze completes (poison is skipped,
    as the stream quarantines it); every good change of a distinct key is in the dimension."""
    from hypothesis import strategies as st
    from pyspark.sql.pandas.types import to_arrow_schema

    from spark_jobs.gold.dims import dim_customers
    from tests.cdc_fuzz import bad_record, good_record, sample, tombstone, wild_record

    rows, keys = to_arrow_schema(CUSTOMERS.schema), list(CUSTOMERS.keys)
    band = st.integers(-(2**62), 2**62)
    good = sample(good_record(rows, keys, extra_columns=False, key_values=band, ops=("c", "u", "r")), 60)
    bad = sample(bad_record(rows, keys, refused=("zz_forged",), key_values=band), 120)
    wild = [wild_record(rows, keys).example() for _ in range(60)]
    pairs = [(f.key, f.value) for f in [*good, *bad, *sample(tombstone(keys, band), 5)]] + wild
    frame = spark.createDataFrame(
        [(k, v, "shop.public.customers", 0, i, T0, T0, T0.date()) for i, (k, v) in enumerate(pairs)],
        schema_of("bronze.events__clickstream"))
    history = cdc_history(frame, CUSTOMERS)
    dims = dim_customers(history).collect()
    assert {(f.expected or {})["customer_id"] for f in good} <= {r.customer_id for r in dims}
    # Gold's block rule: every version has a valid_from, forged records without any time included.
    assert all(r.valid_from is not None for r in dims)


def test_a_change_without_any_commit_time_is_dated_by_kafka(spark: Any) -> None:
    bare = payload("c", 100, 110, after={**customer(1, "a@x"), "updated_at": None})
    bare["source"].pop("ts_ms")
    bare.pop("ts_ms")
    out = cdc_history(bronze(spark, [({"customer_id": 1}, bare)]), CUSTOMERS).collect()
    assert [(r.customer_id, r._source_ts) for r in out] == [(1, T0.replace(tzinfo=None))]
