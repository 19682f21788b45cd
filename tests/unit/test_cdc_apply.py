"""CDC apply: latest_per_key and the MERGE plan, one named test per edge case.

``apply`` below runs the plan's own SQL fragments as a full outer join with the
MERGE's semantics (delete / update / insert / keep), so these tests check the
strings the streaming app hands to Delta, on plain local Spark.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType
from pyspark.testing import assertDataFrameEqual

from spark_jobs.silver.cdc import (
    POSITION_COLUMNS,
    UNAVAILABLE_VALUE,
    drop_superseded_by_delete,
    latest_per_key,
    merge_condition,
    merge_plan,
    newer_condition,
    parse_changes,
    silver_columns,
    toastable_columns,
)
from tests.unit.test_cdc_parse import KEYS, ORDERS, bronze, change, row, tombstone

SILVER_META = StructType(
    [
        StructField("_op", StringType()),
        StructField("_snapshot_rank", IntegerType()),
        StructField("_commit_lsn", LongType()),
        StructField("_change_lsn", LongType()),
        StructField("_source_ts", TimestampType()),
        StructField("_extra", StringType()),
    ]
)
SILVER = StructType([*ORDERS.fields, *SILVER_META.fields])
COLUMNS = silver_columns(ORDERS)
SHOWN = ["id", "status", "notes", "_op", "_snapshot_rank", "_commit_lsn", "_change_lsn"]
SHOWN_DDL = "id int, status string, notes string, _op string, _snapshot_rank int, _commit_lsn long, _change_lsn long"


def _flag(condition: str) -> Any:
    return F.coalesce(F.expr(condition), F.lit(False))


def apply(target: DataFrame, changes: DataFrame) -> DataFrame:
    """One foreachBatch step: latest_per_key, then MERGE emulated with the plan's SQL fragments."""
    plan = merge_plan(KEYS, COLUMNS, toastable_columns(ORDERS, KEYS))
    s = latest_per_key(changes, KEYS).withColumn("__in_s", F.lit(True)).alias("s")
    t = target.withColumn("__in_t", F.lit(True)).alias("t")
    joined = t.join(s, F.expr(plan.condition), "full_outer")
    matched = F.col("t.__in_t").isNotNull() & F.col("s.__in_s").isNotNull()
    delete = matched & _flag(plan.delete_condition)
    update = matched & ~delete & _flag(plan.update_condition)
    insert = F.col("t.__in_t").isNull() & _flag(plan.insert_condition)
    keep = F.col("s.__in_s").isNull() | (matched & ~delete & ~update)
    out = [
        F.when(update, F.expr(plan.update_set.get(c, f"t.`{c}`")))
        .when(insert, F.expr(plan.insert_values[c]))
        .otherwise(F.col(f"t.`{c}`"))
        .cast(SILVER[c].dataType)
        .alias(c)
        for c in COLUMNS
    ]
    return joined.where(keep | update | insert).select(*out)


def empty_silver(spark: Any) -> DataFrame:
    df: DataFrame = spark.createDataFrame([], SILVER)
    return df


def parsed(spark: Any, records: list[Any], first_offset: int = 0) -> DataFrame:
    changes, rejects = parse_changes(bronze(spark, records, first_offset), ORDERS, KEYS)
    assert rejects.count() == 0
    return changes


def shown(spark: Any, rows: list[tuple[Any, ...]]) -> DataFrame:
    df: DataFrame = spark.createDataFrame(rows, SHOWN_DDL)
    return df


def test_out_of_order_across_batches_older_change_is_ignored(spark: Any) -> None:
    newer = [change("u", {"id": 1}, after=row(1, "shipped"), commit=300, lsn=310)]
    older = [change("u", {"id": 1}, after=row(1, "paid"), commit=200, lsn=210)]
    silver = apply(empty_silver(spark), parsed(spark, newer))
    silver = apply(silver, parsed(spark, older, first_offset=1))
    assertDataFrameEqual(silver.select(SHOWN), shown(spark, [(1, "shipped", "n", "u", 1, 300, 310)]))
    # Same outcome as one batch holding both: latest_per_key twice == latest_per_key of the union.
    both = parsed(spark, newer + older)
    once = latest_per_key(both, KEYS).select("id", "_pos")
    twice = latest_per_key(latest_per_key(parsed(spark, newer), KEYS).unionByName(
        latest_per_key(parsed(spark, older, first_offset=1), KEYS)), KEYS).select("id", "_pos")
    assertDataFrameEqual(once, twice)


