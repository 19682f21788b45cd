"""Publish clickstream events to Kafka under the contract (``spark_jobs.contracts.clickstream``).

::

    with EventProducer(load_settings()) as producer:
        producer.send(make_event("page_view", user_id=42, session_id="s-1", properties={"page": "/"}))
    # leaving the block flushes; undelivered messages raise ProducerError

Delivery: idempotent producer (``enable.idempotence``, ``acks=all``), so
retries never duplicate or reorder a partition's records; the key is the
``user_id``, so one user's events stay in order on one partition. ``send``
validates first and raises :class:`InvalidEventError` (nothing is produced);
``send_raw`` sends bytes as they are (the load generator's deliberately bad
records). Delivery reports are counted in :attr:`EventProducer.stats`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

from spark_jobs import kafka_auth
from spark_jobs.contracts.clickstream import (
    MAX_EVENT_BYTES,
    SCHEMA_VERSION,
    TOPIC,
    event_errors,
    format_event_time,
)
from spark_jobs.waits import poll_until

if TYPE_CHECKING:
    from spark_jobs.settings import Settings

#: librdkafka batches a partition's records for this long. With 5 ms, a load of thousands of events a second went
#: out as hundreds of tiny produce requests a second, and the requests, not the records, cost the broker's and this
#: process's CPU, which the stream shares on a small machine (docs/benchmarks.md, "The load generator's share").
LINGER_MS = 50
COMPRESSION = "lz4"
MAX_KEPT_ERRORS = 10


class ProducerError(RuntimeError):
    """Kafka could not take or deliver the records; the message names the servers, topic and what to do."""


class InvalidEventError(ValueError):
    """An event breaks the contract; nothing was sent. ``field`` and ``problem`` say what is wrong."""

    def __init__(self, field: str, problem: str, *, reason: str, topic: str, bootstrap: str,
                 problems: Sequence[str] = ()) -> None:
        self.field = field
        self.problem = problem
        self.reason = reason
        self.problems = list(problems)
        more = f" (+{len(self.problems) - 1} more: {'; '.join(self.problems[1:4])})" if len(self.problems) > 1 else ""
        super().__init__(f"event not sent to {topic} at {bootstrap}: {reason}: {field}: {problem}{more}")


def make_event(event_type: str, user_id: int, session_id: str, properties: Mapping[str, Any],
               event_time: datetime | None = None) -> dict[str, Any]:
    """A contract-shaped event dict with a fresh ``event_id`` (uuid4) and ``schema_version``.

    ``event_time`` defaults to now (UTC, millisecond precision); pass an aware datetime otherwise.
    """
    return {
        "event_id": str(uuid.uuid4()),
        "event_type": event_type,
        "user_id": user_id,
        "session_id": session_id,
        "event_time": format_event_time(event_time or datetime.now(UTC)),
        "properties": dict(properties),
        "schema_version": SCHEMA_VERSION,
    }


def serialize(event: Mapping[str, Any]) -> bytes:
    """Compact UTF-8 JSON, as every producer of the topic writes it."""
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass
class DeliveryStats:
    """What Kafka acknowledged: counts, per-partition offset ranges, the first errors."""

    delivered: int = 0
    failed: int = 0
    offsets: dict[int, list[int]] = field(default_factory=dict)  # partition -> [min, max]
    errors: list[str] = field(default_factory=list)

    def offset_ranges(self) -> dict[str, list[int]]:
        """``{"0": [min, max], ...}`` sorted by partition (JSON-ready)."""
        return {str(p): list(r) for p, r in sorted(self.offsets.items())}


def _connection_conf(settings_or_bootstrap: Settings | str) -> dict[str, Any]:
    """The lake's Kafka as principal ``lake_producer`` (SASL), or a bare ``host:port`` list without auth."""
    if isinstance(settings_or_bootstrap, str):
        return {"bootstrap.servers": settings_or_bootstrap}
    return kafka_auth.client_conf(settings_or_bootstrap, "producer")


