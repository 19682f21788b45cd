"""The events query ``lake_events``: ``events.clickstream`` -> hot tables first, then bronze -> silver.

Two paths, one query, one driver:

**Hot path** (``foreachBatch``, bounded by ``LAKE_EVENTS_MAX_OFFSETS_PER_TRIGGER``):

1. collect the batch's raw records from Kafka to the driver as Arrow (one
   Spark job, no parse) and parse and validate them there against the contract
   (``spark_jobs.silver.events_arrow``: the compiled checks, ~7 us an event,
   and ``spark_jobs.contracts.events.check_record`` for whatever they do not
   accept; a large batch is split over ``LAKE_EVENTS_PARSE_PROCESSES`` worker
   processes); the hot tables and silver both come from this one decision;
2. de-duplicate by ``event_id`` in the driver: within the batch (first Kafka
   offset wins) and against every event that arrived within the last
   ``LAKE_EVENTS_WATERMARK_MINUTES`` (``DedupIndex``, rebuilt from
   ``silver.events`` after a restart);
3. flag ``_late`` the events whose ``event_time`` is older than the watermark in
   force (max on-time event time seen - ``LAKE_EVENTS_WATERMARK_MINUTES``); they
   are kept and counted in their window's ``late_events``, never silently dropped;
4. add the new unique events to the hot windows held in the driver
   (``spark_jobs.hot.events.HotWindows``, Arrow aggregation) and commit each
   changed hot table from the driver (``spark_jobs.driver_delta``: delta-rs,
   ~50 ms, no Spark job);
5. commit the batch's ledger row to ``ops.stream_events_ledger`` the same way:
   counts, offsets, the watermark before/after, the offsets of the duplicates
   and the moment the hot tables committed. It is the batch's decision log.

**Archive** (a thread of the same driver, behind the hot path): every batch
queued since its last run, in one delta-rs append per table, to
``bronze.events__clickstream`` (raw, partitioned by ingest date),
``silver.events`` (the new unique events, partitioned by event date) and
``quarantine.events`` (rejects with raw bytes, reason, detail, Kafka
coordinates), from the rows the hot path built (``archive_tables``); then a
row in ``ops.stream_events_archive``.
The queue is bounded by rows (2 x ``maxOffsetsPerTrigger``): when the archive
falls behind, the hot path waits, so a backlog never fills the driver's memory.
``lake stream wait`` and the status file's ``offsets`` count a batch as done
only once the archive has landed it.

Why in the driver: a Delta commit from Spark costs seconds on two cores (a
state reconstruction job per new table version, see ``session.py``), and the
Spark parse (variant checks) ~110 us of CPU per event; the hot tables waited
behind both (freshness p95 77 s at 5,000 events/s with everything in Spark,
22 s with the commits moved to the driver and the parse still in Spark).
Spark still owns the Kafka offsets (the query's checkpoint) and the reads; all
tables stay plain Delta tables that Spark reads and maintains.

Exactly-once: every commit carries a Delta transaction (query id + table,
batch id; see ``streaming.common.once_writer``), so nothing is written twice.
If the driver dies after a batch's ledger row but before its archive (Spark
has then committed the batch's offsets and will not replay it), the next start
re-reads those offset ranges from Kafka and lands them with the ledger's
ingest time, watermark and duplicates, so the rows are those the lost archive
would have written (``EventsApp._recover``); each table gets exactly the
batches after its own transaction version. A batch the ledger already holds
is not recomputed when Spark replays it. Kafka must keep the records until the
archive has landed them (seconds to minutes; retention is days).

No table maintenance of bronze/silver yet. Measured with
``LAKE_STREAM_MAINTENANCE_MINUTES=1`` and ``streaming.common.Maintenance``
(what the CDC query runs): OPTIMIZE + VACUUM held this query's batches for
553 s over its tables (1.4M events of history). The hot tables, rewritten per
batch, are vacuumed from the driver every ``HOT_VACUUM_SECONDS``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from spark_jobs.arrow_py import py_values
from spark_jobs.contracts.events import TOPIC
from spark_jobs.driver_delta import DriverTable
from spark_jobs.hot.events import HOT_VIEWS, HotWindows, epoch_micros, from_epoch_micros, hot_schema
from spark_jobs.io import ensure_database
from spark_jobs.settings import Settings
from spark_jobs.silver.events import PROPERTY_COLUMNS
from spark_jobs.silver.events_arrow import ParallelCheck
from spark_jobs.streaming.common import (
    bronze_rows,
    bronze_schema,
    create_table,
    quarantine_arrow,
    quarantine_schema,
    query_id,
    raw_records,
    read_json,
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
ARCHIVE_LOG = "ops.stream_events_archive"
#: Hot tables get a version per batch: keep removed files 1 hour (readers of older versions, time travel)
#: and the log 1 day, instead of Delta's 7 and 30 days (~86,400 versions a day at one batch a second).
HOT_TABLE_PROPERTIES = {"delta.deletedFileRetentionDuration": "interval 1 hours",
                        "delta.logRetentionDuration": "interval 1 days"}
HOT_VACUUM_SECONDS = 600
#: Batches of at least this many records (a backlog) get a progress line with their step times in the log.
LOG_BATCH_RECORDS = 20_000
#: File name under ``<run dir>/failpoints/`` that holds the archive thread (tests only, see ``_hold_if_asked``).
ARCHIVE_HOLD_FAILPOINT = "events-archive-hold"


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
        known = self._first
        ids = [e for e in event_ids if e not in known]
        known.update(dict.fromkeys(ids, batch_id))
        self._batches.append((batch_id, ingest_time, ids))
        while self._batches and self._batches[0][1] < ingest_time - self.horizon:
            for e in self._batches.popleft()[2]:
                known.pop(e, None)

    def duplicates(self, ids: pa.Array | pa.ChunkedArray, partitions: np.ndarray,
                   offsets: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """Which of a batch's events are re-sends -> (boolean mask over ``ids``, the new ids in Kafka order).

        ``ids`` (no nulls) come with their Kafka coordinates. Within the batch
        the lowest (partition, offset) of an id wins; an id already in the
        index is a duplicate everywhere. The new ids are what
        :meth:`add_batch` takes once the batch is committed. Vectorised (Arrow
        dictionary encoding, numpy sorts): ~0.1 s for 200,000 events, mostly
        hashing the ids against the index.
        """
        import pyarrow.compute as pc

        n = len(ids)
        if n == 0:
            return np.zeros(0, dtype=bool), []
        if isinstance(ids, pa.ChunkedArray):
            ids = ids.combine_chunks()
        order = np.lexsort((offsets, partitions))  # by partition, then offset
        encoded = pc.dictionary_encode(pc.take(ids, pa.array(order)))
        if len(encoded.dictionary) == n:  # no id twice in the batch (the usual case)
            firsts = order
        else:  # the dictionary is in order of first appearance: its first index per code
            _, first_at = np.unique(encoded.indices.to_numpy(), return_index=True)
            firsts = order[np.sort(first_at)]
        first_ids = py_values(pc.take(ids, pa.array(firsts)))
        if self._first and not self._first.keys().isdisjoint(first_ids):  # (C speed; usually disjoint)
            known = self._first
            seen = np.fromiter((e in known for e in first_ids), dtype=bool, count=len(first_ids))
            firsts = firsts[~seen]
            first_ids = [e for e, s in zip(first_ids, seen, strict=True) if not s]
        dup = np.ones(n, dtype=bool)
        dup[firsts] = False
        return dup, first_ids


@dataclass
class ArchiveJob:
    """A batch whose hot windows and ledger row are committed; its bronze/silver/quarantine rows are not yet."""

    batch_id: int
    tables: dict[str, pa.Table]  # BRONZE, SILVER, QUARANTINE -> this batch's rows (archive_tables)
    received: int
    quarantined: int
    offsets: dict[str, list[int]]  # partition -> [first, last] offset


class EventsApp:
    """State and per-batch logic of the events query: the hot path in ``process``, the archive in a thread."""

    def __init__(self, spark: SparkSession, settings: Settings) -> None:
        self.spark = spark
        self.settings = settings
        self.delay = timedelta(minutes=settings.events_watermark_minutes)
        self.index = DedupIndex(self.delay)
        self.watermark: datetime | None = None
        self.restored_for: int | None = None
        self.done_through = -1  # batches up to here are in the ledger already (a replay after a crash)
        self.hot = {view.table: HotWindows(view) for view in HOT_VIEWS}
        self.hot_version: dict[str, int] = {}
        self.driver_tables: dict[str, DriverTable] = {}
        self.progress: dict[str, Any] = read_json(events_status_path(settings)) or {"offsets": {}, "totals": {}}
        self.progress.setdefault("offsets", {})
        self.progress.setdefault("totals", {})
        self._progress_lock = threading.Lock()
        # Archive queue: bounded by rows so a backlog never holds more than ~2 batches in memory.
        self._jobs: deque[ArchiveJob] = deque()
        self._queued_rows = 0
        self._max_queued_rows = 2 * settings.events_max_offsets_per_trigger
        self._cond = threading.Condition()
        self.archive_error: BaseException | None = None
        self._archiver: threading.Thread | None = None
        self._stopping = False
        self._last_vacuum = time.monotonic()
        self.checker = ParallelCheck(settings.events_parse_process_count)
        self._ledger_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="events-ledger")

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
            create_table(self.spark, self.settings, view.table, hot_schema(view), props=HOT_TABLE_PROPERTIES)
        create_table(self.spark, self.settings, LEDGER, ledger_schema())
        create_table(self.spark, self.settings, ARCHIVE_LOG, archive_log_schema())
        for name in (*self.hot, LEDGER, ARCHIVE_LOG, BRONZE, SILVER, QUARANTINE):
            self.driver_tables[name] = DriverTable(self.settings, name)

    # -- the hot path (foreachBatch) ---------------------------------------------

    def process(self, batch: DataFrame, batch_id: int) -> None:
        import pyarrow.compute as pc

        self._raise_archive_error()
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", "events_hot")
        app_id = query_id(self.spark, QUERY)
        if self.restored_for is None:
            self._restore(app_id, batch_id)
        if batch_id <= self.done_through:
            print(f"lake stream: {QUERY} batch {batch_id} is in the ledger already (replay after a restart); "
                  "its tables were completed from Kafka at start", flush=True)
            return
        started = time.monotonic()
        steps: dict[str, float] = {}
        ingest_time = datetime.now(UTC)
        watermark_before = self.watermark

        t = time.monotonic()
        raw = raw_records(batch)
        steps["read"] = time.monotonic() - t
        received = raw.num_rows
        if received == 0:
            return
        t = time.monotonic()
        # Parse and validate in the driver (~7 us an event, vs ~110 us for the Spark variant checks):
        # spark_jobs.silver.events_arrow. The hot tables and silver both come from this one decision.
        keys = self.checker.check(raw)
        steps["parse"] = time.monotonic() - t

        t = time.monotonic()
        parts = keys.column("partition").to_numpy().astype(np.int64)
        offs = keys.column("offset").to_numpy()
        offsets = partition_spans(parts, offs)
        valid_rows = np.flatnonzero(pc.is_null(keys.column("_reason")).to_numpy(zero_copy_only=False))
        valid_parts, valid_offs = parts[valid_rows], offs[valid_rows]
        dup, new_ids = self.index.duplicates(pc.take(keys.column("_event_id"), pa.array(valid_rows)),
                                             valid_parts, valid_offs)
        dups = list(zip(valid_parts[dup].tolist(), valid_offs[dup].tolist(), strict=True))
        # The batch's bronze/silver/quarantine rows; silver's are the new unique events with their late flag,
        # which the hot windows take too (one rule for both, the one the recovery applies).
        tables = archive_tables(keys, batch_id, ingest_time, watermark_before, set(dups))
        new = tables[SILVER]
        micros = pc.cast(new.column("event_time"), pa.int64()).to_numpy(zero_copy_only=False)
        late_mask = new.column("_late").to_numpy(zero_copy_only=False)
        late = int(late_mask.sum())
        if late < len(micros):
            candidate = from_epoch_micros(int(micros[~late_mask].max())) - self.delay
            self.watermark = candidate if watermark_before is None else max(watermark_before, candidate)
        steps["dedup"] = time.monotonic() - t

        t = time.monotonic()
        events = pa.table({"event_type": new.column("event_type"), "user_id": new.column("user_id"),
                           "event_us": pa.array(micros, pa.int64()), "revenue": new.column("revenue"),
                           "late": new.column("_late")})
        for table, windows in self.hot.items():
            if batch_id <= self.hot_version.get(table, -1):
                continue  # committed before a crash: the state loaded from the table holds it
            if windows.add_arrow(events, batch_id, ingest_time) or table not in self.hot_version:
                self.driver_tables[table].write_once(windows.rows(), app_id, batch_id, "overwrite")
                self.hot_version[table] = batch_id
        hot_committed = datetime.now(UTC)
        steps["hot"] = time.monotonic() - t

        t = time.monotonic()
        quarantined = received - len(valid_rows)
        dup_offsets: dict[str, list[int]] = {}
        for p, o in dups:
            dup_offsets.setdefault(str(p), []).append(o)
        ledger = {
            "batch_id": batch_id, "received": received, "valid": len(valid_rows), "quarantined": quarantined,
            "duplicates": len(dups), "appended": new.num_rows, "late": late,
            "watermark_before": watermark_before, "watermark_after": self.watermark,
            "max_ingest_time": ingest_time, "hot_committed_at": hot_committed,
            "offsets": {k: f"{v[0]}-{v[1]}" for k, v in offsets.items()},
            "duplicate_offsets": list(dup_offsets.items()),
            "batch_seconds": time.monotonic() - started,
        }
        # The ledger row is the batch's decision log: with its offsets, watermark and duplicates the
        # archive can be recomputed from Kafka exactly if the driver dies before it lands.
        writing = self._ledger_writer.submit(self.driver_tables[LEDGER].write_once, [ledger], app_id, batch_id,
                                             "append")
        self.index.add_batch(batch_id, ingest_time, new_ids)  # meanwhile (delta-rs releases the GIL); the index
        writing.result()  # is in memory only, rebuilt from silver at a restart
        steps["ledger"] = time.monotonic() - t
        self._record_progress(batch_id, ledger, steps, started)
        if received >= LOG_BATCH_RECORDS:  # a backlog: show progress and where the time goes
            print(f"lake stream: {QUERY} batch {batch_id}: {received} records in {ledger['batch_seconds']:.2f} s ("
                  + ", ".join(f"{k} {v:.2f}" for k, v in steps.items()) + ")", flush=True)
        self._maybe_vacuum_hot()
        self._enqueue(ArchiveJob(batch_id, tables, received, quarantined, offsets), app_id)

    # -- the archive (bronze, silver, quarantine) ----------------------------------

    def _enqueue(self, job: ArchiveJob, app_id: str) -> None:
        """Hand ``job`` to the archive thread; waits while the queue holds too many rows (back-pressure)."""
        if self._archiver is None or not self._archiver.is_alive():
            self._archiver = threading.Thread(target=self._archive_loop, args=(app_id,), name="events-archive",
                                              daemon=True)
            self._archiver.start()
        with self._cond:
            while self._jobs and self._queued_rows + job.received > self._max_queued_rows:
                self._cond.wait(1.0)
                self._raise_archive_error()
            self._jobs.append(job)
            self._queued_rows += job.received
            self._cond.notify_all()

    def _archive_loop(self, app_id: str) -> None:
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", "events_archive")
        while True:
            with self._cond:
                while not self._jobs and not self._stopping:
                    self._cond.wait(1.0)
                if not self._jobs:
                    return
                group = list(self._jobs)  # every batch waiting: one append per table for all of them
            ids = {job.batch_id for job in group}
            try:  # everything inside: a failure must reach the hot path (archive_error), never end the thread silently
                self._hold_if_asked()
                started = time.monotonic()
                write_archive(self.driver_tables, {table: {job.batch_id: job.tables[table] for job in group}
                                                   for table in (BRONZE, SILVER, QUARANTINE)}, app_id)
                seconds = time.monotonic() - started
                self.driver_tables[ARCHIVE_LOG].write_once([{
                    "first_batch": group[0].batch_id, "last_batch": group[-1].batch_id, "batches": len(group),
                    "records": sum(job.received for job in group), "archived_at": datetime.now(UTC),
                    "seconds": seconds}], app_id, group[-1].batch_id, "append")
                self._record_archived(group, seconds)
            except BaseException as exc:  # noqa: BLE001  (surfaced by the next process() call: the query fails)
                self.archive_error = exc
                print(f"lake stream: {QUERY}: archive of batches {min(ids)}-{max(ids)} "
                      f"failed: {exc}", file=sys.stderr, flush=True)
                with self._cond:
                    self._cond.notify_all()
                return
            with self._cond:
                for _ in group:
                    done = self._jobs.popleft()
                    self._queued_rows -= done.received
                self._cond.notify_all()

    def _hold_if_asked(self) -> None:
        """Fault injection for tests: while ``<run dir>/failpoints/events-archive-hold`` exists, the archive
        waits (the hot path goes on until the queue is full). It opens the gap between a batch's ledger row
        and its archive for as long as a test needs to SIGKILL the driver inside it."""
        hold = self.settings.run_dir / "failpoints" / ARCHIVE_HOLD_FAILPOINT
        while hold.exists() and not self._stopping:
            time.sleep(0.05)

    def _raise_archive_error(self) -> None:
        if self.archive_error is not None:
            raise RuntimeError(f"{QUERY}: the archive thread failed (bronze/silver/quarantine append); the "
                               "batches it did not land are re-read from Kafka at the next start") \
                from self.archive_error

    def drain(self, timeout: float) -> bool:
        """Let the archive thread land what is queued (a clean stop); False if it did not within ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            while self._jobs and self.archive_error is None and time.monotonic() < deadline:
                self._cond.wait(1.0)
            return not self._jobs

    def _recover(self, app_id: str, ledger_rows: list[Any], versions: dict[str, int]) -> None:
        """Land the ledger's batches that bronze/silver/quarantine miss (the driver died before the archive).

        Each table gets exactly the batches after its own Delta transaction
        version (``versions``), recomputed from Kafka with the ledger's ingest time, watermark
        and duplicates, so the rows are those the lost archive would have written.
        """

        wanted = {
            BRONZE: {int(r.batch_id) for r in ledger_rows if int(r.batch_id) > versions[BRONZE]},
            SILVER: {int(r.batch_id) for r in ledger_rows if int(r.batch_id) > versions[SILVER]},
            QUARANTINE: {int(r.batch_id) for r in ledger_rows
                         if int(r.batch_id) > versions[QUARANTINE] and int(r.quarantined) > 0},
        }
        needed = set().union(*wanted.values())
        if not needed:
            return
        rows = [r for r in ledger_rows if int(r.batch_id) in needed]
        started = time.monotonic()
        print(f"lake stream: {QUERY}: landing {len(rows)} batch(es) ({sum(int(r.received) for r in rows)} records) "
              f"the last run committed to the ledger but not to "
              f"{', '.join(t for t, b in wanted.items() if b)}, re-read from Kafka", flush=True)
        raw = raw_records(read_kafka_ranges(self.spark, self.settings, rows))
        checked = self.checker.check(raw)
        parts = checked.column("partition").to_numpy()
        offs = checked.column("offset").to_numpy()
        per_batch: dict[int, dict[str, pa.Table]] = {}
        for r in rows:
            mask = np.zeros(checked.num_rows, dtype=bool)
            for p, span in r.offsets.items():
                lo, hi = (int(x) for x in span.split("-"))
                mask |= (parts == int(p)) & (offs >= lo) & (offs <= hi)
            dups = {(int(p), int(o)) for p, offs_list in (r.duplicate_offsets or {}).items() for o in offs_list}
            batch = checked.filter(pa.array(mask))
            if batch.num_rows != int(r.received):
                raise RuntimeError(f"{QUERY}: batch {r.batch_id}: the ledger holds {r.received} records at offsets "
                                   f"{dict(r.offsets)} of {TOPIC}, Kafka returned {batch.num_rows}")
            per_batch[int(r.batch_id)] = archive_tables(batch, int(r.batch_id), r.max_ingest_time.astimezone(UTC),
                                                        _utc(r.watermark_before), dups)
        write_archive(self.driver_tables, {table: {b: per_batch[b][table] for b in sorted(ids)}
                                           for table, ids in wanted.items()}, app_id)
        print(f"lake stream: {QUERY}: recovered batches {min(needed)}-{max(needed)} in "
              f"{time.monotonic() - started:.1f} s", flush=True)

    # -- restart -----------------------------------------------------------------

    def _restore(self, app_id: str, batch_id: int) -> None:
        """After a (re)start: land what the last run left, then the watermark, dedup index and hot windows."""
        from pyspark.sql import functions as F

        versions = {name: _txn_version(self.settings, name, app_id) for name in (BRONZE, SILVER, QUARANTINE)}
        # Quarantine's version lags legitimately (batches without rejects skip it), so its candidates are
        # only batches that had rejects; bronze and silver need every batch after their version.
        pending = ((F.col("batch_id") > min(versions[BRONZE], versions[SILVER]))
                   | ((F.col("batch_id") > versions[QUARANTINE]) & (F.col("quarantined") > 0)))
        ledger_rows = self.spark.table(LEDGER).where(pending).orderBy("batch_id").collect()
        self._recover(app_id, ledger_rows, versions)
        last = (self.spark.table(LEDGER).orderBy(F.col("batch_id").desc()).limit(1).collect())
        if last:
            row = last[0]
            self.done_through = int(row.batch_id)
            self.watermark = _utc(row.watermark_after)
            since = row.max_ingest_time.astimezone(UTC) - self.delay
            self._load_recent_ids(since)
            print(f"lake stream: {QUERY} restored watermark {self.watermark} and {len(self.index)} recent "
                  f"event ids (ledger through batch {self.done_through}, next batch {batch_id})", flush=True)
        for table, windows in self.hot.items():
            driver_table = self.driver_tables[table]
            windows.load(driver_table.read().to_pylist())
            version = driver_table.committed_version(app_id)
            if version is not None:
                self.hot_version[table] = version
        self.restored_for = batch_id

    def _load_recent_ids(self, since: datetime) -> None:
        """Fill the dedup index with silver's events that arrived at or after ``since``, batch by batch.

        Read from the driver (delta-rs, two columns): millions of ids in seconds, where a Spark
        ``collect_list`` held the first batch after a restart ~20 s for 3.4 million.
        """
        import pyarrow.compute as pc

        micros = pa.timestamp("us", tz="UTC")
        recent = self.driver_tables[SILVER].read(["event_id", "_batch_id", "_ingest_time"],
                                                 where=pc.field("_ingest_time") >= pa.scalar(since, micros))
        if recent.num_rows == 0:
            return
        recent = recent.sort_by("_batch_id")
        batch_ids = recent.column("_batch_id").to_numpy()
        ingest = pc.cast(recent.column("_ingest_time"), pa.int64()).to_numpy()
        ids = py_values(recent.column("event_id"))
        for a, b in _runs(batch_ids):
            self.index.add_batch(int(batch_ids[a]), from_epoch_micros(int(ingest[a:b].max())), ids[a:b])

    # -- status ------------------------------------------------------------------

    def _record_progress(self, batch_id: int, ledger: dict[str, Any], steps: dict[str, float],
                         started: float) -> None:
        with self._progress_lock:
            totals = self.progress["totals"]
            for key in ("received", "valid", "quarantined", "duplicates", "appended", "late"):
                totals[key] = int(totals.get(key, 0)) + int(ledger[key])
            wm = ledger["watermark_after"]
            self.progress.update({
                "query": QUERY, "batch_id": batch_id, "committed_at": datetime.now(UTC).isoformat(),
                "batch_seconds": round(time.monotonic() - started, 3), "batch_records": ledger["received"],
                "watermark": wm.isoformat() if wm else None,
                "dedup_index_ids": len(self.index),
                "step_seconds": {k: round(v, 3) for k, v in sorted(steps.items())},
            })
            write_json_atomic(events_status_path(self.settings), self.progress)

    def _record_archived(self, group: list[ArchiveJob], seconds: float) -> None:
        """``offsets`` in the status file move only when bronze and silver hold them (``lake stream wait``)."""
        from spark_jobs.contracts.events import TOPIC

        with self._progress_lock:
            for job in group:
                self.progress["offsets"].update({f"{TOPIC}:{p}": hi for p, (_lo, hi) in job.offsets.items()})
            self.progress.update({
                "archived_batch_id": group[-1].batch_id, "archived_at": datetime.now(UTC).isoformat(),
                "archive_seconds": round(seconds, 3), "archive_batches": len(group),
            })
            write_json_atomic(events_status_path(self.settings), self.progress)

    def _maybe_vacuum_hot(self) -> None:
        """Hot tables get a new version per batch: drop the files removed more than their retention ago."""
        if time.monotonic() - self._last_vacuum < HOT_VACUUM_SECONDS:
            return
        self._last_vacuum = time.monotonic()
        for table in self.hot:
            self.driver_tables[table].vacuum()