def test_duplicate_event_is_applied_once(spark: Any) -> None:
    event = change("c", {"id": 1}, after=row(1), commit=100, lsn=110)
    batch = parsed(spark, [event, event])
    newest = latest_per_key(batch, KEYS)
    # Ties on _pos are broken by the higher Kafka offset: deterministic.
    assertDataFrameEqual(newest.select("id", "_offset"), spark.createDataFrame([(1, 1)], "id int, _offset long"))
    silver = apply(empty_silver(spark), batch)
    # Connect re-sends the same event after a restart: the replayed batch must not change silver.
    again = apply(silver, parsed(spark, [event], first_offset=2))
    assertDataFrameEqual(again, silver)
    assertDataFrameEqual(again.select(SHOWN), shown(spark, [(1, "new", "n", "c", 1, 100, 110)]))


def test_delete_then_reinsert_same_key(spark: Any) -> None:
    created = change("c", {"id": 1}, after=row(1, "new"), commit=100, lsn=110)
    deleted = change("d", {"id": 1}, before={"id": 1}, commit=200, lsn=210)
    reinserted = change("c", {"id": 1}, after=row(1, "again"), commit=300, lsn=310)
    # One batch: the re-insert is the newest change and updates the existing row.
    silver = apply(empty_silver(spark), parsed(spark, [created]))
    one = apply(silver, parsed(spark, [deleted, tombstone({"id": 1}), reinserted], first_offset=1))
    assertDataFrameEqual(one.select(SHOWN), shown(spark, [(1, "again", "n", "c", 1, 300, 310)]))
    # Separate batches: the delete removes the row, the re-insert inserts it again.
    gone = apply(silver, parsed(spark, [deleted], first_offset=1))
    assert gone.count() == 0
    back = apply(gone, parsed(spark, [reinserted], first_offset=2))
    assertDataFrameEqual(back.select(SHOWN), shown(spark, [(1, "again", "n", "c", 1, 300, 310)]))


def test_resent_change_after_delete_is_dropped_by_the_delete_markers(spark: Any) -> None:
    """Silver forgets a deleted row, the append-only marker table does not: a re-sent older insert stays out."""
    created = change("c", {"id": 1}, after=row(1, "new"), commit=100, lsn=110)
    deleted = change("d", {"id": 1}, before={"id": 1}, commit=200, lsn=210)
    deleted_again = change("d", {"id": 1}, before={"id": 1}, commit=150, lsn=160)
    reinserted = change("c", {"id": 1}, after=row(1, "again"), commit=300, lsn=310)
    other = change("c", {"id": 2}, after=row(2), commit=100, lsn=120)
    # Markers as the app appends them: one per applied delete, two for key 1 (order irrelevant).
    markers = latest_per_key(parsed(spark, [deleted]), KEYS).select(*KEYS, *POSITION_COLUMNS).unionByName(
        latest_per_key(parsed(spark, [deleted_again]), KEYS).select(*KEYS, *POSITION_COLUMNS))

    def kept(records: list[Any]) -> list[tuple[int, int]]:
        out = drop_superseded_by_delete(latest_per_key(parsed(spark, records), KEYS), markers, KEYS)
        return sorted((r["id"], r["_commit_lsn"]) for r in out.collect())

    assert kept([created, other]) == [(2, 100)]  # Connect re-sent the insert: key 1 stays deleted
    assert kept([deleted]) == []  # the same delete again: already applied
    assert kept([reinserted, other]) == [(1, 300), (2, 100)]  # newer than every marker: applies
    assert kept([other]) == [(2, 100)]  # keys without a marker pass
    # Columns are the input's, unchanged.
    assert drop_superseded_by_delete(parsed(spark, [other]), markers, KEYS).columns == parsed(spark, [other]).columns


