"""Every DAG imports cleanly, has tags and retries, and does no I/O at parse time."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

DAGS_DIR = Path(__file__).resolve().parents[2] / "dags"
DAG_FILES = sorted(p for p in DAGS_DIR.glob("*.py") if not p.name.startswith("_"))


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import os

    home = tmp_path_factory.mktemp("airflow_home")
    os.environ.setdefault("AIRFLOW_HOME", str(home))
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    from airflow.dag_processing.dagbag import DagBag

    # Parse-time network access is a bug: make any connection attempt fail loudly.
    real_connect = socket.socket.connect

    def refuse(self: socket.socket, address: Any) -> None:
        raise AssertionError(f"DAG parsing opened a network connection to {address}")

    socket.socket.connect = refuse  # type: ignore[method-assign,assignment]
    try:
        return DagBag(dag_folder=str(DAGS_DIR))
    finally:
        socket.socket.connect = real_connect  # type: ignore[method-assign]


def test_there_are_dags() -> None:
    assert DAG_FILES, "no DAG files found"


def test_no_import_errors(dagbag: Any) -> None:
    assert dagbag.import_errors == {}


def test_every_file_defines_a_dag(dagbag: Any) -> None:
    files = {Path(d.fileloc).name for d in dagbag.dags.values()}
    assert {p.name for p in DAG_FILES} <= files


@pytest.mark.parametrize("dag_file", [p.name for p in DAG_FILES])
def test_dag_has_tags_retries_docs(dagbag: Any, dag_file: str) -> None:
    dags = [d for d in dagbag.dags.values() if Path(d.fileloc).name == dag_file]
    assert dags
    for dag in dags:
        assert dag.tags, f"{dag.dag_id} has no tags"
        assert dag.doc_md, f"{dag.dag_id} has no doc_md"
        assert dag.start_date is not None and dag.start_date.tzinfo is not None
        for task in dag.tasks:
            assert task.retries >= 2, f"{dag.dag_id}.{task.task_id} retries={task.retries}"


def test_dags_do_not_read_variables_or_connections_at_parse_time() -> None:
    for path in DAG_FILES:
        text = path.read_text()
        for forbidden in ("Variable.get(", "get_connection(", "BaseHook.get", "requests.", "SparkSession"):
            assert forbidden not in text, f"{path.name} uses {forbidden} at module level"


def test_gold_dag_has_real_intervals_pools_assets_and_order(dagbag: Any) -> None:
    from datetime import UTC, datetime

    import pendulum
    from airflow.sdk import CronDataIntervalTimetable
    from airflow.timetables.interval import CronDataIntervalTimetable as SchedulerTimetable

    dag = dagbag.dags["lake_gold_daily"]
    # A real [start, end) interval: a plain cron string would give start == end in Airflow 3.
    assert isinstance(dag.timetable, CronDataIntervalTimetable)
    core = SchedulerTimetable(dag.timetable.expression, dag.timetable.timezone)
    info = core.infer_manual_data_interval(run_after=pendulum.datetime(2026, 11, 20, 5, tz="UTC"))
    assert (info.start, info.end) == (datetime(2026, 11, 19, tzinfo=UTC), datetime(2026, 11, 20, tzinfo=UTC))
    tables = ["dim_customers", "dim_products", "fct_orders", "fct_daily_sales", "fct_daily_funnel"]
    assert sorted(dag.task_ids) == sorted([*tables, "serving_watermark"])
    for t in tables:
        task = dag.get_task(t)
        assert task.pool == f"gold_{t}", "one writer per gold table: its own 1-slot pool"
        assert [o.name for o in task.outlets] == [f"gold.{t}"]
    # A task runs after the tasks of the gold tables it reads (the table registry's reads).
    assert dag.get_task("fct_orders").upstream_task_ids == {"dim_customers"}
    assert dag.get_task("fct_daily_sales").upstream_task_ids == {"fct_orders"}
    assert dag.get_task("fct_daily_funnel").upstream_task_ids == set()
    assert dag.catchup is False and dag.max_active_runs >= 1


def test_gold_dag_moves_the_serving_watermark_last_and_emits_the_serving_assets(dagbag: Any) -> None:
    dag = dagbag.dags["lake_gold_daily"]
    task = dag.get_task("serving_watermark")
    # After every gold task of the run (their gates passed, their rows committed), never beside them.
    assert task.upstream_task_ids == {"dim_customers", "dim_products", "fct_orders", "fct_daily_sales",
                                      "fct_daily_funnel"}
    assert task.downstream_task_ids == set()
    assert task.trigger_rule == "all_success"
    assert task.pool == "ops_serving_watermark", "one writer of ops.serving_watermark: its own 1-slot pool"
    assert [(o.name, o.uri) for o in task.outlets] == [("serving.daily_sales", "lakestream://serving/daily_sales"),
                                                      ("serving.daily_funnel", "lakestream://serving/daily_funnel")]
    assert task.retries >= 2
    assert dag.params["serving_backfill"] is False, "moving the watermark back must be asked for"


def test_serving_assets_name_the_serving_views() -> None:
    import importlib.util

    from spark_jobs.serving.views import VIEWS

    spec = importlib.util.spec_from_file_location("lake_gold_daily_module", DAGS_DIR / "lake_gold_daily.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert sorted(a.name for a in module.SERVING_ASSETS.values()) == sorted(v.name for v in VIEWS)


def test_gold_pools_created_by_the_stack_match_the_dag(dagbag: Any) -> None:
    from spark_jobs.stack.bootstrap import GOLD_POOLS

    used = {t.pool for t in dagbag.dags["lake_gold_daily"].tasks}
    assert used == set(GOLD_POOLS)


def test_replay_dag_is_manual_with_params_and_one_run_at_a_time(dagbag: Any) -> None:
    from airflow.sdk.definitions.timetables.simple import NullTimetable

    from spark_jobs.stack.bootstrap import POOLS

    dag = dagbag.dags["lake_replay"]
    assert isinstance(dag.timetable, NullTimetable)  # triggered from the UI only
    assert dag.max_active_runs == 1 and dag.catchup is False
    assert set(dag.params) == {"tables", "until", "switch"}
    assert dag.params["switch"] is False, "a switch must be asked for: the default run is a dry run"
    (task,) = dag.tasks
    assert task.pool == "ops_replay" and task.pool in POOLS
    assert task.application.endswith("spark_jobs/cli/replay_job.py")
    args = " ".join(task.application_args)
    assert "--tables {{ params.tables | join(',') }}" in args and "--switch {{ params.switch }}" in args
    # `until` may be left empty in the UI's trigger form (null: an empty string param counts as missing there and
    # the form refuses to submit); it renders as an empty argument, which the job reads as "every archived record".
    assert dag.params["until"] is None
    import jinja2

    until = task.application_args[task.application_args.index("--until") + 1]
    assert jinja2.Template(until).render(params={"until": None}) == ""
    assert jinja2.Template(until).render(params={"until": "2026-11-26T18:00:00Z"}) == "2026-11-26T18:00:00Z"


def test_replay_job_arguments_parse_as_the_dag_renders_them() -> None:
    """The rendered args reach the same command as `lake replay` (no Spark: the replay itself is stubbed)."""
    from unittest import mock

    from spark_jobs.cli.replay_job import command
    from spark_jobs.replay.run import ReplayReport

    with mock.patch("spark_jobs.replay.jobs.replay", return_value=ReplayReport("r", status="blocked")) as replay:
        rc = command.main(["--tables", "silver.orders,hot.*", "--until", "2026-11-26T18:00:00Z", "--switch", "True",
                           "--run-id", "manual__1"], standalone_mode=False)
    assert rc == 1  # blocked: the task fails
    _settings, targets = replay.call_args.args
    assert [t.live for t in targets] == ["silver.orders", "hot.sales_per_minute", "hot.active_users_5m",
                                         "hot.funnel_15m"]
    assert replay.call_args.kwargs["dry_run"] is False and replay.call_args.kwargs["run"] == "manual__1"
    assert replay.call_args.kwargs["until"].isoformat() == "2026-11-26T18:00:00+00:00"
    from spark_jobs.stack.stream_control import SupervisedStream

    assert isinstance(replay.call_args.kwargs["stream"], SupervisedStream)  # the switch stops the supervised stream
