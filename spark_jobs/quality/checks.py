"""Checks of whole tables: the ``lake_dq_streaming`` tasks and ``lake dq run|status|history``.

A live check reads the table as it is now (a silver CDC view or hot table whole;
``silver.events`` only its last ``live_days`` event dates, per the suite's
``meta``), validates it, records the results (and any quarantine rows: for
tables the streaming app owns they are copies for triage, silver itself is not
changed) and raises :class:`DqBlocked` if a ``block`` expectation failed.
"""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from spark_jobs.contracts.tables import live_tables
from spark_jobs.quality.docs import refresh_trend_page
from spark_jobs.quality.outcome import DqBlocked, DqOutcome
from spark_jobs.quality.params import SETTLE_SECONDS
from spark_jobs.quality.runner import validate
from spark_jobs.quality.store import RESULTS_TABLE, write_quarantine, write_results
from spark_jobs.quality.suites import Suite, load_suite

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.settings import Settings

log = logging.getLogger(__name__)

#: Tables the ``lake_dq_streaming`` DAG checks (the streaming app's silver and hot tables: the registry's live ones).
LIVE_TABLES = live_tables()


def _utc_date_col(column: str) -> Any:
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType

    return F.col(column) if column.endswith("_date") else F.date_from_unix_date(
        F.floor(F.unix_seconds(F.col(column)) / F.lit(86400)).cast("int")).cast(DateType())


def table_frame(spark: SparkSession, suite: Suite, *, day: date | None = None, now: datetime | None = None
                ) -> tuple[DataFrame, tuple[datetime, datetime] | None]:
    """The rows of ``suite.table`` to validate and their interval: one UTC ``day``, the live window, or all."""
    from pyspark.sql import functions as F

    df = spark.table(suite.table)
    date_column = suite.meta.get("date_column")
    if day is not None:
        if not date_column:
            raise ValueError(f"{suite.table} has no date column (meta.date_column in {suite.path}): validate it whole")
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        return df.where(_utc_date_col(str(date_column)) == F.lit(day)), (start, start + timedelta(days=1))
    if suite.meta.get("live") == "days" and date_column:
        today = (now or datetime.now(UTC)).date()
        first = today - timedelta(days=int(suite.meta.get("live_days", 1)) - 1)
        return df.where(_utc_date_col(str(date_column)) >= F.lit(first)), None
    return df, None


def check_table(spark: SparkSession, settings: Settings, table: str, *, run_id: str, dag_id: str, task_id: str,
                day: date | None = None, settle_seconds: int = SETTLE_SECONDS) -> DqOutcome:
    """Validate ``table`` now (or one UTC ``day`` of it), record results and quarantine rows; -> the outcome.

    ``settle_seconds``: cross-table rules judge only changes at least this old (``{settle_seconds}``).
    """
    suite = load_suite(table)
    df, interval = table_frame(spark, suite, day=day)
    outcome = validate(spark, df, table, interval=interval, run_id=run_id, dag_id=dag_id, task_id=task_id,
                       settle_seconds=settle_seconds)
    write_results(spark, settings, outcome)
    write_quarantine(spark, settings, outcome)
    # The trend page follows ops.dq_results here (every lake_dq_streaming task, lake dq run), not in the gold
    # gate: its query over the whole history costs seconds the publishing step should not wait for.
    refresh_trend_page(spark, settings)
    return outcome


def run_live_check(table: str, *, run_id: str, dag_id: str, task_id: str, settle_seconds: int = SETTLE_SECONDS
                   ) -> str:
    """Airflow task body of ``lake_dq_streaming``: check one live table; raises :class:`DqBlocked` on a block failure.

    Runs on the stack's Spark Connect server (no JVM per task). ``settle_seconds`` is the run's param: 0 judges
    every change at once (right when the stream is known to be caught up, e.g. after ``lake stream wait``).
    """
    from spark_jobs.session import connect_session
    from spark_jobs.settings import load_settings

    settings = load_settings()
    spark = connect_session(settings)
    outcome = check_table(spark, settings, table, run_id=run_id, dag_id=dag_id, task_id=task_id,
                          settle_seconds=settle_seconds)
    text = outcome.summary()
    log.info("%s", text)  # the task log must name the table, failed expectations, samples and Data Docs page
    if outcome.blocked:
        raise DqBlocked(text)
    return text.splitlines()[0]