def test_delete_older_than_row_is_ignored(spark: Any) -> None:
    silver = apply(empty_silver(spark), parsed(spark, [change("u", {"id": 1}, after=row(1, "paid"), commit=300,
                                                              lsn=310)]))
    late_delete = parsed(spark, [change("d", {"id": 1}, before={"id": 1}, commit=200, lsn=210)], first_offset=1)
    assertDataFrameEqual(apply(silver, late_delete), silver)
    # A delete for a key silver never had inserts nothing.
    assert apply(empty_silver(spark), late_delete).count() == 0


def test_primary_key_change_moves_the_row(spark: Any) -> None:
    silver = apply(empty_silver(spark), parsed(spark, [change("c", {"id": 1}, after=row(1, "new"), commit=100,
                                                              lsn=110)]))
    pk_change = [change("d", {"id": 1}, before={"id": 1}, commit=400, lsn=410), tombstone({"id": 1}),
                 change("c", {"id": 2}, after=row(2, "new"), commit=400, lsn=410)]
    silver = apply(silver, parsed(spark, pk_change, first_offset=1))
    assertDataFrameEqual(silver.select(SHOWN), shown(spark, [(2, "new", "n", "c", 1, 400, 410)]))


def test_snapshot_read_loses_to_streamed_change(spark: Any) -> None:
    # The snapshot's LSN (500) is higher than the streamed update's, yet the streamed change wins.
    streamed = change("u", {"id": 1}, after=row(1, "paid"), commit=200, lsn=210)
    snapshot = change("r", {"id": 1}, after=row(1, "stale"), commit=None, lsn=500, snapshot="true")
    silver = apply(empty_silver(spark), parsed(spark, [streamed]))
    after_snapshot = apply(silver, parsed(spark, [snapshot], first_offset=1))
    assertDataFrameEqual(after_snapshot.select(SHOWN), shown(spark, [(1, "paid", "n", "u", 1, 200, 210)]))
    # Same inside one batch, in either arrival order.
    for records in ([streamed, snapshot], [snapshot, streamed]):
        one = apply(empty_silver(spark), parsed(spark, records))
        assertDataFrameEqual(one.select(SHOWN), shown(spark, [(1, "paid", "n", "u", 1, 200, 210)]))
    # A snapshot row in silver is replaced by a later re-snapshot and by any streamed change.
    first = apply(empty_silver(spark), parsed(spark, [snapshot]))
    resnap = apply(first, parsed(spark, [change("r", {"id": 1}, after=row(1, "resnap"), commit=None, lsn=600,
                                                snapshot="true")], first_offset=1))
    assertDataFrameEqual(resnap.select(SHOWN), shown(spark, [(1, "resnap", "n", "r", 0, 600, 600)]))


def test_toast_placeholder_keeps_target_value(spark: Any) -> None:
    long_text = "x" * 5000
    created = change("c", {"id": 1}, after=row(1, "new", notes=long_text, attrs='{"a": 1}'), commit=100, lsn=110)
    untouched = change("u", {"id": 1}, after=row(1, "paid", notes=UNAVAILABLE_VALUE, attrs=UNAVAILABLE_VALUE),
                       commit=200, lsn=210)
    silver = apply(empty_silver(spark), parsed(spark, [created]))
    silver = apply(silver, parsed(spark, [untouched], first_offset=1))
    assertDataFrameEqual(silver.select("id", "status", "notes", "attrs", "_commit_lsn"),
                         spark.createDataFrame([(1, "paid", long_text, '{"a": 1}', 200)],
                                               "id int, status string, notes string, attrs string, _commit_lsn long"))
    # A later real value replaces it as usual.
    edited = change("u", {"id": 1}, after=row(1, "paid", notes="short now"), commit=300, lsn=310)
    silver = apply(silver, parsed(spark, [edited], first_offset=2))
    assert [r.notes for r in silver.collect()] == ["short now"]


def test_added_column_flows_into_silver_extra(spark: Any) -> None:
    silver = apply(empty_silver(spark), parsed(spark, [change("c", {"id": 1}, after=row(1))]))
    grown = change("u", {"id": 1}, after=row(1, "paid", coupon="SPRING"), commit=200, lsn=210)
    silver = apply(silver, parsed(spark, [grown], first_offset=1))
    assertDataFrameEqual(silver.select("id", "status", "_extra"),
                         spark.createDataFrame([(1, "paid", '{"coupon":"SPRING"}')], "id int, status string, _extra string"))


