"""The replay's transforms: bronze records -> the rows the streaming app would have written, as one Spark batch.

Each function runs the stream's own transforms (no copy of them) over a range of the archive instead of one
micro-batch:

* CDC (:func:`apply_cdc`): :func:`spark_jobs.silver.cdc.parse_tables_frame` in the executors' Python workers,
  :func:`~spark_jobs.silver.cdc.table_rows`, then :func:`~spark_jobs.table_io.merge.apply_changes` (newest change
  per key by source position, TOAST-filled, against the delete markers; the position-guarded MERGE; the delete
  markers appended). Over an empty shadow it builds the table; over a built one it applies a later range (the
  tail), exactly as the stream applies its next batch.
* events (:func:`events_rows`): :func:`spark_jobs.silver.clickstream.check_events` and
  :func:`~spark_jobs.silver.clickstream.valid_events`, ``_late`` from
  :func:`spark_jobs.streaming.clickstream_plan.late_flag`, the de-duplication by ``event_id`` over the same horizon
  (:func:`unique_checked`), ``_batch_id`` from the events ledger's offset ranges.
* hot (:func:`hot_rows`): :func:`spark_jobs.hot.windows.batch_deltas` over every replayed event at once (each hot
  metric is additive, so one batch of all events equals the stream's sum of batches); :func:`add_windows` adds
  later events to existing windows (the Spark form of :func:`~spark_jobs.hot.windows.apply_deltas`).

Ranges are Kafka offsets per partition (:data:`Offsets`, last offset included), never times: a build point is
exact and the tail after it is exactly the records past it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from spark_jobs.hot.windows import HotView, batch_deltas, hot_schema
from spark_jobs.silver.cdc import parse_tables_frame, table_rows
from spark_jobs.silver.clickstream import check_events, valid_events
from spark_jobs.table_io import append_to
from spark_jobs.table_io.merge import apply_changes

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

MATERIALIZE_SOURCE = "spark.databricks.delta.merge.materializeSource"
#: Kafka partition -> last offset included (a build point, or the end of a range).
Offsets = dict[int, int]

__all__ = ["Offsets", "add_windows", "apply_cdc", "events_rows", "hot_rows", "in_range", "ledger_ranges",
           "offsets_at", "offsets_from_json", "offsets_to_json", "unique_checked"]


def offsets_to_json(offsets: Mapping[int, int]) -> str:
    return json.dumps({str(p): int(o) for p, o in sorted(offsets.items())}, sort_keys=True)


def offsets_from_json(text: str | None) -> Offsets:
    return {int(p): int(o) for p, o in json.loads(text or "{}").items()}


def offsets_at(records: DataFrame, until: datetime | None = None, partition: str = "partition",
               offset: str = "offset", timestamp: str = "kafka_timestamp") -> Offsets:
    """Per Kafka partition, the last offset of ``records`` (bronze rows) whose Kafka time is ``until`` or earlier
    (every record without ``until``). One small aggregate collected: a row per partition."""
    from pyspark.sql import functions as F

    rows = records if until is None else records.where(F.col(timestamp) <= F.lit(until))
    return {int(r[0]): int(r[1]) for r in rows.groupBy(partition).agg(F.max(offset)).collect() if r[1] is not None}


def in_range(after: Mapping[int, int] | None, upto: Mapping[int, int] | None, partition: str = "partition",
             offset: str = "offset") -> Column:
    """Records past ``after`` (None: from the start; a partition it lacks: from its start) and up to ``upto``
    (None: to the end; a partition it lacks: none of it)."""
    from pyspark.sql import functions as F

    cond: Column = F.lit(True)
    if after:
        starts = F.coalesce(F.element_at(F.create_map(*[F.lit(x) for p, o in after.items() for x in (p, o)]),
                                         F.col(partition)), F.lit(-1))
        cond = cond & (F.col(offset) > starts)
    if upto is not None:
        if not upto:
            return F.lit(False)
        ends = F.element_at(F.create_map(*[F.lit(x) for p, o in upto.items() for x in (p, o)]), F.col(partition))
        cond = cond & ends.isNotNull() & (F.col(offset) <= ends)
    return cond


# -- CDC ---------------------------------------------------------------------------------------------------------


def _no_contract(topic: str) -> str:
    return f"a replay of another topic's bronze table met a record of {topic}"


def apply_cdc(spark: SparkSession, records: DataFrame, topic: str, schema: StructType, keys: tuple[str, ...],
              silver_location: str, deleted_location: str) -> dict[str, int]:
    """Apply a range of ``bronze.<topic>`` records (bronze columns) to the silver table at ``silver_location`` and
    its delete markers at ``deleted_location``, with the stream's parse and apply (module docstring).

    ``schema``: the silver table's columns (row image + metadata). Returns ``records``, ``changes`` (parsed),
    ``rejects`` (records the parse refused: the stream put them in ``quarantine.cdc`` already) and ``deletes``.
    Idempotent: applying a range again changes nothing (the MERGE is position-guarded).
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    raw = records.select("key", "value", "topic", "partition", "offset", "kafka_timestamp")
    parsed = parse_tables_frame(raw, [(topic, schema, keys)], _no_contract).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        from spark_jobs.silver.cdc_parse import wide_column

        op = F.col(wide_column(0, schema.names.index("_op")))
        counts = parsed.agg(F.count(F.lit(1)).alias("records"),
                            F.count(F.when(F.col("_error").isNull(), 1)).alias("changes"),
                            F.count(F.col("_error")).alias("rejects"),
                            F.count(F.when(F.col("_error").isNull() & (op == "d"), 1)).alias("deletes")).first()
        out = {k: int(counts[k]) if counts is not None else 0 for k in ("records", "changes", "rejects", "deletes")}
        if out["changes"]:
            changes = table_rows(parsed, 0, topic, schema).where(F.col("_error").isNull())
            markers = spark.read.format("delta").load(deleted_location)

            def append_markers(rows: DataFrame) -> None:
                append_to(rows, deleted_location)

            # As the streaming app runs it: the MERGE reads the checkpointed source as it is (no second copy).
            previous = spark.conf.get(MATERIALIZE_SOURCE, None)
            spark.conf.set(MATERIALIZE_SOURCE, "none")
            try:
                apply_changes(spark, silver_location, changes, keys, markers,
                              append_markers if out["deletes"] else None, checkpoint=True)
            finally:
                if previous is None:
                    spark.conf.unset(MATERIALIZE_SOURCE)
                else:
                    spark.conf.set(MATERIALIZE_SOURCE, previous)
        return out
    finally:
        parsed.unpersist()


