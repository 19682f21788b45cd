"""How far the streaming app has got: the Kafka topics its queries consume, the last offset each has processed
(from the queries' progress files), and Kafka's end offsets to compare them with."""

from __future__ import annotations

from spark_jobs.contracts.clickstream import TOPIC as EVENTS_TOPIC
from spark_jobs.contracts.shop import CDC_TABLES
from spark_jobs.settings import Settings
from spark_jobs.streaming.common import read_json, status_path


def input_topics(settings: Settings) -> list[str]:
    """The Kafka topics the configured queries consume."""
    from spark_jobs.contracts.clickstream import TOPIC

    topics = list(CDC_TABLES) if "cdc" in settings.stream_query_list else []
    return topics + ([TOPIC] if "events" in settings.stream_query_list else [])


def processed_offsets(settings: Settings) -> dict[str, int]:
    """Last processed offset per ``topic:partition``, from every query's progress file: for the events topic,
    the lower of the archive's and the hot tables' (both must hold a record for it to count as processed)."""
    from spark_jobs.streaming.archive import events_status_path
    from spark_jobs.streaming.hot import hot_status_path

    files = [read_json(path) or {} for path in (status_path(settings), events_status_path(settings))]
    done: dict[str, int] = {}
    for doc in files:
        done.update(doc.get("offsets", {}))
    hot = (read_json(hot_status_path(settings)) or {}).get("offsets", {})
    for tp in [tp for tp in done if tp.startswith(f"{EVENTS_TOPIC}:")]:
        done[tp] = min(int(done[tp]), int(hot.get(tp, -1)))
    for tp in set(hot) - set(done):
        done[tp] = -1  # the hot tables ahead of an archive that has not started on the partition
    return done


def kafka_end_offsets(settings: Settings) -> dict[str, int]:
    """High watermark per ``topic:partition`` for every input topic that exists."""
    from spark_jobs.kafka_topics import partition_offsets

    return {f"{topic}:{pid}": high for (topic, pid), (_low, high) in
            partition_offsets(settings, input_topics(settings)).items()}
