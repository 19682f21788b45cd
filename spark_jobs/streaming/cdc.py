"""The CDC query ``lake_cdc`` of the streaming app: Debezium topics -> bronze -> silver.

Subscribes to every ``shop.public.*`` topic and, per micro-batch (``foreachBatch``):

1. appends the raw records to ``bronze.<topic>`` (key, value bytes, Kafka
   coordinates, ingest time), idempotently: Delta ``txnAppId``/``txnVersion``
   with the query id and the batch id, so a batch replayed after a crash is
   written once;
2. parses the Debezium envelopes (``spark_jobs.silver.cdc``), keeps the newest
   change per key, drops changes not newer than a recorded delete of that key
   (delete markers are appended to ``silver.<table>__deleted``),
   and MERGEs into ``silver.<table>`` guarded by the source position, so
   replays and Connect re-sends are no-ops;
3. appends every record it cannot parse or apply to ``quarantine.cdc`` (raw
   bytes, reason, Kafka coordinates), idempotently, and carries on;
4. widens ``silver.<table>`` when PostgreSQL gained a column (types from the
   Debezium schema in the record), then re-parses the batch, losing nothing;
5. writes a progress file for ``lake stream status`` / ``lake stream wait``;
6. every ``LAKE_STREAM_MAINTENANCE_MINUTES`` compacts (OPTIMIZE) and vacuums
   the tables it owns, inside the batch loop, so no second driver writes them.

Back-pressure: ``maxOffsetsPerTrigger`` bounds every batch, so a backlog is
consumed in bounded steps.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from spark_jobs.contracts.shop import CDC_TABLES, TOPIC_PATTERN, CdcTable
from spark_jobs.io import ensure_database
from spark_jobs.settings import Settings
from spark_jobs.streaming.common import (
    Maintenance,
    append_once,
    bronze_columns,
    bronze_schema,
    create_table,
    quarantine_rows,
    quarantine_schema,
    query_id,
    read_json,
    release,
    start_kafka_query,
    status_path,
    write_json_atomic,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructType

QUERY = "lake_cdc"
QUARANTINE = "quarantine.cdc"
#: Delta table properties of the silver tables. Deletion vectors let MERGE mark the
#: replaced/deleted rows of a data file instead of rewriting the whole file
#: (MERGE support since Delta 3.1; https://docs.delta.io/delta-deletion-vectors).
#: A CDC batch touches rows spread over every file of a table, so without them each MERGE
#: rewrote (nearly) the whole table. Maintenance OPTIMIZE rewrites files and drops the vectors.
SILVER_PROPS = {"delta.enableChangeDataFeed": "true", "delta.enableDeletionVectors": "true"}

#: SQL settings for this query's batch jobs, set on the query's own session (see ``CdcApp.process``).
BATCH_SQL_CONF = {
    # One shuffle partition per join/window: the four tables of a batch run in parallel threads
    # (one per table), which already keep the cores busy, and each MERGE then writes one new file
    # per table instead of one per partition: fewer files for the next MERGE to touch and mark
    # with deletion vectors. Adaptive execution is off inside streaming queries, so this is the
    # partition count used.
    "spark.sql.shuffle.partitions": "1",
    # The MERGE source is a local checkpoint (see CdcApp._apply): already materialised, deterministic
    # and cut from its lineage, so Delta's own copy of it (a localCheckpoint to disk, which "auto" makes
    # for any non-Delta source: MergeIntoMaterializeSource.shouldMaterializeSource in delta-io/delta)
    # would only repeat the work. Profiled: with a persisted (not checkpointed) source that copy did not
    # hit the cache and recomputed the parse/window/join: ~half of all executor time of a batch.
    # ("none" with a persisted source fails with DELTA_MERGE_SOURCE_CACHED_DURING_EXECUTION when another
    # table's thread persists a frame meanwhile; a checkpointed source has no cache to look up.)
    "spark.databricks.delta.merge.materializeSource": "none",
}

__all__ = ["QUERY", "TOPIC_PATTERN", "CdcApp", "added_column_types", "spark_type_for"]


# Debezium Connect schema type (+ semantic name) -> Spark SQL type, for added columns.
_CONNECT_TYPES = {
    "int8": "INT", "int16": "INT", "int32": "INT", "int64": "BIGINT", "float32": "FLOAT", "float64": "DOUBLE",
    "boolean": "BOOLEAN", "string": "STRING", "bytes": "BINARY",
}
_CONNECT_NAMES = {
    "io.debezium.time.ZonedTimestamp": "TIMESTAMP", "io.debezium.time.Date": "DATE",
    "io.debezium.data.Json": "STRING", "io.debezium.data.Uuid": "STRING",
}


def spark_type_for(field: dict[str, Any]) -> str:
    """A Debezium Connect field schema -> the Spark SQL type of its silver column."""
    name = field.get("name")
    if name in _CONNECT_NAMES:
        return _CONNECT_NAMES[name]
    return _CONNECT_TYPES.get(str(field.get("type")), "STRING")


def added_column_types(sample_value: bytes, names: Sequence[str]) -> dict[str, str]:
    """Types of the ``names`` columns from one Debezium envelope's ``schema`` (after image)."""
    doc = json.loads(sample_value)
    after = next(f for f in doc["schema"]["fields"] if f.get("field") == "after")
    fields = {f["field"]: f for f in after.get("fields", [])}
    return {n: spark_type_for(fields.get(n, {})) for n in names}


