"""The clickstream load generator without Kafka: determinism, categories, contract conformance, pacing, manifest."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from spark_jobs.contracts.clickstream import (
    EVENT_TYPES,
    check_record,
    event_errors,
    parse_event_time,
)
from spark_jobs.loadgen.clickstream import (
    BAD_KINDS,
    DUPLICATE,
    LATE,
    VALID,
    ClickstreamGenerator,
    Record,
    event_ids_digest,
    run,
)
from spark_jobs.loadgen.producer import FLUSH_MARGIN_S
from tests.unit.event_records import reason_code

NOW = datetime(2026, 11, 22, 5, 0, tzinfo=UTC)
USERS = list(range(1, 201))


def gen(seed: int = 7, users: list[int] = USERS, **fractions: float) -> ClickstreamGenerator:
    fr = {"late": 0.05, "dup": 0.05, "bad": 0.04, **fractions}
    return ClickstreamGenerator(seed, users, clock=NOW.timestamp, **fr)


def take(g: ClickstreamGenerator, n: int) -> list[Record]:
    return [g.next_record() for _ in range(n)]


def test_same_seed_same_records() -> None:
    assert take(gen(), 3000) == take(gen(), 3000)
    assert [r.event_id for r in take(gen(), 100)] != [r.event_id for r in take(gen(seed=8), 100)]


def test_event_ids_and_categories_do_not_depend_on_the_users() -> None:
    a, b = take(gen(), 3000), take(gen(users=[5, 900, 31_337]), 3000)
    assert [(r.kind, r.event_id) for r in a] == [(r.kind, r.event_id) for r in b]
    assert {json.loads(r.value)["user_id"] for r in b if r.kind == VALID} <= {5, 900, 31_337}


def test_event_ids_are_uuid4() -> None:
    for r in take(gen(), 200):
        if r.kind in (VALID, LATE):
            u = uuid.UUID(r.event_id)
            assert u.version == 4 and str(u) == r.event_id and u.bytes == r.id_bytes


def test_sample_of_valid_events_passes_the_contract() -> None:
    records = take(gen(), 5000)
    for r in records[::7]:
        if r.kind in (VALID, LATE, DUPLICATE):
            doc = json.loads(r.value)
            assert event_errors(doc, received_at=NOW) == [], r
            assert r.key == str(doc["user_id"]).encode()


def test_each_bad_kind_gets_exactly_its_reason_code() -> None:
    records = take(gen(bad=0.5, late=0.0, dup=0.0), 4000)
    got = Counter((r.kind, reason_code(r.value, NOW)) for r in records if r.kind in BAD_KINDS)
    assert {kind for kind, _ in got} == set(BAD_KINDS)
    assert all(kind == reason for kind, reason in got), got


def test_duplicates_repeat_an_earlier_record_exactly() -> None:
    records = take(gen(dup=0.3), 3000)
    sent: dict[str, Record] = {}
    dups = 0
    for r in records:
        if r.kind == DUPLICATE:
            original = sent[r.event_id]
            assert (r.key, r.value) == (original.key, original.value)
            dups += 1
        elif r.kind in (VALID, LATE):
            assert r.event_id not in sent
            sent[r.event_id] = r
    assert dups > 500


def test_late_events_are_1_to_30_minutes_old_and_on_time_ones_are_now() -> None:
    late_ages = []
    for r in take(gen(late=0.3), 3000):
        when = parse_event_time(json.loads(r.value)["event_time"]) if r.kind in (VALID, LATE) else None
        if r.kind == LATE:
            assert when is not None and NOW - when == timedelta(seconds=r.late_s)
            late_ages.append(r.late_s)
        elif r.kind == VALID:
            assert when == NOW
    assert 60 <= min(late_ages) < 120 and 1700 < max(late_ages) <= 1799
    assert 0.25 < sum(a < 600 for a in late_ages) / len(late_ages) < 0.40  # uniform: ~31% under 10 minutes


def test_fractions_are_respected_roughly() -> None:
    kinds = Counter("bad" if r.kind in BAD_KINDS else r.kind for r in take(gen(), 20_000))
    assert abs(kinds["bad"] / 20_000 - 0.04) < 0.006
    assert abs(kinds[DUPLICATE] / 20_000 - 0.05) < 0.006
    assert abs(kinds[LATE] / 20_000 - 0.05) < 0.006


def test_sessions_walk_the_funnel_and_revenue_is_the_cart() -> None:
    records = [r for r in take(gen(late=0, dup=0, bad=0), 20_000)]
    types = Counter(r.event_type for r in records)
    assert set(types) == set(EVENT_TYPES)
    assert types["page_view"] > types["add_to_cart"] > types["checkout"] > types["purchase"] > 0
    carts: dict[str, Decimal] = {}
    for r in records:
        doc = json.loads(r.value)
        props, sid = doc["properties"], doc["session_id"]
        if r.event_type == "add_to_cart":
            carts[sid] = carts.get(sid, Decimal(0)) + Decimal(props["price"]) * props["quantity"]
        elif r.event_type == "checkout":
            assert Decimal(props["cart_value"]) == carts[sid]
        elif r.event_type == "purchase":
            assert Decimal(props["revenue"]) == carts[sid] and r.revenue_cents == int(carts[sid] * 100)


def test_bad_fractions_are_checked() -> None:
    with pytest.raises(ValueError, match="at most 1"):
        ClickstreamGenerator(1, USERS, late=0.5, dup=0.5, bad=0.1)
    with pytest.raises(ValueError, match="--bad must be a fraction"):
        ClickstreamGenerator(1, USERS, bad=-0.1)
    with pytest.raises(ValueError, match="no users"):
        ClickstreamGenerator(1, [])


def test_event_ids_digest_is_order_independent() -> None:
    ids = [str(uuid.UUID(int=i * 7919, version=4)) for i in range(1, 50)]
    assert event_ids_digest(ids) == event_ids_digest(sorted(ids)) == event_ids_digest(list(reversed(ids)))
    assert event_ids_digest(ids) != event_ids_digest(ids[:-1])


class FakeEventProducer:
    """Stands in for EventProducer: delivers everything to one partition on flush."""

    def __init__(self, fail_every: int = 0) -> None:
        from spark_jobs.loadgen.producer import DeliveryStats

        self.topic, self.bootstrap = "t", "b:1"
        self.stats = DeliveryStats()
        self.sent: list[tuple[bytes, bytes]] = []
        self.fail_every = fail_every
        self.config = {"message.timeout.ms": 120_000}
        self.flush_timeouts: list[float] = []

    def send_raw(self, key: bytes, value: bytes) -> None:
        self.sent.append((key, value))

    def poll(self, timeout: float = 0) -> int:
        return 0

    def pending(self) -> int:
        return 0

    def flush(self, timeout: float | None = None) -> None:
        # as EventProducer.flush: None waits for the delivery timeout plus the margin
        self.flush_timeouts.append(float(self.config["message.timeout.ms"]) / 1000 + FLUSH_MARGIN_S
                                   if timeout is None else timeout)
        for i, _ in enumerate(self.sent):
            if self.fail_every and i % self.fail_every == 0:
                self.stats.failed += 1
            else:
                self.stats.delivered += 1
        self.stats.offsets = {0: [0, len(self.sent) - 1]}


def test_run_sends_rate_times_duration_and_the_manifest_adds_up() -> None:
    fake = FakeEventProducer()
    g = ClickstreamGenerator(7, USERS, late=0.05, dup=0.05, bad=0.04)
    result = run(fake, g, rate=4000, duration=0.5)  # type: ignore[arg-type]
    m = result.manifest
    assert result.delivered_all and m["total_sent"] == len(fake.sent) == 2000
    assert m["total_sent"] == m["valid_unique"] + m["duplicates"] + m["bad_total"]
    assert m["valid_unique"] == m["on_time"] + m["late"] == sum(m["by_event_type"].values())
    assert m["late"] == m["late_lt_10m"] + m["late_ge_10m"]
    assert m["bad_total"] == sum(m["bad"].values())
    now = datetime.now(UTC)
    ids, revenue = [], Decimal(0)
    seen: set[str] = set()
    for _, value in fake.sent:
        if reason_code(value, now) is None:
            doc = json.loads(value)
            if doc["event_id"] not in seen:
                seen.add(doc["event_id"])
                ids.append(doc["event_id"])
                if doc["event_type"] == "purchase":
                    revenue += Decimal(doc["properties"]["revenue"])
    assert len(ids) == m["valid_unique"]
    assert event_ids_digest(ids) == m["event_ids_sha256"]
    assert Decimal(m["purchase_revenue"]) == revenue
    assert m["offsets"] == {"0": [0, 1999]}
    assert m["first_produce_time"] <= m["last_produce_time"]


def test_run_reports_failed_deliveries() -> None:
    fake = FakeEventProducer(fail_every=10)
    result = run(fake, gen(), rate=10_000, duration=0.05)  # type: ignore[arg-type]
    assert not result.delivered_all and result.manifest["delivery_failed"] == 50


def test_run_waits_for_the_producers_own_delivery_timeout_by_default() -> None:
    """A broker restart under load holds records until the broker is back: the final flush must not give up
    before the producer itself would (CI saw 34,636 records reported lost by a 60 s flush after a restart)."""
    fake = FakeEventProducer()
    fake.config["message.timeout.ms"] = 200_000
    run(fake, gen(), rate=10_000, duration=0.01)  # type: ignore[arg-type]
    run(fake, gen(), rate=10_000, duration=0.01, flush_timeout=7)  # type: ignore[arg-type]
    assert fake.flush_timeouts == [200 + FLUSH_MARGIN_S, 7]


def test_check_record_detail_for_generated_bad_records() -> None:
    for r in take(gen(bad=1.0, late=0, dup=0), 40):
        result = check_record(r.value, NOW)
        assert result is not None and result[0] == r.kind and result[1]
