"""The hot tables of the speed layer: ``events.clickstream`` -> ``hot.*`` windows, seconds behind Kafka.

No query of its own: the events query ``lake_events`` (:mod:`spark_jobs.streaming.archive`) reads, checks and
de-duplicates each micro-batch once, caches it, and in the same Spark job aggregates its valid events per hot
window (:func:`spark_jobs.streaming.archive.batch_summary`); :meth:`HotWriter.commit` then commits them while
the archive appends (bronze, silver, quarantine) run beside it. A second query for the hot tables read, checked
and de-duplicated every record a second time; on two cores the two queries together did not keep up with 5,000
events/s, one did (docs/benchmarks.md, "One read for the hot tables and the archive"). Per batch:

1. **one Spark job**, the batch's only one before its appends: the batch's contribution per hot window
   (:func:`spark_jobs.hot.windows.batch_deltas`' aggregates); only these few rows reach the driver;
2. **the driver commits** the changed windows of the three hot tables side by side (delta-rs MERGE of a few rows
   each, read back + deltas, :func:`spark_jobs.hot.windows.apply_deltas`), then the batch's row of
   ``ops.stream_hot_ledger`` (offsets, commit time, step seconds, Spark jobs, Delta commits).

Late data: ``_late`` is the record's own property (:func:`.clickstream_plan.late_flag`: it reached Kafka more
than ``LAKE_EVENTS_WATERMARK_MINUTES`` after its event time), so the hot tables and ``silver.events`` agree on
every event, and ``lake reconcile events`` can check one against the other.

Exactly-once: each table's commit carries a Delta transaction (query id + table, batch id), so a batch re-run
after a crash is skipped where it landed and applied where it did not; the ledger row is written last.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_jobs.contracts.clickstream import TOPIC
from spark_jobs.hot.windows import HOT_VIEWS, apply_deltas
from spark_jobs.settings import Settings
from spark_jobs.streaming.common import last_trigger_ms, read_json, write_json_atomic
from spark_jobs.streaming.engine import BatchJobs
from spark_jobs.table_io import ensure_database
from spark_jobs.table_io.create import create_tables
from spark_jobs.table_io.driver import DriverTable
from spark_jobs.table_io.maintenance import Schedule, schedule_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: The query whose batches commit the hot tables (the events query).
QUERY = "lake_events"
HOT_LEDGER = "ops.stream_hot_ledger"
#: How often the driver compacts and vacuums the hot tables (each batch's MERGE adds a small file).
HOT_MAINTENANCE_SECONDS = 600


def hot_status_path(settings: Settings) -> Path:
    return settings.run_dir / "stream-hot-status.json"


class HotWriter:
    """The hot tables' side of an events micro-batch (:meth:`commit`), called by the events query
    (:meth:`spark_jobs.streaming.archive.EventsApp.process`) on its cached, checked, de-duplicated batch right after
    the batch's first job and before the archive appends."""

    def __init__(self, spark: SparkSession, settings: Settings) -> None:
        self.spark = spark
        self.settings = settings
        self.tables: dict[str, DriverTable] = {}
        self.ledger: DriverTable | None = None
        self.progress: dict[str, Any] = read_json(hot_status_path(settings)) or {"offsets": {}}
        self.progress.setdefault("offsets", {})
        self._upkeep = Schedule(schedule_path(settings, "lake_events-hot"), ("compact",))
        self._committers = ThreadPoolExecutor(max_workers=len(HOT_VIEWS), thread_name_prefix="hot-commit")

    def ensure_tables(self) -> None:
        for db in ("hot", "ops"):
            ensure_database(self.spark, self.settings, db)
        create_tables(self.spark, self.settings, [*[view.table for view in HOT_VIEWS], HOT_LEDGER])
        self.tables = {view.table: DriverTable(self.settings, view.table) for view in HOT_VIEWS}
        self.ledger = DriverTable(self.settings, HOT_LEDGER)

    def commit(self, deltas: list[dict[str, Any]], aggregate_seconds: float, spark_jobs: int,
               spans: dict[int, tuple[int, int]], app_id: str, batch_id: int, jobs: BatchJobs,
               watermark: datetime | None) -> datetime:
        """Commit the changed windows of the three hot tables side by side, then the batch's row of
        ``ops.stream_hot_ledger``. ``deltas``: the batch's :func:`~spark_jobs.hot.windows.batch_deltas` rows,
        collected in ``aggregate_seconds`` by its one job (:func:`spark_jobs.streaming.archive.batch_summary`);
        ``spark_jobs``: the jobs the hot side took, counted before the archive appends started. ``spans``:
        ``partition -> (first offset, end offset)`` the batch read;
        ``watermark``: the events watermark after the batch (the events query's, recorded as is).
        Returns when the hot tables held the batch."""
        started = time.monotonic() - aggregate_seconds
        steps: dict[str, float] = {"aggregate": aggregate_seconds}
        received = sum(end - first for first, end in spans.values())
        t = time.monotonic()
        now = datetime.now(UTC)
        committed = [f.result() for f in [self._committers.submit(jobs.wrap(self._commit_view), view.table, deltas,
                                                                  app_id, batch_id, now) for view in HOT_VIEWS]]
        hot_committed = datetime.now(UTC)
        steps["hot_commit"] = time.monotonic() - t
        times = [_utc(d["newest_kafka_time"]) for d in deltas if d.get("newest_kafka_time") is not None]
        newest = max(times) if times else None
        t = time.monotonic()
        seconds = time.monotonic() - started
        ledger: dict[str, Any] = {
            "batch_id": batch_id, "received": received,
            "offsets": {str(p): f"{first}-{end - 1}" for p, (first, end) in sorted(spans.items())},
            "newest_kafka_time": newest, "watermark": watermark, "hot_committed_at": hot_committed,
            "batch_seconds": seconds, "step_seconds": list(steps.items()),
            "spark_jobs": spark_jobs, "delta_commits": sum(committed) + 1,
        }
        assert self.ledger is not None
        self.ledger.write_once([ledger], app_id, batch_id, "append")
        steps["ledger"] = time.monotonic() - t
        self.progress["offsets"].update({f"{TOPIC}:{p}": end - 1 for p, (_first, end) in spans.items()})
        self.progress.update({"query": QUERY, "batch_id": batch_id, "committed_at": hot_committed.isoformat(),
                              "batch_seconds": round(seconds, 3), "batch_records": received,
                              "spark_jobs": ledger["spark_jobs"], "delta_commits": ledger["delta_commits"],
                              "watermark": watermark.isoformat() if watermark else None,
                              "step_seconds": {k: round(v, 3) for k, v in sorted(steps.items())},
                              "previous_trigger_ms": last_trigger_ms(self.spark, QUERY)})
        write_json_atomic(hot_status_path(self.settings), self.progress)
        self._maintain_if_due()
        return hot_committed

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
        if not self._upkeep.due("compact", HOT_MAINTENANCE_SECONDS):
            return
        assert self.ledger is not None
        for table in [*self.tables.values(), self.ledger]:
            table.compact()
            table.vacuum()
        self._upkeep.done("compact")


def _utc(value: datetime) -> datetime:
    """A timestamp collected by Spark (naive, in the driver's local time zone) -> aware UTC."""
    return value.astimezone(UTC)