#: Seconds a default flush waits beyond the producer's delivery timeout (``message.timeout.ms``).
FLUSH_MARGIN_S = 15.0


class EventProducer:
    """Idempotent confluent-kafka producer for one topic, validating events against the contract."""

    def __init__(self, settings_or_bootstrap: Settings | str, topic: str = TOPIC, *,
                 client_id: str = "lakestream-events", config: Mapping[str, Any] | None = None,
                 producer: Any = None) -> None:
        """``config`` adds/overrides librdkafka settings; ``producer`` injects a client (unit tests)."""
        if not isinstance(settings_or_bootstrap, str) and not topic.startswith(kafka_auth.EVENTS_TOPIC_PREFIX):
            raise ProducerError(f"topic {topic!r}: the lake's event producers (Kafka principal "
                                f"{kafka_auth.user('producer')}) may write {kafka_auth.EVENTS_TOPIC_PREFIX}* topics "
                                f"only; name it {kafka_auth.EVENTS_TOPIC_PREFIX}<name>")
        connection = _connection_conf(settings_or_bootstrap)
        self.bootstrap = str(connection["bootstrap.servers"])
        self.topic = topic
        self.stats = DeliveryStats()
        self._last_client_error: str | None = None
        self.config: dict[str, Any] = {
            **connection,
            "client.id": client_id,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": LINGER_MS,
            "compression.type": COMPRESSION,
            "queue.buffering.max.messages": 500_000,
            "message.timeout.ms": 120_000,
            "error_cb": self._on_client_error,
            **(config or {}),
        }
        self.compression = str(self.config["compression.type"])
        self._producer = producer if producer is not None else self._create()

    def _create(self) -> Any:
        from confluent_kafka import KafkaException, Producer

        try:
            return Producer(self.config)
        except KafkaException as exc:
            if "compression" not in str(exc).lower():
                raise ProducerError(f"cannot create a Kafka producer for {self.bootstrap}: {exc}") from exc
            # librdkafka built without lz4: fall back to no compression rather than failing
            self.config["compression.type"] = self.compression = "none"
            return Producer(self.config)

    # -- callbacks (run inside poll/flush) --------------------------------------------------

    def _on_client_error(self, err: Any) -> None:
        self._last_client_error = str(err)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        stats = self.stats
        if err is not None:
            stats.failed += 1
            if len(stats.errors) < MAX_KEPT_ERRORS:
                stats.errors.append(f"{self.topic} at {self.bootstrap}: {err}")
            return
        stats.delivered += 1
        partition, offset = msg.partition(), msg.offset()
        rng = stats.offsets.get(partition)
        if rng is None:
            stats.offsets[partition] = [offset, offset]
        elif offset < rng[0]:
            rng[0] = offset
        elif offset > rng[1]:
            rng[1] = offset

    # -- sending ----------------------------------------------------------------------------

    def validate(self, event: Mapping[str, Any]) -> bytes:
        """The serialized event, or :class:`InvalidEventError` naming the first broken field and why."""
        errors = event_errors(dict(event), datetime.now(UTC))
        if errors:
            reason, detail = errors[0]
            name, _, problem = detail.partition(": ")
            raise InvalidEventError(name, problem, reason=reason, topic=self.topic, bootstrap=self.bootstrap,
                                    problems=[d for _, d in errors])
        value = serialize(event)
        if len(value) > MAX_EVENT_BYTES:
            raise InvalidEventError("(record)", f"{len(value)} bytes serialized, more than the {MAX_EVENT_BYTES} "
                                    "allowed", reason="oversized", topic=self.topic, bootstrap=self.bootstrap)
        return value

    def send(self, event: Mapping[str, Any]) -> None:
        """Validate ``event`` against the contract and queue it (key = its ``user_id``)."""
        value = self.validate(event)
        self.send_raw(str(event["user_id"]).encode("ascii"), value)

    def send_raw(self, key: bytes | str | None, value: bytes | None,
                 headers: Sequence[tuple[str, bytes]] | None = None) -> None:
        """Queue ``value`` unvalidated (waits for queue space when the local buffer is full)."""
        while True:
            try:
                if headers:
                    self._producer.produce(self.topic, value=value, key=key, headers=list(headers),
                                           on_delivery=self._on_delivery)
                else:
                    self._producer.produce(self.topic, value=value, key=key, on_delivery=self._on_delivery)
                return
            except BufferError:
                # Local queue full: serve delivery reports until there is room.
                self._producer.poll(0.05)

    def poll(self, timeout: float = 0.0) -> int:
        """Serve delivery callbacks; returns how many were served."""
        return int(self._producer.poll(timeout))

    def pending(self) -> int:
        """Messages queued or in flight."""
        return len(self._producer)

    @property
    def delivery_timeout_s(self) -> float:
        """How long librdkafka keeps retrying a record before it fails it (``message.timeout.ms``)."""
        return float(self.config["message.timeout.ms"]) / 1000.0

    def flush(self, timeout: float | None = None) -> None:
        """Wait for every queued message; raise :class:`ProducerError` if some are still undelivered. By default
        as long as the producer's own delivery timeout plus :data:`FLUSH_MARGIN_S`: a broker restart under load
        may hold records that long, and giving up sooner reports records lost that would still be delivered (CI
        saw 34,636 reported lost by a 60 s flush)."""
        if timeout is None:
            timeout = self.delivery_timeout_s + FLUSH_MARGIN_S
        remaining = int(self._producer.flush(timeout))
        if remaining:
            hint = f" (last client error: {self._last_client_error})" if self._last_client_error else ""
            raise ProducerError(
                f"{remaining} message(s) to {self.topic} not delivered by {self.bootstrap} within {timeout:g}s{hint}; "
                "is Kafka running (`lake stack status`) and LAKE_KAFKA_BOOTSTRAP right?")

    def close(self, timeout: float | None = None) -> None:
        self.flush(timeout)

    def __enter__(self) -> EventProducer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.flush()
        else:
            self._producer.flush(5)


