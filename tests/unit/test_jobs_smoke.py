from __future__ import annotations

from typing import Any

import pytest

from spark_jobs.jobs.smoke import run_predicate, smoke_rows


def test_smoke_rows_exact_output(spark: Any) -> None:
    from pyspark.testing import assertDataFrameEqual

    got = smoke_rows(spark, "r1", 3).drop("written_at")
    want = spark.createDataFrame([("r1", 1, 1), ("r1", 2, 4), ("r1", 3, 9)], "run_id string, n int, square long")
    assertDataFrameEqual(got, want)


@pytest.mark.parametrize("run_id", ["manual__2026-03-01T00:10:00+00:00", "it's", "back\\slash", "a'' OR ''='"])
def test_the_replace_predicate_matches_exactly_its_runs_rows(spark: Any, run_id: str) -> None:
    rows = smoke_rows(spark, run_id, 2).unionByName(smoke_rows(spark, run_id + "x", 1))
    assert rows.where(run_predicate(run_id)).count() == 2
