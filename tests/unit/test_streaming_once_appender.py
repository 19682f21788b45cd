"""Appends of a streaming query land once per (table, batch) across restarts (spark_jobs.table_io.append.OnceAppender)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_jobs.table_io import append as common


@pytest.fixture
def table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    location = str(tmp_path / "t")
    monkeypatch.setattr(common, "table_location", lambda settings, name: location)
    return location


def _rows(spark: Any, location: str) -> list[int]:
    return sorted(r.id for r in spark.read.format("delta").load(location).collect())


def test_a_replayed_first_batch_is_skipped_and_later_batches_append_without_a_check(spark: Any, table: str) -> None:
    first = common.OnceAppender(None)  # type: ignore[arg-type]
    assert first.append(spark.range(0, 2), "t", "app", 5)
    assert first.append(spark.range(2, 4), "t", "app", 6)  # no history read: batch 6 follows a finished batch 5
    # The driver dies after batch 6's append, before Spark recorded the batch: a new driver re-runs batch 6.
    restarted = common.OnceAppender(None)  # type: ignore[arg-type]
    assert not restarted.append(spark.range(2, 4), "t", "app", 6)
    assert restarted.append(spark.range(4, 5), "t", "app", 7)
    assert _rows(spark, table) == [0, 1, 2, 3, 4]
    markers = {r.userMetadata for r in spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()}
    assert {"app:t:5", "app:t:6", "app:t:7"} <= markers


def test_a_batch_an_older_version_wrote_with_delta_transactions_is_not_appended_again(spark: Any, table: str) -> None:
    (spark.range(0, 3).write.format("delta").mode("append").option("txnAppId", "app:t").option("txnVersion", 8)
     .save(table))
    restarted = common.OnceAppender(None)  # type: ignore[arg-type]
    restarted.append(spark.range(0, 3), "t", "app", 8)  # the first batch also carries Delta's idempotent write
    assert _rows(spark, table) == [0, 1, 2]
    assert restarted.append(spark.range(3, 4), "t", "app", 9)
    assert _rows(spark, table) == [0, 1, 2, 3]
