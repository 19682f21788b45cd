"""``OPTIMIZE`` and ``VACUUM`` of the tables a streaming query writes, by that query's driver (their one writer): of
the append-only tables beside its batches, of the MERGE targets between them."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from spark_jobs.contracts.tables import APPEND, TABLES
from spark_jobs.files import read_json, write_json_atomic
from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class Schedule:
    """When each periodic job of a driver last ran, kept in ``path`` so that its period outlives a restart.

    A timer that starts with the process never fires in a process restarted more often than its period: the
    stream's scheduled ``OPTIMIZE`` (every 10 minutes) never ran on a day of benches that restarted the stream every
    few minutes (docs/benchmarks.md, 2026-12-02), and a supervisor restarting a failing driver does the same. A job
    never run counts from the first start that recorded the file. ``path`` None: in memory only (tests).
    ``clock``: wall-clock seconds (``time.time``; tests pass their own)."""

    def __init__(self, path: Path | None, jobs: Sequence[str], clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.clock = clock
        now = clock()
        saved = self._read()
        # A time in the future (the clock moved back) counts from now.
        self.last = {job: min(float(saved.get(job, now)), now) for job in jobs}
        if any(job not in saved for job in jobs):
            self._write()

    def _read(self) -> dict[str, float]:
        if self.path is None or not self.path.is_file():
            return {}
        doc = read_json(self.path)
        try:
            if doc is None:
                raise ValueError("not a JSON object")
            return {str(k): float(v) for k, v in doc.items()}
        except (ValueError, TypeError) as exc:
            log.warning("lake: the maintenance schedule %s is unreadable (%s): its periods start again now",
                        self.path, exc)
            return {}

    def _write(self) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.path, dict(self.last))

    def due(self, job: str, every_seconds: float) -> bool:
        """``job``'s period (> 0; 0 or less: never) has passed since it last ran, or since the file was made."""
        return every_seconds > 0 and self.clock() - self.last[job] >= every_seconds

    def done(self, job: str) -> None:
        self.last[job] = self.clock()
        self._write()