def archive_tables(checked: pa.Table, batch_id: int, ingest_time: datetime, watermark_before: datetime | None,
                   duplicates: set[tuple[int, int]], quarantined_at: datetime | None = None) -> dict[str, pa.Table]:
    """A batch's :func:`~spark_jobs.silver.events_arrow.check_records` rows -> its bronze, silver and quarantine rows.

    Bronze: every record, with ``ingest_time`` and its date. Silver: the valid
    records that are not ``duplicates`` ((partition, offset) of re-sends, found by
    the hot path), with ``_late`` (event time before ``watermark_before``; NULL
    watermark: nothing is late) and ``_batch_id``. Quarantine: the rejects with
    reason and detail. Deterministic given the ledger's values, so the
    recovery from Kafka rebuilds exactly the rows a lost archive would have written.
    """
    import pyarrow.compute as pc

    micros = pa.timestamp("us", tz="UTC")
    n = checked.num_rows
    ingest = pa.array(np.full(n, epoch_micros(ingest_time), dtype=np.int64)).cast(micros)
    bronze = bronze_rows(checked, ingest_time)
    ok = pc.is_null(checked.column("_reason"))
    # (only the columns silver takes: filtering the raw key/value bytes too doubled the cost)
    valid = checked.drop_columns(["key", "value", "_reason", "_error"]).filter(ok)
    if duplicates:
        by_partition: dict[int, list[int]] = {}
        for p, o in duplicates:
            by_partition.setdefault(p, []).append(o)
        v_parts, v_offs = valid.column("partition").to_numpy(), valid.column("offset").to_numpy()
        drop = np.zeros(valid.num_rows, dtype=bool)
        for p, offs in by_partition.items():
            drop |= (v_parts == p) & np.isin(v_offs, np.array(offs, dtype=np.int64))
        valid = valid.filter(pa.array(~drop))
    times = pc.cast(valid.column("_event_time"), pa.int64()).to_numpy(zero_copy_only=False)
    late = (times < epoch_micros(watermark_before)) if watermark_before is not None else np.zeros(len(times), bool)
    silver = {name: valid.column(f"_{name}") for name in
              ("event_id", "event_type", "user_id", "session_id", "event_time", "event_date", "properties")}
    silver.update({name: valid.column(f"_p_{name}") for name, _t, _o in PROPERTY_COLUMNS})
    silver.update({
        "schema_version": valid.column("_schema_version"), "_topic": valid.column("topic"),
        "_partition": valid.column("partition"), "_offset": valid.column("offset"),
        "_kafka_timestamp": valid.column("kafka_timestamp"), "_ingest_time": ingest.slice(0, valid.num_rows),
        "_late": pa.array(late, pa.bool_()),
        "_batch_id": pa.array(np.full(valid.num_rows, batch_id, dtype=np.int64)),
    })
    rejects = checked.filter(pc.invert(ok))
    quarantine = quarantine_arrow("events", {
        **{c: rejects.column(c) for c in ("topic", "partition", "offset", "kafka_timestamp", "key", "value")},
        "reason": rejects.column("_reason"), "error": rejects.column("_error")}, quarantined_at or datetime.now(UTC))
    return {BRONZE: bronze, SILVER: pa.table(silver), QUARANTINE: quarantine}


