"""The CDC query ``lake_cdc`` of the streaming app: Debezium topics -> bronze -> silver, in Spark tasks.

Subscribes to every ``shop.public.*`` topic. Per micro-batch (``foreachBatch``) the driver
plans and commits; every record is handled in Spark tasks:

1. the batch's Kafka rows are cached on the executors; one small aggregate (records and
   newest offset per topic partition) is all the driver collects;
2. per table (tables in parallel driver threads, one writer each): the raw records are
   appended to ``bronze.<topic>``; the Debezium envelopes are parsed in the executors'
   Python workers (``mapInArrow``, :mod:`spark_jobs.silver.cdc_parse`); per key the newest
   change, TOAST-filled and not older than a recorded delete, is MERGEd into
   ``silver.<table>`` (a Delta table with deletion vectors and change data feed,
   :func:`spark_jobs.silver.cdc.merge`), position-guarded; then the batch's deletes are
   appended to ``silver.<table>__deleted`` (so a stale re-send cannot bring a key back);
3. every record it cannot parse or apply goes to ``quarantine.cdc`` (raw bytes, reason,
   Kafka coordinates) and the stream carries on;
4. when PostgreSQL gained a column, silver is widened (``ALTER TABLE ... ADD COLUMNS``, typed
   from the PostgreSQL catalog: the records carry no schema) and the batch parsed again;
5. a progress file feeds ``lake stream status`` / ``lake stream wait``;
6. every ``LAKE_STREAM_MAINTENANCE_MINUTES`` the tables it owns are vacuumed between batches, in
   this driver (one writer per table); Delta's auto compaction runs in the writes themselves.

Exactly-once: appends carry a Delta transaction (``<query id>:<table>`` = batch id), so a
batch replayed after a crash is appended once; the MERGE is guarded by the source
position, so re-applying it changes nothing. Order per table: MERGE, then the delete
markers (a replay after a crash in between re-applies a no-op MERGE and appends them).

Back-pressure: ``maxOffsetsPerTrigger`` bounds every batch; ``maxRecordsPerPartition``
splits a topic partition's range into tasks, so the parse runs in parallel.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from spark_jobs.contracts.shop import CDC_TABLES, TOPIC_PATTERN, CdcTable
from spark_jobs.settings import Settings
from spark_jobs.silver.cdc import POSITION_COLUMNS, added_columns, quote_ident
from spark_jobs.streaming.common import (
    Maintenance,
    bronze_schema,
    create_tables,
    ensure_log_output,
    log_batch,
    once_writer,
    quarantine_schema,
    query_id,
    read_json,
    start_kafka_query,
    status_path,
    write_json_atomic,
)
from spark_jobs.table_io import ensure_database, table_location

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

QUERY = "lake_cdc"
QUARANTINE = "quarantine.cdc"
#: ``silver.<t>``: deletion vectors (an update or delete marks rows instead of rewriting their file) and the
#: change data feed (``table_changes``; ``lake bench cdc`` reads each change's commit time from it).

__all__ = ["QUERY", "TOPIC_PATTERN", "CdcApp", "source_column_types", "spark_type_for"]


def spark_type_for(data_type: str, precision: int | None, scale: int | None) -> str:
    """A PostgreSQL column type (``information_schema.columns``) -> the Spark SQL type of its silver column.

    Matches the wire formats of the connector (``connectors/shop-postgres.json``) that the CDC parse
    reads: NUMERIC as exact text (a typed DECIMAL when the column has a precision), timestamptz as
    ISO-8601, date as days, bytea as base64, timestamp/time without zone as epoch micros.
    """
    t = data_type.lower()
    if t == "numeric":
        return f"DECIMAL({precision},{scale or 0})" if precision and precision <= 38 else "STRING"
    simple = {"smallint": "INT", "integer": "INT", "bigint": "BIGINT", "real": "FLOAT", "double precision": "DOUBLE",
              "boolean": "BOOLEAN", "timestamp with time zone": "TIMESTAMP", "date": "DATE", "bytea": "BINARY",
              "timestamp without time zone": "BIGINT", "time without time zone": "BIGINT"}
    return simple.get(t, "STRING")


def source_column_types(settings: Settings, schema: str, table: str, names: Sequence[str]) -> dict[str, str]:
    """Silver types of ``names``, columns of ``schema.table`` in the shop database (STRING if not found).

    The records carry no schema (``schemas.enable=false``: a Debezium record with its JSON schema was
    ~4 KB, the payload alone a few hundred bytes), so a column added in PostgreSQL is typed from the
    catalog, once, when it first shows up.
    """
    import psycopg2

    try:
        conn = psycopg2.connect(settings.pg_app_dsn(), connect_timeout=10,
                                application_name="lake-stream")
    except psycopg2.OperationalError as exc:
        raise RuntimeError(f"{QUERY}: cannot read the type of new column(s) {list(names)} of {schema}.{table} from "
                           f"PostgreSQL at {settings.pg_host}:{settings.pg_port} ({str(exc).strip()})") from exc
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT column_name, data_type, numeric_precision, numeric_scale "
                        "FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
                        "AND column_name = ANY(%s)", (schema, table, list(names)))
            found = {r[0]: spark_type_for(r[1], r[2], r[3]) for r in cur.fetchall()}
    finally:
        conn.close()
    return {n: found.get(n, "STRING") for n in names}


class CdcApp:
    """State and per-batch logic of the CDC query."""

    def __init__(self, spark: SparkSession, settings: Settings) -> None:
        self.spark = spark
        self.settings = settings
        owned = [name for c in CDC_TABLES.values() for name in (c.bronze, c.silver, c.deleted)]
        self.maintenance = Maintenance(spark, settings, QUERY, [*owned, QUARANTINE])
        self.timings: dict[str, float] = {}
        self._lock = threading.Lock()
        self._cached: list[DataFrame] = []  # persisted frames of the batch, unpersisted at its end
        self.progress: dict[str, Any] = {"tables": {}, "offsets": {}}
        self.progress = read_json(status_path(settings)) or self.progress

    # -- tables ---------------------------------------------------------------

    def ensure_tables(self) -> None:
        from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

        from spark_jobs.silver.cdc import SILVER_METADATA_COLUMNS

        for db in ("bronze", "silver", "quarantine"):
            ensure_database(self.spark, self.settings, db)
        meta_types = {"_op": StringType(), "_snapshot_rank": IntegerType(), "_commit_lsn": LongType(),
                      "_change_lsn": LongType(), "_source_ts": TimestampType(), "_extra": StringType()}
        views = {r["viewName"] for r in self.spark.sql("SHOW VIEWS IN silver").collect()}
        tables: list[tuple[str, StructType]] = []
        for contract in CDC_TABLES.values():
            self._refuse_old_layout(contract, views)
            tables.append((contract.bronze, bronze_schema()))
            tables.append((contract.silver, StructType([
                *contract.schema.fields, *[StructField(c, meta_types[c]) for c in SILVER_METADATA_COLUMNS]])))
            # Delete markers: append-only (no MERGE), so no table properties needed.
            tables.append((contract.deleted, StructType([
                *[contract.schema[k] for k in contract.keys], *[StructField(c, meta_types[c]) for c in POSITION_COLUMNS]])))
        tables.append((QUARANTINE, quarantine_schema()))
        create_tables(self.spark, self.settings, tables)

    @staticmethod
    def _refuse_old_layout(contract: CdcTable, silver_views: set[str]) -> None:
        """Stop, naming the fix, on a ``silver.<t>`` view (the merge-on-read layout before silver was a table)."""
        if contract.silver.partition(".")[2] in silver_views:
            raise RuntimeError(
                f"{contract.silver} is a view over {contract.silver}__base and __changes (the merge-on-read "
                "layout before silver became one Delta table) and there is no in-place upgrade before 1.0; "
                "`make clean`, then `make up` (PostgreSQL is snapshotted again by the connector). See README, "
                "'Upgrading'.")

    # -- the batch --------------------------------------------------------------

    def process(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        started = time.monotonic()
        app_id = query_id(self.spark, QUERY)
        raw = batch.select("key", "value", "topic", "partition", "offset",
                           F.col("timestamp").alias("kafka_timestamp")).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            t0 = time.monotonic()
            per_partition = [r.asDict() for r in raw.groupBy("topic", "partition")
                             .agg(F.max("offset").alias("offset_max"), F.count(F.lit(1)).alias("offset_count"))
                             .collect()]
            self.timings["batch.read"] = time.monotonic() - t0
            ingest_time = datetime.now(UTC)
            topics = sorted({r["topic"] for r in per_partition})
            rejects: list[DataFrame] = []
            unknown = [t for t in topics if t not in CDC_TABLES]
            if unknown:
                rejects.append(unknown_topic_rejects(raw.where(F.col("topic").isin(unknown))))
            # Tables are independent (one writer each): their Spark jobs overlap, so one table's commit
            # (driver-side latency) does not hold the next table's tasks.
            with ThreadPoolExecutor(max_workers=4) as pool:
                futures = [pool.submit(self._table, CDC_TABLES[t], raw.where(F.col("topic") == t), ingest_time,
                                       app_id, batch_id) for t in topics if t in CDC_TABLES]
                for future in futures:
                    table_rejects, parsed = future.result()
                    if table_rejects:
                        rejects.append(parsed.where(F.col("_error").isNotNull()))
            t0 = time.monotonic()
            if rejects:
                self._quarantine(rejects, app_id, batch_id)
            self.timings["quarantine"] = time.monotonic() - t0
        finally:
            for df in self._cached:
                df.unpersist()
            self._cached = []
            raw.unpersist()
        self._record_progress(per_partition, batch_id, started)
        self.maintenance.run_if_due()

    def _table(self, contract: CdcTable, raw: DataFrame, ingest_time: datetime, app_id: str,
               batch_id: int) -> tuple[int, DataFrame]:
        """Bronze, parse, MERGE and delete markers of one table; returns (rejects, the parsed rows)."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from spark_jobs.silver.cdc import apply_changes, parse_frame

        name = contract.table
        t = time.monotonic()
        self._append(raw.select("key", "value", "topic", "partition", "offset", "kafka_timestamp",
                                F.lit(ingest_time).alias("ingest_time"),
                                F.to_date(F.lit(ingest_time)).alias("ingest_date")),
                     contract.bronze, app_id, batch_id)
        self.timings[f"{name}.bronze"] = time.monotonic() - t
        t = time.monotonic()
        while True:
            schema = self.spark.table(contract.silver).schema
            parsed = parse_frame(raw, schema, contract.keys).persist(StorageLevel.MEMORY_AND_DISK)
            with self._lock:
                self._cached.append(parsed)
            summary = parsed.agg(
                F.count(F.when(F.col("_error").isNull(), 1)).alias("changes"),
                F.count(F.col("_error")).alias("rejects"),
                F.count(F.when(F.col("_op") == "d", 1)).alias("deletes"),
                F.array_distinct(F.flatten(F.collect_list("_extra_names"))).alias("extra"),
                F.max("_source_ts").alias("newest")).first()
            assert summary is not None
            added = added_columns(schema.names, sorted(summary["extra"] or []))
            if not added:
                break
            self._widen(contract, added)
        self.timings[f"{name}.silver.parse"] = time.monotonic() - t
        if summary["changes"]:
            from delta.tables import DeltaTable

            t = time.monotonic()
            markers = self.spark.read.format("delta").load(table_location(self.settings, contract.deleted))

            def append_markers(rows: DataFrame) -> None:
                self._append(rows, contract.deleted, app_id, batch_id)

            apply_changes(DeltaTable.forName(self.spark, contract.silver), parsed.where(F.col("_error").isNull()),
                          contract.keys, markers, append_markers if summary["deletes"] else None)
            self.timings[f"{name}.silver.apply"] = time.monotonic() - t
            with self._lock:
                table_progress = self.progress["tables"].setdefault(contract.silver, {})
                table_progress["changes_applied"] = int(table_progress.get("changes_applied", 0)) + summary["changes"]
                if summary["newest"] is not None:
                    newest = summary["newest"]
                    newest = (newest if newest.tzinfo else newest.replace(tzinfo=UTC)).isoformat()
                    table_progress["newest_change"] = max(newest, table_progress.get("newest_change", ""))
        return int(summary["rejects"]), parsed

    def _append(self, frame: DataFrame, table: str, app_id: str, batch_id: int) -> None:
        """Append ``frame`` to ``table`` at most once per batch (:func:`~spark_jobs.streaming.common.once_writer`)."""
        once_writer(frame, table, app_id, batch_id).mode("append").save(table_location(self.settings, table))

    def _quarantine(self, rejects: list[DataFrame], app_id: str, batch_id: int) -> None:
        from functools import reduce

        from pyspark.sql import functions as F

        rows = [df.select(F.lit("cdc").alias("stage"), F.col("_topic").alias("topic"),
                          F.col("_partition").alias("partition"), F.col("_offset").alias("offset"),
                          F.col("_kafka_timestamp").alias("kafka_timestamp"), F.col("_key").alias("key"),
                          F.col("_value").alias("value"), F.lit("unparseable").alias("reason"),
                          F.col("_error").alias("error"), F.current_timestamp().alias("quarantined_at"))
                for df in rejects]
        self._append(reduce(lambda a, b: a.unionByName(b), rows), QUARANTINE, app_id, batch_id)

    def _widen(self, contract: CdcTable, added: list[str]) -> None:
        """``ALTER TABLE silver.<t> ADD COLUMNS``, each new column typed from the PostgreSQL catalog."""
        types = source_column_types(self.settings, "public", contract.table, added)
        # A PostgreSQL quoted identifier may hold a backtick: Spark SQL escapes it by doubling.
        cols = ", ".join(f"{quote_ident(name)} {sql_type}" for name, sql_type in types.items())
        log.info("lake stream: %s gains column(s) %s from PostgreSQL", contract.silver, cols)
        self.spark.sql(f"ALTER TABLE {contract.silver} ADD COLUMNS ({cols})")

    def _record_progress(self, per_partition: list[dict[str, Any]], batch_id: int, started: float) -> None:
        offsets = {f"{r['topic']}:{r['partition']}": int(r["offset_max"]) for r in per_partition}
        self.progress["offsets"].update(offsets)
        self.progress.update({
            "query": QUERY, "batch_id": batch_id, "committed_at": datetime.now(UTC).isoformat(),
            "batch_seconds": round(time.monotonic() - started, 3), "pid": os.getpid(),
            "batch_records": sum(int(r["offset_count"]) for r in per_partition),
            "step_seconds": {k: round(v, 3) for k, v in sorted(self.timings.items())},
        })
        self.timings = {}
        for table in self.progress["tables"].values():
            table["last_batch"] = batch_id
        write_json_atomic(status_path(self.settings), self.progress)
        log_batch(QUERY, batch_id, self.progress["batch_records"], self.progress["batch_seconds"],
                  self.progress["step_seconds"])