class Maintenance:
    """``OPTIMIZE`` and ``VACUUM`` of the tables one streaming query owns, started from its batch loop.

    The streaming app is the single writer of its tables (DESIGN.md), so their
    clean-up runs in the same driver, never from a second one.
    **Compaction** every ``LAKE_STREAM_COMPACT_MINUTES`` (0 = never): ``OPTIMIZE`` of each table (for a
    table partitioned by ``ingest_date``, the partitions of the last two days: older ones get no new
    files), which bin-packs the small files the batches left (under half of ``LAKE_STREAM_COMPACT_FILE_MB``,
    :func:`spark_jobs.streaming.engine.stream_conf`) and folds deletion vectors back into their files.
    Not Delta's auto compaction in the writes: in Delta 4.4.0 it compacted 2-4 files after
    nearly every batch whatever ``autoCompact.minNumFiles`` said, a job, a commit and a table-state
    rebuild more per table and batch (docs/benchmarks.md, "Auto compaction in the stream").
    ``run_if_due`` is called after each batch; every
    ``LAKE_STREAM_MAINTENANCE_MINUTES`` (0 = never) it vacuums ``tables`` in
    Delta's LITE mode, which finds the removed files in the transaction log
    since the last vacuum instead of listing the table's directory, so its cost
    follows what changed, not the table's size. Where the log no longer reaches
    back that far, Delta refuses LITE (``DELTA_CANNOT_VACUUM_LITE``) and ``VACUUM FULL`` runs once. Files
    removed less than ``delta.deletedFileRetentionDuration`` ago (7 days by
    default) stay, so time travel and readers of older versions keep working.

    ``background_pool``: the tables whose writer only appends (write mode ``append-once``: bronze, quarantine,
    delete markers, ``silver.events``) are compacted and vacuumed in a daemon thread in that scheduler pool
    while the batches go on; the others (MERGE targets) between batches as before. A blind append reads no file,
    so Delta never finds it in conflict with an ``OPTIMIZE`` or ``VACUUM`` of the same table (WriteSerializable),
    and the table keeps one writer of its rows. Between batches, the events query's first ``OPTIMIZE`` of a day held
    its hot commits 80-130 s (docs/benchmarks.md, 2026-12-02). A background run still going when the next one is
    due is not doubled; one that fails is logged and tried again a period later.
    """

    def __init__(self, spark: SparkSession, settings: Settings, query: str, tables: Sequence[str],
                 clock: Callable[[], float] = time.time, schedule: Path | None = None,
                 background_pool: str | None = None) -> None:
        self.spark = spark
        self.query = query
        self.tables = list(tables)
        self.background_pool = background_pool
        self.background = [name for name in self.tables if background_pool is not None and name in TABLES
                           and TABLES[name].write_mode == APPEND]
        self.inline = [name for name in self.tables if name not in self.background]
        self._running: threading.Thread | None = None
        self.interval = settings.stream_maintenance_minutes * 60
        self.compact_interval = settings.stream_compact_minutes * 60
        self.clock = clock  # wall-clock seconds; tests pass their own to step through intervals
        # ``schedule``: the file that keeps the last runs across restarts (the app's: :func:`schedule_path`).
        self.schedule = Schedule(schedule, ("compact", "vacuum"), clock)

    def due(self) -> bool:
        return self.schedule.due("vacuum", self.interval)

    def compact_due(self) -> bool:
        return self.schedule.due("compact", self.compact_interval)

    def _compact(self, tables: Sequence[str], where: str = "") -> None:
        """``OPTIMIZE`` of ``tables`` (recent ``ingest_date`` partitions only where the table has them)."""
        if not tables:
            return
        started = self.clock()
        for name in tables:
            entry = TABLES.get(name)
            if entry is not None and "ingest_date" in entry.partitioned_by:
                self.spark.sql(f"OPTIMIZE {name} WHERE ingest_date >= date_sub(current_date(), 1)")
            else:
                self.spark.sql(f"OPTIMIZE {name}")
        log.info("lake stream: %s: OPTIMIZE of %d table(s) took %.1f s%s", self.query, len(tables),
                 self.clock() - started, where)

    def _vacuum(self, tables: Sequence[str], where: str = "") -> None:
        if not tables:
            return
        started = self.clock()
        for name in tables:
            try:
                self.spark.sql(f"VACUUM {name} LITE")
            except Exception as exc:
                if "DELTA_CANNOT_VACUUM_LITE" not in str(exc):
                    raise
                log.warning("lake stream: %s: VACUUM %s LITE refused (DELTA_CANNOT_VACUUM_LITE: the log no longer "
                            "reaches the last vacuum); running VACUUM FULL once", self.query, name)
                self.spark.sql(f"VACUUM {name} FULL")
        log.info("lake stream: %s: VACUUM LITE of %d table(s) took %.1f s%s", self.query, len(tables),
                 self.clock() - started, where)

    def running(self) -> bool:
        """A background run is still going."""
        return self._running is not None and self._running.is_alive()

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the background run, if any (tests; a stopping driver does not: an unfinished ``OPTIMIZE``
        commits nothing)."""
        if self._running is not None:
            self._running.join(timeout)

    def run_if_due(self) -> None:
        compact, vacuum = self.compact_due(), self.due()
        if not (compact or vacuum):
            return
        if self.background and self.running():
            log.info("lake stream: %s: the previous background upkeep still runs; this one waits a period",
                     self.query)
        elif self.background:
            self._running = threading.Thread(target=self._in_background, args=(compact, vacuum), daemon=True,
                                             name=f"{self.query}-upkeep")
            self._running.start()
        if compact:
            self._compact(self.inline)
            self.schedule.done("compact")
        if vacuum:
            self._vacuum(self.inline)
            self.schedule.done("vacuum")

    def _in_background(self, compact: bool, vacuum: bool) -> None:
        context = getattr(self.spark, "sparkContext", None)
        if context is not None:  # this thread's jobs in the low-priority pool, apart from any batch's
            context.setLocalProperty("spark.scheduler.pool", self.background_pool)
            context.setJobGroup(f"{self.query}-upkeep", f"{self.query}: OPTIMIZE/VACUUM of append-only tables")
        try:
            if compact:
                self._compact(self.background, " (in the background)")
            if vacuum:
                self._vacuum(self.background, " (in the background)")
        except Exception as exc:  # noqa: BLE001 - a thread's top: logged, the stream goes on, the next period retries
            log.error("lake stream: %s: background upkeep of %s failed, tried again a period later: %s",
                      self.query, ", ".join(self.background), exc)


def schedule_path(settings: Settings, name: str) -> Path:
    """Where the streaming app keeps driver ``name``'s :class:`Schedule` (``<run dir>/maintenance/<name>.json``)."""
    return settings.run_dir / "maintenance" / f"{name}.json"
