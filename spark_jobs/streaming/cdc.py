"""The CDC query ``lake_cdc`` of the streaming app: Debezium topics -> bronze -> silver, in Spark tasks.

Subscribes to every ``shop.public.*`` topic. Per micro-batch (``foreachBatch``) the driver
plans and commits; every record is handled in Spark tasks:

1. one job reads the batch's Kafka records and parses them in Python tasks (one per topic partition range
   of at most ``LAKE_STREAM_MAX_RECORDS_PER_TASK`` records), each of which also writes its raw records as
   data files of ``bronze.<topic>`` (:mod:`spark_jobs.table_io.land`); the parsed rows are cached on the
   executors, and the driver collects one small aggregate (per topic partition its records and newest offset,
   per topic its changes, rejects and deletes) and the bronze files' add actions, which it commits with
   delta-rs, one commit per table (the bronze append's transaction and marker). A bronze table delta-rs
   cannot write: the batch is cached and one task appends bronze after the parse, or Spark's append;
2. per table with changes (tables in parallel driver threads, one writer each), one Spark job: the newest
   change per key (a window: TOAST-filled, position-ordered), then one task that drops the changes a delete
   marker supersedes, MERGEs the rest into ``silver.<table>`` with delta-rs (position-guarded) and appends the
   batch's deletes to ``silver.<table>__deleted`` (so a stale re-send cannot bring a key back):
   :func:`spark_jobs.table_io.merge.apply_changes_in_task`. A table delta-rs cannot write keeps Spark's MERGE;
3. every record it cannot parse or apply goes to ``quarantine.cdc`` (raw bytes, reason,
   Kafka coordinates) and the stream carries on;
4. when PostgreSQL gained a column, silver is widened (``ALTER TABLE ... ADD COLUMNS``, typed
   from the PostgreSQL catalog: the records carry no schema) and the batch parsed again;
5. a progress file feeds ``lake stream status`` / ``lake stream wait``;
6. every ``LAKE_STREAM_MAINTENANCE_MINUTES`` the tables it owns are vacuumed between batches, in
   this driver (one writer per table); Delta's auto compaction runs in the writes themselves.

Exactly-once: every commit carries the batch's Delta transaction (``<query id>:<table>`` = batch id), so a
batch replayed after a crash is appended once (bronze files a crashed batch's tasks wrote are never committed:
the replayed batch writes and commits its own); the MERGE is guarded by the source position too, so re-applying
it changes nothing. Order per table: MERGE, then the delete markers (a replay after a crash in between
re-applies a no-op MERGE and appends them).

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
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from spark_jobs.contracts.shop import CDC_TABLES, TOPIC_PATTERN, CdcTable
from spark_jobs.settings import Settings
from spark_jobs.silver.cdc import quote_ident
from spark_jobs.silver.cdc_columns import admit_columns, new_columns
from spark_jobs.streaming.common import (
    batch_time,
    ensure_log_output,
    log_batch,
    query_id,
    read_json,
    start_kafka_query,
    status_path,
    write_json_atomic,
)
from spark_jobs.streaming.engine import ARCHIVE, CDC, BatchJobs
from spark_jobs.table_io import ensure_database, table_location
from spark_jobs.table_io.append import OnceAppender
from spark_jobs.table_io.create import create_tables
from spark_jobs.table_io.driver import TaskAppend, append_split_in_task, log_metadata, task_append
from spark_jobs.table_io.maintenance import Maintenance, schedule_path
from spark_jobs.table_io.merge import TaskTarget
from spark_jobs.table_io.task_files import FileTarget, file_target

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructType

    from spark_jobs.table_io.land import Landing

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
    """Silver types of those of ``names`` that are columns of ``schema.table`` in the shop database (a name it lacks
    is left out: :func:`spark_jobs.silver.cdc_columns.admit_columns` refuses it).

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
    return {n: found[n] for n in names if n in found}