def test_interleaved_transactions_ordered_by_commit_not_change_lsn(spark: Any) -> None:
    # T1 writes at LSN 180 and commits first; T2 began earlier, wrote at LSN 150, commits after T1.
    # Debezium emits T1 then T2; T2's events carry T1's commit LSN (250) as last commit. Its ts_ms is
    # also earlier (clock skew between sessions does not matter). By change LSN or ts_ms T1 would win;
    # by commit position T2 does, as in PostgreSQL.
    t1 = change("u", {"id": 1}, after=row(1, "from T1"), commit=100, lsn=180, ts_ms=1_709_290_000_900)
    t2 = change("u", {"id": 1}, after=row(1, "from T2"), commit=250, lsn=150, ts_ms=1_709_290_000_100)
    want = shown(spark, [(1, "from T2", "n", "u", 1, 250, 150)])
    assertDataFrameEqual(apply(empty_silver(spark), parsed(spark, [t1, t2])).select(SHOWN), want)
    assertDataFrameEqual(apply(empty_silver(spark), parsed(spark, [t2, t1])).select(SHOWN), want)
    across = apply(apply(empty_silver(spark), parsed(spark, [t2])), parsed(spark, [t1], first_offset=1))
    assertDataFrameEqual(across.select(SHOWN), want)


def test_latest_per_key_orders_within_transaction_by_change_lsn(spark: Any) -> None:
    batch = parsed(spark, [change("u", {"id": 1}, after=row(1, "second"), commit=100, lsn=120),
                           change("u", {"id": 1}, after=row(1, "first"), commit=100, lsn=110),
                           change("c", {"id": 2}, after=row(2), commit=100, lsn=115)])
    assertDataFrameEqual(latest_per_key(batch, KEYS).select("id", "status", "_change_lsn"),
                         spark.createDataFrame([(1, "second", 120), (2, "new", 115)],
                                               "id int, status string, _change_lsn long"))


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
    assert COLUMNS == ["id", "status", "amount", "placed_at", "notes", "attrs",
                       "_op", "_snapshot_rank", "_commit_lsn", "_change_lsn", "_source_ts", "_extra"]
    assert [f.name for f in SILVER.fields] == COLUMNS


def test_merge_plan_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="key_columns is empty"):
        merge_condition([])
    with pytest.raises(ValueError, match=r"columns \['_commit_lsn', '_change_lsn'\] are missing"):
        merge_plan(["id"], ["id", "status", "_snapshot_rank"])
    with pytest.raises(ValueError, match=r"TOAST-able columns \['id', 'nope'\]"):
        merge_plan(["id"], COLUMNS, ["id", "nope"])


def test_latest_per_key_rejects_empty_keys(spark: Any) -> None:
    with pytest.raises(ValueError, match="key_columns is empty"):
        latest_per_key(parsed(spark, []), [])



def test_toast_placeholder_after_insert_in_the_same_batch(spark: Any) -> None:
    from spark_jobs.silver.cdc import UNAVAILABLE_VALUE, fill_toast_within_batch, latest_per_key

    rows = [
        (1, "long text", "a", 1, 10, 0, 1),
        (1, UNAVAILABLE_VALUE, "b", 1, 11, 0, 2),  # update left the TOASTed column untouched
        (2, None, "x", 1, 12, 0, 3),  # a real NULL is a value too
        (2, UNAVAILABLE_VALUE, "y", 1, 13, 0, 4),
        (3, UNAVAILABLE_VALUE, "z", 1, 14, 0, 5),  # nothing earlier in the batch: placeholder stays
    ]
    df = spark.createDataFrame(
        rows, "id long, notes string, name string, _snapshot_rank int, _commit_lsn long, _partition int, _offset long"
    ).withColumn("_change_lsn", F.col("_commit_lsn")).withColumn(
        "_pos", F.struct("_snapshot_rank", "_commit_lsn", "_change_lsn"))
    got = latest_per_key(fill_toast_within_batch(df, ["id"], ["notes"]), ["id"]).select("id", "notes", "name")
    assert sorted(tuple(r) for r in got.collect()) == [(1, "long text", "b"), (2, None, "y"), (3, UNAVAILABLE_VALUE, "z")]
