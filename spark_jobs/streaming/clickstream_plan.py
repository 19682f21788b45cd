"""The events query's plan up to ``foreachBatch``: raw rows, checked and de-duplicated rows, per-batch stats.

Pure DataFrame -> DataFrame functions (the per-record work runs in Spark tasks);
:mod:`spark_jobs.streaming.archive` runs them and writes the tables.

One streaming query, one Kafka read per micro-batch shared by two branches:

* *raw*: every record as Kafka gave it (key, value, coordinates, timestamp):
  what bronze keeps and what the ledger counts;
* *checked*: the contract applied on the executors
  (:func:`spark_jobs.silver.clickstream.check_events`, ``mapInArrow``), then
  de-duplicated by ``event_id`` in Spark's state store (:func:`first_seen`,
  RocksDB provider): a re-send is dropped if it arrives within
  ``LAKE_EVENTS_WATERMARK_MINUTES`` of the first copy (processing time), and
  the state forgets an id after that, so it holds rate x horizon ids at most
  and survives restarts with the checkpoint. Rejects pass through (their key is
  their Kafka coordinates).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spark_jobs.silver.clickstream import check_events

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: What the events queries' checkpoints were built with (:func:`spark_jobs.streaming.archive.start_on_topic`
#: refuses a checkpoint of another plan: Spark cannot resume a different stateful operator's state).
PLAN_VERSION = "first_seen/transformWithState-ttl/1"


def first_seen(frame: DataFrame, key: str, horizon_minutes: int) -> DataFrame:
    """``frame``'s rows, the first of each ``key`` (a string column) within ``horizon_minutes``: later copies
    within the horizon after the first are dropped, the id is forgotten after it (processing time).

    Spark's ``dropDuplicatesWithinWatermark`` gives the same, but evicts by scanning every id it holds on every
    micro-batch (seconds per batch at rate x horizon ids, whatever the batch's size: docs/benchmarks.md). This is
    ``transformWithState`` with a per-id ``ValueState`` whose TTL is the horizon (``infra/stream/LakeDedup.java``,
    in ``lake-stream.jar``): Spark expires it through its TTL index, so a batch pays only for the ids that expire.
    Needs the RocksDB state store provider and the jar on the session (the streaming app ships it).
    """
    from pyspark.sql import DataFrame as _DataFrame

    session = frame.sparkSession
    jvm = session._jvm
    assert jvm is not None
    return _DataFrame(jvm.LakeDedup.apply(frame._jdf, key, horizon_minutes * 60_000), session)


#: ``_kind`` of a row: the Kafka record as received (bronze, the ledger) or after the contract check.
RAW, CHECKED = "raw", "checked"


def events_stream(source: DataFrame, watermark_minutes: int) -> DataFrame:
    """The Kafka source's rows -> the query's plan up to ``foreachBatch`` (see the module docstring).

    Out: the raw rows (``_kind`` = "raw": key, value, topic, partition, offset,
    kafka_timestamp) and the checked, de-duplicated rows (``_kind`` = "checked":
    :func:`~spark_jobs.silver.clickstream.checked_schema`, key and value only for
    rejects). No per-batch value (the batch's time or id) is in this plan: Spark writes such a value into its
    generated code, which then compiles again every batch; the writes add them
    (:func:`spark_jobs.streaming.common.batch_time`).
    """
    from pyspark.sql import functions as F

    stamped = source.withColumnRenamed("timestamp", "kafka_timestamp")
    raw = stamped.select("key", "value", "topic", "partition", "offset", "kafka_timestamp",
                         F.lit(RAW).alias("_kind"))
    rejected = F.col("_reason").isNotNull()
    checked = (check_events(stamped)
               .withColumn("key", F.when(rejected, F.col("key")))
               .withColumn("value", F.when(rejected, F.col("value")))
               .withColumn("_kind", F.lit(CHECKED))
               .withColumn("_dedup_key", F.coalesce(F.col("_event_id"),
                                                    F.format_string("#%d/%d", F.col("partition"), F.col("offset")))))
    checked = first_seen(checked, "_dedup_key", watermark_minutes).drop("_dedup_key")
    return raw.unionByName(checked, allowMissingColumns=True)


def late_flag(watermark_minutes: int) -> Column:
    """``_late``: the event reached Kafka more than ``watermark_minutes`` after its ``event_time``.

    A property of the record alone (its event time against its Kafka timestamp), not of the batch it fell in: the
    hot tables, the archive and a replay of the archive all flag the same events, whatever their batches.
    A late event is kept in silver and counted in its window's ``late_events``, never in its metrics.
    """
    from pyspark.sql import functions as F

    return F.col("_event_time") < F.col("kafka_timestamp") - F.expr(f"INTERVAL {int(watermark_minutes)} MINUTES")


STATS_COLUMNS = ("partition", "received", "first_offset", "last_offset", "appended", "quarantined", "late",
                 "newest_kafka_time")


def stats_aggregates(late: Column, counted: Column | None = None, prefix: str = "") -> list[Column]:
    """:func:`batch_stats`'s aggregates (:data:`STATS_COLUMNS` but the partition, each named ``prefix`` + its name)
    over the rows where ``counted`` holds (default: every row)."""
    from pyspark.sql import functions as F

    counted = F.lit(True) if counted is None else counted
    is_raw = counted & (F.col("_kind") == RAW)
    checked = counted & (F.col("_kind") == CHECKED)
    valid = checked & F.col("_reason").isNull()
    one = F.lit(1)
    return [
        F.count(F.when(is_raw, one)).alias(f"{prefix}received"),
        F.min(F.when(is_raw, F.col("offset"))).alias(f"{prefix}first_offset"),
        F.max(F.when(is_raw, F.col("offset"))).alias(f"{prefix}last_offset"),
        F.count(F.when(valid, one)).alias(f"{prefix}appended"),
        F.count(F.when(checked & F.col("_reason").isNotNull(), one)).alias(f"{prefix}quarantined"),
        F.count(F.when(valid & late, one)).alias(f"{prefix}late"),
        F.max(F.when(is_raw, F.col("kafka_timestamp"))).alias(f"{prefix}newest_kafka_time"),
    ]


def merge_stats(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`batch_stats` rows from groups finer than a partition (each with ``partition`` and the ``s_``-prefixed
    :func:`stats_aggregates`): counts add, offsets and times take their least or greatest."""
    def pick(values: list[Any], best: Callable[[list[Any]], Any]) -> Any:
        present = [v for v in values if v is not None]
        return best(present) if present else None

    merged: list[dict[str, Any]] = []
    for partition in sorted({g["partition"] for g in groups}):
        mine = [g for g in groups if g["partition"] == partition]
        row: dict[str, Any] = {"partition": partition}
        for name in STATS_COLUMNS[1:]:
            values = [g[f"s_{name}"] for g in mine]
            row[name] = (pick(values, min) if name == "first_offset" else
                         pick(values, max) if name in ("last_offset", "newest_kafka_time") else
                         sum(int(v) for v in values))
        merged.append(row)
    return merged


def batch_stats(frame: DataFrame, late: Column) -> DataFrame:
    """Per Kafka partition of a batch (:func:`events_stream` rows): received, first/last offset, unique valid,
    quarantined, late, newest Kafka time. One small row per partition."""
    return frame.groupBy("partition").agg(*stats_aggregates(late))
