"""Data quality: Great Expectations suites per table (``expectations/``), severities, results, Data Docs.

Public API (what the DAGs call)::

    outcome = validate(spark, df, "gold.fct_orders", interval=(start, end), run_id=..., dag_id=..., task_id=...)
    write_results(spark, settings, outcome)      # ops.dq_results, one row per expectation
    write_quarantine(spark, settings, outcome)   # quarantine.dq_gold_fct_orders
    if outcome.blocked: raise ...(outcome.summary())
    publish(outcome.passed)

See :mod:`spark_jobs.quality.suites` for the suite files, :mod:`spark_jobs.quality.runner` for how
severities act and :mod:`spark_jobs.quality.checks` for the live-table checks and ``lake dq``.
"""

from spark_jobs.quality.docs import data_docs_dir
from spark_jobs.quality.runner import (
    DqBlocked,
    DqOutcome,
    ExpectationResult,
    validate,
    validate_suite,
)
from spark_jobs.quality.store import RESULTS_TABLE, quarantine_table, write_quarantine, write_results
from spark_jobs.quality.suites import SEVERITIES, Suite, SuiteError, load_all, load_suite

__all__ = [
    "RESULTS_TABLE",
    "SEVERITIES",
    "DqBlocked",
    "DqOutcome",
    "ExpectationResult",
    "Suite",
    "SuiteError",
    "data_docs_dir",
    "load_all",
    "load_suite",
    "quarantine_table",
    "validate",
    "validate_suite",
    "write_quarantine",
    "write_results",
]