# --------------------------------------------------------------------------- lake dq status / history


def latest_verdicts(spark: SparkSession, table: str | None = None) -> list[dict[str, Any]]:
    """Per table: its newest validation (by ``validated_at``) summed up; failed expectations by name.

    Verdict: ``BLOCK`` (a block expectation failed), ``QUARANTINE`` (rows were held back), ``WARN``, ``PASS``.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    results = spark.table(RESULTS_TABLE)
    if table is not None:  # a DataFrame filter: the name is data, never SQL text
        results = results.where(F.col("table_name") == F.lit(table))
    failed, severity = ~F.col("success"), F.col("severity")
    newest = (results.withColumn("newest", F.max("validated_at").over(Window.partitionBy("table_name")))
              .where(F.col("validated_at") == F.col("newest")))
    rows = (newest.groupBy("table_name", "newest").agg(
        F.first("run_id").alias("run_id"), F.first("dag_id").alias("dag_id"), F.first("task_id").alias("task_id"),
        F.count(F.lit(1)).alias("expectations"), F.count_if(failed).alias("failed"),
        F.count_if(failed & (severity == "block")).alias("blocking"),
        F.count_if(failed & (severity == "quarantine")).alias("quarantining"),
        F.sort_array(F.collect_list(F.when(failed, F.concat(severity, F.lit(":"), F.col("expectation")))))
        .alias("failures"))
        .withColumnRenamed("newest", "validated_at").orderBy("table_name").collect())
    out = []
    for r in rows:
        # A failed quarantine expectation held rows back: say so, it is not a mere warning.
        verdict = ("BLOCK" if r["blocking"] else "QUARANTINE" if r["quarantining"] else "WARN" if r["failed"]
                   else "PASS")
        out.append({"table": r["table_name"], "verdict": verdict, "validated_at": r["validated_at"].isoformat(),
                    "run_id": r["run_id"], "dag_id": r["dag_id"], "task_id": r["task_id"],
                    "expectations": r["expectations"], "failed": r["failed"], "failures": list(r["failures"])})
    return out


def history(spark: SparkSession, table: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """Validations newest first: table, time, run, pass rate, failed count (the trend of ``ops.dq_results``)."""
    from pyspark.sql import functions as F

    results = spark.table(RESULTS_TABLE)
    if table is not None:
        results = results.where(F.col("table_name") == F.lit(table))
    rows = (results.groupBy("table_name", "validated_at", "run_id", "task_id").agg(
        F.count(F.lit(1)).alias("expectations"), F.count_if(F.col("success")).alias("passed"),
        F.count_if(~F.col("success") & (F.col("severity") == "block")).alias("blocking"))
        .orderBy(F.col("validated_at").desc(), F.col("table_name")).limit(int(limit)).collect())
    return [{"table": r["table_name"], "validated_at": r["validated_at"].isoformat(), "run_id": r["run_id"],
             "task_id": r["task_id"], "expectations": r["expectations"], "passed": r["passed"],
             "pass_rate": round(r["passed"] / r["expectations"], 4) if r["expectations"] else None,
             "blocking": r["blocking"]} for r in rows]


def run_now(spark: SparkSession, settings: Settings, table: str, day: date | None,
            settle_seconds: int = SETTLE_SECONDS) -> DqOutcome:
    """``lake dq run``: validate ``table`` (whole, or one UTC day) now, recorded under a manual run id."""
    from uuid import uuid4

    run_id = f"manual__{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}_{uuid4().hex[:6]}"
    return check_table(spark, settings, table, run_id=run_id, dag_id="lake_dq_cli", task_id=table, day=day,
                       settle_seconds=settle_seconds)


def recorded_verdicts(spark: SparkSession, table: str | None) -> list[dict[str, Any]]:
    """:func:`latest_verdicts`, or none before the first validation created the results table."""
    return latest_verdicts(spark, table) if spark.catalog.tableExists(RESULTS_TABLE) else []


def recorded_history(spark: SparkSession, table: str | None, limit: int) -> list[dict[str, Any]]:
    """:func:`history`, or none before the first validation created the results table."""
    return history(spark, table, limit) if spark.catalog.tableExists(RESULTS_TABLE) else []
