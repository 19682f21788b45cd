"""parse_events: clickstream records in bronze -> valid typed events + rejects, checked on the executors (mapInArrow)
with the reason codes the contract gives."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from spark_jobs.contracts.clickstream import (
    INVALID_VALUE,
    NOT_JSON,
    TOPIC,
    check_record,
)
from spark_jobs.loadgen.clickstream import BAD_KINDS
from spark_jobs.silver.clickstream import REJECT_SCHEMA, parse_events
from tests.unit.event_records import (
    EDGE_CASES,
    EVENT_ID,
    KAFKA_TS,
    enc,
    event,
    generated_corpus,
    reason_code,
    with_props,
    without,
)

BRONZE_DDL = (
    "key binary, value binary, topic string, partition int, offset long, kafka_timestamp timestamp, ingest_time timestamp"
)
INGEST = datetime(2026, 11, 22, 5, 0, 5, tzinfo=UTC)


def bronze(spark: Any, values: Sequence[bytes | None], kafka_ts: datetime = KAFKA_TS) -> Any:
    rows = [(b"42", v, TOPIC, i % 3, 1000 + i, kafka_ts, INGEST) for i, v in enumerate(values)]
    return spark.createDataFrame(rows, BRONZE_DDL)


def spark_reasons(spark: Any, values: list[bytes | None]) -> dict[int, tuple[str | None, str | None]]:
    valid, rejects = parse_events(bronze(spark, values))
    out: dict[int, tuple[str | None, str | None]] = {r["_offset"] - 1000: (None, None) for r in valid.collect()}
    for r in rejects.collect():
        out[r["offset"] - 1000] = (r["reason"], r["error"])
    assert len(out) == len(values), "every record is either valid or rejected, exactly once"
    return out


def test_edge_cases_python_classifier() -> None:
    wrong = {name: (expected, check_record(value, KAFKA_TS)) for name, value, expected in EDGE_CASES
             if reason_code(value, KAFKA_TS) != expected}
    assert wrong == {}


def test_parity_with_the_python_contract(spark: Any) -> None:
    corpus = generated_corpus()
    values = [v for _, v in corpus] + [v for _, v, _ in EDGE_CASES]
    kinds = [k for k, _ in corpus] + [f"edge: {name}" for name, _, _ in EDGE_CASES]
    assert set(BAD_KINDS) <= set(kinds) and {"valid", "late", "duplicate"} <= set(kinds)
    got = spark_reasons(spark, values)
    differ = {}
    for i, value in enumerate(values):
        python = check_record(value, KAFKA_TS)
        spark_reason, spark_error = got[i]
        if (python[0] if python else None) != spark_reason:
            differ[f"{i} {kinds[i]}"] = {"python": python, "spark": (spark_reason, spark_error)}
    assert differ == {}


def test_generated_bad_records_get_their_own_reason(spark: Any) -> None:
    corpus = generated_corpus(400)
    got = spark_reasons(spark, [v for _, v in corpus])
    for i, (kind, _) in enumerate(corpus):
        expected = kind if kind in BAD_KINDS else None
        assert got[i][0] == expected, (kind, got[i])


def test_reject_details_name_the_field(spark: Any) -> None:
    cases = {
        "user_id": enc(event(user_id="abc")),
        "session_id": enc(without(event(), "session_id")),
        "properties.quantity": enc(with_props("add_to_cart", quantity=-1)),
        "properties.revenue": enc(with_props("purchase", revenue="12.345")),
        "referrer": enc(event(referrer="ad")),
        "event_time": enc(event(event_time="2026-11-22T06:00:00Z")),
    }
    got = spark_reasons(spark, list(cases.values()))
    for i, field in enumerate(cases):
        error = got[i][1] or ""
        assert error.startswith(f"{field}:"), error
        python = check_record(list(cases.values())[i], KAFKA_TS)
        assert python is not None and python[1].startswith(f"{field}:"), python


def test_rejects_keep_raw_bytes_and_coordinates(spark: Any) -> None:
    values = [enc(event()), b"hello", None]
    valid, rejects = parse_events(bronze(spark, values))
    assert rejects.schema == REJECT_SCHEMA
    want = spark.createDataFrame(
        [(b"42", b"hello", TOPIC, 1, 1001, KAFKA_TS, NOT_JSON, check_record(b"hello", KAFKA_TS)[1]),  # type: ignore[index]
         (b"42", None, TOPIC, 2, 1002, KAFKA_TS, NOT_JSON, "record has no value (tombstone)")], REJECT_SCHEMA)
    assertDataFrameEqual(rejects, want)
    assert valid.count() + rejects.count() == len(values)


def test_valid_columns_money_exact_and_event_time_instant(spark: Any) -> None:
    purchase = with_props("purchase", revenue="12345678901234.56", order_id="o-9")
    purchase["event_time"] = "2026-11-21T23:59:59.999Z"
    cart = with_props("add_to_cart", price="0.10", quantity=3, product_id=9_000_000_000)
    valid, rejects = parse_events(bronze(spark, [enc(purchase), enc(cart)]))
    assert rejects.count() == 0
    assert valid.columns == [
        "event_id", "event_type", "user_id", "session_id", "event_time", "event_date", "properties", "page",
        "product_id", "quantity", "price", "cart_value", "order_id", "revenue", "currency", "schema_version",
        "_topic", "_partition", "_offset", "_kafka_timestamp", "_ingest_time"]
    types = dict(valid.dtypes)
    assert (types["user_id"], types["product_id"], types["quantity"], types["revenue"], types["price"],
            types["event_time"], types["event_date"], types["schema_version"]) == (
        "bigint", "bigint", "int", "decimal(18,2)", "decimal(18,2)", "timestamp", "date", "int")
    rows = {r.event_type: r for r in valid.collect()}
    p, c = rows["purchase"], rows["add_to_cart"]
    assert p.revenue == Decimal("12345678901234.56") and p.currency == "EUR" and p.order_id == "o-9"
    assert p.price is None and p.page is None and p.quantity is None
    assert c.price == Decimal("0.10") and c.quantity == 3 and c.product_id == 9_000_000_000 and c.revenue is None
    assert json.loads(p.properties) == purchase["properties"]
    assert (p.event_id, p.user_id, p.session_id, p.schema_version) == (EVENT_ID, 42, "s-1", 1)
    assert (p._partition, p._offset) == (0, 1000)
    # The instant and its UTC date do not depend on the session time zone.
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
    try:
        got = (parse_events(bronze(spark, [enc(purchase)]))[0]
               .select(F.unix_micros("event_time").alias("us"), F.col("event_date").cast("string").alias("d"))
               .first())
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
    instant = datetime(2026, 11, 21, 23, 59, 59, 999_000, tzinfo=UTC)
    assert got is not None
    assert got.us == int(instant.timestamp()) * 1_000_000 + 999_000
    assert got.d == str(date(2026, 11, 21))


def test_revenue_sum_is_exact(spark: Any) -> None:
    values = [enc(with_props("purchase", revenue=r, order_id=f"o{i}") | {"event_id": f"{i:08d}" + EVENT_ID[8:]})
              for i, r in enumerate(["0.10", "0.20", "9999999999999999.99", "0.01"])]
    valid, _ = parse_events(bronze(spark, values))
    total = valid.agg(F.sum("revenue").alias("s")).first()
    assert total is not None and total.s == Decimal("10000000000000000.30")


def test_extra_bronze_columns_are_ignored(spark: Any) -> None:
    src = bronze(spark, [enc(event())]).withColumn("ingest_date", F.lit(date(2026, 11, 22)))
    valid, rejects = parse_events(src)
    assert valid.count() == 1 and rejects.count() == 0


@pytest.mark.parametrize("late_s", [0, 299])
def test_future_limit_is_relative_to_the_kafka_timestamp(spark: Any, late_s: int) -> None:
    doc = event(event_time="2026-11-22T05:04:59.250Z")  # 299 s after KAFKA_TS
    ts = KAFKA_TS - timedelta(seconds=late_s)
    got = spark_reasons_at(spark, enc(doc), ts)
    expected = None if late_s == 0 else INVALID_VALUE
    assert got == expected == reason_code(enc(doc), ts)


def spark_reasons_at(spark: Any, value: bytes, kafka_ts: datetime) -> str | None:
    _, rejects = parse_events(bronze(spark, [value], kafka_ts))
    row = rejects.first()
    return None if row is None else str(row.reason)


def test_split_parses_each_record_once(spark: Any) -> None:
    """Each of valid/rejects runs the Python check once over the records (one MapInArrow), not per column."""
    valid, rejects = parse_events(bronze(spark, [enc(event())]))
    for frame in (valid, rejects):
        plan = frame._jdf.queryExecution().optimizedPlan().toString()
        assert plan.count("MapInArrow") == 1, plan
