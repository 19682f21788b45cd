"""Pieces the streaming app's queries share: bronze rows, quarantine rows, table creation, status files."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from spark_jobs import kafka_auth, logs

# The status files' helpers live with the other file helpers; their callers import them from here too.
from spark_jobs.files import read_json as read_json
from spark_jobs.files import write_json_atomic as write_json_atomic
from spark_jobs.settings import Settings

if TYPE_CHECKING:

    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

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


def batch_constant(value: int) -> Column:
    """``value`` as a bigint column that Spark keeps out of its generated code.

    ``F.lit(value)`` is written into the generated Java as a constant, so a plan holding a per-batch value (the
    batch id, the batch's time) has new code text every batch: Spark compiled the same two or three classes again
    every micro-batch (a CodeGenerator debug log of the events stream: the batch time in its two largest stages,
    the batch id in silver.events' append), and new classes run interpreted until the JIT catches up
    (docs/benchmarks.md, "Per-batch code generation"). ``java_method`` is evaluated, not compiled (CodegenFallback
    and non-deterministic: the optimizer does not fold it back into a literal), and the cast around it compiles to
    the same text whatever the value. It costs a reflective call per row (and the projection holding it runs
    outside whole-stage code): about 0.2 µs per row for a timestamp evaluated once, its date taken from the column
    (0.4 µs when both evaluate it; 2M rows, local[2], against a literal; docs/benchmarks.md). Use it once per row in
    the few projections that write the value, not in per-record logic.
    """
    from pyspark.sql import functions as F

    return F.expr(f"java_method('java.lang.Long', 'valueOf', '{int(value)}')").cast("bigint")


def batch_time(millis: int) -> Column:
    """A batch's timestamp (epoch milliseconds) as a timestamp column kept out of generated code
    (:func:`batch_constant`)."""
    from pyspark.sql import functions as F

    return F.timestamp_millis(batch_constant(millis))


def batch_timestamp_ms(spark: SparkSession, query: str, batch_id: int, checkpoint: str) -> int:
    """Spark's timestamp of micro-batch ``batch_id`` of query ``query`` (what ``current_timestamp()`` means in it),
    in epoch milliseconds. It is recorded in the batch's offsets file before the batch runs, so a batch run again
    after a crash gets the same value: its rows carry the same ingest time whichever run wrote them.

    Read from the running query's current execution (no I/O); from the offsets file (``<checkpoint>/offsets/<id>``,
    its second line) when that is not the batch asked for.
    """
    import json

    for active in spark.streams.active:
        if active.name == query:
            try:
                execution = active._jsq.streamingQuery().lastExecution()
                if execution is not None and int(execution.currentBatchId()) == batch_id:
                    return int(execution.offsetSeqMetadata().batchTimestampMs())
            except Exception:  # Spark internals moved: the offsets file says the same
                log.debug("%s batch %d: batch time from the offsets file", query, batch_id, exc_info=True)
    text = read_checkpoint_file(spark, f"{checkpoint}/offsets/{batch_id}")
    if text is None or len(text.splitlines()) < 2:
        raise RuntimeError(f"{query}: no offsets file for batch {batch_id} under {checkpoint}/offsets")
    return int(json.loads(text.splitlines()[1])["batchTimestampMs"])


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