# -- events ------------------------------------------------------------------------------------------------------


def ledger_ranges(ledger: DataFrame) -> DataFrame:
    """``ops.stream_events_ledger`` rows -> ``(partition, first, last, batch_id)``: which archive batch read which
    offsets (the ledger's ``offsets`` map holds ``"<partition>" -> "<first>-<last>"``)."""
    from pyspark.sql import functions as F

    pairs = ledger.select("batch_id", F.explode("offsets").alias("p", "span"))
    return pairs.select(F.col("p").cast("int").alias("partition"),
                        F.split("span", "-").getItem(0).cast("bigint").alias("first"),
                        F.split("span", "-").getItem(1).cast("bigint").alias("last"),
                        F.col("batch_id").cast("bigint").alias("batch_id"))


def unique_checked(checked: DataFrame, horizon_seconds: int, prior: DataFrame | None = None) -> DataFrame:
    """:func:`~spark_jobs.silver.clickstream.check_events` rows (with ``ingest_time``) -> the copies the stream keeps.

    The stream drops a re-sent ``event_id`` that arrives within the de-duplication horizon of the copy it kept
    (``LAKE_EVENTS_WATERMARK_MINUTES``, :func:`spark_jobs.streaming.clickstream_plan.events_stream`); one sent again
    after it is a new event. Here, per id in archive order (ingest time, partition, offset), a copy is kept when
    it is the first or arrives ``horizon_seconds`` or more after the last kept copy. ``prior``: ids already kept
    (``event_id``, ``_ingest_time``: rows of a built ``silver.events``) that the range continues. A reject is its
    own key (its Kafka coordinates), as in the stream, so it is never dropped.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    key = F.coalesce(F.col("_event_id"), F.format_string("#%d/%d", F.col("partition"), F.col("offset")))
    rows = checked.withColumn("_dedup_key", key).withColumn("_prior", F.lit(False))
    if prior is not None:
        earlier = prior.select(F.col("event_id").alias("_dedup_key"), F.col("_ingest_time").alias("ingest_time"),
                               F.lit(True).alias("_prior"))
        rows = rows.unionByName(earlier, allowMissingColumns=True)
    micros = F.unix_micros(F.col("ingest_time"))
    by_key = (Window.partitionBy("_dedup_key").orderBy(F.col("ingest_time"), F.col("_prior").desc(),
                                                         F.col("partition"), F.col("offset"))
              .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    horizon = F.lit(int(horizon_seconds) * 1_000_000)
    start = F.struct(F.lit(None).cast("bigint").alias("last"), F.lit(False).alias("kept"))

    def step(acc: Column, x: Column) -> Column:
        keep = x["p"] | acc["last"].isNull() | (x["t"] >= acc["last"] + horizon)
        return F.when(keep, F.struct(x["t"].alias("last"), F.lit(True).alias("kept"))).otherwise(
            F.struct(acc["last"].alias("last"), F.lit(False).alias("kept")))

    seen = F.collect_list(F.struct(micros.alias("t"), F.col("_prior").alias("p"))).over(by_key)
    verdict = F.aggregate(seen, start, step)["kept"]
    return (rows.withColumn("_keep", verdict).where(F.col("_keep") & ~F.col("_prior"))
            .drop("_keep", "_prior", "_dedup_key"))


def events_rows(bronze: DataFrame, watermark_minutes: int, ranges: DataFrame | None = None,
                prior: DataFrame | None = None) -> DataFrame:
    """Bronze rows of ``events.clickstream`` -> ``silver.events`` rows, as the events query writes them.

    The contract check (executors' Python workers), the de-duplication (:func:`unique_checked`, horizon
    ``watermark_minutes``), the valid rows as silver columns with ``_late`` (the record's own property, the same
    rule as the stream) and ``_batch_id``: the archive batch that read the record according to ``ranges``
    (:func:`ledger_ranges`), NULL for a record no ledger row covers. Grain: one row per kept valid event.
    """
    from pyspark.sql import functions as F

    from spark_jobs.streaming.clickstream_plan import late_flag

    checked = check_events(bronze.select("key", "value", "topic", "partition", "offset", "kafka_timestamp",
                                         "ingest_time"), keep=["ingest_time"])
    unique = unique_checked(checked, watermark_minutes * 60, prior)
    if ranges is not None:
        r = ranges.alias("r")
        unique = (unique.alias("u").join(F.broadcast(r), (F.col("u.partition") == F.col("r.partition"))
                                         & F.col("u.offset").between(F.col("r.first"), F.col("r.last")), "left")
                  .select("u.*", F.col("r.batch_id").alias("_replay_batch_id")))
    else:
        unique = unique.withColumn("_replay_batch_id", F.lit(None).cast("bigint"))
    return valid_events(unique, keep=[late_flag(watermark_minutes).alias("_late"),
                                      F.col("_replay_batch_id").alias("_batch_id")])


# -- hot ---------------------------------------------------------------------------------------------------------


def _hot_frame(rows: DataFrame, view: HotView) -> DataFrame:
    """Rows with the hot table's metric columns (any order, maybe wider types) -> exactly ``hot_schema(view)``."""
    from pyspark.sql import functions as F

    schema = hot_schema(view)
    return rows.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])