def partition_spans(partitions: np.ndarray, offsets: np.ndarray) -> dict[str, list[int]]:
    """Kafka coordinates of a batch -> ``{partition: [first offset, last offset]}`` (the ledger's ``offsets``)."""
    if len(partitions) == 0:
        return {}
    order = np.lexsort((offsets, partitions))
    p_sorted, o_sorted = partitions[order], offsets[order]
    return {str(int(p_sorted[a])): [int(o_sorted[a]), int(o_sorted[b - 1])] for a, b in _runs(p_sorted)}


def _runs(keys: np.ndarray) -> list[tuple[int, int]]:
    """``[start, end)`` of each run of equal values in ``keys`` (sorted, not empty), in order."""
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return list(zip(starts.tolist(), [*starts[1:].tolist(), len(keys)], strict=True))


def write_archive(tables: dict[str, DriverTable], rows: dict[str, dict[int, pa.Table]], app_id: str) -> None:
    """Append, per table, the rows of the batches given for it in one commit (delta-rs, from the driver).

    ``rows``: table -> {batch id -> rows}. The commit's Delta transaction is
    ``<app_id>:<table>`` with the highest batch id, so a group already landed
    is skipped. A table with nothing to add for its batches (no rejects) is
    not written. The appends run in parallel threads (delta-rs writes Parquet
    and talks to S3 outside the GIL).
    """

    work = {table: (max(batches), [t for t in batches.values() if t.num_rows]) for table, batches in rows.items()
            if batches}
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = [pool.submit(tables[table].write_once, pa.concat_tables(parts), app_id, version, "append")
                   for table, (version, parts) in work.items() if parts]
        for future in futures:
            future.result()


