"""Pieces the streaming app's queries share: bronze rows, quarantine rows, table creation, status files."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from spark_jobs import kafka_auth, logs
from spark_jobs.contracts.tables import TABLES, lake_table
from spark_jobs.delta_rs_tables import HISTORY, batch_marker
from spark_jobs.files import write_atomic
from spark_jobs.settings import Settings
from spark_jobs.table_io import table_location

if TYPE_CHECKING:

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)
Q = TypeVar("Q")


def ensure_log_output() -> None:
    """The app's INFO lines (batches, restarts, failpoints) must reach its log: under supervisord that is stdout.

    Its entry points call :func:`spark_jobs.logs.setup`; a process that configured nothing gets the same setup
    (plain lines, other libraries at WARNING), and one that configured logging itself keeps its setup.
    """
    if not logging.getLogger().handlers:
        logs.setup()
    package = logging.getLogger("spark_jobs.streaming")
    if package.level == logging.NOTSET:
        package.setLevel(logging.INFO)


def log_batch(query: str, batch_id: int, records: int, seconds: float, steps: dict[str, float],
              level: int = logging.INFO) -> None:
    """One line per micro-batch: ``query=... batch=... records=... seconds=...`` then ``<step>=<seconds>``."""
    log.log(level, "lake stream: query=%s batch=%d records=%d seconds=%.3f %s", query, batch_id, records, seconds,
            " ".join(f"{k}={v:.3f}" for k, v in steps.items()))


def status_path(settings: Settings) -> Path:
    """Progress file of the CDC query (read by ``lake stream status|wait``)."""
    return settings.run_dir / "stream-status.json"


def write_json_atomic(path: Path, doc: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(doc, indent=1, sort_keys=True))


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def bronze_schema() -> StructType:
    """A Kafka record's columns as the source gives them (``timestamp`` renamed), then when and which day it landed."""
    from pyspark.sql.types import DateType, StructField, StructType, TimestampType

    from spark_jobs.silver.events import RAW_FIELDS

    return StructType([*RAW_FIELDS, StructField("ingest_time", TimestampType()), StructField("ingest_date", DateType())])


def quarantine_schema() -> StructType:
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

    return StructType([
        StructField("stage", StringType()), StructField("topic", StringType()),
        StructField("partition", IntegerType()), StructField("offset", LongType()),
        StructField("kafka_timestamp", TimestampType()), StructField("key", BinaryType()),
        StructField("value", BinaryType()), StructField("reason", StringType()), StructField("error", StringType()),
        StructField("quarantined_at", TimestampType()),
    ])


#: Properties a table's writer may turn on for good (the CDC stream enables deletion vectors on a silver table past
#: ``LAKE_CDC_TASK_MERGE_MAX_MB``): :func:`create_table` does not turn them off again.
TURNED_ON_BY_WRITER = frozenset({"delta.enableDeletionVectors"})


def properties_to_set(declared: Mapping[str, str], current: Mapping[str, str]) -> dict[str, str]:
    """The ``declared`` table properties an existing table lacks or holds otherwise, except one its writer turned on
    for good (:data:`TURNED_ON_BY_WRITER`)."""
    return {k: v for k, v in declared.items()
            if current.get(k) != v and not (k in TURNED_ON_BY_WRITER and current.get(k) == "true")}


def create_table(spark: SparkSession, settings: Settings, name: str, schema: StructType,
                 exists: bool | None = None) -> None:
    """``CREATE TABLE IF NOT EXISTS`` a Delta table at its warehouse location, partitioned and with the properties
    the table registry (:mod:`spark_jobs.contracts.tables`) declares; properties missing on a table that exists
    (one created by an older version) are set. ``exists``, when the caller listed the catalog: True skips the
    CREATE (a no-op on an existing table that still loads its snapshot), False the check of its properties."""
    from delta.tables import DeltaTable

    entry = lake_table(name)
    if exists is not True:
        builder = (DeltaTable.createIfNotExists(spark).tableName(name).addColumns(schema)
                   .location(table_location(settings, name)))
        if entry.partitioned_by:
            builder = builder.partitionedBy(*entry.partitioned_by)
        for k, v in entry.properties.items():
            builder = builder.property(k, v)
        builder.execute()
    if entry.properties and exists is not False:
        detail = DeltaTable.forName(spark, name).detail().select("properties").head()
        current = (detail[0] if detail else None) or {}
        missing = properties_to_set(entry.properties, current)
        if missing:
            spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ("
                      + ", ".join(f"'{k}' = '{v}'" for k, v in sorted(missing.items())) + ")")