def hot_rows(events: DataFrame, view: HotView, now: datetime, last_batch: int | None) -> DataFrame:
    """``silver.events`` rows (``event_type``, ``user_id``, ``event_time``, ``revenue``, ``_late``) -> the rows of
    hot table ``view``: one per window, every event in one :func:`~spark_jobs.hot.windows.batch_deltas` pass.
    ``updated_at`` is ``now``, ``_last_batch`` the events query's last batch the rows stand for."""
    from pyspark.sql import functions as F

    deltas = batch_deltas(events.select("event_type", "user_id", "event_time", "revenue", "_late"))
    mine = deltas.where(F.col("table") == view.table)
    return _hot_frame(mine.withColumn("updated_at", F.lit(now)).withColumn("_last_batch", F.lit(last_batch)), view)


def add_windows(current: DataFrame, events: DataFrame, view: HotView, now: datetime,
                last_batch: int | None) -> DataFrame:
    """Hot rows of ``view`` plus later ``events``: what the stream's batches would have added (counts and revenue
    add, user sets unite, ``late_events`` adds); windows the events do not touch keep their row."""
    from pyspark.sql import functions as F

    added = hot_rows(events, view, now, last_batch)
    both = current.select(*hot_schema(view).names, F.lit(False).alias("_new")).unionByName(
        added.select(*hot_schema(view).names, F.lit(True).alias("_new")))
    aggs: list[Any] = [F.sum(name).alias(name) for name in view.metric_names if name != "active_users"]
    if view.user_set:
        users = F.array_sort(F.array_distinct(F.flatten(F.collect_list("user_ids"))))
        aggs += [users.alias("user_ids"), F.size(users).alias("active_users")]
    aggs += [F.sum("late_events").alias("late_events"),
             F.when(F.max(F.col("_new").cast("int")) == 1, F.lit(now)).otherwise(F.max("updated_at"))
             .alias("updated_at"),
             F.when(F.max(F.col("_new").cast("int")) == 1, F.lit(last_batch)).otherwise(F.max("_last_batch"))
             .alias("_last_batch")]
    return _hot_frame(both.groupBy("window_start", "window_end").agg(*aggs), view)
