"""Writes of ``ops.dq_results`` and ``quarantine.dq_*``: a write that lost a commit race is retried, others fail."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.quality import store

# As a gold task sees it over Spark Connect when two tasks create ops.dq_results at once (CI log, 2026-11-25).
PROTOCOL_CHANGED = ("(io.delta.exceptions.ProtocolChangedException) [DELTA_PROTOCOL_CHANGED] ProtocolChangedException: "
                    "The protocol version of the Delta table has been changed by a concurrent update. This happens "
                    "when multiple writers are writing to an empty directory.")


class UnknownException(Exception):  # the class name pyspark's Connect client gives a JVM error it does not map
    pass


def _flaky(errors: list[Exception]) -> tuple[list[int], Callable[[], None]]:
    calls: list[int] = []

    def write() -> None:
        calls.append(1)
        if errors:
            raise errors.pop(0)

    return calls, write


@pytest.mark.parametrize("error", [UnknownException(PROTOCOL_CHANGED),
                                   UnknownException("[DELTA_CONCURRENT_APPEND] ConcurrentAppendException: Files "
                                                    "were added to the root of the table by a concurrent update.")])
def test_a_write_that_lost_a_commit_race_is_retried(error: Exception, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("spark_jobs.quality.store.time.sleep", lambda s: None)
    calls, write = _flaky([error, error])
    store._with_retries(write)
    assert len(calls) == 3


def test_other_errors_and_the_last_attempt_are_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("spark_jobs.quality.store.time.sleep", lambda s: None)
    calls, write = _flaky([UnknownException("[TABLE_OR_VIEW_NOT_FOUND] ops.dq_results")])
    with pytest.raises(UnknownException, match="TABLE_OR_VIEW_NOT_FOUND"):
        store._with_retries(write)
    assert len(calls) == 1
    calls, write = _flaky([UnknownException(PROTOCOL_CHANGED) for _ in range(store.WRITE_ATTEMPTS)])
    with pytest.raises(UnknownException, match="DELTA_PROTOCOL_CHANGED"):
        store._with_retries(write)
    assert len(calls) == store.WRITE_ATTEMPTS


def _outcome(spark: Any, run_id: str, task_id: str, expectations: list[str]) -> Any:
    from datetime import UTC, datetime

    from spark_jobs.quality.outcome import DqOutcome, ExpectationResult

    results = [ExpectationResult(table=f"gold.{task_id}", expectation=e, expectation_type="t", severity="warn",
                                 success=True, observed_value=None, unexpected_count=0, unexpected_sample="[]")
               for e in expectations]
    return DqOutcome(table=f"gold.{task_id}", interval=None, run_id=run_id, dag_id="d", task_id=task_id,
                     validated_at=datetime(2026, 1, 1, tzinfo=UTC), results=results, passed=spark.range(1),
                     quarantined=None, blocked=False)


def test_first_write_of_a_scope_appends_blindly_and_a_rerun_replaces_its_rows(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_jobs.settings import load_settings

    monkeypatch.setattr("spark_jobs.table_io.database_location", lambda settings, db: f"file://{tmp_path}/{db}")
    settings = load_settings()
    spark.sql(f"DROP TABLE IF EXISTS {store.RESULTS_TABLE}")
    store.write_results(spark, settings, _outcome(spark, "r1", "fct_orders", ["a", "b"]))  # creates the table
    store.write_results(spark, settings, _outcome(spark, "r1", "fct_daily_sales", ["a", "b", "c"]))
    store.write_results(spark, settings, _outcome(spark, "r1", "fct_orders", ["a"]))  # a cleared task re-runs

    history = spark.sql(f"DESCRIBE HISTORY {store.RESULTS_TABLE}").orderBy("version").collect()
    # Another task's first write reads nothing, so it cannot conflict with a concurrent commit: a blind append.
    assert [(h["operation"], h["isBlindAppend"]) for h in history][1] == ("WRITE", True)
    assert history[2]["operationParameters"]["mode"] == "Overwrite"  # the re-run replaced its own rows
    rows = spark.table(store.RESULTS_TABLE).select("task_id", "expectation").collect()
    assert sorted((r[0], r[1]) for r in rows) == [("fct_daily_sales", "a"), ("fct_daily_sales", "b"),
                                                   ("fct_daily_sales", "c"), ("fct_orders", "a")]
    spark.sql(f"DROP TABLE {store.RESULTS_TABLE}")


@pytest.mark.parametrize("value", ["scheduled__2026-03-01T00:10:00+00:00", "it's", "a'' OR ''='", "back\\slash\\",
                                   "new\nline", "ü; --"])
def test_sql_string_reads_back_as_the_same_value(spark: Any, value: str) -> None:
    """The literal ``replaceWhere`` predicates are built from (Delta takes SQL text, no parameters)."""
    from pyspark.sql import functions as F

    assert spark.range(1).select(F.expr(store.sql_string(value))).first()[0] == value
