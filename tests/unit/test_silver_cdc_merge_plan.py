"""CDC apply: the MERGE plan's SQL fragments (the statement runs on real Delta tables in test_silver_cdc_apply.py)."""

from __future__ import annotations

import pytest

from spark_jobs.silver.cdc import UNAVAILABLE_VALUE, silver_columns, toastable_columns, toastable_columns_of
from spark_jobs.table_io.merge import merge_condition, merge_plan, newer_condition
from tests.unit.cdc_records import KEYS, ORDERS

COLUMNS = silver_columns(ORDERS)


def test_merge_plan_sql_strings() -> None:
    newer = ("((s.`_snapshot_rank` > t.`_snapshot_rank`) OR (s.`_snapshot_rank` = t.`_snapshot_rank` AND "
             "s.`_commit_lsn` > t.`_commit_lsn`) OR (s.`_snapshot_rank` = t.`_snapshot_rank` AND "
             "s.`_commit_lsn` = t.`_commit_lsn` AND s.`_change_lsn` > t.`_change_lsn`))")
    assert newer_condition() == newer
    assert merge_condition(["order_id", "line"]) == "t.`order_id` = s.`order_id` AND t.`line` = s.`line`"
    plan = merge_plan(["id"], ["id", "status", "notes", "_op", "_snapshot_rank", "_commit_lsn", "_change_lsn"],
                      ["notes"])
    assert plan.condition == "t.`id` = s.`id`"
    assert plan.newer == newer
    assert plan.delete_condition == f"s.`_op` = 'd' AND {newer}"
    assert plan.update_condition == f"s.`_op` <> 'd' AND {newer}"
    assert plan.insert_condition == "s.`_op` <> 'd'"
    assert dict(plan.update_set) == {
        "status": "s.`status`",
        "notes": f"CASE WHEN s.`notes` = '{UNAVAILABLE_VALUE}' THEN t.`notes` ELSE s.`notes` END",
        "_op": "s.`_op`",
        "_snapshot_rank": "s.`_snapshot_rank`",
        "_commit_lsn": "s.`_commit_lsn`",
        "_change_lsn": "s.`_change_lsn`",
    }
    assert dict(plan.insert_values) == {c: f"s.`{c}`" for c in
                                        ["id", "status", "notes", "_op", "_snapshot_rank", "_commit_lsn", "_change_lsn"]}


def test_merge_plan_quotes_odd_names_and_uses_given_aliases() -> None:
    plan = merge_plan(["order"], ["order", "we`ird", *["_snapshot_rank", "_commit_lsn", "_change_lsn"]],
                      target="tgt", source="src")
    assert plan.condition == "tgt.`order` = src.`order`"
    assert plan.update_set["we`ird"] == "src.`we``ird`"


def test_toastable_columns_default_to_non_key_strings() -> None:
    assert toastable_columns(ORDERS, KEYS) == ["status", "notes", "attrs"]
    assert toastable_columns_of([("id", True), ("status", True), ("amount", False)], KEYS) == ["status"]
    assert COLUMNS == ["id", "status", "amount", "placed_at", "notes", "attrs",
                       "_op", "_snapshot_rank", "_commit_lsn", "_change_lsn", "_source_ts", "_extra"]


def test_merge_plan_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="key_columns is empty"):
        merge_condition([])
    with pytest.raises(ValueError, match=r"columns \['_commit_lsn', '_change_lsn'\] are missing"):
        merge_plan(["id"], ["id", "status", "_snapshot_rank"])
    with pytest.raises(ValueError, match=r"TOAST-able columns \['id', 'nope'\]"):
        merge_plan(["id"], COLUMNS, ["id", "nope"])
