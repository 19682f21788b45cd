"""Where validations land: ``ops.dq_results`` (one row per expectation) and ``quarantine.dq_<table>`` (rows moved).

Both writes are idempotent per (run_id, table, task): a retry or a cleared task
replaces its own rows (Delta ``replaceWhere`` through :mod:`spark_jobs.table_io`); a first write of
``ops.dq_results`` is a blind append, which cannot conflict with other tasks' writes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_incrementing

from spark_jobs.contracts.tables import schema_of
from spark_jobs.quality.outcome import EXPECTATIONS_COLUMN, DqOutcome
from spark_jobs.quality.params import utc_micros
from spark_jobs.table_io import has_rows, replace_or_append, replace_partition

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.settings import Settings

RESULTS_TABLE = "ops.dq_results"
#: Attempts of a write that lost a race with another task's commit to the same table.
WRITE_ATTEMPTS = 4


def quarantine_table(table: str) -> str:
    """``gold.fct_orders`` -> ``quarantine.dq_gold_fct_orders``."""
    return "quarantine.dq_" + table.replace(".", "_")


def sql_string(value: str) -> str:
    """A Spark SQL string literal (backslash escapes: Spark's default parser, ``escapedStringLiterals`` off).

    Only for SQL text that takes no parameters: a Delta ``replaceWhere`` predicate (a writer option, see
    :mod:`spark_jobs.table_io`) and the ``where`` of the same rows. A query run through ``spark.sql`` binds its
    values as named parameters instead (``spark.sql(query, args={...})``).
    """
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _scope(outcome: DqOutcome) -> str:
    return (f"run_id = {sql_string(outcome.run_id)} AND table_name = {sql_string(outcome.table)} "
            f"AND task_id = {sql_string(outcome.task_id)}")


def results_rows(outcome: DqOutcome) -> list[tuple[Any, ...]]:
    """``outcome.results`` as ``ops.dq_results`` rows (driver-side: one small row per expectation)."""
    start, end = outcome.interval if outcome.interval else (None, None)
    return [(outcome.run_id, outcome.dag_id, outcome.task_id, outcome.table, start, end, r.expectation,
             r.expectation_type, r.severity, r.success, r.observed_value, r.unexpected_count, r.unexpected_sample,
             outcome.validated_at) for r in outcome.results]


def _concurrent_commit(exc: BaseException) -> bool:
    """Delta's optimistic concurrency: another task committed to the table meanwhile (Concurrent*Exception; or
    DELTA_PROTOCOL_CHANGED "... changed by a concurrent update" when two tasks create the table). Our rows are keyed
    by (run, table, task), so re-running the overwrite is safe. Over Spark Connect the class is UnknownException:
    match the message."""
    return "concurrent" in (type(exc).__name__ + str(exc)[:500]).lower()


def _with_retries(write: Callable[[], None]) -> None:
    Retrying(stop=stop_after_attempt(WRITE_ATTEMPTS), wait=wait_incrementing(start=2, increment=2),
             retry=retry_if_exception(_concurrent_commit), reraise=True, sleep=time.sleep)(write)


def write_results(spark: SparkSession, settings: Settings, outcome: DqOutcome) -> None:
    """Replace this (run_id, table, task)'s rows of ``ops.dq_results`` with one row per expectation."""
    frame = spark.createDataFrame(results_rows(outcome), schema_of(RESULTS_TABLE))
    _with_retries(lambda: replace_or_append(frame, settings, RESULTS_TABLE, _scope(outcome)))


def quarantine_frame(outcome: DqOutcome, quarantined: DataFrame) -> DataFrame:
    """``outcome.quarantined`` -> quarantine rows: run, task, table, interval, expectation(s), the row as JSON."""
    from pyspark.sql import functions as F

    start, end = outcome.interval if outcome.interval else (None, None)
    row_cols = [c for c in quarantined.columns if c != EXPECTATIONS_COLUMN]

    def ts(value: Any) -> Any:
        return F.lit(None).cast("timestamp") if value is None else F.timestamp_micros(F.lit(utc_micros(value)))

    return quarantined.select(
        F.lit(outcome.run_id).alias("run_id"), F.lit(outcome.dag_id).alias("dag_id"),
        F.lit(outcome.task_id).alias("task_id"), F.lit(outcome.table).alias("table_name"),
        ts(start).alias("interval_start"), ts(end).alias("interval_end"),
        F.array_join(F.col(EXPECTATIONS_COLUMN), ", ").alias("expectation"),
        F.to_json(F.struct(*[F.col(f"`{c}`") for c in row_cols])).alias("row_json"),
        ts(outcome.validated_at).alias("quarantined_at"),
    )


def write_quarantine(spark: SparkSession, settings: Settings, outcome: DqOutcome) -> None:
    """Replace this (run_id, table, task)'s rows of ``quarantine.dq_<table>`` with ``outcome.quarantined``.

    With nothing quarantined, rows an earlier attempt of the same task wrote are cleared (if the table exists).
    """
    name = quarantine_table(outcome.table)
    if outcome.quarantined is None:
        # Nothing to clear is the common case (a first attempt): a read of the small quarantine table is much
        # cheaper than an empty replaceWhere commit.
        if not has_rows(spark, name, _scope(outcome)):
            return
        from pyspark.sql.types import StructField, StructType

        spark_schema = spark.table(name).schema
        frame = spark.createDataFrame([], StructType([StructField(f.name, f.dataType) for f in spark_schema]))
    else:
        frame = quarantine_frame(outcome, outcome.quarantined)
    _with_retries(lambda: replace_partition(frame, settings, name, _scope(outcome)))
