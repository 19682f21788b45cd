"""``lake dq status`` / ``lake dq history`` (spark_jobs.quality.checks) over a local results table: the table filter
is a bound SQL parameter, so any table name (a quote in it included) selects exactly its rows."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.contracts.tables import schema_of
from spark_jobs.quality import checks

T1, T2 = datetime(2026, 11, 27, 10, tzinfo=UTC), datetime(2026, 11, 28, 10, tzinfo=UTC)


@pytest.fixture(scope="module")
def results(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    root = Path(tmp_path_factory.mktemp("dq_status"))
    spark.sql(f"CREATE DATABASE IF NOT EXISTS ut_dq_ops LOCATION '{root}'")

    def row(table: str, at: datetime, expectation: str, severity: str, success: bool) -> tuple[Any, ...]:
        return ("r", "d", "t", table, None, None, expectation, "expect_x", severity, success, None, 0, None, at)

    rows = [row("silver.orders", T1, "a", "block", False), row("silver.orders", T2, "a", "block", True),
            row("silver.orders", T2, "b", "warn", False), row("gold.it's", T2, "a", "block", False)]
    spark.createDataFrame(rows, schema_of("ops.dq_results")).write.format("delta").saveAsTable("ut_dq_ops.dq_results")
    return "ut_dq_ops.dq_results"


def test_status_and_history_filter_by_a_bound_table_name(spark: Any, results: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checks, "RESULTS_TABLE", results)
    (orders,) = checks.latest_verdicts(spark, "silver.orders")
    assert (orders["verdict"], orders["expectations"], orders["failures"]) == ("WARN", 2, ["warn:b"])
    (quoted,) = checks.latest_verdicts(spark, "gold.it's")
    assert quoted["verdict"] == "BLOCK"
    assert checks.latest_verdicts(spark, "x' OR '1'='1") == []
    assert {v["table"] for v in checks.latest_verdicts(spark)} == {"silver.orders", "gold.it's"}
    assert [(h["validated_at"][:19], h["passed"]) for h in checks.history(spark, "silver.orders")] == [
        ("2026-11-28T10:00:00", 2 - 1), ("2026-11-27T10:00:00", 0)]
    assert len(checks.history(spark, None, limit=1)) == 1
