"""The driver's parse (silver/events_arrow.py): same verdicts as the contract, same typed rows as Spark's parse_events."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from spark_jobs.contracts.events import TOPIC, check_record, parse_event_time, parse_record
from spark_jobs.hot.events import epoch_micros
from spark_jobs.silver.events import parse_events
from spark_jobs.silver.events_arrow import (
    EventTimes,
    FastCheck,
    ParallelCheck,
    check_records,
    fast_doc,
    properties_text,
)
from spark_jobs.streaming import events as ev
from tests.unit.test_events_parse import (
    EDGE_CASES,
    EVENT_ID,
    INGEST,
    KAFKA_TS,
    bronze,
    enc,
    event,
    generated_corpus,
    with_props,
)

TS_TYPE = pa.timestamp("us", tz="UTC")


def raw_table(values: list[bytes | None], kafka_ts: datetime = KAFKA_TS) -> pa.Table:
    """The same records as ``test_events_parse.bronze``: key b"42", partition i % 3, offset 1000 + i."""
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
    got = check_records(raw_table(values)).select(["_reason", "_error"]).to_pylist()
    differ = {}
    for i, value in enumerate(values):
        want = check_record(value, KAFKA_TS)
        have = None if got[i]["_reason"] is None else (got[i]["_reason"], got[i]["_error"])
        if have != want:
            differ[f"{i} {kinds[i]}"] = {"contract": want, "driver": have}
    assert differ == {}


def test_typed_rows_equal_spark_parse_events(spark: Any) -> None:
    """Every valid record: the driver's columns equal Spark's, value for value (properties as JSON)."""
    _kinds, values = corpus()
    checked = check_records(raw_table(values)).to_pylist()
    valid, _ = parse_events(bronze(spark, values))
    spark_rows = {r["_offset"]: r.asDict() for r in valid.collect()}
    driver_rows = {r["offset"]: r for r in checked if r["_reason"] is None}
    assert set(driver_rows) == set(spark_rows) and len(driver_rows) > 300
    differ = {}
    for offset, s in spark_rows.items():
        d = driver_rows[offset]
        for name in ("event_id", "event_type", "user_id", "session_id", "event_date", "schema_version",
                     "page", "product_id", "quantity", "price", "cart_value", "order_id", "revenue", "currency"):
            have = d[f"_{name}"] if f"_{name}" in d else d[f"_p_{name}"]
            if have != s[name]:
                differ[(offset, name)] = (have, s[name])
        if d["_event_time"] != s["event_time"].replace(tzinfo=UTC).astimezone(UTC):
            differ[(offset, "event_time")] = (d["_event_time"], s["event_time"])
        if json.loads(d["_properties"]) != json.loads(s["properties"]):
            differ[(offset, "properties")] = (d["_properties"], s["properties"])
    assert differ == {}


def test_generated_properties_text_is_byte_equal_to_spark(spark: Any) -> None:
    values: list[bytes | None] = [v for kind, v in generated_corpus(300) if kind in ("valid", "late")]
    values.append(enc(event(properties={"page": "/köln/東京", "z": [1, {"b": None, "a": "x"}], "a": 7})))
    spark_text = {r["_offset"]: r["properties"] for r in parse_events(bronze(spark, values))[0].collect()}
    driver = check_records(raw_table(values)).to_pylist()
    assert {r["offset"]: r["_properties"] for r in driver} == spark_text


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


def test_fast_check_accepts_only_what_the_contract_accepts() -> None:
    fast = FastCheck()
    kafka_us = (KAFKA_TS - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    accepted = wrongly = 0
    for doc in mutations():
        value = enc(doc)
        if fast.accepts(parse_record(value), kafka_us):
            accepted += 1
            if check_record(value, KAFKA_TS) is not None:
                wrongly += 1
    assert accepted > 100 and wrongly == 0


def test_the_fast_check_rejects_nothing_a_generated_run_sends_valid() -> None:
    """Not needed for correctness (check_record decides), but the speed depends on it."""
    fast = FastCheck()
    kafka_us = (KAFKA_TS - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    valid = [v for kind, v in generated_corpus(500) if kind in ("valid", "late", "duplicate")]
    assert valid and all(fast.accepts(parse_record(v), kafka_us) for v in valid)


def test_lone_surrogates_are_stored_as_question_marks() -> None:
    value = (b'{"event_id":"' + EVENT_ID.encode() + b'","event_type":"page_view","user_id":1,"session_id":"s\\ud800",'
             b'"event_time":"2026-11-22T04:59:59Z","properties":{"page":"\\ud800"},"schema_version":1}')
    row = check_records(raw_table([value])).to_pylist()[0]
    assert row["_reason"] is None
    assert (row["_session_id"], row["_p_page"], row["_properties"]) == ("s?", "?", '{"page":"?"}')


def test_properties_text_is_compact_sorted_and_keeps_non_ascii() -> None:
    assert properties_text({"b": 1, "a": "é"}) == '{"a":"é","b":1}'


def test_archive_tables_drop_duplicates_flag_late_and_split_rejects() -> None:
    on_time = enc(event(event_id="00000000-0000-4000-8000-000000000001", event_time="2026-11-22T04:59:00Z"))
    late = enc(event(event_id="00000000-0000-4000-8000-000000000002", event_time="2026-11-22T04:40:00Z"))
    resend = on_time
    values: list[bytes | None] = [on_time, late, b"not json", resend]
    checked = check_records(raw_table(values))
    quarantined_at = datetime(2026, 11, 22, 5, 1, tzinfo=UTC)
    tables = ev.archive_tables(checked, 7, INGEST, datetime(2026, 11, 22, 4, 50, tzinfo=UTC), {(0, 1003)},
                               quarantined_at)
    bronze_rows = tables[ev.BRONZE].to_pylist()
    assert [r["offset"] for r in bronze_rows] == [1000, 1001, 1002, 1003]
    assert {(r["ingest_time"], str(r["ingest_date"])) for r in bronze_rows} == {(INGEST, "2026-11-22")}
    silver = tables[ev.SILVER].to_pylist()
    assert [(r["_offset"], r["_late"], r["_batch_id"], r["_ingest_time"]) for r in silver] == [
        (1000, False, 7, INGEST), (1001, True, 7, INGEST)]
    assert [(r["offset"], r["reason"], r["value"], r["stage"], r["quarantined_at"])
            for r in tables[ev.QUARANTINE].to_pylist()] == [(1002, "not_json", b"not json", "events", quarantined_at)]


def test_no_watermark_yet_means_nothing_is_late() -> None:
    checked = check_records(raw_table([enc(event(event_time="2020-01-01T00:00:00Z"))]))
    silver = ev.archive_tables(checked, 0, INGEST, None, set())[ev.SILVER]
    assert silver.column("_late").to_pylist() == [False]


def test_write_archive_skips_tables_with_nothing_to_add() -> None:
    class Table:
        def __init__(self) -> None:
            self.writes: list[tuple[int, int]] = []

        def write_once(self, rows: pa.Table, app_id: str, batch_id: int, mode: str) -> bool:
            self.writes.append((rows.num_rows, batch_id))
            return True

    tables = {name: Table() for name in (ev.BRONZE, ev.SILVER, ev.QUARANTINE)}
    some, none = pa.table({"a": [1, 2]}), pa.table({"a": pa.array([], pa.int64())})
    ev.write_archive(tables, {ev.BRONZE: {3: some, 4: some}, ev.SILVER: {3: some, 4: none},  # type: ignore[arg-type]
                              ev.QUARANTINE: {3: none, 4: none}}, "q")
    assert tables[ev.BRONZE].writes == [(4, 4)] and tables[ev.SILVER].writes == [(2, 4)]
    assert tables[ev.QUARANTINE].writes == []


@pytest.mark.parametrize("late_s", [0, 299])
def test_future_limit_is_relative_to_the_kafka_timestamp(late_s: int) -> None:
    doc = event(event_time="2026-11-22T05:04:59.250Z")  # 299 s after KAFKA_TS
    row = check_records(raw_table([enc(doc)], KAFKA_TS - timedelta(seconds=late_s))).to_pylist()[0]
    assert row["_reason"] == (None if late_s == 0 else "invalid_value")


def test_parallel_check_equals_the_single_process_parse_in_order() -> None:
    _kinds, values = corpus()
    raw = raw_table(values)
    checker = ParallelCheck(3, min_rows=10)  # the driver's slice + two worker processes (spawned)
    try:
        checker.warm()
        got = checker.check(raw)
        small = checker.check(raw.slice(0, 5))  # below min_rows: in the driver process only
    finally:
        checker.close()
    assert got.equals(check_records(raw))
    assert small.equals(check_records(raw.slice(0, 5)))


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
