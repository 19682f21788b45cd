"""
### lake_smoke

Writes a small Delta table `ops.smoke` to the lake through the shared catalog
and reads it back (`spark_jobs/jobs/smoke.py`, via `spark-submit`). Proves that
Airflow -> Spark -> Delta on S3 -> Hive metastore works end to end.

Each run replaces only its own rows (keyed on the run id), so retries and
re-runs are idempotent. Trigger it from the UI; `rows` sets the row count.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param

JOB = Path(__file__).resolve().parent.parent / "spark_jobs" / "jobs" / "smoke.py"

with DAG(
    dag_id="lake_smoke",
    description="Write and read back ops.smoke through the shared catalog",
    doc_md=__doc__,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    schedule=None,
    catchup=False,
    tags=["lakestream", "smoke", "ops"],
    params={"rows": Param(10, type="integer", minimum=1, maximum=1_000_000, description="rows to write")},
    default_args={"retries": 2, "retry_delay": timedelta(seconds=30), "owner": "lakestream"},
    max_active_runs=1,
) as dag:
    SparkSubmitOperator(
        task_id="write_and_read_back",
        conn_id="lake_spark",
        application=str(JOB),
        name="lake_smoke",
        application_args=["--run-id", "{{ run_id }}", "--rows", "{{ params.rows }}"],
        pool="default_pool",
        execution_timeout=timedelta(minutes=15),
    )
