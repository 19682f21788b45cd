"""``OPTIMIZE`` and ``VACUUM`` of the tables a streaming query writes, between its batches (their one writer)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from spark_jobs.contracts.tables import TABLES
from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


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
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.spark = spark
        self.query = query
        self.tables = list(tables)
        self.interval = settings.stream_maintenance_minutes * 60
        self.compact_interval = settings.stream_compact_minutes * 60
        self.clock = clock  # seconds; tests pass their own to step through intervals
        self.last = self.last_compact = clock()

    def due(self) -> bool:
        return self.interval > 0 and self.clock() - self.last >= self.interval

    def compact_due(self) -> bool:
        return self.compact_interval > 0 and self.clock() - self.last_compact >= self.compact_interval

    def compact(self) -> None:
        """``OPTIMIZE`` every table (recent ``ingest_date`` partitions only where the table has them)."""
        started = self.clock()
        for name in self.tables:
            entry = TABLES.get(name)
            if entry is not None and "ingest_date" in entry.partitioned_by:
                self.spark.sql(f"OPTIMIZE {name} WHERE ingest_date >= date_sub(current_date(), 1)")
            else:
                self.spark.sql(f"OPTIMIZE {name}")
        self.last_compact = self.clock()
        log.info("lake stream: %s: OPTIMIZE of %d table(s) took %.1f s", self.query, len(self.tables),
                 self.last_compact - started)

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
        self.last = self.clock()
        log.info("lake stream: %s: VACUUM LITE of %d table(s) took %.1f s", self.query, len(self.tables),
                 self.last - started)