def unknown_topic_rejects(raw: DataFrame) -> DataFrame:
    """Records of a topic the pattern matched but no contract names: parse-shaped reject rows, with the fix."""
    from pyspark.sql import functions as F

    return raw.select(F.col("topic").alias("_topic"), F.col("partition").alias("_partition"),
                      F.col("offset").alias("_offset"), F.col("kafka_timestamp").alias("_kafka_timestamp"),
                      F.col("key").alias("_key"), F.col("value").alias("_value"),
                      F.concat(F.lit("no CDC contract for topic "), F.col("topic"),
                               F.lit("; add it to spark_jobs/contracts/shop.py")).alias("_error"))


def start(spark: SparkSession, settings: Settings) -> StreamingQuery:
    """Create the CDC tables and start ``lake_cdc`` (Kafka ``shop.public.*`` -> foreachBatch)."""
    ensure_log_output()
    app = CdcApp(spark, settings)
    app.ensure_tables()
    # Bounded in records, not bytes: a CDC record with TOASTed text (before and after image) is 10-30 KB;
    # splitting a partition's range into tasks of at most this many records parallelises the parse.
    return start_kafka_query(spark, settings, QUERY, ("subscribePattern", TOPIC_PATTERN),
                             settings.stream_max_offsets_per_trigger, settings.stream_trigger_seconds, app.process,
                             max_records_per_task=settings.stream_max_records_per_task)