def _utc(value: datetime | None) -> datetime | None:
    """A timestamp collected by Spark (naive, in the driver's local time zone) -> aware UTC."""
    return None if value is None else value.astimezone(UTC)


def read_kafka_ranges(spark: SparkSession, settings: Settings, ledger_rows: Sequence[Any]) -> DataFrame:
    """The records of the ledger rows' offset ranges, read from Kafka in one batch query."""
    import json

    from spark_jobs.contracts.events import TOPIC

    lo: dict[str, int] = {}
    hi: dict[str, int] = {}
    for row in ledger_rows:
        for p, span in row.offsets.items():
            first, last = (int(x) for x in span.split("-"))
            lo[p] = min(lo.get(p, first), first)
            hi[p] = max(hi.get(p, last), last)
    return (spark.read.format("kafka")
            .option("kafka.bootstrap.servers", settings.kafka_bootstrap)
            .option("assign", json.dumps({TOPIC: sorted(int(p) for p in lo)}))
            .option("startingOffsets", json.dumps({TOPIC: lo}))
            .option("endingOffsets", json.dumps({TOPIC: {p: v + 1 for p, v in hi.items()}}))
            .option("failOnDataLoss", "true")
            .load())


def _txn_version(settings: Settings, table: str, app_id: str) -> int:
    """Last batch id ``table`` committed for the query ``app_id`` (-1: none)."""
    version = DriverTable(settings, table).committed_version(app_id)
    return -1 if version is None else version