class CdcApp:
    """State and per-batch logic of the CDC query."""

    def __init__(self, spark: SparkSession, settings: Settings) -> None:
        self.spark = spark
        self.settings = settings
        owned = [name for c in CDC_TABLES.values() for name in (c.silver, c.deleted, c.bronze)]
        self.maintenance = Maintenance(spark, settings, QUERY, [*owned, QUARANTINE])
        self.timings: dict[str, float] = {}
        self._progress_lock = threading.Lock()
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
        for contract in CDC_TABLES.values():
            create_table(self.spark, self.settings, contract.bronze, bronze_schema(), ["ingest_date"])
            silver_schema = StructType([*contract.schema.fields,
                                        *[StructField(c, meta_types[c]) for c in SILVER_METADATA_COLUMNS]])
            create_table(self.spark, self.settings, contract.silver, silver_schema, props=SILVER_PROPS)
            deleted_schema = StructType([*[contract.schema[k] for k in contract.keys],
                                         *[StructField(c, meta_types[c]) for c in
                                           ("_snapshot_rank", "_commit_lsn", "_change_lsn")]])
            # Delete markers: append-only (no MERGE), so no table properties needed.
            create_table(self.spark, self.settings, contract.deleted, deleted_schema)
            self._ensure_props(contract.silver, SILVER_PROPS)
        create_table(self.spark, self.settings, QUARANTINE, quarantine_schema())

    def _ensure_props(self, table: str, props: dict[str, str]) -> None:
        """Set ``props`` on a table created before they were part of its definition (idempotent)."""
        current = {r["key"]: r["value"] for r in self.spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}
        missing = {k: v for k, v in props.items() if current.get(k, "").lower() != v}
        if missing:
            assignments = ", ".join(f"'{k}' = '{v}'" for k, v in sorted(missing.items()))
            print(f"lake stream: {table}: setting table properties {assignments}", flush=True)
            self.spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({assignments})")

    def table_schema(self, contract: CdcTable) -> StructType:
        """The row schema in force: the silver table's columns minus metadata (superset of the contract)."""
        from pyspark.sql.types import StructType

        from spark_jobs.silver.cdc import SILVER_METADATA_COLUMNS

        fields = [f for f in self.spark.table(contract.silver).schema.fields if f.name not in SILVER_METADATA_COLUMNS]
        return StructType(fields)

    # -- the batch --------------------------------------------------------------

    def process(self, batch: DataFrame, batch_id: int) -> None:

        started = time.monotonic()
        app_id = query_id(self.spark, QUERY)
        # foreachBatch hands us the query's own (cloned) session: settings made on it
        # apply to this query's batch jobs only, not to other queries of the driver.
        session = batch.sparkSession
        for key, value in BATCH_SQL_CONF.items():
            session.conf.set(key, value)
        batch = batch.persist()
        to_release: list[DataFrame] = []
        try:
            t0 = time.monotonic()
            per_partition = batch.groupBy("topic", "partition").agg(
                F.max("offset").alias("max_offset"), F.count(F.lit(1)).alias("records")).collect()
            self.timings["batch.read"] = time.monotonic() - t0
            topics = sorted({r.topic for r in per_partition})
            # Tables are independent (one writer each): apply them concurrently so
            # Delta commits and S3 round trips of one overlap the compute of another.
            # The bronze appends get their own threads: silver is parsed from the
            # persisted batch, not from bronze, so neither waits for the other.
            workers = max(1, min(4, len(topics)))
            with ThreadPoolExecutor(max_workers=workers) as pool, ThreadPoolExecutor(max_workers=workers) as writes:
                results = list(pool.map(lambda t: self._topic(session, batch, batch_id, app_id, t, writes), topics))
            rejects_all: DataFrame | None = None
            for rejects, timings, cached in results:
                to_release += cached
                if rejects is not None:
                    rejects_all = rejects if rejects_all is None else rejects_all.unionByName(rejects)
                self.timings.update(timings)
            t0 = time.monotonic()
            # Skipping the write when nothing was rejected keeps exactly-once: a re-run of
            # this batch sees the same records, so it makes the same decision.
            if rejects_all is not None:
                append_once(quarantine_rows(rejects_all, "cdc"), QUARANTINE, app_id, batch_id, merge_schema=True)
            self.timings["quarantine"] = time.monotonic() - t0
            self._record_progress(per_partition, batch_id, started)
            self.maintenance.run_if_due()
        finally:
            for frame in to_release:
                release(frame)
            batch.unpersist()

    def _topic(self, session: SparkSession, batch: DataFrame, batch_id: int, app_id: str,
               topic: str, writes: ThreadPoolExecutor) -> tuple[DataFrame | None, dict[str, float], list[DataFrame]]:
        timings: dict[str, float] = {}
        t0 = time.monotonic()
        # Derived from the persisted batch: a filter and a projection, not worth a second cache.
        part = bronze_columns(batch.where(F.col("topic") == topic))
        contract = CDC_TABLES.get(topic)
        if contract is None:
            return self._unknown_topic(part), timings, []

        def bronze() -> float:
            append_once(part, contract.bronze, app_id, batch_id)
            return time.monotonic() - t0

        landed = writes.submit(bronze)
        rejects, cached = self._apply(session, contract, part, timings, app_id, batch_id)
        timings[f"{contract.table}.silver"] = time.monotonic() - t0
        # The batch counts as done only once bronze holds it too (an error there fails the batch).
        timings[f"{contract.table}.bronze"] = landed.result()
        return rejects, timings, cached

    def _unknown_topic(self, part: DataFrame) -> DataFrame:
        return part.select(
            F.col("key").alias("raw_key"), F.col("value").alias("raw_value"), "topic", "partition", "offset",
            F.concat(F.lit("no CDC contract for topic "), F.col("topic"),
                     F.lit("; add it to spark_jobs/contracts/shop.py")).alias("error"),
            "kafka_timestamp",
        )

    def _parse(self, bronze: DataFrame, schema: StructType, keys: list[str]) -> tuple[DataFrame, Any]:
        """Parse the table's records once into a persisted frame; one job also yields its summary."""
        from spark_jobs.silver.cdc import parse_records

        parsed = parse_records(bronze, schema, keys).persist()
        good = F.col("_error").isNull()
        extra_names = F.map_keys(F.from_json(F.col("_extra"), "map<string,string>"))
        summary = parsed.agg(
            F.count(F.when(good, F.lit(1))).alias("changes"),
            F.count(F.when(~good, F.lit(1))).alias("rejects"),
            F.array_distinct(F.flatten(F.collect_set(F.when(good, extra_names)))).alias("extra"),
        ).first()
        return parsed, summary

    def _apply(self, session: SparkSession, contract: CdcTable, bronze: DataFrame, timings: dict[str, float],
               app_id: str, batch_id: int) -> tuple[DataFrame | None, list[DataFrame]]:
        """MERGE one table's batch into silver; returns its rejects (or None) and the frames to unpersist later.

        Spark actions per table and batch: one aggregate over the parsed records
        (materialises the cache; counts, added columns), one over the newest
        change per key (materialises it; applied count, deletes, newest time),
        the silver MERGE, and an append of delete markers only when the batch deletes.
        """
        from delta.tables import DeltaTable

        from spark_jobs.silver.cdc import (
            POSITION_COLUMNS,
            added_columns,
            drop_superseded_by_delete,
            fill_toast_within_batch,
            latest_per_key,
            merge_plan,
            silver_columns,
            split_parsed,
            toastable_columns,
        )

        name = contract.table
        keys = list(contract.keys)
        t = time.monotonic()
        schema = self.table_schema(contract)
        parsed, summary = self._parse(bronze, schema, keys)
        timings[f"{name}.silver.parse"] = time.monotonic() - t
        added = added_columns(schema, list(summary["extra"] or [])) if summary else []
        if added:
            t = time.monotonic()
            parsed.unpersist()
            self._widen(contract, bronze, added)
            schema = self.table_schema(contract)
            parsed, summary = self._parse(bronze, schema, keys)
            timings[f"{name}.silver.widen"] = time.monotonic() - t
        changes, rejects = split_parsed(parsed)
        cached = [parsed]
        rejects_out = rejects if summary and summary["rejects"] else None
        if not summary or not summary["changes"]:
            return rejects_out, cached

        t = time.monotonic()
        toastable = toastable_columns(schema, keys)
        newest = latest_per_key(fill_toast_within_batch(changes, keys, toastable), keys).drop("_pos")
        # A change not newer than a recorded delete of its key is a stale re-send.
        newest = drop_superseded_by_delete(newest, session.table(contract.deleted), keys).localCheckpoint(eager=True)
        cached.append(newest)
        stats = newest.agg(F.count(F.lit(1)).alias("n"), F.count(F.when(F.col("_op") == "d", F.lit(1))).alias("deletes"),
                           F.max("_source_ts").alias("newest")).first()
        timings[f"{name}.silver.newest"] = time.monotonic() - t
        if not stats or not stats["n"]:
            return rejects_out, cached

        t = time.monotonic()
        plan = merge_plan(keys, silver_columns(schema), toastable)
        source = newest.select(*silver_columns(schema))
        (DeltaTable.forName(session, contract.silver).alias("t").merge(source.alias("s"), plan.condition)
         .whenMatchedDelete(condition=plan.delete_condition)
         .whenMatchedUpdate(condition=plan.update_condition, set=dict(plan.update_set))
         .whenNotMatchedInsert(condition=plan.insert_condition, values=dict(plan.insert_values))
         .execute())
        timings[f"{name}.silver.merge"] = time.monotonic() - t
        if stats["deletes"]:
            # Delete markers are appended, never merged: a blind idempotent append is one
            # write and commit, where a MERGE scanned the side table and wrote deletion
            # vectors (~a dozen Spark jobs per batch). Readers take any marker at or after
            # a change's position (drop_superseded_by_delete), so older markers do no harm.
            t = time.monotonic()
            deletes = newest.where(F.col("_op") == "d").select(*keys, *POSITION_COLUMNS)
            append_once(deletes, contract.deleted, app_id, batch_id)
            timings[f"{name}.silver.deleted_append"] = time.monotonic() - t
        with self._progress_lock:
            table_progress = self.progress["tables"].setdefault(contract.silver, {})
            table_progress["changes_applied"] = int(table_progress.get("changes_applied", 0)) + int(stats["n"])
            if stats["newest"] is not None:
                newest_ts = stats["newest"].replace(tzinfo=UTC).isoformat()
                table_progress["newest_change"] = max(newest_ts, table_progress.get("newest_change", ""))
        return rejects_out, cached

    def _widen(self, contract: CdcTable, bronze: DataFrame, added: list[str]) -> None:
        from pyspark.sql import functions as F

        sample = bronze.where(F.col("value").isNotNull()).orderBy(F.col("offset").desc()).select("value").first()
        if sample is None:
            return
        types = added_column_types(bytes(sample["value"]), added)
        cols = ", ".join(f"`{name}` {sql_type}" for name, sql_type in types.items())
        print(f"lake stream: {contract.silver} gains column(s) {cols} from PostgreSQL", flush=True)
        self.spark.sql(f"ALTER TABLE {contract.silver} ADD COLUMNS ({cols})")

    def _record_progress(self, per_partition: list[Any], batch_id: int, started: float) -> None:
        offsets = {f"{r.topic}:{r.partition}": int(r.max_offset) for r in per_partition}
        self.progress["offsets"].update(offsets)
        self.progress.update({
            "query": QUERY, "batch_id": batch_id, "committed_at": datetime.now(UTC).isoformat(),
            "batch_seconds": round(time.monotonic() - started, 3), "pid": os.getpid(),
            "batch_records": sum(int(r.records) for r in per_partition),
            "step_seconds": {k: round(v, 3) for k, v in sorted(self.timings.items())},
        })
        self.timings = {}
        for table in self.progress["tables"].values():
            table["last_batch"] = batch_id
        write_json_atomic(status_path(self.settings), self.progress)


def start(spark: SparkSession, settings: Settings) -> StreamingQuery:
    """Create the CDC tables and start ``lake_cdc`` (Kafka ``shop.public.*`` -> foreachBatch)."""
    app = CdcApp(spark, settings)
    app.ensure_tables()
    return start_kafka_query(spark, settings, QUERY, ("subscribePattern", TOPIC_PATTERN),
                             settings.stream_max_offsets_per_trigger, settings.stream_trigger_seconds, app.process)
