"""Hot window aggregates: per-batch deltas add up to the batch aggregation, late events only counted."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from spark_jobs.hot.windows import (
    ACTIVE_USERS_5M,
    FUNNEL_15M,
    HOT_VIEWS,
    SALES_PER_MINUTE,
    apply_deltas,
    base_aggregates,
    base_window,
    batch_aggregate,
    batch_deltas,
    hot_schema,
    rollup_deltas,
    window_deltas,
)

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SCHEMA = "event_type STRING, user_id BIGINT, event_time TIMESTAMP, revenue DECIMAL(18,2), _late BOOLEAN"


def _events(spark: Any, rows: list[tuple[Any, ...]], schema: str = SCHEMA) -> Any:
    return spark.createDataFrame(rows, schema)


ROWS = [
    ("page_view", 1, T0 + timedelta(seconds=5), None, False),
    ("add_to_cart", 1, T0 + timedelta(seconds=20), None, False),
    ("purchase", 1, T0 + timedelta(seconds=50), Decimal("10.10"), False),
    ("purchase", 2, T0 + timedelta(seconds=59, microseconds=999999), Decimal("0.01"), False),
    ("purchase", 3, T0 + timedelta(minutes=1), Decimal("5.00"), False),  # next minute: window end is exclusive
    ("page_view", 2, T0 + timedelta(minutes=3), None, False),
    ("purchase", 4, T0 + timedelta(seconds=30), Decimal("99.99"), True),  # arrived after its window closed
    ("checkout", 5, T0 + timedelta(minutes=16), None, False),
]


def _by_window(frame: Any) -> dict[datetime, dict[str, Any]]:
    return {r["window_start"].astimezone(UTC): r.asDict() for r in frame.collect()}


def test_sales_per_minute_exact_revenue_and_late_counted_not_added(spark: Any) -> None:
    got = _by_window(window_deltas(_events(spark, ROWS), SALES_PER_MINUTE))
    first = got[T0]
    assert first["orders"] == 2 and first["revenue"] == Decimal("10.11") and first["late_events"] == 1
    assert got[T0 + timedelta(minutes=1)]["orders"] == 1
    assert got[T0 + timedelta(minutes=3)]["orders"] == 0  # a window with only a page view still shows up


def test_active_users_are_distinct_and_funnel_counts_each_stage(spark: Any) -> None:
    users = _by_window(window_deltas(_events(spark, ROWS), ACTIVE_USERS_5M))
    assert users[T0]["active_users"] == 3 and users[T0]["user_ids"] == [1, 2, 3]
    funnel = _by_window(window_deltas(_events(spark, ROWS), FUNNEL_15M))
    assert (funnel[T0]["page_views"], funnel[T0]["add_to_carts"], funnel[T0]["checkouts"],
            funnel[T0]["purchases"], funnel[T0]["late_events"]) == (2, 1, 0, 3, 1)
    assert funnel[T0 + timedelta(minutes=15)]["checkouts"] == 1


def _run_batches(spark: Any, parts: list[list[Any]]) -> dict[str, dict[datetime, dict[str, Any]]]:
    """What the streaming app does per batch: aggregate the batch (Spark), read the changed windows' rows from the
    table (here a dict per view), add the deltas (apply_deltas) and upsert them."""
    tables: dict[str, dict[datetime, dict[str, Any]]] = {view.table: {} for view in HOT_VIEWS}
    for batch_id, part in enumerate(parts):
        deltas = [r.asDict() for r in batch_deltas(_events(spark, part)).collect()]
        for view in HOT_VIEWS:
            mine = [{**d, "window_start": d["window_start"].astimezone(UTC),
                     "window_end": d["window_end"].astimezone(UTC)} for d in deltas if d["table"] == view.table]
            table = tables[view.table]
            current = [table[d["window_start"]] for d in mine if d["window_start"] in table]
            for row in apply_deltas(view, current, mine, batch_id, T0):
                table[row["window_start"]] = row
    return tables


@pytest.mark.parametrize("cuts", [(3, 5), (1, 2, 7), ()], ids=["three-batches", "four-batches", "one-batch"])
def test_batches_upserted_by_the_driver_equal_the_spark_batch_aggregation(spark: Any, cuts: tuple[int, ...]) -> None:
    bounds = [0, *cuts, len(ROWS)]
    tables = _run_batches(spark, [ROWS[lo:hi] for lo, hi in itertools.pairwise(bounds)])
    for view in HOT_VIEWS:
        rows = sorted(tables[view.table].values(), key=lambda r: r["window_start"])
        table = spark.createDataFrame(rows, hot_schema(view))  # the schema a driver commit must fit
        assert table.columns == hot_schema(view).names
        got = _by_window(table)
        whole = _by_window(batch_aggregate(_events(spark, ROWS), view))
        cols = ("window_end", *view.metric_names, "late_events")
        assert {k: {c: v[c] for c in cols} for k, v in got.items()} == {
            k: {c: v[c] for c in cols} for k, v in whole.items()}, view.table


def test_untouched_windows_keep_their_last_batch_and_user_sets_union(spark: Any) -> None:
    tables = _run_batches(spark, [[ROWS[0], ROWS[5]], [ROWS[1], ROWS[7]], [ROWS[7]]])
    got = tables[ACTIVE_USERS_5M.table]
    assert got[T0]["user_ids"] == [1, 2] and got[T0]["active_users"] == 2 and got[T0]["_last_batch"] == 1
    later = got[T0 + timedelta(minutes=15)]
    assert later["user_ids"] == [5] and later["active_users"] == 1 and later["_last_batch"] == 2
    assert tables[FUNNEL_15M.table][T0 + timedelta(minutes=15)]["checkouts"] == 2  # sent twice, counted twice here:
    # de-duplication happens before the hot path, not in it


def test_batch_deltas_have_one_row_per_view_and_window_with_only_their_metrics(spark: Any) -> None:
    rows = batch_deltas(_events(spark, ROWS[:2])).collect()
    assert sorted((r.table, r.window_start.astimezone(UTC)) for r in rows) == sorted(
        (view.table, T0) for view in HOT_VIEWS)
    sales = next(r for r in rows if r.table == SALES_PER_MINUTE.table)
    assert (sales.orders, sales.revenue, sales.page_views, sales.user_ids) == (0, Decimal("0.00"), None, None)


def test_base_windows_rolled_up_on_the_driver_equal_the_per_view_deltas(spark: Any) -> None:
    """The stream's path (one group per Kafka partition and minute, summed per view's window on the driver) gives
    batch_deltas' rows exactly: windows shared by two partitions, a window with only a late event, a 15-minute
    window over several minutes, the user set of a 5-minute window split across partitions and minutes."""
    from pyspark.sql import functions as F

    rows = [*ROWS, ("page_view", 3, T0 + timedelta(minutes=4, seconds=1), None, False),
            ("purchase", 6, T0 + timedelta(minutes=40), Decimal("1.00"), True)]  # late alone in its windows
    events = _events(spark, [(*r, T0 + timedelta(seconds=i)) for i, r in enumerate(rows)],
                     SCHEMA + ", kafka_timestamp TIMESTAMP").withColumn(
        "partition", F.monotonically_increasing_id() % 2)
    groups = (events.withColumn("_base", base_window(F.col("event_time"))).groupBy("partition", "_base")
              .agg(*base_aggregates(F.lit(True))).collect())
    assert len({g["_base"] for g in groups}) < len(groups)  # some minute is in both partitions

    def key(row: dict[str, Any]) -> tuple[str, ...]:
        return tuple(str(row[k]) for k in sorted(row))

    expected = [r.asDict() for r in batch_deltas(events.drop("partition")).collect()]
    got = rollup_deltas([g.asDict() for g in groups])
    assert sorted(got, key=key) == sorted(expected, key=key)
    assert {d["table"] for d in got if d["late_events"] and not (d.get("page_views") or d.get("orders") or
                                                                  d.get("active_users"))} == {
        view.table for view in HOT_VIEWS}


@pytest.mark.parametrize("view", HOT_VIEWS, ids=lambda v: v.table)
def test_the_independent_sql_of_lake_reconcile_agrees_with_the_stream_aggregation(spark: Any, view: Any) -> None:
    """``lake reconcile events`` checks the hot tables with SQL written apart from the stream's DataFrame code
    (spark_jobs.reconcile.expected_windows_sql): both give the same windows on the same events, edges included."""
    from spark_jobs.hot.windows import comparable
    from spark_jobs.reconcile import expected_windows_sql

    _events(spark, ROWS).createOrReplaceTempView("_hot_rows")
    sql = comparable(spark.sql(expected_windows_sql(view.table, view.minutes, "_hot_rows")), view)
    stream = comparable(window_deltas(_events(spark, ROWS), view), view)
    assert sql.count() == stream.count() > 0
    assert sql.exceptAll(stream).count() == 0 and stream.exceptAll(sql).count() == 0
