"""EventProducer: validation before sending, delivery accounting, errors that name servers and topic (fake client)."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spark_jobs.contracts.clickstream import TOPIC, event_errors
from spark_jobs.loadgen.producer import EventProducer, InvalidEventError, ProducerError, make_event, serialize

BOOTSTRAP = "broker-a:9092,broker-b:9092"


class FakeMessage:
    def __init__(self, partition: int, offset: int) -> None:
        self._p, self._o = partition, offset

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o


class FakeProducer:
    """Records produce() calls; delivers on poll/flush (or fails, or keeps messages undelivered)."""

    def __init__(self, *, full_once: bool = False, fail: bool = False, stuck: bool = False) -> None:
        self.produced: list[dict[str, Any]] = []
        self.queue: list[tuple[Any, int]] = []
        self.full_once, self.fail, self.stuck = full_once, fail, stuck
        self.offsets: dict[int, int] = {}

    def produce(self, topic: str, value: bytes | None = None, key: Any = None, headers: Any = None,
                on_delivery: Any = None) -> None:
        if self.full_once:
            self.full_once = False
            raise BufferError("queue full")
        self.produced.append({"topic": topic, "key": key, "value": value, "headers": headers})
        partition = int(key or b"0") % 3
        self.queue.append((on_delivery, partition))

    def poll(self, timeout: float = 0) -> int:
        if self.stuck:
            return 0
        served = len(self.queue)
        for callback, partition in self.queue:
            if self.fail:
                callback("KafkaError{code=_MSG_TIMED_OUT}", None)
            else:
                offset = self.offsets.get(partition, 0)
                self.offsets[partition] = offset + 1
                callback(None, FakeMessage(partition, offset))
        self.queue.clear()
        return served

    def flush(self, timeout: float = 0) -> int:
        self.poll()
        return len(self.queue)

    def __len__(self) -> int:
        return len(self.queue)


def producer(**fake: bool) -> tuple[EventProducer, FakeProducer]:
    client = FakeProducer(**fake)
    return EventProducer(BOOTSTRAP, producer=client), client


def test_config_is_idempotent_ordered_and_batched() -> None:
    p, _ = producer()
    assert p.topic == TOPIC
    cfg = p.config
    assert cfg["enable.idempotence"] is True and cfg["acks"] == "all"
    assert cfg["bootstrap.servers"] == BOOTSTRAP and cfg["linger.ms"] == 50
    assert cfg["compression.type"] in ("lz4", "none")


def test_real_client_accepts_the_config() -> None:
    """librdkafka validates the settings at construction (no broker needed)."""
    p = EventProducer("127.0.0.1:1", topic="t")
    assert p.compression == "lz4"  # the wheel's librdkafka has lz4


def test_make_event_fills_id_version_and_time() -> None:
    e = make_event("page_view", 7, "s-1", {"page": "/"})
    assert uuid.UUID(e["event_id"]).version == 4 and e["schema_version"] == 1
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", e["event_time"])
    assert event_errors(e) == []
    fixed = make_event("checkout", 7, "s-1", {"cart_value": "1.00"}, event_time=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert fixed["event_time"] == "2026-01-02T03:04:05.000Z"


def test_send_keys_by_user_and_serializes_compactly() -> None:
    p, client = producer()
    e = make_event("add_to_cart", 42, "s-1", {"product_id": 3, "quantity": 1, "price": "9.99"})
    p.send(e)
    (msg,) = client.produced
    assert msg["topic"] == TOPIC and msg["key"] == b"42"
    assert msg["value"] == serialize(e) and json.loads(msg["value"]) == e
    assert b" " not in msg["value"]


def test_invalid_event_names_field_and_problem_and_sends_nothing() -> None:
    p, client = producer()
    e = make_event("add_to_cart", 42, "s-1", {"product_id": 3, "quantity": -1, "price": "9.99"})
    with pytest.raises(InvalidEventError) as info:
        p.send(e)
    err = info.value
    assert err.field == "properties.quantity" and "less than the minimum of 1" in err.problem
    assert err.reason == "invalid_value"
    assert TOPIC in str(err) and BOOTSTRAP in str(err)
    assert client.produced == []


def test_invalid_event_reports_every_problem() -> None:
    p, client = producer()
    e = make_event("purchase", 42, "s-1", {"order_id": "o", "revenue": "1.234", "currency": "eur"})
    e["user_id"] = "42"
    with pytest.raises(InvalidEventError, match=r"wrong_type: user_id: expected integer.*\(\+2 more") as info:
        p.send(e)
    assert info.value.field == "user_id" and len(info.value.problems) == 3
    assert client.produced == []


def test_future_event_is_refused() -> None:
    p, _ = producer()
    e = make_event("page_view", 1, "s", {"page": "/"}, event_time=datetime.now(UTC) + timedelta(minutes=10))
    with pytest.raises(InvalidEventError, match=r"event_time: .* more than 300 s after"):
        p.send(e)


def test_oversized_event_is_refused() -> None:
    p, client = producer()
    e = make_event("page_view", 1, "s", {"page": "/", "blob": "x" * 70_000})
    with pytest.raises(InvalidEventError, match="oversized: \\(record\\): 70"):
        p.send(e)
    assert client.produced == []


def test_send_raw_passes_bytes_and_headers_and_waits_for_room() -> None:
    p, client = producer(full_once=True)
    p.send_raw(b"7", b"not json", headers=[("source", b"test")])
    assert client.produced == [{"topic": TOPIC, "key": b"7", "value": b"not json", "headers": [("source", b"test")]}]


def test_delivery_reports_count_and_track_offset_ranges() -> None:
    p, _ = producer()
    for user in (1, 2, 3, 4, 5, 6, 7):
        p.send(make_event("page_view", user, "s", {"page": "/"}))
    p.flush()
    assert p.stats.delivered == 7 and p.stats.failed == 0
    assert p.stats.offset_ranges() == {"0": [0, 1], "1": [0, 2], "2": [0, 1]}


def test_failed_deliveries_are_counted_with_the_error() -> None:
    p, _ = producer(fail=True)
    p.send_raw(b"1", b"x")
    p.flush()
    assert p.stats.failed == 1 and p.stats.delivered == 0
    assert p.stats.errors == [f"{TOPIC} at {BOOTSTRAP}: KafkaError{{code=_MSG_TIMED_OUT}}"]


def test_flush_with_undelivered_messages_names_servers_and_count() -> None:
    p, _ = producer(stuck=True)
    p.send_raw(b"1", b"x")
    p.send_raw(b"2", b"y")
    with pytest.raises(ProducerError, match=rf"2 message\(s\) to {re.escape(TOPIC)} not delivered by "
                                            rf"{re.escape(BOOTSTRAP)} within 1s"):
        p.flush(1)


def test_context_manager_flushes() -> None:
    client = FakeProducer()
    with EventProducer(BOOTSTRAP, producer=client) as p:
        p.send_raw(b"1", b"x")
    assert p.stats.delivered == 1


def test_the_lake_producer_logs_in_as_its_principal_and_names_its_topics(tmp_path: Any) -> None:
    from spark_jobs.loadgen.producer import ProducerError
    from spark_jobs.settings import load_settings

    settings = load_settings({"LAKE_STATE_DIR": str(tmp_path), "LAKE_KAFKA_PRODUCER_PASSWORD": "producerPw0123"})
    p = EventProducer(settings, producer=FakeProducer())
    assert p.config["sasl.username"] == "lake_producer" and p.config["security.protocol"] == "SASL_PLAINTEXT"
    with pytest.raises(ProducerError, match=r"may write events\.\* topics only; name it events\.<name>"):
        EventProducer(settings, "test.other", producer=FakeProducer())
