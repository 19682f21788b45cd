"""Retention of the lake's Kafka topics: ``events.clickstream`` (bounded retention) and the CDC topics
(``shop.public.*``, log-compacted with ``min.compaction.lag.ms`` from the settings).

Bronze is the archive (DESIGN.md: a replay must not depend on Kafka retention), so a topic only has to keep
what the streaming app has not archived yet: ``retention.ms`` / ``retention.bytes`` come from the settings
(``LAKE_KAFKA_EVENTS_RETENTION_*``, ``LAKE_KAFKA_CDC_RETENTION_*``) instead of the broker's defaults (7 days
for events, and no limit at all for the CDC topics Debezium created with ``retention.ms=-1``).

``lake stack up`` creates the events topic with them (before any producer or the streaming app could
auto-create it) and sets them on topics that exist already; Debezium creates the CDC topics with them through
Connect's ``topic.creation.default.*`` (``connectors/shop-postgres.json``), and ``lake connectors apply`` sets
them on CDC topics created before.
"""

from __future__ import annotations

from collections.abc import Iterable

from spark_jobs import kafka_auth
from spark_jobs.settings import Settings


class TopicError(RuntimeError):
    """A topic could not be created or configured; the message says where and what to do."""


def events_topic_config(settings: Settings) -> dict[str, str]:
    """The events topic keeps a bounded window (bronze is the archive): deleted past its retention."""
    return {"cleanup.policy": "delete", "retention.ms": str(settings.kafka_events_retention_ms),
            "retention.bytes": str(settings.kafka_events_retention_bytes)}


def cdc_topic_config(settings: Settings) -> dict[str, str]:
    """A CDC topic is log-compacted: Kafka keeps the newest record per key (Debezium's tombstones end a deleted key)
    and bronze keeps every change. ``min.compaction.lag.ms`` keeps a superseded change at least that long, so the
    streaming app can archive it after an outage shorter than that (docs/operations.md, Replay (Kappa))."""
    return {"cleanup.policy": "compact", "min.compaction.lag.ms": str(settings.kafka_cdc_min_compaction_lag_ms),
            "retention.ms": str(settings.kafka_cdc_retention_ms),
            "retention.bytes": str(settings.kafka_cdc_retention_bytes)}


#: The topic settings the lake sets and ``lake stack status`` reads.
MANAGED_KEYS = ("cleanup.policy", "min.compaction.lag.ms", "retention.ms", "retention.bytes")


def wanted_configs(settings: Settings) -> dict[str, dict[str, str]]:
    """Topic -> the settings it must have (retention; for CDC topics compaction too)."""
    from spark_jobs.contracts.clickstream import TOPIC
    from spark_jobs.contracts.shop import CDC_TABLES

    out = {TOPIC: events_topic_config(settings)}
    out.update({topic: cdc_topic_config(settings) for topic in CDC_TABLES})
    return out


def topic_configs(settings: Settings, topics: Iterable[str], timeout: float = 15.0) -> dict[str, dict[str, str]]:
    """Current :data:`MANAGED_KEYS` settings (retention, cleanup policy, compaction lag) of each of ``topics`` that
    exists."""
    from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]  # public, not in stubs

    admin = AdminClient(kafka_auth.client_conf(settings, "tools"))
    existing = set(admin.list_topics(timeout=timeout).topics)
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics if t in existing]
    if not resources:
        return {}
    out = {}
    for res, fut in admin.describe_configs(resources, request_timeout=timeout).items():
        entries = fut.result(timeout)
        out[res.name] = {k: entries[k].value for k in MANAGED_KEYS if k in entries}
    return out


def partition_offsets(settings: Settings, topics: Iterable[str], timeout: float = 10.0) -> dict[tuple[str, int],
                                                                                            tuple[int, int]]:
    """``(topic, partition) -> (earliest offset, end offset)`` of every partition of ``topics`` that exists, from the
    admin client's ListOffsets.

    Not a consumer's watermark offsets: a consumer has a group id, and closing it cut its group coordinator's
    connection mid-SASL-handshake, so librdkafka printed an authentication error on every ``lake stream wait`` and
    status check. The admin client needs no group."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]  # public, not in stubs

    admin = AdminClient(kafka_auth.client_conf(settings, "tools"))
    meta = admin.list_topics(timeout=timeout).topics
    parts = [TopicPartition(t, pid) for t in dict.fromkeys(topics) if t in meta for pid in meta[t].partitions]
    if not parts:
        return {}
    ends: dict[str, dict[tuple[str, int], int]] = {}
    for name, spec in (("low", OffsetSpec.earliest()), ("high", OffsetSpec.latest())):  # type: ignore[no-untyped-call]
        futures = admin.list_offsets({tp: spec for tp in parts}, request_timeout=timeout)
        ends[name] = {(tp.topic, tp.partition): int(fut.result(timeout).offset) for tp, fut in futures.items()}
    return {tp: (ends["low"][tp], ends["high"][tp]) for tp in ends["high"]}


def ensure_retention(settings: Settings, *, create_events: bool = True, timeout: float = 15.0) -> list[str]:
    """Create the events topic with its retention if missing; set the wanted retention on every lake topic that
    exists with another. Returns what it did, one line each (empty when everything already matched)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public API the stubs do not re-export
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
    )

    from spark_jobs.contracts.clickstream import TOPIC

    admin = AdminClient(kafka_auth.client_conf(settings, "tools"))
    wanted = wanted_configs(settings)
    done: list[str] = []
    try:
        existing = set(admin.list_topics(timeout=timeout).topics)
        if create_events and TOPIC not in existing:
            fut = admin.create_topics([NewTopic(TOPIC, num_partitions=settings.kafka_topic_partitions, replication_factor=1,
                                                config=wanted[TOPIC])], operation_timeout=timeout)[TOPIC]
            try:
                fut.result(timeout)
                done.append(f"created {TOPIC} ({settings.kafka_topic_partitions} partitions, "
                            f"retention.ms={wanted[TOPIC]['retention.ms']}, "
                            f"retention.bytes={wanted[TOPIC]['retention.bytes']})")
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
            existing.add(TOPIC)
        current = topic_configs(settings, [t for t in wanted if t in existing], timeout)
        changes = {t: cfg for t, cfg in wanted.items()
                   if t in current and any(current[t].get(k) != v for k, v in cfg.items())}
        if changes:
            resources = [ConfigResource(ConfigResource.Type.TOPIC, t, incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in cfg.items()])
                for t, cfg in changes.items()]
            for res, fut in admin.incremental_alter_configs(resources, request_timeout=timeout).items():
                fut.result(timeout)
                done.append(f"set {res.name} " + " ".join(
                    f"{k}={v} (was {current[res.name].get(k)})" for k, v in changes[res.name].items()
                    if current[res.name].get(k) != v))
    except KafkaException as exc:
        raise TopicError(f"Kafka at {settings.kafka_bootstrap}: could not create/configure the lake's topics "
                         f"({exc}); is kafka up? (lake stack status)") from exc
    return done