def catalog_tables(spark: SparkSession, databases: Sequence[str]) -> set[str]:
    """``db.table`` names (tables and views) the catalog holds in ``databases``: one metastore call per database."""
    return {f"{db}.{r['tableName']}" for db in databases for r in spark.sql(f"SHOW TABLES IN {db}").collect()}


def create_tables(spark: SparkSession, settings: Settings, tables: Sequence[tuple[str, StructType]],
                  workers: int = 8) -> None:
    """:func:`create_table` for each of ``tables``, a few at once.

    A start of the streaming app ensures ~20 tables, each loading its Delta snapshot from the object store;
    one at a time, that was a large part of every (re)start after a crash (docs/benchmarks.md). The calls
    wait on MinIO and the metastore, not on CPU, so they overlap even on 2 cores.
    """
    from concurrent.futures import ThreadPoolExecutor

    existing = catalog_tables(spark, sorted({name.partition(".")[0] for name, _ in tables}))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="create-table") as pool:
        # list(): the first failure is raised here.
        list(pool.map(lambda t: create_table(spark, settings, t[0], t[1], exists=t[0] in existing), tables))


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


def query_id(spark: SparkSession, name: str) -> str:
    """Id of the active streaming query ``name`` (the stable ``txnAppId`` prefix of its writes)."""
    for query in spark.streams.active:
        if query.name == name:
            return str(query.id)
    raise RuntimeError(f"streaming query {name} is not active")


def last_trigger_ms(spark: SparkSession, name: str) -> dict[str, int] | None:
    """Spark's own timing of query ``name``'s previous trigger (``durationMs``: latestOffset, queryPlanning,
    addBatch, walCommit, commitOffsets, triggerExecution) and its state store's (``state.allUpdatesTimeMs``: the
    de-duplication lookups, ``state.allRemovalsTimeMs``: dropping ids past the watermark, ``state.commitTimeMs``),
    for the status files and the benches: what a batch spends outside ``foreachBatch`` or in the state store is
    visible only here."""
    for query in spark.streams.active:
        if query.name == name and query.lastProgress:
            out = {str(k): int(v) for k, v in (query.lastProgress.get("durationMs") or {}).items()}
            for op in query.lastProgress.get("stateOperators") or []:  # the de-duplication state's own timing
                for key in ("allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs"):
                    out[f"state.{key}"] = out.get(f"state.{key}", 0) + int(op.get(key) or 0)
            return out
    return None


def batch_offsets(spark: SparkSession, checkpoint: str, batch_id: int, topic: str) -> dict[int, tuple[int, int]]:
    """``partition -> (first offset, end offset)`` of ``topic`` that micro-batch ``batch_id`` reads (end exclusive),
    from the query's own offset log: what Spark itself committed to read, at the cost of two small reads by the
    driver instead of a second scan of the Kafka range. The start is the previous batch's end (or the source's
    initial offsets for a query's first batch); a partition the batch does not read is left out."""
    end = _offset_json(read_checkpoint_file(spark, f"{checkpoint}/offsets/{batch_id}"), topic)
    previous = read_checkpoint_file(spark, f"{checkpoint}/offsets/{batch_id - 1}") if batch_id > 0 else None
    if previous is None:
        previous = read_checkpoint_file(spark, f"{checkpoint}/sources/0/0")
    start = _offset_json(previous, topic)
    out = {}
    for partition, until in end.items():
        first = start.get(partition, 0)
        if until > first:
            out[partition] = (first, until)
    return out


def read_checkpoint_file(spark: SparkSession, path: str) -> str | None:
    """A small checkpoint file's text (Hadoop FS, the checkpoint's own store), None if absent."""
    jvm = spark._jvm
    assert jvm is not None
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    fs = hpath.getFileSystem(spark._jsc.hadoopConfiguration())
    if not fs.exists(hpath):
        return None
    stream = fs.open(hpath)
    try:
        return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()


