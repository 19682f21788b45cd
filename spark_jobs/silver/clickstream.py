"""Clickstream records (Kafka or bronze rows) -> validated, typed events + rejects, in Spark tasks.

The contract is applied once, by one implementation: the Python classifier of
:mod:`spark_jobs.silver.clickstream_arrow` (the contract's JSON Schema validated
by jsonschema-rs, plus the contract's rules JSON Schema cannot say, with the
reason codes of :func:`spark_jobs.contracts.clickstream.check_record`), run on
the executors through ``mapInArrow``: each task classifies its own Arrow batches,
nothing reaches the driver. The executors therefore need the same Python
packages as the driver (``spark.pyspark.python``; the project's venv on ``local[*]``).

Why ``mapInArrow`` rather than Spark SQL expressions: the Python check costs a
fraction of the CPU per event (docs/benchmarks.md), and one implementation
cannot drift from itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    DataType,
    DateType,
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_jobs.contracts.clickstream import PROPERTY_COLUMNS
from spark_jobs.contracts.lake_schemas import RAW_FIELDS

if TYPE_CHECKING:
    import pyarrow as pa

MONEY = DecimalType(18, 2)

#: Columns of the rejects frame (-> ``quarantine.events``).
REJECT_SCHEMA = StructType(
    [
        StructField("raw_key", BinaryType()),
        StructField("raw_value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("kafka_timestamp", TimestampType()),
        StructField("reason", StringType()),
        StructField("error", StringType()),
    ]
)

_SPARK_TYPES: dict[str, DataType] = {"string": StringType(), "bigint": LongType(), "int": IntegerType(),
                                     "decimal(18,2)": MONEY}

def checked_schema() -> StructType:
    """Output of :func:`check_events`: the raw columns, then the verdict and the typed fields of valid records."""
    return StructType([
        *RAW_FIELDS,
        StructField("_reason", StringType()), StructField("_error", StringType()),
        StructField("_event_id", StringType()), StructField("_event_type", StringType()),
        StructField("_user_id", LongType()), StructField("_session_id", StringType()),
        StructField("_event_time", TimestampType()), StructField("_event_date", DateType()),
        StructField("_properties", StringType()),
        *[StructField(f"_p_{name}", _SPARK_TYPES[t]) for name, t, _ in PROPERTY_COLUMNS],
        StructField("_schema_version", IntegerType()),
    ])


def _check_batches(batches: Iterator[pa.RecordBatch], keep: Sequence[str] = ()) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function (runs in the executors' Python workers): one contract validator per worker
    process; the verdict and the ``keep`` columns unchanged go back to the JVM."""
    import pyarrow as pa

    from spark_jobs.silver.clickstream_arrow import check_records, contract_check

    contract = contract_check()
    for batch in batches:
        if batch.num_rows:
            table = pa.Table.from_batches([batch])
            out = check_records(table, contract)
            for name in keep:
                out = out.append_column(name, table.column(name))
            yield from out.to_batches()


def check_events(records: DataFrame, keep: Sequence[str] = ()) -> DataFrame:
    """Raw records -> the same rows with the contract's verdict and typed fields (``checked_schema``).

    In: ``key``, ``value`` (binary), ``topic``, ``partition`` int, ``offset``
    long and ``kafka_timestamp`` (or the Kafka source's ``timestamp``), plus
    the ``keep`` columns, carried to the end unchanged; other columns are
    dropped. Grain: one row per record. ``_reason`` is NULL for a valid
    record, else one code of ``spark_jobs.contracts.clickstream.REASONS``, with
    ``_error`` naming the field. Works on streaming frames too (no state).
    """
    if "kafka_timestamp" not in records.columns:
        records = records.withColumnRenamed("timestamp", "kafka_timestamp")
    raw = records.select(*[f.name for f in RAW_FIELDS], *keep)
    out = checked_schema()
    schema = StructType([*out.fields, *[raw.schema[name] for name in keep]])
    return raw.mapInArrow(partial(_check_batches, keep=tuple(keep)), schema)


def silver_columns() -> list[str]:
    """Column names of the valid frame of :func:`split_checked` (before ``keep``)."""
    return ["event_id", "event_type", "user_id", "session_id", "event_time", "event_date", "properties",
            *[name for name, _t, _o in PROPERTY_COLUMNS], "schema_version", "_topic", "_partition", "_offset",
            "_kafka_timestamp", "_ingest_time"]


def valid_events(checked: DataFrame, keep: Sequence[str | Column] = ()) -> DataFrame:
    """The valid rows of :func:`check_events` output as silver columns (``ingest_time`` must be a column)."""
    return checked.where(F.col("_reason").isNull()).select(
        F.col("_event_id").alias("event_id"),
        F.col("_event_type").alias("event_type"),
        F.col("_user_id").alias("user_id"),
        F.col("_session_id").alias("session_id"),
        F.col("_event_time").alias("event_time"),
        F.col("_event_date").alias("event_date"),
        F.col("_properties").alias("properties"),
        *[F.col(f"_p_{name}").alias(name) for name, _t, _o in PROPERTY_COLUMNS],
        F.col("_schema_version").alias("schema_version"),
        F.col("topic").alias("_topic"),
        F.col("partition").alias("_partition"),
        F.col("offset").alias("_offset"),
        F.col("kafka_timestamp").alias("_kafka_timestamp"),
        F.col("ingest_time").alias("_ingest_time"),
        *keep,
    )


def rejected(checked: DataFrame) -> DataFrame:
    """The rejected rows of :func:`check_events` output (columns of ``REJECT_SCHEMA``)."""
    return checked.where(F.col("_reason").isNotNull()).select(
        F.col("key").alias("raw_key"), F.col("value").alias("raw_value"), "topic", "partition", "offset",
        "kafka_timestamp", F.col("_reason").alias("reason"), F.col("_error").alias("error"))


def parse_events(bronze: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Split bronze clickstream records into valid typed events and rejects.

    In: bronze rows (``key``, ``value``, ``topic``, ``partition``, ``offset``,
    ``kafka_timestamp``, ``ingest_time``; other columns are ignored).

    Out ``valid`` (grain: one row per valid record, duplicates kept):
    ``event_id``, ``event_type``, ``user_id`` long, ``session_id``,
    ``event_time`` timestamp (the UTC instant), ``event_date`` (its UTC date),
    ``properties`` (the JSON object text, keys sorted), the typed properties of
    the event's own type (NULL for other types): ``page``, ``product_id`` long,
    ``quantity`` int, ``price``/``cart_value``/``revenue`` decimal(18,2) (exact),
    ``order_id``, ``currency``; ``schema_version`` int; ``_topic``,
    ``_partition``, ``_offset``, ``_kafka_timestamp``, ``_ingest_time``.

    Out ``rejects`` (grain: one row per rejected record; ``REJECT_SCHEMA``):
    raw key and value, coordinates, ``reason`` and ``error`` naming the field.

    Counts reconcile: ``valid + rejects = bronze``. Both frames re-run the
    check unless the caller persists the input.
    """
    checked = check_events(bronze, keep=["ingest_time"])
    return valid_events(checked), rejected(checked)