class CdcApp:
    """State and per-batch logic of the CDC query."""

    def __init__(self, spark: SparkSession, settings: Settings) -> None:
        self.spark = spark
        self.settings = settings
        owned = [name for c in CDC_TABLES.values() for name in (c.bronze, c.silver, c.deleted)]
        # bronze, markers and quarantine (appended) in the background; the silver tables (MERGE) between batches.
        self.maintenance = Maintenance(spark, settings, QUERY, [*owned, QUARANTINE],
                                       schedule=schedule_path(settings, QUERY), background_pool=ARCHIVE)
        self.timings: dict[str, float] = {}
        self._lock = threading.Lock()
        self.contracts = list(CDC_TABLES.values())
        self.appender = OnceAppender(settings)
        self._schemas: dict[str, StructType] = {}  # silver schemas (this driver is their only writer)
        self._task_targets: dict[str, TaskTarget] = {}  # silver tables MERGEd in a task with delta-rs
        self._bronze_targets: dict[str, TaskAppend] = {}  # bronze tables appended in a task with delta-rs
        self._bronze_files: dict[str, FileTarget] = {}  # per topic, its bronze table, landed by the parse tasks
        self.progress: dict[str, Any] = {"tables": {}, "offsets": {}}
        self.progress = read_json(status_path(settings)) or self.progress

    # -- tables ---------------------------------------------------------------

    def ensure_tables(self) -> None:
        for db in ("bronze", "silver", "quarantine"):
            ensure_database(self.spark, self.settings, db)
        views = {r["viewName"] for r in self.spark.sql("SHOW VIEWS IN silver").collect()}
        tables: list[str] = []
        for contract in CDC_TABLES.values():
            self._refuse_old_layout(contract, views)
            tables += [contract.bronze, contract.silver, contract.deleted]
        create_tables(self.spark, self.settings, [*tables, QUARANTINE])
        self._task_targets = {c.silver: target for c in CDC_TABLES.values() if (target := self._task_target(c))}
        self._bronze_targets = {c.bronze: bronze for c in CDC_TABLES.values()
                                if (bronze := task_append(self.settings, c.bronze))}
        self._bronze_files = {c.topic: file_target(self._bronze_targets[c.bronze]) for c in CDC_TABLES.values()
                              if c.bronze in self._bronze_targets}

    def _task_target(self, contract: CdcTable) -> TaskTarget | None:
        """Where a Spark task MERGEs this table with delta-rs (:func:`~spark_jobs.table_io.merge.apply_changes_in_task`),
        or None when delta-rs cannot write it (a silver table with deletion vectors, from before they were turned
        off): then Spark's MERGE applies it, slower (docs/benchmarks.md, "CDC design G")."""
        silver, markers = task_append(self.settings, contract.silver), task_append(self.settings, contract.deleted)
        if silver is None or markers is None:
            log.warning("lake stream: %s is applied by Spark's MERGE, not in a task with delta-rs (its protocol, or "
                        "its markers', has features delta-rs does not write, e.g. deletion vectors)", contract.silver)
            return None
        return TaskTarget(silver, markers)  # app_id: the query's id, known once it runs (_apply sets it)

    @staticmethod
    def _refuse_old_layout(contract: CdcTable, silver_views: set[str]) -> None:
        """Stop, naming the fix, on a ``silver.<t>`` view (the merge-on-read layout before silver was a table)."""
        if contract.silver.partition(".")[2] in silver_views:
            raise RuntimeError(
                f"{contract.silver} is a view over {contract.silver}__base and __changes (the merge-on-read "
                "layout before silver became one Delta table) and there is no in-place upgrade before 1.0; "
                "`make clean`, then `make up` (PostgreSQL is snapshotted again by the connector). See docs/operations.md, "
                "'Upgrading'.")

    # -- the batch --------------------------------------------------------------

    def process(self, batch: DataFrame, batch_id: int) -> None:
        """One micro-batch: one job reads and parses every topic, lands bronze and counts it (module docstring);
        then per table with changes, in parallel threads, one job computes the MERGE source, the MERGE and the
        delete markers, while the driver commits the bronze files."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from spark_jobs.silver.cdc import parse_tables_frame
        from spark_jobs.table_io.land import parse_and_land_frame

        started = time.monotonic()
        jobs = BatchJobs(self.spark, QUERY, batch_id, CDC)
        jobs.enter()
        app_id = query_id(self.spark, QUERY)
        ingest_time = datetime.now(UTC)
        landing = self._landing(ingest_time)
        raw = batch.select("key", "value", "topic", "partition", "offset",
                           F.col("timestamp").alias("kafka_timestamp"))
        if landing is None:
            # Bronze is appended after the parse, from the batch cached here, one task per core (with one per
            # topic partition every job over the batch ran 12 tasks, most near-empty: docs/benchmarks.md, design E).
            raw = raw.coalesce(max(1, self.spark.sparkContext.defaultParallelism)).persist(
                StorageLevel.MEMORY_AND_DISK)
        # Else the parse tasks read Kafka themselves, one per topic partition range of at most
        # LAKE_STREAM_MAX_RECORDS_PER_TASK records, and land bronze: Spark spreads them over the cores (two tasks over
        # the twelve ranges put the 10-18 KB customers and products records in one: 10.6 of 12 task-seconds).
        parsed: DataFrame | None = None
        refused: dict[str, set[str]] = {}  # per topic, payload columns PostgreSQL lacks: their records quarantined
        try:
            while True:
                t0 = time.monotonic()
                specs = [(c.topic, self._schema(c), c.keys) for c in self.contracts]
                parsed = (parse_tables_frame(raw, specs, unknown_topic_reason, refused) if landing is None else
                          parse_and_land_frame(raw, specs, unknown_topic_reason, refused, landing)).persist(
                    StorageLevel.MEMORY_AND_DISK)
                summary = self._summary(raw, parsed, landed=landing is not None)
                self.timings["read_parse"] = time.monotonic() - t0
                widened = False
                for contract in self.contracts:
                    extra = summary["tables"].get(contract.topic, {}).get("extra") or []
                    added = new_columns(self._schema(contract).names, extra)
                    if added:
                        refused.setdefault(contract.topic, set()).update(self._widen(contract, added))
                        widened = True
                if not widened:
                    break
                parsed.unpersist()  # parsed again with the wider schema (or refusals): nothing is lost meanwhile
            per_partition = summary["partitions"]
            topics = summary["tables"]
            with ThreadPoolExecutor(max_workers=2 * len(self.contracts) + 1, thread_name_prefix="cdc") as pool:
                if landing is not None:
                    bronze = [pool.submit(self._commit_bronze, summary["adds"], app_id, batch_id, jobs)]
                else:
                    bronze = [pool.submit(jobs.wrap(self._bronze, ARCHIVE),
                                          [c for c in self.contracts if c.topic in topics], raw, ingest_time, app_id,
                                          batch_id, jobs)]
                tables = [pool.submit(jobs.wrap(self._apply), i, c, parsed, topics[c.topic], app_id, batch_id, jobs)
                          for i, c in enumerate(self.contracts) if topics.get(c.topic, {}).get("changes")]
                rejects = sum(int(t.get("rejects") or 0) for t in topics.values())
                quarantine = pool.submit(jobs.wrap(self._quarantine), parsed, app_id, batch_id, jobs) if rejects \
                    else None
                for future in [*tables, *bronze, *([quarantine] if quarantine else [])]:
                    future.result()
        finally:
            if parsed is not None:
                parsed.unpersist()
            if landing is None:
                raw.unpersist()
            jobs.leave()
        if self.settings.stream_log_jobs:
            jobs.log()
        self.timings["batch.jobs"] = float(jobs.jobs())
        self.timings["batch.delta_commits"] = float(jobs.commits)
        self._record_progress(per_partition, batch_id, started)
        self.maintenance.run_if_due()

    def _schema(self, contract: CdcTable) -> StructType:
        """``silver.<t>``'s schema, read from its Delta log once (by delta-rs: no Spark job) and kept (this driver is
        its only writer, and it refreshes the copy when it widens the table): no metastore lookup per batch."""
        if contract.silver not in self._schemas:
            _props, self._schemas[contract.silver] = log_metadata(
                self.settings, table_location(self.settings, contract.silver))
        return self._schemas[contract.silver]

    def _summary(self, raw: DataFrame, parsed: DataFrame, *, landed: bool) -> dict[str, Any]:
        """One Spark job over the batch (it fills the caches): records and newest offset per topic partition,
        per topic its changes, rejects, deletes, payload columns the table lacks and newest change, and
        (``landed``: the parse tasks landed bronze) the add actions of the bronze files they wrote."""
        from pyspark.sql import functions as F

        from spark_jobs.silver.cdc_parse import wide_column
        from spark_jobs.table_io.land import LANDED, LANDED_SCHEMA

        frames: list[DataFrame] = []
        if landed:
            meta = parsed.where(F.col(LANDED).isNotNull()).select(F.from_json(LANDED, LANDED_SCHEMA).alias("m"))
            reads = meta.where(F.col("m.kind") == "read")
            frames.append(reads.groupBy(F.col("m.topic").alias("topic"), F.col("m.partition").alias("partition")).agg(
                F.max("m.newest_offset").alias("offset_max"), F.sum("m.records").alias("offset_count")))
            frames.append(meta.where(F.col("m.kind") == "add").select(F.col("m.table").alias("bronze_table"),
                                                                       F.col("m.add").alias("bronze_add")))
            parsed = parsed.where(F.col(LANDED).isNull())
        else:
            frames.append(raw.groupBy("topic", "partition").agg(
                F.max("offset").alias("offset_max"), F.count(F.lit(1)).alias("offset_count")))

        def any_table(name: str) -> Column:  # a metadata column, whichever table's the row is
            schemas = [self._schema(c) for c in self.contracts]
            return F.coalesce(*[F.col(wide_column(i, s.names.index(name))) for i, s in enumerate(schemas)])

        per_topic = parsed.groupBy(F.col("_topic").alias("topic")).agg(
            F.count(F.when(F.col("_error").isNull(), 1)).alias("changes"),
            F.count(F.col("_error")).alias("rejects"),
            F.count(F.when(any_table("_op") == "d", 1)).alias("deletes"),
            F.array_distinct(F.flatten(F.collect_list("_extra_names"))).alias("extra"),
            F.max(any_table("_source_ts")).alias("newest"))
        union = per_topic
        for frame in frames:
            union = union.unionByName(frame, allowMissingColumns=True)
        rows = [r.asDict() for r in union.collect()]
        adds: dict[str, list[str]] = {}
        for r in rows:
            if r.get("bronze_add") is not None:
                adds.setdefault(r["bronze_table"], []).append(r["bronze_add"])
        return {"partitions": [r for r in rows if r["partition"] is not None],
                "tables": {r["topic"]: r for r in rows if r["partition"] is None and r.get("bronze_add") is None},
                "adds": adds}

    def _bronze(self, contracts: Sequence[CdcTable], raw: DataFrame, ingest_time: datetime, app_id: str,
                batch_id: int, jobs: BatchJobs) -> None:
        """The batch's raw records -> ``bronze.<topic>`` of each of ``contracts``: one Spark task appends them all
        with delta-rs (:func:`~spark_jobs.table_io.driver.append_split_in_task`); a table delta-rs cannot write
        gets Spark's append."""
        from pyspark.sql import functions as F

        t = time.monotonic()
        stamp = batch_time(int(ingest_time.timestamp() * 1000))  # not a literal: it would compile every batch
        rows = raw.select("key", "value", "topic", "partition", "offset", "kafka_timestamp",
                          stamp.alias("ingest_time")).withColumn("ingest_date", F.to_date("ingest_time"))
        in_task = {c.topic: target for c in contracts if (target := self._bronze_targets.get(c.bronze))}
        for contract in contracts:
            if contract.topic not in in_task:
                self._append(rows.where(F.col("topic") == contract.topic), contract.bronze, app_id, batch_id, jobs)
        if in_task:
            jobs.committed(len(append_split_in_task(rows, "topic", in_task, app_id, batch_id,
                                                    check_history=self.appender.is_first(batch_id))))
        self.timings["bronze"] = time.monotonic() - t

    def _landing(self, ingest_time: datetime) -> Landing | None:
        """Where the parse tasks land the batch's raw records (every topic's bronze table), or None when a bronze
        table is not one delta-rs writes (then the batch is cached and bronze appended after the parse)."""
        from spark_jobs.table_io.land import Landing

        if len(self._bronze_files) < len(self.contracts):
            return None
        return Landing(self._bronze_files, int(ingest_time.timestamp() * 1_000_000))

    def _commit_bronze(self, adds: dict[str, list[str]], app_id: str, batch_id: int, jobs: BatchJobs) -> None:
        """Commit the bronze files the parse tasks wrote: one delta-rs commit per table, in the driver, once per
        batch (the batch's transaction and marker, as every bronze append)."""
        t = time.monotonic()
        first = self.appender.is_first(batch_id)
        for contract in self.contracts:
            if adds.get(contract.bronze):
                table = self._bronze_targets[contract.bronze].open()
                if table.commit_files_once(adds[contract.bronze], app_id, batch_id, check_history=first):
                    jobs.committed()
        self.timings["bronze"] = time.monotonic() - t

    def _apply(self, index: int, contract: CdcTable, parsed: DataFrame, summary: dict[str, Any], app_id: str,
               batch_id: int, jobs: BatchJobs) -> None:
        """The MERGE of one table's changes and its delete markers: one Spark job whose task MERGEs with delta-rs
        (:func:`spark_jobs.table_io.merge.apply_changes_in_task`), else Spark's MERGE (:meth:`_apply_with_spark`)."""
        from pyspark.sql import functions as F

        from spark_jobs.silver.cdc import table_rows
        from spark_jobs.table_io.merge import apply_changes_in_task

        t = time.monotonic()
        changes = table_rows(parsed, index, contract.topic, self._schema(contract)).where(F.col("_error").isNull())
        target = self._task_targets.get(contract.silver)
        if target is not None:
            applied = apply_changes_in_task(changes, self._schema(contract), contract.keys,
                                            replace(target, app_id=app_id), batch_id)
            jobs.committed(int(applied["commits"]))
            self.timings[f"{contract.table}.silver.task"] = float(applied["seconds"])
            self._leave_task_merge_if_large(contract, int(applied["table_bytes"]))
        else:
            self._apply_with_spark(contract, changes, summary, app_id, batch_id, jobs)
        self.timings[f"{contract.table}.silver.apply"] = time.monotonic() - t
        with self._lock:
            table_progress = self.progress["tables"].setdefault(contract.silver, {})
            table_progress["changes_applied"] = int(table_progress.get("changes_applied", 0)) + summary["changes"]
            if summary["newest"] is not None:
                newest = summary["newest"]
                newest = (newest if newest.tzinfo else newest.replace(tzinfo=UTC)).isoformat()
                table_progress["newest_change"] = max(newest, table_progress.get("newest_change", ""))

    def _leave_task_merge_if_large(self, contract: CdcTable, size: int) -> None:
        """Past ``LAKE_CDC_TASK_MERGE_MAX_MB``, turn deletion vectors on for ``silver.<t>`` and apply it with Spark's
        MERGE from the next batch on, for good: delta-rs writes no deletion vectors, so its MERGE rewrites every file
        holding a changed row, and random updates touch them all (the whole table per batch); Spark's MERGE with
        deletion vectors costs seconds per batch, but not more as the table grows (docs/benchmarks.md, "CDC: large
        silver tables"). Run by this table's own apply thread, its only writer, between two of its commits."""
        limit = self.settings.cdc_task_merge_max_mb * 1024 * 1024
        if not limit or size <= limit:
            return
        log.warning("lake stream: %s holds %.0f MB of files, more than LAKE_CDC_TASK_MERGE_MAX_MB=%d: deletion vectors "
                    "on, Spark's MERGE applies it from the next batch (a copy-on-write MERGE rewrote the table's "
                    "changed files every batch)", contract.silver, size / 2**20, self.settings.cdc_task_merge_max_mb)
        self.spark.sql(f"ALTER TABLE {contract.silver} SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
        with self._lock:
            self._task_targets.pop(contract.silver, None)

    def _apply_with_spark(self, contract: CdcTable, changes: DataFrame, summary: dict[str, Any], app_id: str,
                          batch_id: int, jobs: BatchJobs) -> None:
        """Spark's MERGE and a Spark append of the markers (:func:`spark_jobs.table_io.merge.apply_changes`): a table
        delta-rs cannot write."""
        from spark_jobs.table_io.merge import apply_changes

        markers = self.spark.read.format("delta").load(table_location(self.settings, contract.deleted))

        def append_markers(rows: DataFrame) -> None:
            self._append(rows, contract.deleted, app_id, batch_id, jobs)

        apply_changes(self.spark, table_location(self.settings, contract.silver), changes,
                      contract.keys, markers, append_markers if summary["deletes"] else None, checkpoint=True)
        jobs.committed()

    def _append(self, frame: DataFrame, table: str, app_id: str, batch_id: int, jobs: BatchJobs) -> None:
        """Append ``frame`` to ``table`` at most once per batch (:class:`~spark_jobs.table_io.append.OnceAppender`)."""
        if self.appender.append(frame, table, app_id, batch_id):
            jobs.committed()

    def _quarantine(self, parsed: DataFrame, app_id: str, batch_id: int, jobs: BatchJobs) -> None:
        from pyspark.sql import functions as F

        t = time.monotonic()
        rows = parsed.where(F.col("_error").isNotNull()).select(
            F.lit("cdc").alias("stage"), F.col("_topic").alias("topic"),
            F.col("_partition").alias("partition"), F.col("_offset").alias("offset"),
            F.col("_kafka_timestamp").alias("kafka_timestamp"), F.col("_key").alias("key"),
            F.col("_value").alias("value"), F.lit("unparseable").alias("reason"),
            F.col("_error").alias("error"), F.current_timestamp().alias("quarantined_at"))
        self._append(rows, QUARANTINE, app_id, batch_id, jobs)
        self.timings["quarantine"] = time.monotonic() - t

    def _widen(self, contract: CdcTable, added: list[str]) -> list[str]:
        """``ALTER TABLE silver.<t> ADD COLUMNS`` for the ``added`` names PostgreSQL's table has, each typed from its
        catalog; returns the names it lacks (refused: :mod:`spark_jobs.silver.cdc_columns`)."""
        accepted, refused = admit_columns(self._schema(contract).names, added,
                                          source_column_types(self.settings, "public", contract.table, added))
        if refused:
            log.warning("lake stream: %s: payload column(s) %s are not in PostgreSQL's public.%s; their records go "
                        "to %s", contract.silver, refused[:20], contract.table, QUARANTINE)
        if accepted:
            # A PostgreSQL quoted identifier may hold a backtick: Spark SQL escapes it by doubling.
            cols = ", ".join(f"{quote_ident(name)} {sql_type}" for name, sql_type in accepted.items())
            log.info("lake stream: %s gains column(s) %s from PostgreSQL", contract.silver, cols)
            self.spark.sql(f"ALTER TABLE {contract.silver} ADD COLUMNS ({cols})")
            self._schemas.pop(contract.silver, None)
        return refused

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


def unknown_topic_reason(topic: str) -> str:
    """Why a record of a topic the pattern matched but no contract names is rejected, with the fix."""
    return f"no CDC contract for topic {topic}; add it to spark_jobs/contracts/shop.py"


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
