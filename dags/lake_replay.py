"""
### lake_replay

The Kappa rebuild: replays tables from the **bronze archive** with the streaming app's own transforms, as one
Spark batch, into shadow tables (`replay.<db>__<table>`), runs each table's data-quality suite on its shadow and
logs a diff against the live table (row counts, keys only on one side, a sample of changed rows). Logic in
`spark_jobs/replay/` (the same as `lake replay`); this file only schedules it.

* **Params**: `tables` (e.g. `silver.orders`, `hot.*`, or `all`), `until` (ISO-8601 instant: build from records
  Kafka received up to then; empty: everything archived) and `switch`. Without `switch` the run is a dry run:
  the shadows stay for inspection (`lake sql`). With `switch` (the confirmation), when every `block` rule passed,
  the streaming app is stopped, the tail of bronze since the build is applied to the shadows and each live table
  is overwritten from its shadow in one Delta commit, then the app is restarted. A failed `block` rule fails the
  task with nothing switched.
* **Rollback**: `lake replay rollback TABLE` (Delta RESTORE to the version before the switch, recorded in
  `ops.replays`) within `LAKE_REPLAY_ROLLBACK_HOURS`.
* **Manual only** (no schedule); one run at a time (`max_active_runs=1`, pool `ops_replay`, and the replay's own
  lock against a `lake replay` from a terminal).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param

JOB = Path(__file__).resolve().parent.parent / "spark_jobs" / "cli" / "replay_job.py"

with DAG(
    dag_id="lake_replay",
    description="Rebuild silver/hot tables from the bronze archive into shadows; DQ gate, diff, switch",
    doc_md=__doc__,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    schedule=None,
    catchup=False,
    max_active_runs=1,
    tags=["lakestream", "replay", "kappa", "ops"],
    params={
        "tables": Param(["all"], type="array", items={"type": "string"}, minItems=1,
                        description="tables to replay (silver.orders, silver.events, hot.sales_per_minute, "
                                    "patterns like hot.*), or all"),
        # null allowed: the UI's trigger form treats an empty string param as missing and refuses to submit.
        "until": Param(None, type=["null", "string"], description="ISO-8601 instant (UTC if no zone); empty: every "
                                                                  "archived record"),
        "switch": Param(False, type="boolean", description="switch the live tables when every block rule passes "
                                                           "(else a dry run: shadows and diff only)"),
    },
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1), "owner": "lakestream"},
) as dag:
    SparkSubmitOperator(
        task_id="replay",
        conn_id="lake_spark",
        application=str(JOB),
        name="lake_replay",
        application_args=["--tables", "{{ params.tables | join(',') }}", "--until", "{{ params.until or '' }}",
                          "--switch", "{{ params.switch }}", "--run-id", "{{ run_id }}"],
        pool="ops_replay",
        execution_timeout=timedelta(hours=3),
    )
