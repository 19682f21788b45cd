"""The clickstream load generator against the real Kafka: what the manifest says is exactly what the topic holds.

Each run writes to its own topic (``--topic``), so nothing lands in
``events.clickstream`` and the streaming app never sees these records.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from spark_jobs import kafka_auth
from spark_jobs.contracts.clickstream import check_record, parse_event_time
from spark_jobs.loadgen.clickstream import BAD_KINDS, LATE_SPLIT_S, event_ids_digest
from spark_jobs.settings import Settings, load_settings
from tests.integration.lakehelpers import lake_output_dir, run_lake

ARGS = ("--rate", "2000", "--duration", "5", "--seed", "7", "--late", "0.05", "--dup", "0.05", "--bad", "0.04")


@pytest.fixture(scope="module")
def kafka() -> Iterator[Settings]:
    """The running stack's settings; Kafka must answer (this test never starts or stops services)."""
    from confluent_kafka.admin import AdminClient

    settings = load_settings()
    admin = AdminClient(kafka_auth.client_conf(settings, "tools"))
    try:
        admin.list_topics(timeout=10)
    except Exception as exc:
        pytest.fail(f"Kafka at {settings.kafka_bootstrap} does not answer ({exc}); start the stack: lake stack up")
    yield settings


@pytest.fixture(scope="module")
def topics(kafka: Settings) -> Iterator[list[str]]:
    """Per-run topics, deleted afterwards."""
    from confluent_kafka.admin import AdminClient

    made: list[str] = []
    yield made
    if made:
        admin = AdminClient(kafka_auth.client_conf(kafka, "tools"))  # keep it alive until the futures resolve
        futures = admin.delete_topics(made, operation_timeout=30)
        for f in futures.values():
            f.result(60)


def loadgen(settings: Settings, topics: list[str], tmp: Path, *extra: str) -> tuple[dict[str, Any], str]:
    topic = f"events.test-loadgen-{uuid.uuid4().hex[:10]}"  # lake_producer may write events.* only
    topics.append(topic)
    manifest = tmp / f"{topic}.json"
    # "--": the CLI hands everything after the sub-command to the loadgen verbatim.
    proc = run_lake("loadgen", "events", "--", *ARGS, "--topic", topic, "--manifest", str(manifest), *extra,
                    timeout=300)
    return json.loads(manifest.read_text(encoding="utf-8")), proc.stdout


def consume(settings: Settings, topic: str, ranges: dict[str, list[int]]) -> list[tuple[int, int, bytes | None, datetime]]:
    """Every record in the manifest's offset ranges: (partition, offset, value, kafka timestamp)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**kafka_auth.client_conf(settings, "tools"), "group.id": f"test-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, int(p), lo) for p, (lo, _) in ranges.items()])
    want = {int(p): hi for p, (_, hi) in ranges.items()}
    out = []
    done: set[int] = set()
    try:
        while len(done) < len(want):
            batch = consumer.consume(num_messages=5000, timeout=10)
            assert batch, f"no more records from {topic} but partitions {set(want) - done} are not complete"
            for msg in batch:
                assert msg.error() is None, msg.error()
                p, o = int(msg.partition() or 0), int(msg.offset() or 0)
                if o > want[p]:
                    continue
                _, ts_ms = msg.timestamp()
                out.append((p, o, msg.value(), datetime.fromtimestamp(ts_ms / 1000, UTC)))
                if o == want[p]:
                    done.add(p)
    finally:
        consumer.close()
    return out


@pytest.fixture(scope="module")
def first_run(kafka: Settings, topics: list[str]) -> tuple[dict[str, Any], str]:
    return loadgen(kafka, topics, lake_output_dir(kafka, "loadgen-events"))


def test_manifest_matches_what_kafka_holds(kafka: Settings, first_run: tuple[dict[str, Any], str]) -> None:
    m, stdout = first_run
    print(stdout)
    assert m["total_sent"] == 10_000 and m["delivered"] == 10_000 and m["delivery_failed"] == 0
    records = consume(kafka, m["topic"], m["offsets"])
    assert len(records) == m["total_sent"], "records in the offset ranges = records sent"

    reasons: Counter[str] = Counter()
    seen: set[str] = set()
    unique_ids: list[str] = []
    by_type: Counter[str] = Counter()
    duplicates = late_lt = late_ge = 0
    revenue = Decimal(0)
    for _p, _o, value, kafka_ts in sorted(records, key=lambda r: (r[0], r[1])):
        result = check_record(value, kafka_ts)
        if result is not None:
            reasons[result[0]] += 1
            continue
        doc = json.loads(value or b"")
        if doc["event_id"] in seen:
            duplicates += 1
            continue
        seen.add(doc["event_id"])
        unique_ids.append(doc["event_id"])
        by_type[doc["event_type"]] += 1
        if doc["event_type"] == "purchase":
            revenue += Decimal(doc["properties"]["revenue"])
        event_time = parse_event_time(doc["event_time"])
        assert event_time is not None
        age = (kafka_ts - event_time).total_seconds()
        if age >= 60:  # late events are 1-30 minutes old; on-time ones are produced within milliseconds
            late_lt += age < LATE_SPLIT_S
            late_ge += age >= LATE_SPLIT_S

    assert dict(reasons) == {k: v for k, v in m["bad"].items() if v}
    assert set(reasons) == set(BAD_KINDS), "a 5 s run at 4% bad covers every malformed kind"
    assert len(unique_ids) == m["valid_unique"]
    assert duplicates == m["duplicates"] > 0
    assert (late_lt + late_ge, late_lt, late_ge) == (m["late"], m["late_lt_10m"], m["late_ge_10m"])
    assert m["late_lt_10m"] > 0 and m["late_ge_10m"] > 0
    assert dict(by_type) == {k: v for k, v in m["by_event_type"].items() if v}
    assert revenue == Decimal(m["purchase_revenue"])
    assert event_ids_digest(unique_ids) == m["event_ids_sha256"]
    assert m["first_produce_time"] <= m["last_produce_time"]


def test_same_seed_same_event_ids(kafka: Settings, topics: list[str], first_run: tuple[dict[str, Any], str]) -> None:
    again, _ = loadgen(kafka, topics, lake_output_dir(kafka, "loadgen-events"))
    first = first_run[0]
    assert again["event_ids_sha256"] == first["event_ids_sha256"]
    for key in ("total_sent", "valid_unique", "late", "late_lt_10m", "late_ge_10m", "duplicates", "bad"):
        assert again[key] == first[key], key


def test_unreachable_kafka_names_the_address() -> None:
    manifest = lake_output_dir(load_settings(), "loadgen-events") / "m.json"
    proc = run_lake("loadgen", "events", "--", "--rate", "10", "--duration", "1", "--users", "5",
                    "--manifest", str(manifest), env={"LAKE_KAFKA_BOOTSTRAP": "127.0.0.1:1"},
                    check=False, timeout=120)
    assert proc.returncode == 2
    assert "Kafka at 127.0.0.1:1" in proc.stderr and "lake stack up" in proc.stderr
    assert not manifest.exists()
