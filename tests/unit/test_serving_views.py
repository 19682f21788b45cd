"""Serving views on local Delta tables: gold up to the watermark, speed after it, the switch, and one rule.

The lake is played by databases ``ut_sv_<layer>`` (the views' SQL takes the table names through a mapping).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.testing import assertDataFrameEqual

from spark_jobs.contracts.shop import ORDER_ITEMS, ORDERS
from spark_jobs.contracts.tables import schema_of
from spark_jobs.gold.facts import fct_daily_funnel, fct_daily_sales, fct_orders
from spark_jobs.serving.views import VIEWS, create_views
from spark_jobs.serving.watermark import Move, record
from tests.unit.test_gold_facts import DIM, EVENTS, orders_and_items

D = Decimal
D1, D2, D3 = date(2026, 3, 1), date(2026, 3, 2), date(2026, 3, 3)
LAYERS = ("gold", "silver", "serving", "ops")


def name(table: str) -> str:
    return f"ut_sv_{table}"


def midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def at(day: date, hour: int) -> datetime:
    return midnight(day) + timedelta(hours=hour)


def order(oid: int, cid: int, placed: datetime, status: str, total: str, currency: str = "EUR") -> tuple[Any, ...]:
    return (oid, cid, status, currency, D(total), None, None, placed, placed)


def item(oid: int, qty: int) -> tuple[Any, ...]:
    return (oid, 1, 10, qty, D("1.00"), None)


def event(eid: str, etype: str, session: str, when: datetime) -> tuple[Any, ...]:
    return (eid, etype, 1, session, when, when.date(), None)


ORDERS_AT_GOLD_TIME = [
    order(1, 1, at(D1, 9), "paid", "10.00"), order(2, 2, at(D1, 10), "shipped", "5.50"),
    order(3, 1, at(D1, 11), "cancelled", "7.00"),
    order(4, 3, at(D2, 9), "paid", "20.00"), order(5, 3, at(D2, 23), "paid", "1.25", "USD"),
]
ITEMS = [item(1, 2), item(2, 1), item(3, 3), item(4, 4), item(5, 1)]
EVENT_ROWS = [
    event("e1", "page_view", "s1", at(D1, 1)), event("e2", "add_to_cart", "s1", at(D1, 2)),
    event("e3", "page_view", "s2", at(D1, 3)),
    event("e4", "page_view", "s3", at(D2, 1)), event("e5", "purchase", "s3", at(D2, 2)),
]
SALES_COLS = ["order_date", "currency", "orders", "paid_orders", "revenue", "refunded_amount", "cancelled_orders",
              "units", "customers"]
# gold of D1, built before order 2 was refunded: 3 orders, 2 paid (15.50), 3 units
GOLD_D1 = (D1, "EUR", 3, 2, D("15.50"), D("0.00"), 1, 3, 2)
# the same day from current silver (order 2 refunded since): 1 paid (10.00), 5.50 refunded, 2 units
SPEED_D1 = (D1, "EUR", 3, 1, D("10.00"), D("5.50"), 1, 2, 2)
SPEED_D2 = [(D2, "EUR", 1, 1, D("20.00"), D("0.00"), 0, 4, 1), (D2, "USD", 1, 1, D("1.25"), D("0.00"), 0, 1, 1)]


@pytest.fixture(scope="module")
def lake(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = Path(tmp_path_factory.mktemp("serving_views"))
    for layer in LAYERS:
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {name(layer)} LOCATION '{root / layer}'")
    spark.createDataFrame(ORDERS_AT_GOLD_TIME, ORDERS.schema).write.format("delta").saveAsTable(name("silver.orders"))
    spark.createDataFrame(ITEMS, ORDER_ITEMS.schema).write.format("delta").saveAsTable(name("silver.order_items"))
    spark.createDataFrame(EVENT_ROWS, EVENTS).write.format("delta").saveAsTable(name("silver.events"))
    spark.createDataFrame([], schema_of("ops.serving_watermark")).write.format("delta").saveAsTable(name("ops.serving_watermark"))
    # gold of D1, computed by the gold transforms from silver as it is now
    build_gold(spark, D1, mode="overwrite")
    # then silver moves on: order 2 is refunded (the speed view sees it, D1's gold does not)
    changed = [order(2, 2, at(D1, 10), "refunded", "5.50") if r[0] == 2 else r for r in ORDERS_AT_GOLD_TIME]
    spark.createDataFrame(changed, ORDERS.schema).write.format("delta").mode("overwrite").saveAsTable(
        name("silver.orders"))
    create_views(spark, VIEWS, name)
    return spark


def build_gold(spark: Any, day: date, mode: str = "append") -> None:
    start, end = midnight(day), midnight(day) + timedelta(days=1)
    dim = spark.createDataFrame([], DIM)
    orders, items = spark.table(name("silver.orders")), spark.table(name("silver.order_items"))
    sales = fct_daily_sales(fct_orders(orders, items, dim, start, end))
    funnel = fct_daily_funnel(spark.table(name("silver.events")), start, end)
    sales.write.format("delta").mode(mode).saveAsTable(name("gold.fct_daily_sales"))
    funnel.write.format("delta").mode(mode).saveAsTable(name("gold.fct_daily_funnel"))


def move_to(spark: Any, seq: int, day: date, previous: date | None) -> None:
    record(spark, seq, Move(previous, day, False, "test"), run_id=f"r{seq}", dag_id="t", task_id="t",
           table=name("ops.serving_watermark"))


def sales(spark: Any) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in spark.sql(f"SELECT * FROM {name('serving.daily_sales')} "
                                        "ORDER BY order_date, currency").collect()]


def test_views_keep_the_gold_columns_and_types(lake: Any) -> None:
    for view in VIEWS:
        gold = [(f.name, f.dataType) for f in lake.table(name(view.gold)).schema.fields]
        assert [(f.name, f.dataType) for f in lake.table(name(view.name)).schema.fields] == gold, view.name
        assert [(f.name, f.dataType) for f in lake.table(name(view.speed_view)).schema.fields] == gold, view.name


def test_switch_at_the_watermark_edge(lake: Any) -> None:
    # no watermark yet: every day from speed (D1 as silver is now, not gold's D1)
    assert sales(lake) == [SPEED_D1, *SPEED_D2]
    # the gold DAG moved the watermark to D1: D1 from gold only, D2 (after it, no gold) from speed only
    move_to(lake, 1, D1, None)
    assert sales(lake) == [GOLD_D1, *SPEED_D2]
    # D2's gold lands: nothing changes until the watermark moves (D2 is still speed's, not both)
    build_gold(lake, D2)
    assert sales(lake) == [GOLD_D1, *SPEED_D2]
    # orders of D2 change in silver after its gold: speed would see them, the served D2 must not once switched
    lake.sql(f"UPDATE {name('silver.orders')} SET status = 'cancelled' WHERE order_id = 5")
    speed_d2_now = [SPEED_D2[0], (D2, "USD", 1, 0, D("0.00"), D("0.00"), 1, 0, 1)]
    assert sales(lake) == [GOLD_D1, *speed_d2_now]
    # the watermark commit to D2 is the switch: D2 now is gold's (built before the cancel), every row once
    move_to(lake, 2, D2, D1)
    assert sales(lake) == [GOLD_D1, *SPEED_D2]
    # a later day appears from speed as soon as silver has it
    lake.createDataFrame([order(6, 4, at(D3, 0), "paid", "3.00")], ORDERS.schema).write.format("delta").mode(
        "append").saveAsTable(name("silver.orders"))
    assert sales(lake)[-1] == (D3, "EUR", 1, 1, D("3.00"), D("0.00"), 0, 0, 1)
    # a backfill moving the watermark back hands D2 back to speed
    record(lake, 3, Move(D2, D1, True, "test backfill"), run_id="bf", dag_id="t", task_id="t",
           table=name("ops.serving_watermark"))
    assert [r[:2] for r in sales(lake)] == [(D1, "EUR"), (D2, "EUR"), (D2, "USD"), (D3, "EUR")]
    assert sales(lake)[2] == speed_d2_now[1]


def test_funnel_switches_with_the_same_watermark(lake: Any) -> None:
    rows = lake.sql(f"SELECT event_date, sessions_viewed, sessions_purchased FROM {name('serving.daily_funnel')} "
                    "ORDER BY event_date").collect()
    assert [tuple(r) for r in rows] == [(D1, 2, 0), (D2, 1, 1)]


def test_the_shared_rule_gives_gold_and_speed_the_same_figures(spark: Any, lake: Any) -> None:
    """The gold transforms and the speed views on the same silver rows (the gold facts' test data: rounding,
    orders without lines, interval edges, several days) give the same rows for a day."""
    orders, items = orders_and_items(spark)
    start, end = datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 2, tzinfo=UTC)
    gold = fct_daily_sales(fct_orders(orders, items, spark.createDataFrame([], DIM), start, end))
    orders.createOrReplaceTempView("same_rule_orders")
    items.createOrReplaceTempView("same_rule_items")
    sales_view = next(v for v in VIEWS if v.name == "serving.daily_sales")
    speed = spark.sql(sales_view.speed({"silver.orders": "same_rule_orders",
                                        "silver.order_items": "same_rule_items"}.__getitem__))
    assert speed.select("order_date").distinct().count() == 3  # the day before, the day, the day after
    assertDataFrameEqual(speed.where("order_date = DATE'2026-03-01'"), gold)

    events = spark.createDataFrame([*EVENT_ROWS, event("e6", "purchase", "s3", at(D2, 3)),
                                    event("e5", "purchase", "s3", at(D2, 2)), event("e7", "checkout", "s4", at(D2, 4))],
                                   EVENTS)
    events.createOrReplaceTempView("same_rule_events")
    funnel_view = next(v for v in VIEWS if v.name == "serving.daily_funnel")
    speed_funnel = spark.sql(funnel_view.speed({"silver.events": "same_rule_events"}.__getitem__))
    for day in (D1, D2):
        gold_funnel = fct_daily_funnel(events, midnight(day), midnight(day) + timedelta(days=1))
        assertDataFrameEqual(speed_funnel.where(f"event_date = DATE'{day.isoformat()}'"), gold_funnel)
