"""Gold facts of one data interval: orders, daily sales, daily funnel (exact rows, exact decimals)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from pyspark.testing import assertDataFrameEqual

from spark_jobs.contracts.clickstream import EVENT_TYPES
from spark_jobs.contracts.shop import ORDER_ITEMS, ORDERS
from spark_jobs.gold.facts import FUNNEL_STEPS, fct_daily_funnel, fct_daily_sales, fct_orders

START = datetime(2026, 3, 1, tzinfo=UTC)
END = datetime(2026, 3, 2, tzinfo=UTC)
D = Decimal

DIM = StructType([
    StructField("customer_key", LongType()), StructField("customer_id", LongType()), StructField("email", StringType()),
    StructField("full_name", StringType()), StructField("country", StringType()),
    StructField("loyalty_tier", StringType()), StructField("valid_from", TimestampType()),
    StructField("valid_to", TimestampType()), StructField("is_current", BooleanType()),
    StructField("is_deleted", BooleanType())])

FCT_ORDERS = StructType([
    StructField("order_id", LongType()), StructField("customer_id", LongType()),
    StructField("customer_key", LongType()), StructField("status", StringType()), StructField("currency", StringType()),
    StructField("total", DecimalType(14, 2)), StructField("item_count", LongType()), StructField("units", LongType()),
    StructField("items_amount", DecimalType(14, 2)), StructField("placed_at", TimestampType()),
    StructField("order_date", DateType())])

EVENTS = StructType([
    StructField("event_id", StringType()), StructField("event_type", StringType()), StructField("user_id", LongType()),
    StructField("session_id", StringType()), StructField("event_time", TimestampType()),
    StructField("event_date", DateType()), StructField("properties", StringType())])


def at(hour: int, minute: int = 0, day: int = 1, micro: int = 0) -> datetime:
    return datetime(2026, 3, day, hour, minute, 0, micro, tzinfo=UTC)


def order(oid: int, cid: int, placed: datetime, status: str = "paid", total: str = "10.00",
          currency: str = "EUR") -> tuple[Any, ...]:
    return (oid, cid, status, currency, D(total), None, None, placed, placed)


def item(oid: int, line: int, qty: int, price: str, discount: str | None = None) -> tuple[Any, ...]:
    return (oid, line, 10, qty, D(price), None if discount is None else D(discount))


def dim(spark: Any) -> Any:
    day0 = START - timedelta(days=10)
    return spark.createDataFrame([
        (11, 1, "a@x", "Ana", "DE", "gold", day0, at(10), False, False),
        (12, 1, "a@x", "Ana", "DE", "platinum", at(10), None, True, False),
        (21, 2, "b@x", "Bo", "SE", None, day0, at(8), False, False),
        (22, 2, "b@x", "Bo", "SE", None, at(8), None, False, True),
    ], DIM)


def orders_and_items(spark: Any) -> tuple[Any, Any]:
    orders = spark.createDataFrame([
        order(100, 1, START, total="0.54"),                     # at start: in
        order(101, 1, at(9, 59), status="shipped"),            # customer version 11
        order(102, 1, at(10), status="pending"),               # customer version 12 (valid_from inclusive)
        order(103, 2, at(9), status="cancelled"),              # customer deleted at 08:00: no key
        order(104, 3, END - timedelta(microseconds=1)),        # last instant in; unknown customer
        order(105, 1, END),                                    # end is exclusive
        order(106, 1, START - timedelta(microseconds=1)),      # before the interval
    ], ORDERS.schema)
    items = spark.createDataFrame([
        # 3 x 0.35 x (1 - 0.5) = 0.525 -> 0.52 half-even (0.53 half-up); 1 x 0.25 x 0.1 = 0.025 -> 0.02 (0.03).
        # Rounded per line: 0.54; rounding the sum (0.55) would give 0.55.
        item(100, 1, 3, "0.35", "0.5000"), item(100, 2, 1, "0.25", "0.9000"),
        item(101, 1, 2, "18.90"), item(101, 2, 1, "24.00", "0.0500"),  # 37.80 + 22.80
        item(102, 1, 1, "0.15", "0.5000"),                               # 0.075 -> 0.08 (7 is odd: up)
        item(105, 1, 1, "1.00"), item(106, 1, 1, "1.00"),
        # 103 and 104 have no lines
    ], ORDER_ITEMS.schema)
    return orders, items


def test_fct_orders_exact_rows(spark: Any) -> None:
    orders, items = orders_and_items(spark)
    out = fct_orders(orders, items, dim(spark), START, END)
    d1 = date(2026, 3, 1)
    expected = spark.createDataFrame([
        (100, 1, 11, "paid", "EUR", D("0.54"), 2, 4, D("0.54"), START, d1),
        (101, 1, 11, "shipped", "EUR", D("10.00"), 2, 3, D("60.60"), at(9, 59), d1),
        (102, 1, 12, "pending", "EUR", D("10.00"), 1, 1, D("0.08"), at(10), d1),
        (103, 2, None, "cancelled", "EUR", D("10.00"), 0, 0, D("0.00"), at(9), d1),
        (104, 3, None, "paid", "EUR", D("10.00"), 0, 0, D("0.00"), END - timedelta(microseconds=1), d1),
    ], FCT_ORDERS)
    assert [(f.name, f.dataType) for f in out.schema.fields] == [(f.name, f.dataType) for f in FCT_ORDERS.fields]
    assertDataFrameEqual(out, expected)


def test_fct_orders_half_even_per_line_rounding(spark: Any) -> None:
    orders, items = orders_and_items(spark)
    row = fct_orders(orders, items, dim(spark), START, END).where("order_id = 100").collect()[0]
    assert row.items_amount == D("0.54")  # half-up per line: 0.56; rounding the sum: 0.55


def test_fct_orders_interval_bounds_start_inclusive_end_exclusive(spark: Any) -> None:
    orders, items = orders_and_items(spark)
    ids = sorted(r.order_id for r in fct_orders(orders, items, dim(spark), START, END).collect())
    assert ids == [100, 101, 102, 103, 104]
    nxt = fct_orders(orders, items, dim(spark), END, END + timedelta(days=1)).collect()
    assert [(r.order_id, r.order_date, r.customer_key) for r in nxt] == [(105, date(2026, 3, 2), 12)]


def test_fct_orders_customer_key_picked_by_placed_at(spark: Any) -> None:
    orders, items = orders_and_items(spark)
    keys = {r.order_id: r.customer_key for r in fct_orders(orders, items, dim(spark), START, END).collect()}
    assert keys == {100: 11, 101: 11, 102: 12, 103: None, 104: None}


def test_fct_orders_order_without_items(spark: Any) -> None:
    orders, items = orders_and_items(spark)
    row = fct_orders(orders, items, dim(spark), START, END).where("order_id = 103").collect()[0]
    assert (row.item_count, row.units, row.items_amount) == (0, 0, D("0.00"))


def test_fct_orders_order_date_is_utc_whatever_the_session_time_zone(spark: Any) -> None:
    orders, items = orders_and_items(spark)
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        dates = {r.order_id: r.order_date for r in fct_orders(orders, items, dim(spark), START, END).collect()}
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
    assert dates == dict.fromkeys([100, 101, 102, 103, 104], date(2026, 3, 1))


def test_interval_must_be_timezone_aware_and_non_empty(spark: Any) -> None:
    orders, items = orders_and_items(spark)
    with pytest.raises(ValueError, match="no time zone"):
        fct_orders(orders, items, dim(spark), datetime(2026, 3, 1), END)
    with pytest.raises(ValueError, match="empty data interval"):
        fct_daily_funnel(spark.createDataFrame([], EVENTS), END, START)


def fo(oid: int, cid: int, status: str, total: str, units: int, day: int = 1, currency: str = "EUR") -> tuple[Any, ...]:
    return (oid, cid, None, status, currency, D(total), 1, units, D(total), at(12, day=day), date(2026, 3, day))


def test_fct_daily_sales_figures(spark: Any) -> None:
    facts = spark.createDataFrame([
        fo(1, 1, "paid", "10.00", 2), fo(2, 2, "shipped", "5.50", 1), fo(3, 1, "refunded", "3.00", 4),
        fo(4, 3, "cancelled", "4.00", 1), fo(5, 1, "pending", "1.00", 1), fo(6, 1, "refunded", "2.25", 1),
        fo(7, 4, "pending", "9.99", 3, currency="USD"),
        fo(8, 1, "paid", "7.00", 1, day=2),
    ], FCT_ORDERS)
    schema = StructType([
        StructField("order_date", DateType()), StructField("currency", StringType()),
        StructField("orders", LongType(), False), StructField("paid_orders", LongType(), False),
        StructField("revenue", DecimalType(18, 2)), StructField("refunded_amount", DecimalType(18, 2)),
        StructField("cancelled_orders", LongType(), False), StructField("units", LongType()),
        StructField("customers", LongType(), False)])
    expected = spark.createDataFrame([
        (date(2026, 3, 1), "EUR", 6, 2, D("15.50"), D("5.25"), 1, 3, 3),
        (date(2026, 3, 1), "USD", 1, 0, D("0.00"), D("0.00"), 0, 0, 1),
        (date(2026, 3, 2), "EUR", 1, 1, D("7.00"), D("0.00"), 0, 1, 1),
    ], schema)
    out = fct_daily_sales(facts)
    assert [(f.name, f.dataType) for f in out.schema.fields] == [(f.name, f.dataType) for f in schema.fields]
    assertDataFrameEqual(out, expected)


def ev(eid: str, etype: str, session: str, when: datetime) -> tuple[Any, ...]:
    return (eid, etype, 1, session, when, when.date(), "{}")


def test_fct_daily_funnel_ratios_and_zero_denominators(spark: Any) -> None:
    events = spark.createDataFrame([
        ev("e1", "page_view", "s1", at(9)), ev("e2", "add_to_cart", "s1", at(9, 1)),
        ev("e3", "checkout", "s1", at(9, 2)), ev("e4", "purchase", "s1", at(9, 3)),
        ev("e4", "purchase", "s1", at(9, 3)),  # a re-sent event counts once
        ev("e5", "page_view", "s2", at(10)), ev("e6", "page_view", "s2", at(10, 1)),
        ev("e7", "add_to_cart", "s2", at(10, 2)), ev("e8", "page_view", "s3", START),
        # day 2: a checkout and a purchase, no page view and no cart (sessions that began the day before)
        ev("e9", "checkout", "s4", at(0, day=2)), ev("e10", "purchase", "s4", at(0, 5, day=2)),
        ev("e11", "purchase", "s4", at(0, 6, day=2)),
        ev("e12", "page_view", "s5", START + timedelta(days=2)),  # end: exclusive
        ev("e13", "page_view", "s6", START - timedelta(microseconds=1)),  # before start
    ], EVENTS)
    out = fct_daily_funnel(events, START, START + timedelta(days=2))
    schema = StructType([
        StructField("event_date", DateType()), *[StructField(c, LongType(), False) for c in (
            "sessions_viewed", "sessions_carted", "sessions_checked_out", "sessions_purchased", "purchases")],
        *[StructField(c, DoubleType()) for c in (
            "view_to_cart", "cart_to_checkout", "checkout_to_purchase", "view_to_purchase")]])
    expected = spark.createDataFrame([
        (date(2026, 3, 1), 3, 2, 1, 1, 1, 2 / 3, 1 / 2, 1.0, 1 / 3),
        (date(2026, 3, 2), 0, 0, 1, 1, 2, None, None, 1.0, None),
    ], schema)
    assert [(f.name, f.dataType) for f in out.schema.fields] == [(f.name, f.dataType) for f in schema.fields]
    assertDataFrameEqual(out, expected)


def test_funnel_steps_are_the_contract_event_types() -> None:
    assert set(FUNNEL_STEPS) == set(EVENT_TYPES)
