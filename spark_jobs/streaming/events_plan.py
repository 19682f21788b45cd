"""The events query's plan up to ``foreachBatch``: raw rows, checked and de-duplicated rows, per-batch stats.

Pure DataFrame -> DataFrame functions (the per-record work runs in Spark tasks);
:mod:`spark_jobs.streaming.events` runs them and writes the tables.

One streaming query, one Kafka read per micro-batch shared by two branches:

* *raw*: every record as Kafka gave it (key, value, coordinates, timestamp):
  what bronze keeps and what the ledger counts;
* *checked*: the contract applied on the executors
  (:func:`spark_jobs.silver.events.check_events`, ``mapInArrow``), then
  de-duplicated by ``event_id`` in Spark's state store
  (``dropDuplicatesWithinWatermark``, RocksDB provider) with a watermark on
  the batch's ingest time: a re-send is dropped if it arrives within
  ``LAKE_EVENTS_WATERMARK_MINUTES`` (to 2x that) of the first copy, and the
  state forgets ids after that, so it holds rate x horizon ids at most and
  survives restarts with the checkpoint. Rejects pass through (their key is
  their Kafka coordinates). The ingest time never falls behind its own
  watermark, so the operator drops no record as "late".
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from spark_jobs.silver.events import check_events

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: ``_kind`` of a row: the Kafka record as received (bronze, the ledger) or after the contract check.
RAW, CHECKED = "raw", "checked"


def events_stream(source: DataFrame, watermark_minutes: int) -> DataFrame:
    """The Kafka source's rows -> the query's plan up to ``foreachBatch`` (see the module docstring).

    Out: the raw rows (``_kind`` = "raw": key, value, topic, partition, offset,
    kafka_timestamp) and the checked, de-duplicated rows (``_kind`` = "checked":
    :func:`~spark_jobs.silver.events.checked_schema`, key and value only for
    rejects), both with ``_ingest_time`` (the batch's timestamp).
    """
    from pyspark.sql import functions as F

    stamped = source.withColumnRenamed("timestamp", "kafka_timestamp").withColumn(
        "_ingest_time", F.current_timestamp())
    raw = stamped.select("key", "value", "topic", "partition", "offset", "kafka_timestamp", "_ingest_time",
                         F.lit(RAW).alias("_kind"))
    rejected = F.col("_reason").isNotNull()
    checked = (check_events(stamped, keep=["_ingest_time"])
               .withColumn("key", F.when(rejected, F.col("key")))
               .withColumn("value", F.when(rejected, F.col("value")))
               .withColumn("_kind", F.lit(CHECKED))
               .withColumn("_dedup_key", F.coalesce(F.col("_event_id"),
                                                    F.format_string("#%d/%d", F.col("partition"), F.col("offset"))))
               .withWatermark("_ingest_time", f"{watermark_minutes} minutes")
               .dropDuplicatesWithinWatermark(["_dedup_key"])
               .drop("_dedup_key"))
    return raw.unionByName(checked, allowMissingColumns=True)


def late_flag(watermark: datetime | None) -> Column:
    """``_late``: event time before the watermark in force (NULL watermark: nothing is late yet)."""
    from pyspark.sql import functions as F

    if watermark is None:
        return F.lit(False)
    return F.col("_event_time") < F.lit(watermark)


def batch_stats(frame: DataFrame, late: Column) -> DataFrame:
    """Per Kafka partition of a batch (:func:`events_stream` rows): received, first/last offset, unique valid,
    quarantined, late, newest on-time event time, ingest time. One small row per partition."""
    from pyspark.sql import functions as F

    is_raw = F.col("_kind") == RAW
    checked = F.col("_kind") == CHECKED
    valid = checked & F.col("_reason").isNull()
    one = F.lit(1)
    return frame.groupBy("partition").agg(
        F.count(F.when(is_raw, one)).alias("received"),
        F.min(F.when(is_raw, F.col("offset"))).alias("first_offset"),
        F.max(F.when(is_raw, F.col("offset"))).alias("last_offset"),
        F.count(F.when(valid, one)).alias("appended"),
        F.count(F.when(checked & F.col("_reason").isNotNull(), one)).alias("quarantined"),
        F.count(F.when(valid & late, one)).alias("late"),
        F.max(F.when(valid & ~late, F.col("_event_time"))).alias("newest_on_time"),
        F.max("_ingest_time").alias("ingest_time"),
    )