def ensure_topic(settings: Settings, topic: str = TOPIC, partitions: int = 3, replication: int = 1,
                 timeout: float = 15.0, config: dict[str, str] | None = None) -> bool:
    """Create ``topic`` (with topic ``config``, e.g. its retention) if it does not exist; True if it was created.
    An existing topic is left as it is. Creating topics is administration: it runs as ``lake_tools``."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    bootstrap = settings.kafka_bootstrap
    admin = AdminClient(kafka_auth.client_conf(settings, "tools"))
    try:
        existing = admin.list_topics(timeout=timeout).topics
    except KafkaException as exc:
        raise ProducerError(f"cannot reach Kafka at {bootstrap} to look up topic {topic}: {exc}; "
                            "start it with `lake stack up` or fix LAKE_KAFKA_BOOTSTRAP") from exc
    if topic in existing:
        return False
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=replication,
                                            config=config or {})], operation_timeout=timeout)
    created = True
    try:
        futures[topic].result(timeout)
    except KafkaException as exc:
        if exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            created = False  # another process made it meanwhile
        else:
            raise ProducerError(f"cannot create topic {topic} ({partitions} partitions) at {bootstrap}: {exc}") from exc
    def visible() -> bool:  # metadata propagates after creation; producing earlier fails with UNKNOWN_TOPIC
        meta = admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
        return meta is not None and meta.error is None and len(meta.partitions) > 0

    if not poll_until(visible, lambda ok: ok, timeout, 0.2):
        raise ProducerError(f"topic {topic} at {bootstrap} was created but its metadata did not appear "
                            f"within {timeout:g}s")
    return created
