"""``OPTIMIZE`` and ``VACUUM`` of the tables a streaming query writes, between its batches (their one writer)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from spark_jobs.contracts.tables import TABLES
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
    """``OPTIMIZE`` and ``VACUUM`` of the tables one streaming query owns, run inside its batch loop.

    The streaming app is the single writer of its tables (DESIGN.md), so their
    clean-up runs in the same driver, between batches, never from a second one.
    **Compaction** every ``LAKE_STREAM_COMPACT_MINUTES`` (0 = never): ``OPTIMIZE`` of each table (for a
    table partitioned by ``ingest_date``, the partitions of the last two days: older ones get no new
    files), which bin-packs the small files the batches left and folds deletion vectors back into
    their files. Not Delta's auto compaction in the writes: in Delta 4.4.0 it compacted 2-4 files after
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
    """

    def __init__(self, spark: SparkSession, settings: Settings, query: str, tables: Sequence[str],
                 clock: Callable[[], float] = time.time, schedule: Path | None = None) -> None:
        self.spark = spark
        self.query = query
        self.tables = list(tables)
        self.interval = settings.stream_maintenance_minutes * 60
        self.compact_interval = settings.stream_compact_minutes * 60
        self.clock = clock  # wall-clock seconds; tests pass their own to step through intervals
        # ``schedule``: the file that keeps the last runs across restarts (the app's: :func:`schedule_path`).
        self.schedule = Schedule(schedule, ("compact", "vacuum"), clock)

    def due(self) -> bool:
        return self.schedule.due("vacuum", self.interval)

    def compact_due(self) -> bool:
        return self.schedule.due("compact", self.compact_interval)

    def compact(self) -> None:
        """``OPTIMIZE`` every table (recent ``ingest_date`` partitions only where the table has them)."""
        started = self.clock()
        for name in self.tables:
            entry = TABLES.get(name)
            if entry is not None and "ingest_date" in entry.partitioned_by:
                self.spark.sql(f"OPTIMIZE {name} WHERE ingest_date >= date_sub(current_date(), 1)")
            else:
                self.spark.sql(f"OPTIMIZE {name}")
        self.schedule.done("compact")
        log.info("lake stream: %s: OPTIMIZE of %d table(s) took %.1f s", self.query, len(self.tables),
                 self.clock() - started)

    def run_if_due(self) -> None:
        if self.compact_due():
            self.compact()
        if not self.due():
            return
        started = self.clock()
        for name in self.tables:
            try:
                self.spark.sql(f"VACUUM {name} LITE")
            except Exception as exc:
                if "DELTA_CANNOT_VACUUM_LITE" not in str(exc):
                    raise
                log.warning("lake stream: %s: VACUUM %s LITE refused (DELTA_CANNOT_VACUUM_LITE: the log no longer "
                            "reaches the last vacuum); running VACUUM FULL once", self.query, name)
                self.spark.sql(f"VACUUM {name} FULL")
        self.schedule.done("vacuum")
        log.info("lake stream: %s: VACUUM LITE of %d table(s) took %.1f s", self.query, len(self.tables),
                 self.clock() - started)


def schedule_path(settings: Settings, name: str) -> Path:
    """Where the streaming app keeps driver ``name``'s :class:`Schedule` (``<run dir>/maintenance/<name>.json``)."""
    return settings.run_dir / "maintenance" / f"{name}.json"
