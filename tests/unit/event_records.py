"""Clickstream record builders shared by the events parse tests (test_silver_events, test_silver_events_arrow):
one valid event per type, edits of it, and the edge-case corpus both parse implementations must agree on."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from spark_jobs.contracts.clickstream import (
    INVALID_VALUE,
    MAX_EVENT_BYTES,
    MISSING_FIELD,
    NOT_JSON,
    OVERSIZED,
    WRONG_TYPE,
    check_record,
)
from spark_jobs.loadgen.clickstream import ClickstreamGenerator

KAFKA_TS = datetime(2026, 11, 22, 5, 0, 0, 250_000, tzinfo=UTC)
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


def reason_code(value: bytes | None, kafka_timestamp: datetime) -> str | None:
    """The contract's reason code for one record value (None: valid)."""
    result = check_record(value, kafka_timestamp)
    return None if result is None else result[0]


def generated_corpus(n: int = 600) -> list[tuple[str, bytes]]:
    # The clock sits 2 s before the Kafka timestamp the records get, like a real producer.
    gen = ClickstreamGenerator(11, list(range(1, 60)), late=0.1, dup=0.1, bad=0.2,
                               clock=lambda: KAFKA_TS.timestamp() - 2)
    return [(r.kind, r.value) for r in (gen.next_record() for _ in range(n))]
