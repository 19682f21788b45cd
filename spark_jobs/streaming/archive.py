"""The events query ``lake_events``: ``events.clickstream`` -> the hot tables, then bronze, silver, quarantine, ledger.

One read, contract check and de-duplication per micro-batch feeds both the speed layer's hot tables
(:mod:`spark_jobs.streaming.hot`, committed right after the batch's one job) and the durable archive (appended
beside the hot commits, in the ``archive`` scheduler pool). Every per-record step runs in Spark tasks; the driver plans,
commits and keeps a few values (the last batch id, the watermark shown by ``lake stream status``).

The plan up to ``foreachBatch`` (one Kafka read per micro-batch, raw and
checked branches, state-store de-duplication) is :mod:`spark_jobs.streaming.clickstream_plan`.

**Each micro-batch** (``foreachBatch``, :meth:`EventsApp.process`), on the
persisted batch:

1. **one Spark job** (:func:`batch_summary`) reads, checks and de-duplicates the batch (cached for the writes),
   counts it per Kafka partition (received, offsets, unique valid, rejects, late, newest Kafka time) and
   aggregates its valid events per hot window; only these few rows reach the driver;
2. the hot tables (:meth:`~spark_jobs.streaming.hot.HotWriter.commit`): the driver commits the changed windows
   (delta-rs) and the batch's ``ops.stream_hot_ledger`` row, while step 4 runs beside it;
3. ``_late``: an event that reached Kafka more than ``LAKE_EVENTS_WATERMARK_MINUTES``
   after its event time (:func:`~spark_jobs.streaming.clickstream_plan.late_flag`) is kept in silver, flagged,
   and counted in its hot window's ``late_events``, never in its metrics;
4. Spark appends bronze (every record), silver (the unique valid events) and
   quarantine (rejects with raw bytes, reason, detail, coordinates), side by
   side in the ``archive`` pool, from the moment step 1 is done, skipping a table the batch has no row for;
5. once both are done, the driver appends the batch's ledger row to ``ops.stream_events_ledger``
   (with the batch's Spark jobs and Delta commits beside its step seconds).

Exactly-once: a batch already in the ledger is skipped whole; otherwise every hot commit (a Delta transaction
per table and batch) and every append lands at most once (``table_io.append.OnceAppender``: a commit marker per
table and batch, checked on the first batch after a start). A batch re-run after a
crash sees the same records, the same de-duplication state (the state store
is versioned with the checkpoint) and the same ingest time (the batch
timestamp is in the offset log), so every table gets its rows once. Only which
copy of a duplicate sent twice in one batch survives may differ (copies are
equal records).

Assumption: a re-sent event has the same ``event_id``; an id sent again after
the horizon is a new event (counted, not dropped).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_jobs.contracts.clickstream import TOPIC
from spark_jobs.settings import Settings
from spark_jobs.silver.clickstream import valid_events
from spark_jobs.streaming.clickstream_plan import (
    CHECKED,
    RAW,
    events_stream,
    late_flag,
    merge_stats,
    stats_aggregates,
)
from spark_jobs.streaming.common import (
    batch_constant,
    batch_time,
    batch_timestamp_ms,
    ensure_log_output,
    last_trigger_ms,
    log_batch,
    query_id,
    read_json,
    write_json_atomic,
)
from spark_jobs.streaming.engine import ARCHIVE, HOT, BatchJobs
from spark_jobs.streaming.hot import HOT_MAINTENANCE_SECONDS, HotWriter
from spark_jobs.table_io import checkpoint_location, ensure_database
from spark_jobs.table_io.append import OnceAppender
from spark_jobs.table_io.create import create_tables
from spark_jobs.table_io.driver import DriverTable
from spark_jobs.table_io.maintenance import Maintenance, Schedule, schedule_path

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

QUERY = "lake_events"
BRONZE = "bronze.events__clickstream"
SILVER = "silver.events"
QUARANTINE = "quarantine.events"
LEDGER = "ops.stream_events_ledger"
#: Batches of at least this many records (a backlog) get a progress line with their step times in the log.
LOG_BATCH_RECORDS = 20_000
#: Set for this query only (see ``start``). RocksDB state store (Spark docs, "RocksDB state store
#: implementation"): state off the JVM heap; with changelog checkpointing a batch uploads only its changes.
STATE_STORE_CONF = {
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # transformWithState in processing time (events_plan.first_seen) asks for another batch after every batch
    # (Spark 4.1 TransformWithStateExecBase.shouldRunAnotherBatch): without this an idle query runs an empty batch
    # per trigger. Expired ids are evicted by the next batch with data instead.
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
    # RocksDB counts its rows by reading each key before every put and remove (a get per update, two per expired
    # id: the value and its TTL index entry); the de-duplication's state ops were the largest part of an events
    # task (jstack samples). Off: the status shows no id count (docs/benchmarks.md, "One read for the hot tables and
    # the archive").
    "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows": "false",
}
#: File under ``<run dir>/failpoints/`` that holds a batch after its count, before its appends (tests only:
#: the crash test kills the driver there, see ``_hold_if_asked``).
HOLD_BEFORE_APPEND_FAILPOINT = "events-hold-before-append"
#: The same after a batch's ledger row, before Spark commits its offsets (tests only: a driver killed there
#: replays a batch every table holds already, see ``process``).
HOLD_AFTER_LEDGER_FAILPOINT = "events-hold-after-ledger"
#: Start of the log line a (re)started app prints when its first batch begins (``lake bench events`` waits for it).
FIRST_BATCH_MARKER = f"lake stream: {QUERY} first batch"


def events_status_path(settings: Settings) -> Path:
    return settings.run_dir / "stream-events-status.json"


def watermark_after_batch(stats: list[dict[str, Any]], before: datetime | None, delay: timedelta) -> datetime | None:
    """The events watermark after a batch (its ``batch_stats`` rows): the newest Kafka time of what it received,
    minus the horizon ``delay``, never below ``before``. The events ledger, the hot ledger and ``lake stream status``
    all show this one value."""
    newest = [r["newest_kafka_time"].astimezone(UTC) for r in stats if r["newest_kafka_time"] is not None]
    if not newest:
        return before
    candidate: datetime = max(newest) - delay
    return candidate if before is None else max(before, candidate)


class EventsApp:
    """Per-batch logic of the events query (:meth:`process`) and the few values it keeps between batches."""

    def __init__(self, spark: SparkSession, settings: Settings) -> None:
        self.spark = spark
        self.settings = settings
        self.delay = timedelta(minutes=settings.events_watermark_minutes)
        self.watermark: datetime | None = None
        self.done_through: int | None = None  # batches up to here are in the ledger (None: not restored yet)
        self.ledger: DriverTable | None = None
        self.progress: dict[str, Any] = read_json(events_status_path(settings)) or {"offsets": {}, "totals": {}}
        self.progress.setdefault("offsets", {})
        self.progress.setdefault("totals", {})
        # All three only appended: their upkeep runs beside the batches, never holding a hot commit.
        self.maintenance = Maintenance(spark, settings, QUERY, [BRONZE, SILVER, QUARANTINE],
                                       schedule=schedule_path(settings, QUERY), background_pool=ARCHIVE)
        self._ledger_upkeep = Schedule(schedule_path(settings, f"{QUERY}-ledger"), ("compact",))
        self.appender = OnceAppender(settings)
        self._writers = ThreadPoolExecutor(max_workers=3, thread_name_prefix="events-append")
        self.hot = HotWriter(spark, settings)

    def ensure_tables(self) -> None:
        for db in ("bronze", "silver", "quarantine", "ops"):
            ensure_database(self.spark, self.settings, db)
        create_tables(self.spark, self.settings, [BRONZE, SILVER, QUARANTINE, LEDGER])
        self.ledger = DriverTable(self.settings, LEDGER)
        self.hot.ensure_tables()

    # -- one micro-batch ---------------------------------------------------------------

    def process(self, frame: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        if self.done_through is None:
            self._restore(batch_id)
        if self.done_through is not None and batch_id <= self.done_through:
            log.info("lake stream: %s batch %d is in the ledger already (replay after a restart): every table "
                     "holds it", QUERY, batch_id)
            # The batch's plan still runs once, writing nothing: its de-duplication state store commits this batch's
            # version. Returning without running it failed the query in Spark 4.1's commit check
            # (STATE_STORE_COMMIT_VALIDATION_FAILED, "Expected 2 commits but got 0") and the supervisor restarted
            # the whole app once more after every crash that landed exactly there.
            frame.write.format("noop").mode("overwrite").save()
            return
        started = time.monotonic()
        jobs = BatchJobs(self.spark, QUERY, batch_id, HOT)
        jobs.enter()
        steps: dict[str, float] = {}
        app_id = query_id(self.spark, QUERY)
        watermark_before = self.watermark
        late = late_flag(self.settings.events_watermark_minutes)
        # The batch's time and id reach the rows through columns kept out of Spark's generated code (batch_time,
        # batch_constant), only in the appends' projections: as literals they made Spark compile the batch's largest
        # stages again every batch.
        batch_ms = batch_timestamp_ms(self.spark, QUERY, batch_id, checkpoint_location(self.settings, QUERY))
        ingest_time = datetime.fromtimestamp(batch_ms / 1000, UTC)
        frame = frame.persist()
        appends: list[Future[None]] = []
        try:
            checked = frame.where(F.col("_kind") == CHECKED).withColumn("ingest_time", batch_time(batch_ms))
            valid = valid_events(checked, keep=[late.alias("_late"), batch_constant(batch_id).alias("_batch_id")])
            # One Spark job: read, check, de-duplicate (and cache) the batch, count it per Kafka partition and
            # aggregate its valid events per hot window; only these few rows reach the driver.
            t = time.monotonic()
            stats, deltas = batch_summary(frame, late)
            steps["read_check_dedup_count"] = time.monotonic() - t
            received = sum(int(r["received"]) for r in stats)
            if received == 0:  # a no-data batch (the state store evicting old ids): nothing to write
                return
            totals = {k: sum(int(r[k]) for r in stats) for k in ("received", "appended", "quarantined", "late")}
            # The hot tables first, from the cached batch (one small job and the driver's commits), then the archive.
            t = time.monotonic()
            spans = {int(r["partition"]): (int(r["first_offset"]), int(r["last_offset"]) + 1) for r in stats
                     if r["received"]}
            watermark_after = watermark_after_batch(stats, watermark_before, self.delay)
            # The archive appends start now, in the archive pool, beside the hot step (the driver's delta-rs
            # commits, no Spark job): the batch ends when the slower of the two does, not after both in turn.
            # With the test failpoint set, the steps run in turn instead, so a driver killed there has the hot
            # tables ahead of the archive.
            hot_jobs = jobs.jobs()  # the hot side's: counted before the appends add theirs
            held = self._failpoint(HOLD_BEFORE_APPEND_FAILPOINT).exists()
            if not held:
                appends = self._start_appends(frame, valid, checked, batch_ms, app_id, batch_id, totals, jobs)
            hot_committed = self.hot.commit(deltas, steps["read_check_dedup_count"], hot_jobs, spans, app_id,
                                            batch_id, jobs, watermark_after)
            steps["hot"] = time.monotonic() - t
            if held:
                self._hold_if_asked(batch_id, HOLD_BEFORE_APPEND_FAILPOINT, "counted, holding before the appends")
                appends = self._start_appends(frame, valid, checked, batch_ms, app_id, batch_id, totals, jobs)
            for future in appends:
                future.result()
            steps["append"] = time.monotonic() - t  # from the start of the hot step: the two overlap
        finally:
            # Never drop the cache under a running append (it would compute the batch again, its state store
            # included): a failed hot step waits for the appends before the batch fails.
            wait(appends)
            frame.unpersist()
            jobs.leave()

        self.watermark = watermark_after
        ledger: dict[str, Any] = {
            "batch_id": batch_id, **totals, "valid": totals["received"] - totals["quarantined"],
            "duplicates": totals["received"] - totals["appended"] - totals["quarantined"],
            "watermark_before": watermark_before, "watermark_after": self.watermark,
            "max_ingest_time": ingest_time, "hot_committed_at": hot_committed,
            "offsets": {str(r["partition"]): f"{r['first_offset']}-{r['last_offset']}" for r in stats
                        if r["received"]},
            "batch_seconds": time.monotonic() - started,
        }
        t = time.monotonic()
        assert self.ledger is not None
        ledger["committed_at"] = datetime.now(UTC)  # every table holds the batch from here
        # Counts beside the seconds (the ledger's schema is kept): what the batch cost in Spark jobs and commits.
        if self.settings.stream_log_jobs:
            jobs.log()
        ledger["step_seconds"] = [*steps.items(), ("spark_jobs", float(jobs.jobs())),
                                  ("delta_commits", float(jobs.commits + 1))]
        self.ledger.write_once([ledger], app_id, batch_id, "append")
        steps["ledger"] = time.monotonic() - t
        self.done_through = batch_id
        self._hold_if_asked(batch_id, HOLD_AFTER_LEDGER_FAILPOINT, "in the ledger, holding before the offsets commit")
        self._record_progress(batch_id, ledger, stats, steps)
        # A backlog's batches show progress and where the time goes; small steady batches only at DEBUG.
        log_batch(QUERY, batch_id, received, ledger["batch_seconds"], steps,
                  logging.INFO if received >= LOG_BATCH_RECORDS else logging.DEBUG)
        self._maintain_ledger_if_due()
        self.maintenance.run_if_due()

    def _start_appends(self, frame: DataFrame, valid: DataFrame, checked: DataFrame, batch_ms: int, app_id: str,
                       batch_id: int, totals: dict[str, int], jobs: BatchJobs) -> list[Future[None]]:
        """Start the bronze, silver and quarantine appends of the batch, Spark appends side by side in the
        ``archive`` pool (each once); a table the batch has no row for gets no write (an empty idempotent write
        would still commit its transaction). Returns their futures."""
        from pyspark.sql import functions as F

        bronze = frame.where(F.col("_kind") == RAW).select(
            "key", "value", "topic", "partition", "offset", "kafka_timestamp",
            batch_time(batch_ms).alias("ingest_time")).withColumn("ingest_date", F.to_date("ingest_time"))
        quarantine = checked.where(F.col("_reason").isNotNull()).select(
            F.lit("events").alias("stage"), "topic", "partition", "offset", "kafka_timestamp", "key", "value",
            F.col("_reason").alias("reason"), F.col("_error").alias("error"),
            F.col("ingest_time").alias("quarantined_at"))

        def write(table: str, rows: DataFrame) -> None:
            # One task and one file per table (and date) per batch: the batch is cached, and each further
            # task is an S3 upload and a small file more.
            if self.appender.append(rows.coalesce(1), table, app_id, batch_id):
                jobs.committed()

        writes = [(BRONZE, bronze, totals["received"]), (SILVER, valid, totals["appended"]),
                  (QUARANTINE, quarantine, totals["quarantined"])]
        return [self._writers.submit(jobs.wrap(write, ARCHIVE), table, rows) for table, rows, n in writes if n]

    def _failpoint(self, name: str) -> Path:
        return self.settings.run_dir / "failpoints" / name

    def _hold_if_asked(self, batch_id: int, failpoint: str, what: str) -> None:
        """Wait while the failpoint file exists (tests: a driver killed with the hot tables ahead of the rest, or
        with a batch in the ledger whose offsets Spark has not committed)."""
        hold = self._failpoint(failpoint)
        if hold.exists():
            log.info("lake stream: %s batch %d: %s (failpoint %s)", QUERY, batch_id, what, hold)
        while hold.exists():
            time.sleep(0.1)

    # -- restart ---------------------------------------------------------------------

    def _restore(self, batch_id: int) -> None:
        """After a (re)start: the watermark and the last batch in the ledger (every table holds that batch)."""
        from pyspark.sql import functions as F

        last = self.spark.table(LEDGER).orderBy(F.col("batch_id").desc()).limit(1).collect()
        self.done_through = int(last[0].batch_id) if last else -1
        self.watermark = _utc(last[0].watermark_after) if last else None
        log.info("%s %d: restored watermark %s (ledger through batch %d)", FIRST_BATCH_MARKER, batch_id,
                 self.watermark, self.done_through)

    # -- status and upkeep ---------------------------------------------------------------

    def _record_progress(self, batch_id: int, ledger: dict[str, Any], stats: list[dict[str, Any]],
                         steps: dict[str, float]) -> None:
        """The status file of ``lake stream status|wait``: its offsets move once every table holds them."""
        totals = self.progress["totals"]
        for key in ("received", "valid", "quarantined", "duplicates", "appended", "late"):
            totals[key] = int(totals.get(key, 0)) + int(ledger[key])
        self.progress["offsets"].update({f"{TOPIC}:{r['partition']}": int(r["last_offset"]) for r in stats
                                         if r["received"]})
        wm = ledger["watermark_after"]
        self.progress.update({
            "query": QUERY, "batch_id": batch_id, "committed_at": datetime.now(UTC).isoformat(),
            "batch_seconds": round(ledger["batch_seconds"], 3), "batch_records": ledger["received"],
            "watermark": wm.isoformat() if wm else None,
            "step_seconds": {k: round(v, 3) for k, v in sorted(steps.items())},
            "dedup_state": self._state_metrics(),
            "previous_trigger_ms": last_trigger_ms(self.spark, QUERY),
        })
        write_json_atomic(events_status_path(self.settings), self.progress)

    def _state_metrics(self) -> dict[str, Any] | None:
        """The de-duplication state as of the previous batch (Spark's query progress): memory, partitions, and
        whether RocksDB holds it (not the ids held: RocksDB does not count its rows, see ``STATE_STORE_CONF``)."""
        for query in self.spark.streams.active:
            if query.name == QUERY and query.lastProgress:
                for op in query.lastProgress.get("stateOperators", []):
                    metrics = op.get("customMetrics", {})
                    return {"memory_bytes": op.get("memoryUsedBytes"),
                            "partitions": op.get("numShufflePartitions"),
                            "rocksdb": any(k.startswith("rocksdb") for k in metrics),
                            "dropped_duplicates": metrics.get("numDroppedDuplicateRows")}
        return None

    def _maintain_ledger_if_due(self) -> None:
        """Each batch's delta-rs commit adds a small file to the ledger: compact it and drop the removed ones
        (Delta's auto compaction runs in Spark writes only)."""
        if not self._ledger_upkeep.due("compact", HOT_MAINTENANCE_SECONDS):
            return
        assert self.ledger is not None
        self.ledger.compact()
        self.ledger.vacuum()
        self._ledger_upkeep.done("compact")


def batch_summary(frame: DataFrame, late: Column) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A batch's :func:`~.clickstream_plan.batch_stats` rows (per Kafka partition) and its hot deltas
    (:func:`~spark_jobs.hot.windows.batch_deltas` of its valid events, per hot view and window), from one scan of
    the batch in one Spark job.

    Each row is grouped once, under its Kafka partition and, for a valid event, its base window
    (:data:`~spark_jobs.hot.windows.BASE_MINUTES`): the groups carry the partition's counts and the window's hot
    aggregates side by side. The driver adds the few groups up per partition
    (:func:`~.clickstream_plan.merge_stats`) and per view's window (:func:`~spark_jobs.hot.windows.rollup_deltas`).
    One row per record instead of one per record and view:
    the aggregation (a collect_set, so Spark's object hash aggregate) was the largest part of the job's CPU beside
    the cache (docs/benchmarks.md)."""
    from pyspark.sql import functions as F

    from spark_jobs.hot.windows import base_aggregates, base_window, rollup_deltas

    valid = (F.col("_kind") == CHECKED) & F.col("_reason").isNull()
    rows = frame.select("partition", F.when(valid, base_window(F.col("_event_time"))).alias("_base"),
                        valid.alias("_valid"), "_kind", "_reason", "offset", "kafka_timestamp",
                        F.col("_event_type").alias("event_type"), F.col("_user_id").alias("user_id"),
                        F.col("_p_revenue").alias("revenue"), late.alias("_late"))
    grouped = rows.groupBy("partition", "_base").agg(*stats_aggregates(F.col("_late"), prefix="s_"),
                                                     *base_aggregates(F.col("_valid")))
    collected = [r.asDict() for r in grouped.collect()]
    return merge_stats(collected), rollup_deltas([r for r in collected if r["_base"] is not None])


def _utc(value: datetime | None) -> datetime | None:
    """A timestamp collected by Spark (naive, in the driver's local time zone) -> aware UTC."""
    return None if value is None else value.astimezone(UTC)


def start_on_topic(spark: SparkSession, settings: Settings, query: str, plan: Callable[[DataFrame, int], DataFrame],
                   process: Callable[[DataFrame, int], None], pool: str, trigger_seconds: int) -> StreamingQuery:
    """Start ``query`` over the events topic: ``plan(kafka source, watermark minutes)`` -> ``process`` per batch,
    with the de-duplication state's settings for this query alone, in scheduler ``pool`` (both events queries)."""
    from spark_jobs.streaming.common import kafka_source, start_with_query_conf

    source = kafka_source(spark, settings, ("subscribe", TOPIC), settings.events_max_offsets_per_trigger)
    # State store partitions (fixed in the checkpoint at its first batch: LAKE_EVENTS_STATE_PARTITIONS); each is
    # a RocksDB instance opened, committed and uploaded per batch.
    query_conf = {**STATE_STORE_CONF, "spark.sql.shuffle.partitions": str(settings.events_state_partitions)}
    require_plan(spark, checkpoint_location(settings, query), query)
    return start_with_query_conf(spark, query_conf, pool, lambda: (
        plan(source, settings.events_watermark_minutes).writeStream.queryName(query)
        .foreachBatch(process)
        .option("checkpointLocation", checkpoint_location(settings, query))
        .trigger(processingTime=f"{trigger_seconds} seconds")
        .start()))


def require_plan(spark: SparkSession, checkpoint: str, query: str) -> None:
    """Refuse a checkpoint that another plan's stateful operator wrote (Spark cannot resume it: the query would
    fail on every restart); stamp a new checkpoint with :data:`~.events_plan.PLAN_VERSION`."""
    from spark_jobs.streaming.clickstream_plan import PLAN_VERSION
    from spark_jobs.streaming.common import read_checkpoint_file, write_checkpoint_file

    marker = f"{checkpoint}/lake-plan"
    found = read_checkpoint_file(spark, marker)
    if found is not None and found.strip() == PLAN_VERSION:
        return
    if found is not None or read_checkpoint_file(spark, f"{checkpoint}/offsets/0") is not None:
        older = (found or "dropDuplicatesWithinWatermark").strip()
        raise RuntimeError(
            f"{query}: its checkpoint {checkpoint} was written by an older plan ({older}) whose state this "
            f"version cannot resume (now: {PLAN_VERSION}). There is no "
            "in-place upgrade before 1.0: `lake stack clean --yes` (or `make clean FORCE=1`), then `make up` "
            "(docs/operations.md, Upgrading).")
    write_checkpoint_file(spark, marker, PLAN_VERSION + "\n")


def start(spark: SparkSession, settings: Settings) -> StreamingQuery:
    """Create the events tables, then start ``lake_events`` (its topic must exist: ``lake stack up`` makes it)."""
    from spark_jobs.streaming.common import require_topic

    ensure_log_output()
    require_topic(settings, TOPIC)  # before the tables: the stream may read topics, not create them
    app = EventsApp(spark, settings)
    app.ensure_tables()
    return start_on_topic(spark, settings, QUERY, events_stream, app.process, HOT, settings.events_trigger_seconds)
