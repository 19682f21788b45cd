"""The executors' parse (silver/clickstream_arrow.py, run by mapInArrow): same verdicts as the contract validator."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from spark_jobs.contracts.clickstream import TOPIC, check_record, parse_event_time, parse_record
from spark_jobs.hot.windows import epoch_micros
from spark_jobs.silver.clickstream_arrow import (
    ContractCheck,
    EventTimes,
    check_records,
    contract_check,
    fast_doc,
    properties_text,
)
from tests.unit.event_records import (
    EDGE_CASES,
    EVENT_ID,
    KAFKA_TS,
    enc,
    event,
    generated_corpus,
    with_props,
)

TS_TYPE = pa.timestamp("us", tz="UTC")


def raw_table(values: list[bytes | None], kafka_ts: datetime = KAFKA_TS) -> pa.Table:
    """The same records as ``test_silver_events.bronze``: key b"42", partition i % 3, offset 1000 + i."""
    n = len(values)
    return pa.table({
        "key": pa.array([b"42"] * n, pa.binary()), "value": pa.array(values, pa.binary()),
        "topic": pa.array([TOPIC] * n), "partition": pa.array([i % 3 for i in range(n)], pa.int32()),
        "offset": pa.array([1000 + i for i in range(n)], pa.int64()),
        "kafka_timestamp": pa.array([kafka_ts] * n, TS_TYPE),
    })


def corpus() -> tuple[list[str], list[bytes | None]]:
    generated = generated_corpus()
    kinds = [k for k, _ in generated] + [f"edge: {name}" for name, _, _ in EDGE_CASES]
    return kinds, [v for _, v in generated] + [v for _, v, _ in EDGE_CASES]


def test_verdicts_and_details_equal_the_contract_validator() -> None:
    kinds, values = corpus()
    values += [enc(doc) for doc in mutations()]  # every field and property with every palette value
    kinds += ["mutation"] * (len(values) - len(kinds))
    got = check_records(raw_table(values)).select(["_reason", "_error"]).to_pylist()
    differ = {}
    for i, value in enumerate(values):
        want = check_record(value, KAFKA_TS)
        have = None if got[i]["_reason"] is None else (got[i]["_reason"], got[i]["_error"])
        if have != want:
            differ[f"{i} {kinds[i]}"] = {"contract": want, "check_records": have}
    assert differ == {}


#: The hand-made records of ``lake bench contract`` (spark_jobs/bench/contract.py ``_edge_cases``) where plain
#: JSON Schema parts from our contract, and the reason code each gets from us.
BENCH_EDGE_REASONS = {
    "valid page_view": None,
    "user_id 42.0": "wrong_type",  # an integer-valued float is not an integer for us (JSON Schema: it is)
    "user_id 1e2": "wrong_type",
    "schema_version 1.0": "wrong_type",
    "user_id 2**63": "wrong_type",  # beyond signed 64 bits: wrong type, not the schema's maximum
    "user_id 2**70": "wrong_type",
    "event_time not a real date": "invalid_value",  # 2026-02-30 matches the schema's pattern
    "event_time leap second": "invalid_value",  # 23:59:60 too
    "event_time 10 min after the Kafka timestamp": "invalid_value",
    "event_id with a trailing newline": "invalid_value",
    "revenue with 3 decimals": "invalid_value",
}


def test_bench_edge_cases_get_our_reason_codes() -> None:
    from spark_jobs.bench.contract import _edge_cases

    cases = _edge_cases()
    assert [name for name, _, _ in cases] == list(BENCH_EDGE_REASONS)
    for name, value, kafka_us in cases:
        kafka_ts = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=kafka_us)
        row = check_records(raw_table([value], kafka_ts)).to_pylist()[0]
        assert row["_reason"] == BENCH_EDGE_REASONS[name], (name, row["_reason"], row["_error"])
        reference = check_record(value, kafka_ts)
        assert (None if reference is None else reference[0]) == row["_reason"], name
        if reference is not None:
            assert row["_error"] == reference[1], name  # the reference's detail, word for word


@pytest.mark.parametrize(("name", "value", "reason"), [
    # jsonschema-rs raises on these (a lone surrogate it has to read; nesting past its recursion limit):
    # check_record decides, valid or not.
    ("surrogate property key", enc(with_props("page_view", **{"\ud800": 1})), None),
    ("surrogate event_type", enc(event(event_type="\ud800")), "invalid_value"),
    ("surrogate session_id too long", enc(event(session_id="\ud800" * 65)), "invalid_value"),
    ("300-deep user_id", enc(event()).replace(b'"user_id":42', b'"user_id":' + b"[" * 300 + b"]" * 300), "wrong_type"),
    ("300-deep extra property", enc(event()).replace(b'"page":"/p/7"', b'"page":"/p/7","deep":' + b"[" * 300
                                                     + b"]" * 300), None),
    ("integer-valued float quantity", enc(event("add_to_cart")).replace(b'"quantity":2', b'"quantity":2.0'),
     "wrong_type"),
    ("product_id beyond 64 bits", enc(with_props("add_to_cart", product_id=2**64)), "wrong_type"),
])
def test_what_the_library_cannot_read_or_call_an_integer_gets_the_reference_verdict(
        name: str, value: bytes, reason: str | None) -> None:
    row = check_records(raw_table([value])).to_pylist()[0]
    reference = check_record(value, KAFKA_TS)
    assert (row["_reason"], row["_error"]) == ((None, None) if reference is None else reference)
    assert row["_reason"] == reason, name


def test_money_exact_event_time_instant_and_date() -> None:
    purchase = with_props("purchase", revenue="12345678901234.56", order_id="o-9")
    purchase["event_time"] = "2026-11-21T23:59:59.999Z"
    cart = with_props("add_to_cart", price="0.10", quantity=3, product_id=9_000_000_000)
    rows = check_records(raw_table([enc(purchase), enc(cart)])).to_pylist()
    p, c = rows
    assert p["_p_revenue"] == Decimal("12345678901234.56") and p["_p_price"] is None and p["_p_page"] is None
    assert c["_p_price"] == Decimal("0.10") and c["_p_product_id"] == 9_000_000_000 and c["_p_revenue"] is None
    assert p["_event_time"] == datetime(2026, 11, 21, 23, 59, 59, 999_000, tzinfo=UTC)
    assert str(p["_event_date"]) == "2026-11-21"


# Values that break some rule of some field, plus ones that are fine: the fast check may only accept a
# document the contract validator accepts (it is never the one that rejects).
PALETTE: list[Any] = [None, True, False, 0, 1, -1, 2**31, 2**63 - 1, 2**63, 1.0, 1.5, "", "x", "x" * 65, "x" * 2049,
                      "abc", "EUR", "eur", "12.34", "12.345", "-1.00", "01.00", "/p/1", "page_view", "purchase",
                      EVENT_ID, EVENT_ID.upper(), EVENT_ID + "\n", "2026-11-22T04:59:59Z", "2026-02-30T00:00:00Z",
                      "2026-11-22T05:10:00Z", {}, {"page": "/"}, [], [1]]


def mutations() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for etype in ("page_view", "add_to_cart", "checkout", "purchase"):
        base = event(etype)
        for field in [*base, "extra"]:
            docs += [base | {field: v} for v in PALETTE]
            docs.append({k: v for k, v in base.items() if k != field})
        for prop in [*base["properties"], "other"]:
            docs += [with_props(etype, **{prop: v}) for v in PALETTE]
            docs.append(base | {"properties": {k: v for k, v in base["properties"].items() if k != prop}})
    return docs


def test_contract_check_accepts_exactly_what_the_contract_accepts() -> None:
    check = ContractCheck()
    kafka_us = (KAFKA_TS - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    accepted = 0
    differ = []
    for doc in mutations():
        value = enc(doc)
        ours = check.event_micros(parse_record(value), kafka_us) is not None
        accepted += ours
        if ours != (check_record(value, KAFKA_TS) is None):
            differ.append(doc)
    assert accepted > 100 and differ == []


def test_the_contract_check_accepts_what_a_generated_run_sends_valid() -> None:
    check = contract_check()
    assert contract_check() is check  # one validator per process (per Python worker)
    kafka_us = (KAFKA_TS - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    valid = [v for kind, v in generated_corpus(500) if kind in ("valid", "late", "duplicate")]
    assert valid and all(check.event_micros(parse_record(v), kafka_us) is not None for v in valid)


def test_lone_surrogates_are_stored_as_question_marks() -> None:
    value = (b'{"event_id":"' + EVENT_ID.encode() + b'","event_type":"page_view","user_id":1,"session_id":"s\\ud800",'
             b'"event_time":"2026-11-22T04:59:59Z","properties":{"page":"\\ud800"},"schema_version":1}')
    row = check_records(raw_table([value])).to_pylist()[0]
    assert row["_reason"] is None
    assert (row["_session_id"], row["_p_page"], row["_properties"]) == ("s?", "?", '{"page":"?"}')


def test_properties_text_is_compact_sorted_and_keeps_non_ascii() -> None:
    assert properties_text({"b": 1, "a": "é"}) == '{"a":"é","b":1}'


@pytest.mark.parametrize("late_s", [0, 299])
def test_future_limit_is_relative_to_the_kafka_timestamp(late_s: int) -> None:
    doc = event(event_time="2026-11-22T05:04:59.250Z")  # 299 s after KAFKA_TS
    row = check_records(raw_table([enc(doc)], KAFKA_TS - timedelta(seconds=late_s))).to_pylist()[0]
    assert row["_reason"] == (None if late_s == 0 else "invalid_value")


def test_fast_doc_is_the_strict_parse_or_nothing() -> None:
    """orjson's parse is used only where it equals parse_record's; everything else goes to the strict parser."""
    values = [enc(doc) for doc in mutations()] + [v for _, v in generated_corpus(300) if v is not None]
    values += [json.dumps(d, separators=(",", ":"), ensure_ascii=False).encode() for d in
               (event(session_id="sé\u2028\x01"), with_props("page_view", page="/\u00e9\ud7ff"))]
    taken = 0
    for value in values:
        doc = fast_doc(value)
        if doc is not None:
            taken += 1
            assert doc == parse_record(value)
    assert taken > 100
    for value in [b'{"a":1,"a":2}',  # duplicate key: orjson keeps the last, the contract rejects it
                  b'{"a":18446744073709551616}',  # beyond 64 bits: a float in orjson, an int in the contract
                  b'{"a": 1}',  # not compact: fine, but the strict parser decides
                  b'{"a":1e5}', b'{"a":"\\u00e9"}', b'{"a":"\\ud800"}', b'{"a":NaN}', b'\xff', b"[" * 40 + b"]" * 40]:
        assert fast_doc(value) is None, value


@pytest.mark.parametrize("props", [
    {"page": "/p/é", "b": 1, "a": -(2**63)}, {"z": "\x00\x1f\"\\\u2028", "y": 2**63 - 1}, {"big": 2**64},
    {"s": "\ud800"}, {"f": 1.5, "n": None, "l": [1, {"b": 2, "a": 1}]}, {},
])
def test_properties_text_fast_way_equals_json_dumps(props: dict[str, Any]) -> None:
    assert properties_text(props) == json.dumps(props, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize("text", [
    "2026-11-22T04:59:59Z", "2026-11-22T04:59:59.1Z", "2026-11-22T04:59:59.123456Z", "2024-02-29T00:00:00.5Z",
    "2026-02-29T00:00:00Z", "2026-02-30T00:00:00Z", "2026-13-01T00:00:00Z", "2026-11-22T24:00:00Z",
    "2026-11-22T04:59:60Z", "2026-11-22T04:59:59.1234567Z", "2026-11-22T04:59:59", "2026-11-22 04:59:59Z",
    "1970-01-01T00:00:00Z", "1969-12-31T23:59:59.999999Z",
])
def test_event_times_equal_parse_event_time(text: str) -> None:
    times = EventTimes(size=2)
    want = None if parse_event_time(text) is None else epoch_micros(parse_event_time(text))  # type: ignore[arg-type]
    for _ in range(2):  # the cached seconds give the same answer
        assert times.micros(text) == want
    for other in ("2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"):
        times.micros(other)  # evicts
    assert times.micros(text) == want