def write_checkpoint_file(spark: SparkSession, path: str, text: str) -> None:
    """Write a small file next to a query's checkpoint (Hadoop FS, the checkpoint's own store)."""
    jvm = spark._jvm
    assert jvm is not None
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    fs = hpath.getFileSystem(spark._jsc.hadoopConfiguration())
    stream = fs.create(hpath, True)
    try:
        stream.write(bytearray(text.encode()))
    finally:
        stream.close()


def _offset_json(text: str | None, topic: str) -> dict[int, int]:
    """``partition -> offset`` of ``topic`` in an offset-log or source-log file (a version line, metadata, one JSON
    line per source; Kafka's initial-offsets file starts with a zero byte)."""
    for line in (text or "").replace("\x00", "").splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get(topic), dict):
            return {int(p): int(o) for p, o in doc[topic].items()}
    return {}


#: Kafka consumer ``fetch.max.wait.ms`` of the streaming queries (see ``start_kafka_query``).
KAFKA_FETCH_MAX_WAIT_MS = 20


def kafka_source(spark: SparkSession, settings: Settings, subscription: tuple[str, str], max_offsets: int,
                 max_records_per_task: int | None = None) -> DataFrame:
    """The lake's Kafka as a streaming source, logged in as ``lake_stream`` (SASL; :mod:`spark_jobs.kafka_auth`).

    Bounded batches (``maxOffsetsPerTrigger``) and ``failOnDataLoss``: bronze is the archive, silently skipping
    lost offsets would lose data. ``max_records_per_task`` splits a topic partition's range of a batch into
    Spark tasks of at most that many records (Kafka source option ``maxRecordsPerPartition``).
    """
    reader = spark.readStream.format("kafka").options(**kafka_auth.spark_source_options(settings))
    if max_records_per_task is not None:
        reader = reader.option("maxRecordsPerPartition", str(max_records_per_task))
    return (reader
            .option(*subscription)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", max_offsets)
            .option("failOnDataLoss", "true")
            # A micro-batch reads its offset range to the end of each partition, where the broker holds each
            # fetch up to fetch.max.wait.ms (500 ms by default) waiting for more data (docs/benchmarks.md).
            .option("kafka.fetch.max.wait.ms", str(KAFKA_FETCH_MAX_WAIT_MS))
            .load())


def require_topic(settings: Settings, topic: str, timeout: float = 15.0) -> None:
    """Fail with the fix when ``topic`` is missing: the stream may read topics, not create them (its ACLs)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(kafka_auth.client_conf(settings, "stream"))
    if topic not in admin.list_topics(timeout=timeout).topics:
        raise RuntimeError(f"Kafka topic {topic} does not exist at {settings.kafka_bootstrap} (or principal "
                           f"{kafka_auth.user('stream')} may not describe it); `lake stack up` creates it")


def start_with_query_conf(spark: SparkSession, conf: dict[str, str], pool: str, start: Callable[[], Q]) -> Q:
    """``start()`` a streaming query with ``conf`` set for it alone, in scheduler ``pool``.

    A query runs on a clone of the session taken at ``start()``, and some of its settings are recorded in the
    checkpoint at its first batch (the state store provider and partitions): set them for this query only, so
    the other queries of the driver keep theirs.
    """
    previous = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", pool)
    try:
        return start()
    finally:
        for key, old in previous.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def start_kafka_query(spark: SparkSession, settings: Settings, name: str, subscription: tuple[str, str],
                      max_offsets: int, trigger_seconds: int, process: Any,
                      max_records_per_task: int | None = None) -> StreamingQuery:
    """Start query ``name``: :func:`kafka_source` (``subscription`` = ("subscribe" | "subscribePattern", value))
    -> foreachBatch, one checkpoint per query."""
    from spark_jobs.table_io import checkpoint_location

    source = kafka_source(spark, settings, subscription, max_offsets, max_records_per_task)
    return (source.writeStream.queryName(name)
            .foreachBatch(process)
            .option("checkpointLocation", checkpoint_location(settings, name))
            .trigger(processingTime=f"{trigger_seconds} seconds")
            .start())


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
