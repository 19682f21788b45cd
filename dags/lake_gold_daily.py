"""
### lake_gold_daily

The batch layer: builds the gold star schema for one UTC day per run.

`dim_customers`, `dim_products` (SCD2 from the ordered CDC history in bronze) ->
`fct_orders` -> `fct_daily_sales`, and `fct_daily_funnel` from `silver.events`.
Logic lives in `spark_jobs/jobs/gold.py` and `spark_jobs/gold/`; this file only
schedules it.

* **Interval**: a `CronDataIntervalTimetable` at 00:00 UTC, so the run of a day
  has the real interval [day 00:00, next day 00:00) (a plain cron string gives
  start == end in Airflow 3). The `day` param (YYYY-MM-DD) overrides it for a
  manual run; a run without a usable interval fails saying why.
* **Backfill**: Trigger -> Backfill in the UI, or `POST /api/v2/backfills`.
  Every fact write replaces exactly its day (`replaceWhere`), so a re-run or a
  reprocessing backfill gives identical rows; dimensions are rebuilt whole from
  the complete history (idempotent).
* **Where Spark runs**: in the stack's long-running Spark Connect server
  (service `spark-connect`). A task sends its plan there and waits, instead of
  paying a JVM start per `spark-submit` (a 7-day backfill is 35 tasks) and an
  extra driver heap next to the streaming app. Pointing `LAKE_SPARK_MASTER` at
  a cluster moves that server's executors there.
* **One writer per table**: each task takes a slot of its table's pool
  (`gold_<table>`, 1 slot, created by `lake stack up`), so two runs, scheduled
  or backfill, never write the same table at once.
* **Data quality**: before a table is written, its suite
  (`expectations/gold.<table>.yml`) validates the computed rows: verdicts go to
  `ops.dq_results`, rows failing a `quarantine` expectation to
  `quarantine.dq_gold_<table>` (the rest is published), and a failed `block`
  expectation fails the task without writing (its log names the table,
  interval, expectation, count and sample rows; fix the data, then clear it).
  The `dq_drill` param plays a faulty transform for one table (a duplicated
  row) to show the gate failing the task with nothing published.
* **Assets**: each gold table is an Asset (`gold.<table>`), updated when its
  task succeeds; data-quality and serving DAGs schedule on them.
* **Serving watermark**: once every gold task of the run succeeded (their
  gates passed, their rows are committed), `serving_watermark` moves
  `ops.serving_watermark` forwards over the unbroken run of days whose gold
  passed its `block` rules: that commit switches those days of the serving
  views from the speed layer to gold. It never moves backwards unless the run
  sets the `serving_backfill` param (recorded in the table). It updates the
  Assets `serving.daily_sales` and `serving.daily_funnel` (extra: the new and
  previous watermark), for DAGs that read the serving views. Logic in
  `spark_jobs/jobs/serving.py` and `spark_jobs/serving/`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Asset, CronDataIntervalTimetable, Param, task

from spark_jobs.contracts.tables import gold_dependencies, gold_steps

#: The gold tables in build order, from the table registry (spark_jobs/contracts/tables.py): a task, a pool and an
#: Asset each; a task runs after the tasks of the gold tables it reads.
GOLD_TABLES = gold_steps()
GOLD = tuple(t.short for t in GOLD_TABLES)
ASSETS = {t: Asset(name=f"gold.{t}", uri=f"lakestream://gold/{t}", group="gold") for t in GOLD}
#: The serving views (spark_jobs/serving/views.py): updated when the watermark task succeeds.
SERVING = ("daily_sales", "daily_funnel")
SERVING_ASSETS = {v: Asset(name=f"serving.{v}", uri=f"lakestream://serving/{v}", group="serving") for v in SERVING}


def _gold_task(table: str) -> Any:
    @task(task_id=table, pool=f"gold_{table}", outlets=[ASSETS[table]])
    def build(**context: Any) -> str:
        from airflow.sdk.exceptions import AirflowFailException

        from spark_jobs.jobs.gold import IntervalError, RunParamError, run_task
        from spark_jobs.quality.runner import DqBlocked

        try:
            return run_task(table, context["params"].get("day"), context.get("data_interval_start"),
                            context.get("data_interval_end"), run_id=context["run_id"],
                            dag_id=context["dag"].dag_id, task_id=table, drill=context["params"].get("dq_drill"))
        except (IntervalError, RunParamError, DqBlocked) as exc:  # a retry cannot help: fail now, saying why
            raise AirflowFailException(str(exc)) from exc

    return build()


@task(task_id="serving_watermark", pool="ops_serving_watermark", outlets=list(SERVING_ASSETS.values()))
def serving_watermark(**context: Any) -> dict[str, Any]:
    from airflow.sdk.exceptions import AirflowFailException

    from spark_jobs.jobs.gold import IntervalError
    from spark_jobs.jobs.serving import watermark_task

    try:
        moved = watermark_task(context["params"].get("day"), context.get("data_interval_start"),
                               context.get("data_interval_end"), backfill=bool(context["params"].get("serving_backfill")),
                               run_id=context["run_id"], dag_id=context["dag"].dag_id, task_id="serving_watermark")
    except IntervalError as exc:  # a retry cannot help: fail now, saying why
        raise AirflowFailException(str(exc)) from exc
    for asset in SERVING_ASSETS.values():
        context["outlet_events"][asset].extra = moved
    return moved


with DAG(
    dag_id="lake_gold_daily",
    description="Gold star schema (SCD2 dimensions, order/sales/funnel facts) for one UTC day",
    doc_md=__doc__,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    catchup=False,
    max_active_runs=2,
    tags=["lakestream", "gold", "batch"],
    params={"day": Param(None, type=["null", "string"], format="date",
                         description="compute this UTC day (YYYY-MM-DD) instead of the run's data interval"),
            "dq_drill": Param(None, type=["null", "string"], enum=[None, *GOLD],
                              description="data-quality drill: this gold table's computed rows get one duplicated "
                                          "row, so its gate must fail the task and publish nothing"),
            "serving_backfill": Param(False, type="boolean",
                                      description="set the serving watermark to this run's day even when that moves "
                                                  "it backwards (recorded as a backfill in ops.serving_watermark)")},
    default_args={"retries": 2, "retry_delay": timedelta(seconds=20), "owner": "lakestream",
                  "execution_timeout": timedelta(minutes=20)},
) as dag:
    built = {table: _gold_task(table) for table in GOLD}
    for gold_table in GOLD_TABLES:
        for upstream in gold_dependencies(gold_table):
            built[upstream.removeprefix("gold.")] >> built[gold_table.short]
    list(built.values()) >> serving_watermark()
