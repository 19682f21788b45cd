"""The events query ``lake_events``: ``events.clickstream`` -> bronze -> silver -> hot, one driver.

Per micro-batch (``foreachBatch``, bounded by ``LAKE_EVENTS_MAX_OFFSETS_PER_TRIGGER``):

1. ``bronze.events__clickstream``: every record as received (key, value bytes,
   Kafka coordinates, ingest time), partitioned by ingest date, append-only;
2. parse and validate against the contract (``spark_jobs.contracts.events``,
   ``spark_jobs.silver.events``); rejects -> ``quarantine.events`` with the raw
   bytes, reason code, detail and Kafka coordinates;
3. de-duplicate by ``event_id``: within the batch (first Kafka offset wins) and
   against every event that arrived within the last
   ``LAKE_EVENTS_WATERMARK_MINUTES`` (``DedupIndex``, rebuilt from
   ``silver.events`` after a restart);
4. flag ``_late`` the events whose ``event_time`` is older than the watermark in
   force (max on-time event time seen - ``LAKE_EVENTS_WATERMARK_MINUTES``); they
   are kept in silver and counted in their window's ``late_events``, never
   silently dropped;
5. append the new unique events to ``silver.events`` (partitioned by event date);
6. add them to the hot windows (``spark_jobs.hot.events.apply_deltas``): one
   idempotent overwrite per (small) hot table. Steps 5, 6 and the quarantine
   append run in parallel threads, and the bronze append (1) runs alongside
   the parse: Delta commits are mostly driver-side waiting, so one overlaps
   another's compute;
7. append the batch's ledger row to ``ops.stream_events_ledger`` (counts,
   watermark, offsets, the time the hot tables committed) and write the
   progress file for ``lake stream status|wait``;
8. no table maintenance yet. Measured with ``LAKE_STREAM_MAINTENANCE_MINUTES=1``
   and ``streaming.common.Maintenance`` (what the CDC query runs): OPTIMIZE +
   VACUUM inside the batch loop held this query's batches for 553 s over its
   seven tables (1.4M events of history) and ~158 s for just the four small
   hot/ledger tables, each run. Compaction here needs a way that does not
   stall the seconds-fresh hot tables (a background thread on partitions no
   batch writes any more) before it is switched on.

Exactly-once: appends carry Delta ``txnAppId``/``txnVersion`` (query id, batch
id), the hot overwrites too, so a batch replayed after a SIGKILL writes each
table once. The replay computes the same
rows because everything it reads (silver for the dedup index, the ledger for the
watermark) is filtered to batches before it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_jobs.hot.events import HOT_VIEWS, HotView, apply_deltas, hot_schema, window_deltas
from spark_jobs.io import ensure_database, table_location
from spark_jobs.settings import Settings
from spark_jobs.streaming.common import (
    append_once,
    bronze_columns,
    bronze_schema,
    create_table,
    once_writer,
    quarantine_rows,
    quarantine_schema,
    query_id,
    read_json,
    release,
    start_kafka_query,
    write_json_atomic,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructType

QUERY = "lake_events"
BRONZE = "bronze.events__clickstream"
SILVER = "silver.events"
QUARANTINE = "quarantine.events"
LEDGER = "ops.stream_events_ledger"


def events_status_path(settings: Settings) -> Path:
    return settings.run_dir / "stream-events-status.json"


class DedupIndex:
    """Event ids that arrived within the horizon, for de-duplication across batches.

    Arrival is measured by the batches' ingest time, so a re-send is recognised
    for ``horizon`` after the original landed, whatever its ``event_time``.
    Memory: about 100 bytes per id (rate x horizon ids).
    """

    def __init__(self, horizon: timedelta) -> None:
        self.horizon = horizon
        self._first: dict[str, int] = {}
        self._batches: deque[tuple[int, datetime, list[str]]] = deque()

    def __len__(self) -> int:
        return len(self._first)

    def add_batch(self, batch_id: int, ingest_time: datetime, event_ids: Iterable[str]) -> None:
        ids = [e for e in event_ids if e not in self._first]
        for e in ids:
            self._first[e] = batch_id
        self._batches.append((batch_id, ingest_time, ids))
        while self._batches and self._batches[0][1] < ingest_time - self.horizon:
            for e in self._batches.popleft()[2]:
                self._first.pop(e, None)

    def split(self, rows: Sequence[tuple[str, int, int]]) -> tuple[list[int], list[tuple[int, int]]]:
        """``rows`` = (event_id, partition, offset) -> (indexes of first occurrences, (partition, offset) of duplicates).

        Within the batch the lowest (partition, offset) wins; an id already in the index is a duplicate.
        """
        order = sorted(range(len(rows)), key=lambda i: (rows[i][1], rows[i][2]))
        seen: set[str] = set()
        firsts: list[int] = []
        dups: list[tuple[int, int]] = []
        for i in order:
            event_id, partition, offset = rows[i]
            if event_id in seen or event_id in self._first:
                dups.append((partition, offset))
            else:
                seen.add(event_id)
                firsts.append(i)
        return firsts, dups


class EventsApp:
    """State and per-batch logic of the events query."""

    def __init__(self, spark: SparkSession, settings: Settings) -> None:
        self.spark = spark
        self.settings = settings
        self.delay = timedelta(minutes=settings.events_watermark_minutes)
        self.index = DedupIndex(self.delay)
        self.watermark: datetime | None = None
        self.restored_for: int | None = None
        self.progress: dict[str, Any] = read_json(events_status_path(settings)) or {"offsets": {}, "totals": {}}
        self.progress.setdefault("offsets", {})
        self.progress.setdefault("totals", {})

    # -- tables ---------------------------------------------------------------

    def ensure_tables(self) -> None:
        from pyspark.sql.types import BooleanType, LongType, StructField, StructType

        from spark_jobs.silver.events import parse_events

        for db in ("bronze", "silver", "hot", "quarantine", "ops"):
            ensure_database(self.spark, self.settings, db)
        create_table(self.spark, self.settings, BRONZE, bronze_schema(), ["ingest_date"])
        valid, _ = parse_events(self.spark.createDataFrame([], bronze_schema()))
        silver = StructType([*valid.schema.fields, StructField("_late", BooleanType()),
                             StructField("_batch_id", LongType())])
        create_table(self.spark, self.settings, SILVER, _nullable(silver), ["event_date"])
        create_table(self.spark, self.settings, QUARANTINE, quarantine_schema())
        for view in HOT_VIEWS:
            create_table(self.spark, self.settings, view.table, hot_schema(view))
        create_table(self.spark, self.settings, LEDGER, ledger_schema())

    # -- the batch --------------------------------------------------------------

    def process(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        from spark_jobs.silver.events import parse_events

        started = time.monotonic()
        steps: dict[str, float] = {}
        app_id = query_id(self.spark, QUERY)
        if self.restored_for is None:
            self._restore(batch_id)
        bronze = bronze_columns(batch).persist()
        # Writes that do not depend on each other run in threads: a Delta commit is mostly
        # driver-side waiting (log listing, state reconstruction, S3 round trips), so one
        # table's commit overlaps another's compute. Each write is idempotent per batch id,
        # so the order they land in does not matter for a replay (the ledger goes last).
        pool = ThreadPoolExecutor(max_workers=len(HOT_VIEWS) + 2)
        try:
            t = time.monotonic()
            stats = bronze.groupBy("partition").agg(
                F.count(F.lit(1)).alias("n"), F.min("offset").alias("lo"), F.max("offset").alias("hi"),
                F.max("ingest_time").alias("ingest")).collect()
            received = sum(int(r.n) for r in stats)
            if received == 0:
                return
            ingest_time = max(r.ingest for r in stats).astimezone(UTC)  # naive = local time (PySpark)
            steps["read"] = time.monotonic() - t
            bronze_job = pool.submit(_timed, append_once, bronze, BRONZE, app_id, batch_id, partition="ingest_date")

            t = time.monotonic()
            valid, rejects = parse_events(bronze)
            valid = valid.persist()
            keys = valid.select("event_id", "_partition", "_offset", "event_time").toArrow()
            ids = keys.column("event_id").to_pylist()
            parts = keys.column("_partition").to_pylist()
            offs = keys.column("_offset").to_pylist()
            times = keys.column("event_time").to_pylist()
            firsts, dups = self.index.split(list(zip(ids, parts, offs, strict=True)))
            steps["parse_dedup"] = time.monotonic() - t

            t = time.monotonic()
            watermark_before = self.watermark
            new = valid
            if dups:
                dup_frame = self.spark.createDataFrame(dups, "_partition INT, _offset BIGINT")
                new = valid.join(F.broadcast(dup_frame), ["_partition", "_offset"], "left_anti")
            late_flag = (F.col("event_time") < F.lit(watermark_before)) if watermark_before else F.lit(False)
            # A local checkpoint, not a cache: it has no lineage to recompute, so the silver append
            # and the three window aggregates (run in parallel) read its blocks and never re-parse
            # the batch from the Kafka bytes (profiled with hot MERGEs: Delta's copy of each MERGE
            # source missed a persisted frame's cache and re-parsed 100,000 events per hot table).
            new = (new.withColumn("_late", late_flag).withColumn("_batch_id", F.lit(batch_id).cast("bigint"))
                   .localCheckpoint(eager=True))
            on_time_times = [times[i].astimezone(UTC) for i in firsts
                             if watermark_before is None or times[i].astimezone(UTC) >= watermark_before]
            late = sum(1 for i in firsts if watermark_before is not None and times[i].astimezone(UTC) < watermark_before)
            if on_time_times:
                candidate = max(on_time_times) - self.delay
                self.watermark = candidate if watermark_before is None else max(watermark_before, candidate)
            steps["new"] = time.monotonic() - t

            t = time.monotonic()
            quarantined = received - len(ids)
            hot_jobs = [pool.submit(_timed, self._write_hot, view, new, app_id, batch_id) for view in HOT_VIEWS]
            silver_job = pool.submit(_timed, append_once, new, SILVER, app_id, batch_id, partition="event_date")
            quarantine_job = (pool.submit(_timed, append_once, quarantine_rows(rejects, "events"), QUARANTINE,
                                          app_id, batch_id) if quarantined else None)
            hot_done = max(job.result() for job in hot_jobs)
            hot_committed = datetime.now(UTC) - timedelta(seconds=time.monotonic() - hot_done)
            steps["hot"] = hot_done - t
            steps["silver"] = silver_job.result() - t
            if quarantine_job is not None:
                steps["quarantine"] = quarantine_job.result() - t
            # Started before the parse; measured from the start of the batch's writes.
            steps["bronze"] = bronze_job.result() - started

            t = time.monotonic()
            self.index.add_batch(batch_id, ingest_time, (ids[i] for i in firsts))
            offsets = {f"{r.partition}": [int(r.lo), int(r.hi)] for r in stats}
            ledger = {
                "batch_id": batch_id, "received": received, "valid": len(ids), "quarantined": quarantined,
                "duplicates": len(dups), "appended": len(firsts), "late": late,
                "watermark_before": watermark_before, "watermark_after": self.watermark,
                "max_ingest_time": ingest_time, "hot_committed_at": hot_committed,
                "offsets": {k: f"{v[0]}-{v[1]}" for k, v in offsets.items()},
                "batch_seconds": time.monotonic() - started,
            }
            append_once(self.spark.createDataFrame([ledger], ledger_schema()), LEDGER, app_id, batch_id)
            steps["ledger"] = time.monotonic() - t
            self._record_progress(batch_id, ledger, offsets, steps, started)
            release(new)
            valid.unpersist()
        finally:
            pool.shutdown(wait=True)
            bronze.unpersist()

    def _write_hot(self, view: HotView, new: DataFrame, app_id: str, batch_id: int) -> None:
        """Add the batch's new events to ``view``'s windows: one overwrite of the (small) hot table."""
        from pyspark.sql import functions as F

        session = new.sparkSession
        deltas = (window_deltas(new, view).withColumn("updated_at", F.current_timestamp())
                  .withColumn("_batch", F.lit(batch_id).cast("bigint")))
        # Reads version N of the table and replaces it with N + batch in one commit; a replay of a
        # batch already committed is skipped by Delta (txnVersion <= the one recorded for txnAppId).
        # Saved by path: saveAsTable refuses to overwrite a table the frame reads from.
        (once_writer(apply_deltas(session.table(view.table), deltas, view), view.table, app_id, batch_id)
         .mode("overwrite").save(table_location(self.settings, view.table)))

    def _restore(self, batch_id: int) -> None:
        """After a (re)start: watermark and dedup index as they were before ``batch_id``."""
        from pyspark.sql import functions as F

        last = (self.spark.table(LEDGER).where(F.col("batch_id") < batch_id)
                .orderBy(F.col("batch_id").desc()).limit(1).collect())
        if last:
            row = last[0]
            self.watermark = row.watermark_after.astimezone(UTC) if row.watermark_after else None
            since = row.max_ingest_time.astimezone(UTC) - self.delay
            recent = (self.spark.table(SILVER).where((F.col("_batch_id") < batch_id)
                                                    & (F.col("_ingest_time") >= F.lit(since)))
                      .groupBy("_batch_id").agg(F.collect_list("event_id").alias("ids"),
                                                F.max("_ingest_time").alias("ingest"))
                      .orderBy("_batch_id").collect())
            for r in recent:
                self.index.add_batch(int(r._batch_id), r.ingest.astimezone(UTC), r.ids)
            print(f"lake stream: {QUERY} restored watermark {self.watermark} and {len(self.index)} recent "
                  f"event ids before batch {batch_id}", flush=True)
        self.restored_for = batch_id

    def _record_progress(self, batch_id: int, ledger: dict[str, Any], offsets: dict[str, list[int]],
                         steps: dict[str, float], started: float) -> None:
        from spark_jobs.contracts.events import TOPIC

        totals = self.progress["totals"]
        for key in ("received", "valid", "quarantined", "duplicates", "appended", "late"):
            totals[key] = int(totals.get(key, 0)) + int(ledger[key])
        self.progress["offsets"].update({f"{TOPIC}:{p}": hi for p, (_lo, hi) in offsets.items()})
        wm = ledger["watermark_after"]
        self.progress.update({
            "query": QUERY, "batch_id": batch_id, "committed_at": datetime.now(UTC).isoformat(),
            "batch_seconds": round(time.monotonic() - started, 3), "batch_records": ledger["received"],
            "watermark": wm.isoformat() if wm else None,
            "dedup_index_ids": len(self.index),
            "step_seconds": {k: round(v, 3) for k, v in sorted(steps.items())},
        })
        write_json_atomic(events_status_path(self.settings), self.progress)


def _timed(fn: Any, *args: Any, **kwargs: Any) -> float:
    """Run ``fn`` and return the monotonic time it finished (for the step timings of parallel writes)."""
    fn(*args, **kwargs)
    return time.monotonic()


def ledger_schema() -> StructType:
    from pyspark.sql.types import (
        DoubleType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    longs = ("batch_id", "received", "valid", "quarantined", "duplicates", "appended", "late")
    return StructType([
        *[StructField(n, LongType()) for n in longs],
        StructField("watermark_before", TimestampType()), StructField("watermark_after", TimestampType()),
        StructField("max_ingest_time", TimestampType()), StructField("hot_committed_at", TimestampType()),
        StructField("offsets", MapType(StringType(), StringType())), StructField("batch_seconds", DoubleType()),
    ])


def _nullable(schema: StructType) -> StructType:
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f.name, f.dataType, True) for f in schema.fields])


def start(spark: SparkSession, settings: Settings) -> StreamingQuery:
    """Create the events tables and topic, then start ``lake_events``."""
    from spark_jobs.contracts.events import TOPIC
    from spark_jobs.events_producer import ensure_topic

    ensure_topic(settings.kafka_bootstrap, TOPIC)
    app = EventsApp(spark, settings)
    app.ensure_tables()
    return start_kafka_query(spark, settings, QUERY, ("subscribe", TOPIC), settings.events_max_offsets_per_trigger,
                             settings.events_trigger_seconds, app.process)
