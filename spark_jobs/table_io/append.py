"""The append-once write (``contracts.tables.APPEND``) of a streaming query's Spark appends: each batch lands at
most once per table, across crashes."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from spark_jobs.contracts.tables import APPEND
from spark_jobs.settings import Settings
from spark_jobs.table_io import require_write_mode, table_location
from spark_jobs.table_io.driver import HISTORY, batch_marker

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


class OnceAppender:
    """Appends of one streaming query that land at most once per (table, batch), across crashes.

    Only the first batch a driver runs can be a replay of a batch that landed in part (Spark re-runs a batch
    only after a restart; within one driver every batch follows a finished one). So:

    * every append carries ``userMetadata`` = ``<app_id>:<table>:<batch id>`` in its commit;
    * on the first batch of this driver, before each append, the table's recent history is read for that
      marker (a few JSON commit files, no Spark job) and the append is skipped when it is there; the append
      also carries Delta's idempotent write (``txnAppId`` = ``<app_id>:<table>``, ``txnVersion`` = the batch
      id), which covers a batch written by a version that used it for every write;
    * every later batch appends plainly.

    Why not Delta's idempotent write on every batch: in Delta 4.4.0 reading the ``txnVersion`` rebuilds the
    table's state with Spark jobs on every write (delta-io/delta #7670): measured 5 jobs and ~1.4 s per table
    and batch on a CDC batch of 200 changes (docs/benchmarks.md, "Idempotent writes").
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.first_batch: int | None = None

    def is_first(self, batch_id: int) -> bool:
        """Whether ``batch_id`` is this driver's first batch (the first call names it): the only one whose writes
        may have landed in part before a restart, so the only one checked against the tables' recent markers."""
        if self.first_batch is None:
            self.first_batch = batch_id
        return batch_id == self.first_batch

    def append(self, frame: DataFrame, table: str, app_id: str, batch_id: int) -> bool:
        """Append ``frame`` to ``table`` for ``batch_id`` unless it landed already; True if written."""
        require_write_mode(table, APPEND)
        marker = batch_marker(app_id, table, batch_id)
        location = table_location(self.settings, table)
        writer = frame.write.format("delta").mode("append").option("userMetadata", marker)
        if self.is_first(batch_id):
            if marker in self._recent_markers(frame.sparkSession, location):
                log.info("lake stream: %s already holds batch %d (a replay after a restart): not appended again",
                         table, batch_id)
                return False
            writer = writer.option("txnAppId", f"{app_id}:{table}").option("txnVersion", batch_id)
        writer.save(location)
        return True

    def _recent_markers(self, spark: SparkSession, location: str) -> set[str]:
        from delta.tables import DeltaTable

        if not DeltaTable.isDeltaTable(spark, location):  # nothing written yet
            return set()
        rows = DeltaTable.forPath(spark, location).history(HISTORY).select("userMetadata").collect()
        return {r[0] for r in rows if r[0]}
