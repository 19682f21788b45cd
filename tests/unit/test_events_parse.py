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

from spark_jobs.contracts.events import (
    INVALID_VALUE,
    MAX_EVENT_BYTES,
    MISSING_FIELD,
    NOT_JSON,
    OVERSIZED,
    TOPIC,
    WRONG_TYPE,
    check_record,
    classify_record,
)
from spark_jobs.loadgen.events import BAD_KINDS, ClickstreamGenerator
from spark_jobs.silver.events import REJECT_SCHEMA, parse_events

BRONZE_DDL = (
    "key binary, value binary, topic string, partition int, offset long, kafka_timestamp timestamp, ingest_time timestamp"
)
KAFKA_TS = datetime(2026, 11, 22, 5, 0, 0, 250_000, tzinfo=UTC)
INGEST = datetime(2026, 11, 22, 5, 0, 5, tzinfo=UTC)
EVENT_ID = "0b8e7f0e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"


def event(event_type: Any = "page_view", **changes: Any) -> dict[str, Any]:
    props = {
        "page_view": {"page": "/p/7"},
        "add_to_cart": {"product_id": 7, "quantity": 2, "price": "19.99"},
        "checkout": {"cart_value": "39.98"},
        "purchase": {"order_id": "o-1", "revenue": "39.98", "currency": "EUR"},
    }.get(event_type, {"page": "/"})
    doc: dict[str, Any] = {"event_id": EVENT_ID, "event_type": event_type, "user_id": 42, "session_id": "s-1",
                           "event_time": "2026-11-22T04:59:59.123Z", "properties": props, "schema_version": 1}
    doc.update(changes)
    return doc


def with_props(event_type: str, **changes: Any) -> dict[str, Any]:
    doc = event(event_type)
    doc["properties"] = {**doc["properties"], **changes}
    return doc


def without(doc: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in names}


