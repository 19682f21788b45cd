"""Import what every lake task imports once, in the Airflow scheduler, before its LocalExecutor forks.

On Linux the LocalExecutor forks its workers from the scheduler at start, and each worker forks the task
process: modules the scheduler already holds cost a task nothing. Without this, every gold and
data-quality task spent seconds of CPU importing Great Expectations and the Spark Connect client before
doing any work (figures in docs/benchmarks.md, "`make test` duration"). Called from
``infra/airflow/airflow_local_settings.py``, which Airflow imports in each of its processes; only the
scheduler preloads (the API server, DAG processor and triggerer never run task code).
"""

from __future__ import annotations

import importlib
import logging
import time

#: What a lake_gold_daily or lake_dq_streaming task imports before its first Spark call (found by diffing
#: ``sys.modules`` around one task run; see tests/unit/test_stack_airflow_preload.py).
MODULES = (
    "pyspark.sql.connect.session",
    "pyspark.sql.connect.functions",
    "great_expectations",
    "great_expectations.core.run_identifier",
    "great_expectations.validator.validation_statistics",
    "great_expectations.data_context.types.base",
    "great_expectations.data_context.types.resource_identifiers",
    "great_expectations.datasource.fluent.spark_datasource",
    "great_expectations.execution_engine.sparkdf_execution_engine",
    "spark_jobs.session",
    "spark_jobs.jobs.gold",
    "spark_jobs.gold.dims",
    "spark_jobs.gold.facts",
    "spark_jobs.quality.runner",
    "spark_jobs.quality.store",
    "spark_jobs.quality.docs",
    "spark_jobs.quality.checks",
)

log = logging.getLogger(__name__)


def is_scheduler(argv: list[str]) -> bool:
    """``airflow scheduler ...``: the process whose LocalExecutor forks the task processes."""
    return len(argv) > 1 and argv[1] == "scheduler"


def preload(modules: tuple[str, ...] = MODULES) -> list[str]:
    """Import ``modules``; returns those that failed (a task then imports them itself, as without preload)."""
    failed = []
    t0 = time.monotonic()
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - never take the scheduler down for an optimisation
            failed.append(name)
            log.warning("lakestream preload: cannot import %s (%s); tasks will import it themselves", name, exc)
    log.info("lakestream preload: %d/%d task modules imported in the scheduler in %.1f s",
             len(modules) - len(failed), len(modules), time.monotonic() - t0)
    return failed
