from __future__ import annotations

from typing import Any

from spark_jobs.jobs.smoke import smoke_rows


def test_smoke_rows_exact_output(spark: Any) -> None:
    from pyspark.testing import assertDataFrameEqual

    got = smoke_rows(spark, "r1", 3).drop("written_at")
    want = spark.createDataFrame([("r1", 1, 1), ("r1", 2, 4), ("r1", 3, 9)], "run_id string, n int, square long")
    assertDataFrameEqual(got, want)