def enc(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def padded_to(size: int) -> bytes:
    """A valid page_view of exactly ``size`` bytes (the padding is an extra property)."""
    base = enc(with_props("page_view", pad=""))
    return enc(with_props("page_view", pad="x" * (size - len(base))))


# (name, value, expected reason) -- each names one rule; the corpus is checked by both implementations.
EDGE_CASES: list[tuple[str, bytes | None, str | None]] = [
    ("valid page_view", enc(event()), None),
    ("valid add_to_cart", enc(event("add_to_cart")), None),
    ("valid checkout", enc(event("checkout")), None),
    ("valid purchase", enc(event("purchase")), None),
    ("whitespace around the object", b"  " + enc(event()) + b"\n", None),
    ("extra property is allowed", enc(with_props("page_view", referrer="ad")), None),
    ("unicode page, 64-char multibyte session", enc(event(session_id="é" * 64, properties={"page": "/köln/東京"})), None),
    ("lone surrogate in a string", b'{"event_id":"' + EVENT_ID.encode() + b'","event_type":"page_view","user_id":1,'
     b'"session_id":"s","event_time":"2026-11-22T04:59:59Z","properties":{"page":"\\ud800"},"schema_version":1}', None),
    ("event_time exactly 300 s ahead", enc(event(event_time="2026-11-22T05:05:00.250Z")), None),
    ("event_time without fraction", enc(event(event_time="2026-11-22T05:00:00Z")), None),
    ("event_time with micros", enc(event(event_time="2026-11-22T05:00:00.123456Z")), None),
    ("price 0", enc(with_props("add_to_cart", price="0")), None),
    ("exactly MAX_EVENT_BYTES", padded_to(MAX_EVENT_BYTES), None),
    # oversized
    ("one byte over MAX_EVENT_BYTES", padded_to(MAX_EVENT_BYTES + 1), OVERSIZED),
    ("oversized and not JSON", b"x" * (MAX_EVENT_BYTES + 1), OVERSIZED),
    # not_json
    ("no value (tombstone)", None, NOT_JSON),
    ("empty value", b"", NOT_JSON),
    ("plain text", b"hello", NOT_JSON),
    ("truncated", enc(event())[:-1], NOT_JSON),
    ("trailing content", enc(event()) + b" x", NOT_JSON),
    ("two objects", enc(event()) + enc(event()), NOT_JSON),
    ("two objects with a comma", enc(event()) + b"," + enc(event()), NOT_JSON),
    ("object then bracket", enc(event()) + b"]", NOT_JSON),
    ("top-level array", b"[" + enc(event()) + b"]", NOT_JSON),
    ("top-level string", b'"event"', NOT_JSON),
    ("top-level null", b"null", NOT_JSON),
    ("not UTF-8", b"\xff" + enc(event()), NOT_JSON),
    ("UTF-8 BOM", b"\xef\xbb\xbf" + enc(event()), NOT_JSON),
    ("duplicate key", enc(event())[:-1] + b',"user_id":43}', NOT_JSON),
    ("duplicate key nested", enc(event()).replace(b'"page":"/p/7"', b'"page":"/a","page":"/b"'), NOT_JSON),
    ("NaN", enc(event()).replace(b'"user_id":42', b'"user_id":NaN'), NOT_JSON),
    ("single quotes", enc(event()).replace(b'"user_id"', b"'user_id'"), NOT_JSON),
    ("raw newline in a string", enc(event()).replace(b"/p/7", b"/p\n7"), NOT_JSON),
    ("number of 1001 digits", enc(with_props("page_view", big=0)).replace(b'"big":0', b'"big":' + b"9" * 1001),
     NOT_JSON),
    # missing_field
    *[(f"missing {f}", enc(without(event(), f)), MISSING_FIELD)
      for f in ("event_id", "event_type", "user_id", "session_id", "event_time", "properties", "schema_version")],
    ("missing page", enc(event(properties={})), MISSING_FIELD),
    ("missing quantity", enc(without(event("add_to_cart"), "properties") | {"properties": {"product_id": 1,
                                                                                            "price": "1.00"}}),
     MISSING_FIELD),
    ("missing currency", enc(event("purchase", properties={"order_id": "o", "revenue": "1.00"})), MISSING_FIELD),
    ("missing beats wrong type", enc(without(event(user_id="abc"), "session_id")), MISSING_FIELD),
    ("missing beats invalid", enc(without(event(event_type="click"), "user_id")), MISSING_FIELD),
    # wrong_type
    ("user_id string", enc(event(user_id="abc")), WRONG_TYPE),
    ("user_id numeric string", enc(event(user_id="42")), WRONG_TYPE),
    ("user_id 1.0", enc(event()).replace(b'"user_id":42', b'"user_id":42.0'), WRONG_TYPE),
    ("user_id 1e2", enc(event()).replace(b'"user_id":42', b'"user_id":1e2'), WRONG_TYPE),
    ("user_id 2**63", enc(event(user_id=2**63)), WRONG_TYPE),
    ("user_id true", enc(event(user_id=True)), WRONG_TYPE),
    ("user_id null", enc(event(user_id=None)), WRONG_TYPE),
    ("event_time number", enc(event(event_time=1_700_000_000_123)), WRONG_TYPE),
    ("event_id number", enc(event(event_id=7)), WRONG_TYPE),
    ("event_type number", enc(event(event_type=3)), WRONG_TYPE),
    ("properties string", enc(event(properties="page=/")), WRONG_TYPE),
    ("properties array", enc(event(properties=[1])), WRONG_TYPE),
    ("properties null", enc(event(properties=None)), WRONG_TYPE),
    ("schema_version string", enc(event(schema_version="1")), WRONG_TYPE),
    ("schema_version 1.0", enc(event()).replace(b'"schema_version":1', b'"schema_version":1.0'), WRONG_TYPE),
    ("page null", enc(event(properties={"page": None})), WRONG_TYPE),
    ("quantity string", enc(with_props("add_to_cart", quantity="2")), WRONG_TYPE),
    ("price number", enc(with_props("add_to_cart", price=19.99)), WRONG_TYPE),
    ("revenue number", enc(with_props("purchase", revenue=12)), WRONG_TYPE),
    ("wrong type beats invalid", enc(event(user_id="abc", event_type="click")), WRONG_TYPE),
    # invalid_value
    ("extra top-level field", enc(event(referrer="ad")), INVALID_VALUE),
    ("bad uuid", enc(event(event_id="not-a-uuid")), INVALID_VALUE),
    ("upper-case uuid", enc(event(event_id=EVENT_ID.upper())), INVALID_VALUE),
    ("uuid with a trailing newline", enc(event(event_id=EVENT_ID + "\n")), INVALID_VALUE),
    ("unknown event_type", enc(event(event_type="click")), INVALID_VALUE),
    ("user_id 0", enc(event(user_id=0)), INVALID_VALUE),
    ("empty session_id", enc(event(session_id="")), INVALID_VALUE),
    ("65-char session_id", enc(event(session_id="s" * 65)), INVALID_VALUE),
    ("schema_version 2", enc(event(schema_version=2)), INVALID_VALUE),
    ("negative quantity", enc(with_props("add_to_cart", quantity=-1)), INVALID_VALUE),
    ("quantity beyond int", enc(with_props("add_to_cart", quantity=2**31)), INVALID_VALUE),
    ("product_id 0", enc(with_props("add_to_cart", product_id=0)), INVALID_VALUE),
    ("revenue with 3 decimals", enc(with_props("purchase", revenue="12.345")), INVALID_VALUE),
    ("negative revenue", enc(with_props("purchase", revenue="-1.00")), INVALID_VALUE),
    ("revenue with a leading zero", enc(with_props("purchase", revenue="01.00")), INVALID_VALUE),
    ("revenue in exponent form", enc(with_props("purchase", revenue="1e3")), INVALID_VALUE),
    ("revenue with a trailing newline", enc(with_props("purchase", revenue="12.34\n")), INVALID_VALUE),
    ("revenue of 17 integer digits", enc(with_props("purchase", revenue="1" * 17)), INVALID_VALUE),
    ("lower-case currency", enc(with_props("purchase", currency="eur")), INVALID_VALUE),
    ("empty page", enc(event(properties={"page": ""})), INVALID_VALUE),
    ("empty order_id", enc(with_props("purchase", order_id="")), INVALID_VALUE),
    ("event_time in the future", enc(event(event_time="2026-11-22T05:05:00.251Z")), INVALID_VALUE),
    ("event_time not a real date", enc(event(event_time="2026-02-30T00:00:00Z")), INVALID_VALUE),
    ("event_time hour 24", enc(event(event_time="2026-11-22T24:00:00Z")), INVALID_VALUE),
    ("event_time leap second", enc(event(event_time="2026-11-22T23:59:60Z")), INVALID_VALUE),
    ("event_time with an offset", enc(event(event_time="2026-11-22T05:00:00+01:00")), INVALID_VALUE),
    ("event_time without zone", enc(event(event_time="2026-11-22T05:00:00")), INVALID_VALUE),
    ("event_time with a space", enc(event(event_time="2026-11-22 05:00:00Z")), INVALID_VALUE),
    ("event_time with 7 decimals", enc(event(event_time="2026-11-22T05:00:00.1234567Z")), INVALID_VALUE),
    ("event_time with a trailing newline", enc(event(event_time="2026-11-22T05:00:00Z\n")), INVALID_VALUE),
    ("event_time year 0999", enc(event(event_time="0999-11-22T05:00:00Z")), INVALID_VALUE),
]


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


def generated_corpus(n: int = 600) -> list[tuple[str, bytes]]:
    # The clock sits 2 s before the Kafka timestamp the records get, like a real producer.
    gen = ClickstreamGenerator(11, list(range(1, 60)), late=0.1, dup=0.1, bad=0.2,
                               clock=lambda: KAFKA_TS.timestamp() - 2)
    return [(r.kind, r.value) for r in (gen.next_record() for _ in range(n))]


def test_edge_cases_python_classifier() -> None:
    wrong = {name: (expected, check_record(value, KAFKA_TS)) for name, value, expected in EDGE_CASES
             if classify_record(value, KAFKA_TS) != expected}
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
    assert got == expected == classify_record(enc(doc), ts)


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
