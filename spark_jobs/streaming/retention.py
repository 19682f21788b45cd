"""How close Kafka is to deleting records the streaming app has not archived yet.

Bronze is the archive, Kafka only a window (``retention.ms`` / ``retention.bytes`` per partition, docs/operations.md,
Retention). While the app is stopped or behind, the oldest record it has not processed ages and more bytes
pile up after it; once either reaches its topic's limit Kafka deletes it and bronze never sees it. Per
partition of each input topic this measures:

- the age of the oldest unprocessed record (its Kafka timestamp against now) as a fraction of ``retention.ms``;
- the bytes from that record to the end of the partition as a fraction of ``retention.bytes``: the partition's
  log size on disk (``<state>/data/kafka/<topic>-<p>/*.log``) times the share of its records still to process.
  An estimate (records assumed of equal size), and only where the broker's log dir is readable (the local stack).

Kafka deletes a whole segment once its newest record is past retention, so a record goes no sooner than the
fraction reaches 1: the measure errs on the early side. The CDC topics are log-compacted (:func:`limits`): their
deadline is ``min.compaction.lag.ms``, after which a change superseded by a newer record of its key may be
compacted away before bronze archived it (the stream would skip its offset: docs/operations.md, Replay (Kappa)).
"Processed" is :func:`spark_jobs.streaming.progress.processed_offsets`: for
the events topic the lower of the archive's and the hot tables' offsets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from spark_jobs import kafka_auth
from spark_jobs.settings import Settings


@dataclass(frozen=True)
class PartitionRetention:
    """One partition's unprocessed records against its topic's retention. Offsets and sizes as Kafka reports them;
    ``None`` where a figure is unknown or the limit is off (-1)."""

    topic: str
    partition: int
    behind: int  # records not processed yet (end offset - first unprocessed offset)
    lost: int  # records Kafka already deleted before the app processed them (log start - first unprocessed)
    age_s: float | None  # age of the oldest unprocessed record still in Kafka
    retention_ms: int
    bytes_behind: int | None
    retention_bytes: int
    #: What ``retention_ms`` is: the topic's ``retention.ms`` (deleted past it), or ``min.compaction.lag.ms`` for a
    #: compacted CDC topic (a superseded change may be compacted away past it).
    limit: str = "retention.ms"
    #: Compacted topics: the offset up to which Kafka's log cleaner has compacted the partition (its
    #: ``cleaner-offset-checkpoint``; None: not compacted yet, or unknown).
    cleaned: int | None = None
    processed: int = -1

    @property
    def compacted_unread(self) -> int:
        """Offsets the app has not archived that the cleaner has already compacted (superseded changes there may
        be gone: the stream will skip them, docs/operations.md, Replay (Kappa))."""
        if self.cleaned is None or self.processed < 0 or not self.behind:
            return 0
        return max(0, self.cleaned - (self.processed + 1))

    @property
    def name(self) -> str:
        return f"{self.topic}:{self.partition}"

    @property
    def time_fraction(self) -> float | None:
        if self.age_s is None or self.retention_ms <= 0:
            return None
        return self.age_s * 1000 / self.retention_ms

    @property
    def bytes_fraction(self) -> float | None:
        if self.bytes_behind is None or self.retention_bytes <= 0:
            return None
        return self.bytes_behind / self.retention_bytes

    @property
    def fraction(self) -> float:
        """The larger of the two fractions (0 when nothing is behind or no limit applies)."""
        return max(f for f in (self.time_fraction, self.bytes_fraction, 0.0) if f is not None)


def partition_retention(topic: str, partition: int, *, processed: int, low: int, high: int,
                        oldest_timestamp_ms: int | None, now_ms: int, retention_ms: int, retention_bytes: int,
                        log_bytes: int | None, limit: str = "retention.ms",
                        cleaned: int | None = None) -> PartitionRetention:
    """One partition's figures from fed-in numbers (all offsets as Kafka counts them).

    ``processed``: the last offset the app processed (-1: none or unknown); ``low``/``high``: the partition's log start and
    end offsets; ``oldest_timestamp_ms``: Kafka timestamp of the first unprocessed record still in the log;
    ``log_bytes``: the partition's log size (None: unknown).
    """
    first = processed + 1
    # -1 is also "no progress file yet": the app then starts at the log start, and what went before is unknown.
    lost = max(0, low - first) if processed >= 0 else 0
    start = max(first, low)
    behind = max(0, high - start)
    age = None
    if behind and oldest_timestamp_ms is not None:
        age = max(0.0, (now_ms - oldest_timestamp_ms) / 1000)
    bytes_behind = None
    if log_bytes is not None:
        held = high - low
        bytes_behind = round(log_bytes * behind / held) if held > 0 else 0
    return PartitionRetention(topic, partition, behind, lost, age, retention_ms, bytes_behind, retention_bytes, limit,
                              cleaned, processed)


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 360 else f"{seconds:.0f} s"


def _describe(p: PartitionRetention) -> str:
    parts = []
    if p.time_fraction is not None and p.age_s is not None:
        parts.append(f"oldest unprocessed record {_hours(p.age_s)} old of {p.limit} "
                     f"{_hours(p.retention_ms / 1000)} ({p.time_fraction:.1%})")
    if p.bytes_fraction is not None and p.bytes_behind is not None:
        parts.append(f"~{_gib(p.bytes_behind)} behind of retention.bytes {_gib(p.retention_bytes)} "
                     f"({p.bytes_fraction:.1%})")
    return f"{p.name}: {p.behind} record(s) not archived, " + ", ".join(parts)


def assess(partitions: Iterable[PartitionRetention], warn_fraction: float,
           fail_fraction: float) -> tuple[list[str], list[str]]:
    """``(failures, warnings)``, one line per partition: records already lost or a fraction at or past
    ``fail_fraction`` fail; at or past ``warn_fraction`` warn."""
    failures: list[str] = []
    warnings: list[str] = []
    for p in partitions:
        raise_what = ("LAKE_KAFKA_CDC_MIN_COMPACTION_LAG_MS (docs/operations.md, Replay (Kappa))" if p.limit ==
                      "min.compaction.lag.ms" else "LAKE_KAFKA_*_RETENTION_* (docs/operations.md, Retention)")
        fix = f"let the stream catch up (`lake stream start`) or raise {raise_what}"
        if p.compacted_unread:
            failures.append(
                f"{p.name}: Kafka's log cleaner already compacted offsets {p.processed + 1}-{(p.cleaned or 0) - 1}, "
                "which the streaming app has not archived: superseded changes there may be gone from Kafka and will "
                "be missing from bronze (silver stays right; the SCD2 history loses those versions). Let the stream "
                "catch up (`lake stream start`), then `lake replay gaps` names the keys; raise "
                "LAKE_KAFKA_CDC_MIN_COMPACTION_LAG_MS above the longest outage (docs/operations.md, Replay (Kappa))")
        elif p.lost:
            failures.append(f"{p.name}: Kafka already deleted {p.lost} record(s) the streaming app never archived "
                            "(the app fails at start with failOnDataLoss; docs/operations.md, Retention, says how to recover)")
        elif p.behind and p.fraction >= fail_fraction:
            failures.append(f"{_describe(p)}; past LAKE_RETENTION_FAIL_FRACTION={fail_fraction}: {fix}")
        elif p.behind and p.fraction >= warn_fraction:
            warnings.append(f"{_describe(p)}; past LAKE_RETENTION_WARN_FRACTION={warn_fraction}: {fix}")
    return failures, warnings


def cleaned_offsets(log_dir: Path) -> dict[tuple[str, int], int]:
    """Kafka's ``cleaner-offset-checkpoint`` in the broker's log dir: per compacted partition, the offset up to which
    the log cleaner has compacted it (a version line, a count line, then ``<topic> <partition> <offset>`` lines).
    Empty where the file is missing or not readable (the local stack's broker writes it)."""
    try:
        lines = (log_dir / "cleaner-offset-checkpoint").read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    out: dict[tuple[str, int], int] = {}
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit() and parts[2].lstrip("-").isdigit():
            out[(parts[0], int(parts[1]))] = int(parts[2])
    return out


def log_bytes(log_dir: Path, topic: str, partition: int) -> int | None:
    """Size of a partition's log segments in the broker's log dir (None: not there or not readable)."""
    try:
        return sum(f.stat().st_size for f in (log_dir / f"{topic}-{partition}").glob("*.log"))
    except OSError:
        return None


def _oldest_timestamps(settings: Settings, starts: Mapping[tuple[str, int], int],
                       timeout: float) -> dict[tuple[str, int], int]:
    """Kafka timestamp (ms) of the record at each ``(topic, partition) -> offset``: one fetch per partition."""
    import time

    from confluent_kafka import Consumer, TopicPartition

    if not starts:
        return {}
    consumer = Consumer({**kafka_auth.client_conf(settings, "tools"), "group.id": "_lake_stream_status",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    out: dict[tuple[str, int], int] = {}
    try:
        consumer.assign([TopicPartition(t, p, off) for (t, p), off in starts.items()])
        deadline = time.monotonic() + timeout
        while len(out) < len(starts) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            key = (str(msg.topic()), int(msg.partition() or 0))
            if key in starts and key not in out:
                out[key] = msg.timestamp()[1]
                consumer.pause([TopicPartition(key[0], key[1])])
    finally:
        consumer.close()
    return out


def measure(settings: Settings, topics: Iterable[str] | None = None, processed: Mapping[str, int] | None = None,
            timeout: float = 10.0) -> list[PartitionRetention]:
    """Every partition of ``topics`` (default: the app's input topics) that exists, against its retention.

    ``processed``: last processed offset per ``topic:partition`` (default: the app's progress files).
    """
    from spark_jobs.kafka_topics import partition_offsets, topic_configs
    from spark_jobs.streaming import progress

    topics = list(progress.input_topics(settings) if topics is None else topics)
    done = dict(progress.processed_offsets(settings) if processed is None else processed)
    configs = topic_configs(settings, topics, timeout=timeout)
    marks = partition_offsets(settings, configs, timeout=timeout)
    starts = {tp: max(low, int(done.get(f"{tp[0]}:{tp[1]}", -1)) + 1) for tp, (low, high) in marks.items()}
    starts = {tp: off for tp, off in starts.items() if off < marks[tp][1]}
    stamps = _oldest_timestamps(settings, starts, timeout)
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    log_dir = settings.data_dir / "kafka"
    cleaned = cleaned_offsets(log_dir)
    out = []
    for (topic, pid), (low, high) in sorted(marks.items()):
        limit, retention_ms, retention_bytes = limits(configs[topic])
        out.append(partition_retention(
            topic, pid, processed=int(done.get(f"{topic}:{pid}", -1)), low=low, high=high,
            oldest_timestamp_ms=stamps.get((topic, pid)), now_ms=now_ms, retention_ms=retention_ms,
            retention_bytes=retention_bytes, log_bytes=log_bytes(log_dir, topic, pid), limit=limit,
            cleaned=cleaned.get((topic, pid))))
    return out


def limits(conf: Mapping[str, str]) -> tuple[str, int, int]:
    """``(name, ms, bytes)`` of the limit an unprocessed record of a topic with settings ``conf`` must stay within.

    A deleting topic: ``retention.ms`` / ``retention.bytes``. A compacted-only topic (the CDC topics) deletes nothing
    by age or size, but compaction may remove a change once a newer record of its key exists and it is older than
    ``min.compaction.lag.ms``: that is the deadline (bytes: none). With ``compact,delete`` the earlier of both.
    """
    policy = {p.strip() for p in conf.get("cleanup.policy", "delete").split(",")}
    retention_ms, retention_bytes = int(conf.get("retention.ms", "-1")), int(conf.get("retention.bytes", "-1"))
    if "compact" not in policy:
        return "retention.ms", retention_ms, retention_bytes
    lag = int(conf.get("min.compaction.lag.ms", "0"))
    if "delete" in policy and 0 < retention_ms < lag:
        return "retention.ms", retention_ms, retention_bytes
    return "min.compaction.lag.ms", lag if lag > 0 else -1, retention_bytes if "delete" in policy else -1
