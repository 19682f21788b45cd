"""Columns of the lake's own tables: the bronze archive, the quarantines and the ops tables.

The table registry (:mod:`spark_jobs.contracts.tables`) attaches each to its table; writers take them from there
(``schema_of(name)``), so a table's columns are declared once. The CDC and event contracts, the hot views and
the gold tables declare theirs beside their rules.
"""

from __future__ import annotations

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DateType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

_S, _TS, _L = StringType(), TimestampType(), LongType()

#: The Kafka source's columns, ``timestamp`` renamed to ``kafka_timestamp`` (what bronze keeps of each record and
#: what the events check reads).
RAW_FIELDS = (
    StructField("key", BinaryType()), StructField("value", BinaryType()), StructField("topic", _S),
    StructField("partition", IntegerType()), StructField("offset", _L),
    StructField("kafka_timestamp", _TS),
)

#: A Kafka record's columns, then when and which day it landed (every ``bronze.*`` table).
BRONZE = StructType([*RAW_FIELDS, StructField("ingest_time", _TS), StructField("ingest_date", DateType())])

#: A rejected record: where it came from, its raw bytes, why (``quarantine.cdc``, ``quarantine.events``).
QUARANTINE = StructType([
    StructField("stage", _S), StructField("topic", _S),
    StructField("partition", IntegerType()), StructField("offset", _L),
    StructField("kafka_timestamp", _TS), StructField("key", BinaryType()),
    StructField("value", BinaryType()), StructField("reason", _S), StructField("error", _S),
    StructField("quarantined_at", _TS),
])

_STEP_SECONDS = StructField("step_seconds", MapType(_S, DoubleType()))
_OFFSETS = StructField("offsets", MapType(_S, _S))

#: One row per events archive micro-batch (``ops.stream_events_ledger``): the counts the ledger balances.
EVENTS_LEDGER = StructType([
    *[StructField(n, _L) for n in ("batch_id", "received", "valid", "quarantined", "duplicates", "appended", "late")],
    StructField("watermark_before", _TS), StructField("watermark_after", _TS),
    StructField("max_ingest_time", _TS), StructField("hot_committed_at", _TS),
    _OFFSETS, StructField("batch_seconds", DoubleType()), StructField("committed_at", _TS), _STEP_SECONDS,
])

#: One row per hot micro-batch (``ops.stream_hot_ledger``): offsets, commit time, Spark jobs and Delta commits.
HOT_LEDGER = StructType([
    StructField("batch_id", _L), StructField("received", _L), _OFFSETS,
    StructField("newest_kafka_time", _TS), StructField("watermark", _TS),
    StructField("hot_committed_at", _TS), StructField("batch_seconds", DoubleType()), _STEP_SECONDS,
    StructField("spark_jobs", _L), StructField("delta_commits", _L),
])

#: One row per expectation per validation (``ops.dq_results``).
DQ_RESULTS = StructType([
    StructField("run_id", _S), StructField("dag_id", _S), StructField("task_id", _S), StructField("table_name", _S),
    StructField("interval_start", _TS), StructField("interval_end", _TS), StructField("expectation", _S),
    StructField("expectation_type", _S), StructField("severity", _S), StructField("success", BooleanType()),
    StructField("observed_value", _S), StructField("unexpected_count", _L),
    StructField("unexpected_sample", _S), StructField("validated_at", _TS),
])

#: One row per n per smoke run (``ops.smoke``).
SMOKE = StructType([
    StructField("run_id", _S, False), StructField("n", IntegerType(), False), StructField("square", _L, False),
    StructField("written_at", _TS, False),
])

#: One row per move of the serving layer's batch watermark (``ops.serving_watermark``).
SERVING_WATERMARK = StructType([
    StructField("seq", _L, False), StructField("watermark", DateType(), False),
    StructField("previous", DateType()), StructField("backfill", BooleanType(), False),
    StructField("reason", _S), StructField("run_id", _S), StructField("dag_id", _S), StructField("task_id", _S),
    StructField("moved_at", _TS, False),
])

#: One row per replay switch or rollback of a live table (``ops.replays``).
REPLAYS = StructType([
    StructField("replay_id", _S, False), StructField("table_name", _S, False),
    StructField("action", _S, False), StructField("shadow", _S),
    StructField("version_before", _L), StructField("version_after", _L),
    StructField("offsets", _S), StructField("rows", _L),
    StructField("at", _TS, False), StructField("rollback_until", _TS),
    StructField("run", _S), StructField("note", _S),
])
