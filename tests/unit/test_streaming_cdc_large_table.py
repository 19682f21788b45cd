"""A silver CDC table past ``LAKE_CDC_TASK_MERGE_MAX_MB`` leaves the delta-rs MERGE (copy-on-write) for Spark's MERGE
with deletion vectors, for good: a restart does not turn them off again."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from spark_jobs.contracts.tables import SILVER_PROPS
from spark_jobs.streaming.cdc import CdcApp
from spark_jobs.table_io.create import properties_to_set
from spark_jobs.table_io.driver import writable_target


def _app(spark: Any, limit_mb: int, targets: dict[str, Any]) -> CdcApp:
    app = CdcApp.__new__(CdcApp)  # only what the switch uses: no stack, no status file
    app.spark, app.settings = spark, SimpleNamespace(cdc_task_merge_max_mb=limit_mb)  # type: ignore[assignment]
    app._lock, app._task_targets = threading.Lock(), targets
    return app


def test_a_table_past_the_limit_gets_deletion_vectors_and_leaves_the_task_merge(tmp_path: Path, spark: Any) -> None:
    spark.sql(f"CREATE DATABASE IF NOT EXISTS ut_large LOCATION '{tmp_path}'")
    spark.sql("CREATE TABLE ut_large.orders (order_id BIGINT NOT NULL) USING delta TBLPROPERTIES ("
              + ", ".join(f"'{k}' = '{v}'" for k, v in SILVER_PROPS.items()) + ")")
    uri = str(tmp_path / "orders")
    target = writable_target("ut_large.orders", uri, {})
    assert target is not None  # delta-rs writes it today
    contract = SimpleNamespace(silver="ut_large.orders")
    targets: dict[str, Any] = {"ut_large.orders": target}

    _app(spark, 1, targets)._leave_task_merge_if_large(contract, 2**20)  # type: ignore[arg-type]
    _app(spark, 0, targets)._leave_task_merge_if_large(contract, 2**40)  # type: ignore[arg-type]  # 0: never
    assert "ut_large.orders" in targets and writable_target("ut_large.orders", uri, {}) is not None

    _app(spark, 1, targets)._leave_task_merge_if_large(contract, 2**20 + 1)  # type: ignore[arg-type]
    assert targets == {}
    props = {r["key"]: r["value"] for r in spark.sql("SHOW TBLPROPERTIES ut_large.orders").collect()}
    assert props["delta.enableDeletionVectors"] == "true"
    assert writable_target("ut_large.orders", uri, {}) is None  # after a restart too: the protocol says so
    assert properties_to_set(SILVER_PROPS, props) == {}  # the stream's start does not turn them off again
    spark.sql("DROP DATABASE ut_large CASCADE")


def test_declared_properties_are_set_except_one_the_writer_turned_on() -> None:
    declared = {"delta.enableDeletionVectors": "false", "delta.enableChangeDataFeed": "true"}
    assert properties_to_set(declared, {}) == declared
    assert properties_to_set(declared, {"delta.enableDeletionVectors": "true"}) == {
        "delta.enableChangeDataFeed": "true"}
    assert properties_to_set(declared, {"delta.enableChangeDataFeed": "false",
                                        "delta.enableDeletionVectors": "false"}) == {"delta.enableChangeDataFeed": "true"}