def ledger_schema() -> StructType:
    from pyspark.sql.types import (
        ArrayType,
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
        StructField("offsets", MapType(StringType(), StringType())),
        StructField("duplicate_offsets", MapType(StringType(), ArrayType(LongType()))),
        StructField("batch_seconds", DoubleType()),
    ])


def archive_log_schema() -> StructType:
    """``ops.stream_events_archive``: one row per archive append (a group of batches landed in bronze/silver)."""
    from pyspark.sql.types import DoubleType, LongType, StructField, StructType, TimestampType

    return StructType([
        StructField("first_batch", LongType()), StructField("last_batch", LongType()),
        StructField("batches", LongType()), StructField("records", LongType()),
        StructField("archived_at", TimestampType()), StructField("seconds", DoubleType()),
    ])


def _nullable(schema: StructType) -> StructType:
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f.name, f.dataType, True) for f in schema.fields])


#: The running apps of this process (``stream.run`` drains their archive queues on a clean stop).
APPS: list[EventsApp] = []


def start(spark: SparkSession, settings: Settings) -> StreamingQuery:
    """Create the events tables and topic, then start ``lake_events``."""
    from spark_jobs.contracts.events import TOPIC
    from spark_jobs.events_producer import ensure_topic

    ensure_topic(settings.kafka_bootstrap, TOPIC)
    app = EventsApp(spark, settings)
    app.ensure_tables()
    app.checker.warm()
    APPS.append(app)
    return start_kafka_query(spark, settings, QUERY, ("subscribe", TOPIC), settings.events_max_offsets_per_trigger,
                             settings.events_trigger_seconds, app.process)
