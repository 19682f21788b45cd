"""Every custom SQL rule (``unexpected_rows_expectation``) of expectations/*.yml not covered in
test_quality_suites.py: a passing and a failing case each, on inline rows, with the exact unexpected rows."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from spark_jobs.quality import runner
from spark_jobs.quality.suites import load_all, load_suite

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
DAY = (datetime(2026, 3, 9, tzinfo=UTC), datetime(2026, 3, 10, tzinfo=UTC))
#: Spark hands timestamps back as naive local time (the test machines run in UTC).
NAIVE_NOW = NOW.replace(tzinfo=None)


def N(success: bool, rows: list[Any]) -> tuple[bool, list[Any]]:
    """Expected rows as ops.dq_results keeps samples: JSON, values that JSON lacks (timestamps, decimals) as text."""
    return success, json.loads(json.dumps(rows, default=str))


def check(spark: Any, table: str, name: str, df: Any, *, tables: dict[str, str] | None = None,
          interval: tuple[datetime, datetime] | None = None, settle_seconds: int = 600) -> tuple[bool, list[Any]]:
    from spark_jobs.settings import load_settings

    suite = load_suite(table)
    picked = tuple(e for e in suite.expectations if e.name == name)
    assert len(picked) == 1, (table, name)
    out = runner.validate_suite(spark, df, dataclasses.replace(suite, expectations=picked), interval=interval,
                                run_id="r", dag_id="d", task_id="t", settings=load_settings({}), tables=tables,
                                now=NOW, settle_seconds=settle_seconds)
    (r,) = out.results
    assert r.error is None, r.error
    return r.success, r.sample_rows


DIM = "customer_key long, customer_id long, valid_from timestamp, valid_to timestamp, is_current boolean, " \
      "is_deleted boolean"
T1, T2 = datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 5, tzinfo=UTC)


@pytest.mark.parametrize("table", ["gold.dim_customers", "gold.dim_products"])
def test_dimension_has_one_current_version_per_key(spark, table):
    key = "customer_id" if table.endswith("customers") else "product_id"
    schema = DIM.replace("customer_", key.removesuffix("_id") + "_")
    good = spark.createDataFrame([(1, 7, T1, T2, False, False), (2, 7, T2, None, True, False)], schema)
    assert check(spark, table, "one_current_version", good) == N(True, [])
    bad = spark.createDataFrame([(1, 7, T1, None, True, False), (2, 7, T2, None, True, False),
                                 (3, 8, T1, None, True, False)], schema)
    assert check(spark, table, "one_current_version", bad) == N(False, [{key: 7, "current_versions": 2}])


@pytest.mark.parametrize("table", ["gold.dim_customers", "gold.dim_products"])
def test_current_dimension_version_is_open(spark, table):
    key = "customer_id" if table.endswith("customers") else "product_id"
    surrogate = key.removesuffix("_id") + "_key"
    schema = DIM.replace("customer_", key.removesuffix("_id") + "_")
    good = spark.createDataFrame([(1, 7, T1, T2, False, False), (2, 7, T2, None, True, False)], schema)
    assert check(spark, table, "current_is_open", good) == N(True, [])
    bad = spark.createDataFrame([(1, 7, T1, T2, True, False), (2, 8, T2, None, True, True),
                                 (3, 9, T2, None, True, False)], schema)
    ok, rows = check(spark, table, "current_is_open", bad)
    assert not ok and [(r[surrogate], r[key], r["valid_to"], r["is_deleted"]) for r in rows] == [
        (1, 7, str(T2.replace(tzinfo=None)), False), (2, 8, None, True)]


FCT = "order_id long, placed_at timestamp, order_date date"


def test_fct_order_date_is_the_utc_date_of_placed_at(spark):
    late = datetime(2026, 3, 9, 23, 59, 59, tzinfo=UTC)
    good = spark.createDataFrame([(1, late, date(2026, 3, 9)), (2, DAY[0], date(2026, 3, 9))], FCT)
    assert check(spark, "gold.fct_orders", "order_date_is_utc_date_of_placed_at", good) == N(True, [])
    bad = spark.createDataFrame([(1, late, date(2026, 3, 10)), (2, DAY[0], date(2026, 3, 9))], FCT)
    assert check(spark, "gold.fct_orders", "order_date_is_utc_date_of_placed_at", bad) == N(
        False, [{"order_id": 1, "placed_at": late.replace(tzinfo=None), "order_date": date(2026, 3, 10)}])


def test_fct_rows_are_in_the_interval(spark):
    inside = spark.createDataFrame([(1, DAY[0], date(2026, 3, 9)), (2, DAY[1] - timedelta(microseconds=1),
                                                                    date(2026, 3, 9))], FCT)
    assert check(spark, "gold.fct_orders", "in_interval", inside, interval=DAY) == N(True, [])
    outside = spark.createDataFrame([(1, DAY[0], date(2026, 3, 9)), (3, DAY[1], date(2026, 3, 10))], FCT)
    assert check(spark, "gold.fct_orders", "in_interval", outside, interval=DAY) == N(
        False, [{"order_id": 3, "placed_at": DAY[1].replace(tzinfo=None)}])


def test_fct_order_count_matches_silver(spark):
    spark.createDataFrame([(1, DAY[0]), (2, DAY[0] + timedelta(hours=5)), (3, DAY[1])],
                          "order_id long, placed_at timestamp").createOrReplaceTempView("t_silver_orders")
    names = {"silver.orders": "t_silver_orders"}
    two = spark.createDataFrame([(1, DAY[0], date(2026, 3, 9)), (2, DAY[0], date(2026, 3, 9))], FCT)
    assert check(spark, "gold.fct_orders", "order_count_matches_silver", two, tables=names, interval=DAY) == N(
        True, [])
    assert check(spark, "gold.fct_orders", "order_count_matches_silver", two.limit(1), tables=names,
                 interval=DAY) == N(False, [{"gold_orders": 1, "silver_orders": 2}])


def test_fct_volume_against_trailing_seven_days(spark):
    def history(today: int) -> None:
        rows = [(d * 100 + n, DAY[0] - timedelta(days=d, hours=-1), (DAY[0] - timedelta(days=d)).date())
                for d in range(1, 8) for n in range(10)]
        rows += [(n, DAY[0] + timedelta(hours=1), DAY[0].date()) for n in range(today)]
        spark.createDataFrame(rows, FCT).createOrReplaceTempView("t_fct_history")

    names = {"gold.fct_orders": "t_fct_history"}
    frame = spark.createDataFrame([(1, DAY[0], DAY[0].date())], FCT)
    history(10)
    assert check(spark, "gold.fct_orders", "volume_vs_trailing_7d", frame, tables=names, interval=DAY) == N(True, [])
    history(25)
    assert check(spark, "gold.fct_orders", "volume_vs_trailing_7d", frame, tables=names, interval=DAY) == N(
        False, [{"cur": 25, "trailing_mean": Decimal("10.000000")}])


def test_events_user_is_a_customer(spark):
    spark.createDataFrame([(1,)], "customer_id long").createOrReplaceTempView("t_customers_ev")
    schema = "event_id string, user_id long, event_time timestamp"
    names = {"silver.customers": "t_customers_ev"}
    good = spark.createDataFrame([("a", 1, NOW)], schema)
    assert check(spark, "silver.events", "user_is_customer", good, tables=names) == N(True, [])
    bad = spark.createDataFrame([("a", 1, NOW), ("b", 2, NOW)], schema)
    assert check(spark, "silver.events", "user_is_customer", bad, tables=names) == N(
        False, [{"event_id": "b", "user_id": 2, "event_time": NAIVE_NOW}])


def test_order_items_reference_orders_once_settled(spark):
    spark.createDataFrame([(1,)], "order_id long").createOrReplaceTempView("t_orders_oi")
    schema = "order_id long, line_no int, _source_ts timestamp"
    names = {"silver.orders": "t_orders_oi"}
    old, fresh = NOW - timedelta(hours=1), NOW - timedelta(seconds=30)
    items = spark.createDataFrame([(1, 1, old), (2, 1, old), (3, 1, fresh)], schema)
    assert check(spark, "silver.order_items", "order_exists", items.where("order_id <> 2"), tables=names) == N(
        True, [])
    assert check(spark, "silver.order_items", "order_exists", items, tables=names) == N(
        False, [{"order_id": 2, "line_no": 1, "_source_ts": old.replace(tzinfo=None)}])
    # settle 0 (the stream is caught up): the fresh orphan is judged too
    assert check(spark, "silver.order_items", "order_exists", items, tables=names, settle_seconds=0) == N(
        False, [{"order_id": 2, "line_no": 1, "_source_ts": old.replace(tzinfo=None)},
                {"order_id": 3, "line_no": 1, "_source_ts": fresh.replace(tzinfo=None)}])


SILVER_FRESH = [t for t, s in sorted(load_all().items()) if t.startswith("silver.") and t != "silver.events"
                and any(e.name == "fresh" for e in s.expectations)]


@pytest.mark.parametrize("table", SILVER_FRESH)
def test_silver_cdc_table_fresh_within_its_slo(spark, table):
    schema = "_source_ts timestamp"
    young, old = NOW - timedelta(seconds=899), NOW - timedelta(seconds=901)  # SLO 900 s (default)
    assert check(spark, table, "fresh", spark.createDataFrame([(old,), (young,)], schema)) == N(True, [])
    assert check(spark, table, "fresh", spark.createDataFrame([(old,)], schema)) == N(
        False, [{"newest": old.replace(tzinfo=None), "checked_at": NAIVE_NOW}])


def test_events_fresh_by_ingest_time(spark):
    schema = "_ingest_time timestamp"
    young, old = NOW - timedelta(seconds=899), NOW - timedelta(seconds=901)
    assert check(spark, "silver.events", "fresh", spark.createDataFrame([(young,)], schema)) == N(True, [])
    assert check(spark, "silver.events", "fresh", spark.createDataFrame([(old,)], schema)) == N(
        False, [{"newest": old.replace(tzinfo=None), "checked_at": NAIVE_NOW}])


@pytest.mark.parametrize(("table", "minutes"), [("hot.active_users_5m", 5), ("hot.funnel_15m", 15)])
def test_hot_fresh_newest_closed_window(spark, table, minutes):
    schema = "window_start timestamp, window_end timestamp"
    width = timedelta(minutes=minutes)

    def closed_at(end: datetime) -> Any:  # plus one open window, which does not count
        return spark.createDataFrame([(end - width, end), (NOW, NOW + width)], schema)

    ok_end = NOW - width - timedelta(seconds=299)  # SLO 300 s + the window's length
    late_end = NOW - width - timedelta(seconds=301)
    assert check(spark, table, "fresh", closed_at(ok_end)) == N(True, [])
    assert check(spark, table, "fresh", closed_at(late_end)) == N(
        False, [{"newest_closed_window_end": late_end.replace(tzinfo=None), "checked_at": NAIVE_NOW}])
