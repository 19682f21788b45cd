"""
### lake_dq_streaming

Data-quality checks of the live tables the streaming app keeps: the silver CDC
views (`silver.customers`, `products`, `orders`, `order_items`), `silver.events`
(its last two event dates) and the hot windows, every 10 minutes.

Each task validates one table against its Great Expectations suite in
`expectations/<db>.<table>.yml` (logic: `spark_jobs/quality/checks.py`),
writes one row per expectation to `ops.dq_results`, renders the validation's
Data Docs page under the state dir, and fails naming the table, expectation,
unexpected count and sample rows if a `block` expectation failed. `warn` only
records. Freshness SLOs are declared per table in the table registry (`LAKE_DQ_FRESHNESS_TABLES`
overrides them).

Param `settle_seconds` (default 600): rules across two CDC tables (an order's
total against its items, orders -> customers) judge only changes at least this
old, since each topic applies on its own. Trigger with `{"settle_seconds": 0}`
once the stream is known to be caught up (`lake stream wait`) to judge
everything at once.

Tasks run one at a time (two cores, one writer of `ops.dq_results` per DAG);
a run re-does the same checks, so retries and clears are idempotent (results
are replaced per run, table and task).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Param, task

from spark_jobs.contracts.tables import live_tables

# Literal on purpose: importing spark_jobs.quality at parse time would import GX and Spark.
#: The registry's live tables (spark_jobs/contracts/tables.py, ``dq="live"``): one task each.
LIVE_TABLES = live_tables()


def _check_task(table: str) -> Any:
    @task(task_id=table.replace(".", "__"))
    def check(**context: Any) -> str:
        from airflow.sdk.exceptions import AirflowFailException

        from spark_jobs.quality.checks import run_live_check
        from spark_jobs.quality.runner import DqBlocked

        try:
            return run_live_check(table, run_id=context["run_id"], dag_id=context["dag"].dag_id,
                                  task_id=context["task"].task_id,
                                  settle_seconds=int(context["params"]["settle_seconds"]))
        except DqBlocked as exc:  # the data must change first; the next scheduled run checks again
            raise AirflowFailException(str(exc)) from exc

    return check()


with DAG(
    dag_id="lake_dq_streaming",
    description="Great Expectations checks of the silver and hot tables every 10 minutes",
    doc_md=__doc__,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    schedule=timedelta(minutes=10),
    catchup=False,
    params={"settle_seconds": Param(600, type="integer", minimum=0,
                                    description="judge cross-table rules only on changes at least this old")},
    max_active_runs=1,
    max_active_tasks=1,
    tags=["lakestream", "data-quality", "silver", "hot"],
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1), "owner": "lakestream",
                  "execution_timeout": timedelta(minutes=9)},
) as dag:
    for live_table in LIVE_TABLES:
        _check_task(live_table)
