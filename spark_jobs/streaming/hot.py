"""The hot query ``lake_events_hot``: ``events.clickstream`` -> the hot tables, seconds behind Kafka.

The speed layer's own query, apart from the archive (``lake_events``: bronze, silver, quarantine, ledger), so an
archive write never delays a hot commit. It runs in the ``hot`` scheduler pool (:mod:`.engine`), which gets the
cores before the archive and CDC pools whenever both wait. Per micro-batch:

1. **one Spark job** (:func:`.events_plan.hot_stream` up to ``foreachBatch``): read the Kafka range once, check
   the contract on the executors (only the window fields come back from the Python workers), de-duplicate by
   ``event_id`` in the state store (the same horizon as the archive query), and aggregate the batch per hot
   window (:func:`spark_jobs.hot.windows.batch_deltas`); only these few rows reach the driver, which meanwhile
   reads the batch's offsets from the query's offset log (:func:`.common.batch_offsets`);
2. **the driver commits** the changed windows of the three hot tables side by side (delta-rs MERGE of a few rows
   each, read back + deltas, :func:`spark_jobs.hot.windows.apply_deltas`), then the batch's row of
   ``ops.stream_hot_ledger`` (offsets, commit time, step seconds, Spark jobs, Delta commits).

Late data: ``_late`` is the record's own property (:func:`.events_plan.late_flag`: it reached Kafka more than
``LAKE_EVENTS_WATERMARK_MINUTES`` after its event time), so the hot tables and ``silver.events`` agree on every
event whatever their batches were, and ``lake reconcile events`` can check one against the other.

Exactly-once: each table's commit carries a Delta transaction (query id + table, batch id), so a batch re-run
after a crash is skipped where it landed and applied where it did not; the ledger row is written last.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from spark_jobs.contracts.clickstream import TOPIC
from spark_jobs.hot.windows import HOT_VIEWS, apply_deltas, batch_deltas
from spark_jobs.settings import Settings
from spark_jobs.streaming.clickstream_plan import hot_stream
from spark_jobs.streaming.common import batch_offsets, last_trigger_ms, log_batch, query_id, read_json, write_json_atomic
from spark_jobs.streaming.engine import HOT, BatchJobs
from spark_jobs.table_io import checkpoint_location, ensure_database
from spark_jobs.table_io.create import create_tables
from spark_jobs.table_io.driver import DriverTable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

QUERY = "lake_events_hot"
HOT_LEDGER = "ops.stream_hot_ledger"
#: How often the driver compacts and vacuums the hot tables (each batch's MERGE adds a small file).
HOT_MAINTENANCE_SECONDS = 600
#: Batches of at least this many records (a backlog) get a progress line with their step times in the log.
LOG_BATCH_RECORDS = 20_000


def hot_status_path(settings: Settings) -> Path:
    return settings.run_dir / "stream-hot-status.json"


class HotApp:
    """Per-batch logic of the hot query (:meth:`process`)."""

    def __init__(self, spark: SparkSession, settings: Settings) -> None:
        self.spark = spark
        self.settings = settings
        self.delay = timedelta(minutes=settings.events_watermark_minutes)
        self.watermark: datetime | None = None
        self.tables: dict[str, DriverTable] = {}
        self.ledger: DriverTable | None = None
        self.progress: dict[str, Any] = read_json(hot_status_path(settings)) or {"offsets": {}}
        self.progress.setdefault("offsets", {})
        self._last_maintenance = time.monotonic()
        self._committers = ThreadPoolExecutor(max_workers=len(HOT_VIEWS), thread_name_prefix="hot-commit")
        self._readers = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hot-offsets")
        self.checkpoint = checkpoint_location(settings, QUERY)

    def ensure_tables(self) -> None:
        for db in ("hot", "ops"):
            ensure_database(self.spark, self.settings, db)
        create_tables(self.spark, self.settings, [*[view.table for view in HOT_VIEWS], HOT_LEDGER])
        self.tables = {view.table: DriverTable(self.settings, view.table) for view in HOT_VIEWS}
        self.ledger = DriverTable(self.settings, HOT_LEDGER)

    def process(self, frame: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        jobs = BatchJobs(self.spark, QUERY, batch_id, HOT)
        jobs.enter()
        try:
            steps: dict[str, float] = {}
            app_id = query_id(self.spark, QUERY)
            valid = frame.select(
                F.col("_event_type").alias("event_type"), F.col("_user_id").alias("user_id"),
                F.col("_event_time").alias("event_time"), F.col("_p_revenue").alias("revenue"), "_late",
                "kafka_timestamp")
            t = time.monotonic()
            # The batch's offsets from the offset log (two small reads by the driver) while its one job runs.
            offsets = self._readers.submit(batch_offsets, self.spark, self.checkpoint, batch_id, TOPIC)
            deltas = [r.asDict() for r in batch_deltas(valid).collect()]
            spans = offsets.result()
            steps["read_check_dedup_aggregate"] = time.monotonic() - t
            received = sum(end - first for first, end in spans.values())
            if received == 0:  # a no-data batch (the state store evicting old ids): nothing to write
                return
            t = time.monotonic()
            now = datetime.now(UTC)
            committed = [f.result() for f in [self._committers.submit(self._commit_view, view.table, deltas, app_id,
                                                                      batch_id, now) for view in HOT_VIEWS]]
            hot_committed = datetime.now(UTC)
            steps["hot_commit"] = time.monotonic() - t
            times = [_utc(d["newest_kafka_time"]) for d in deltas if d.get("newest_kafka_time") is not None]
            newest = max(times) if times else None
            if newest is not None:
                candidate = newest - self.delay
                self.watermark = candidate if self.watermark is None else max(self.watermark, candidate)
            t = time.monotonic()
            seconds = time.monotonic() - started
            ledger: dict[str, Any] = {
                "batch_id": batch_id, "received": received,
                "offsets": {str(p): f"{first}-{end - 1}" for p, (first, end) in sorted(spans.items())},
                "newest_kafka_time": newest, "watermark": self.watermark, "hot_committed_at": hot_committed,
                "batch_seconds": seconds, "step_seconds": list(steps.items()),
                "spark_jobs": jobs.jobs(), "delta_commits": sum(committed) + 1,
            }
            if self.settings.stream_log_jobs:
                jobs.log()
            assert self.ledger is not None
            self.ledger.write_once([ledger], app_id, batch_id, "append")
            steps["ledger"] = time.monotonic() - t
        finally:
            jobs.leave()
        self.progress["offsets"].update({f"{TOPIC}:{p}": end - 1 for p, (_first, end) in spans.items()})
        self.progress.update({"query": QUERY, "batch_id": batch_id, "committed_at": hot_committed.isoformat(),
                              "batch_seconds": round(seconds, 3), "batch_records": received,
                              "spark_jobs": ledger["spark_jobs"], "delta_commits": ledger["delta_commits"],
                              "watermark": self.watermark.isoformat() if self.watermark else None,
                              "step_seconds": {k: round(v, 3) for k, v in sorted(steps.items())},
                              "previous_trigger_ms": last_trigger_ms(self.spark, QUERY)})
        write_json_atomic(hot_status_path(self.settings), self.progress)
        log_batch(QUERY, batch_id, received, seconds, steps,
                  logging.INFO if received >= LOG_BATCH_RECORDS else logging.DEBUG)
        self._maintain_if_due()

    def _commit_view(self, table_name: str, deltas: list[dict[str, Any]], app_id: str, batch_id: int,
                     now: datetime) -> int:
        """Upsert one hot table's changed windows (current rows read back + the batch's deltas); 1 if committed."""
        import pyarrow as pa
        import pyarrow.compute as pc

        view = next(v for v in HOT_VIEWS if v.table == table_name)
        mine = [{**d, "window_start": _utc(d["window_start"]), "window_end": _utc(d["window_end"])}
                for d in deltas if d["table"] == view.table]
        if not mine:
            return 0
        table = self.tables[view.table]
        starts = pa.array([d["window_start"] for d in mine], pa.timestamp("us", tz="UTC"))
        current = table.read(where=pc.field("window_start").isin(starts)).to_pylist()
        return int(table.upsert_once(apply_deltas(view, current, mine, batch_id, now), "window_start", app_id,
                                     batch_id))

    def _maintain_if_due(self) -> None:
        """Each batch's delta-rs commit adds a small file to the hot tables and the ledger: compact them and drop
        the removed ones (Delta's auto compaction runs in Spark writes only)."""
        if time.monotonic() - self._last_maintenance < HOT_MAINTENANCE_SECONDS:
            return
        self._last_maintenance = time.monotonic()
        assert self.ledger is not None
        for table in [*self.tables.values(), self.ledger]:
            table.compact()
            table.vacuum()


def _utc(value: datetime) -> datetime:
    """A timestamp collected by Spark (naive, in the driver's local time zone) -> aware UTC."""
    return value.astimezone(UTC)


def start(spark: SparkSession, settings: Settings) -> StreamingQuery:
    """Create the hot tables, then start ``lake_events_hot`` in the ``hot`` pool."""
    from spark_jobs.streaming.archive import start_on_topic
    from spark_jobs.streaming.common import require_topic

    require_topic(settings, TOPIC)  # before the tables: the stream may read topics, not create them
    app = HotApp(spark, settings)
    app.ensure_tables()
    return start_on_topic(spark, settings, QUERY, hot_stream, app.process, HOT, settings.events_trigger_seconds)
