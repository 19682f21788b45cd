"""Facts of one data interval: silver orders/items, the customer dimension and events -> ``gold.fct_*`` rows.

Every function takes the interval ``[start, end)`` as timezone-aware datetimes
(Airflow's data interval) or works on rows already cut to it, and returns rows
of that interval only, so the job can overwrite exactly its partitions
(``replaceWhere``) and a re-run gives the same rows. Dates are UTC dates,
whatever the Spark session's time zone. Money stays decimal end to end.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType

from spark_jobs.gold.rules import (
    DAILY_FUNNEL_COUNTS,
    DAILY_FUNNEL_RATIOS,
    DAILY_SALES,
    FUNNEL_STEPS,
    ORDER_FACTS,
    ORDER_LINES,
    PAID_STATUSES,
    utc_date_sql,
)

__all__ = ["FUNNEL_STEPS", "PAID_STATUSES", "fct_daily_funnel", "fct_daily_sales", "fct_orders", "utc_date"]

MONEY = DecimalType(14, 2)

_SECONDS_PER_DAY = 86400


def _aware(when: datetime, name: str) -> datetime:
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"{name}={when!r} has no time zone: pass an aware datetime (the data interval in UTC)")
    return when


def _instant(when: datetime) -> Column:
    delta = when.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    micros = (delta.days * _SECONDS_PER_DAY + delta.seconds) * 1_000_000 + delta.microseconds
    return F.timestamp_micros(F.lit(micros))


def _interval(col: str, start: datetime, end: datetime) -> Column:
    if _aware(end, "end") <= _aware(start, "start"):
        raise ValueError(f"empty data interval: start {start.isoformat()} is not before end {end.isoformat()}")
    return (F.col(col) >= _instant(start)) & (F.col(col) < _instant(end))


def utc_date(column: str) -> Column:
    """The UTC calendar date of timestamp column ``column``, independent of ``spark.sql.session.timeZone``."""
    return F.expr(utc_date_sql(column))


def _exprs(rules: Mapping[str, str]) -> list[Column]:
    """The rules of :mod:`spark_jobs.gold.rules` as columns (the speed views use the same SQL)."""
    return [F.expr(sql).alias(name) for name, sql in rules.items()]


def _line_amount() -> Column:
    """bround(quantity * unit_price * (1 - coalesce(discount, 0)), 2) in exact decimals (no precision loss)."""
    factor = (F.lit(1).cast(DecimalType(1, 0)) - F.coalesce(F.col("discount"), F.lit(0).cast(DecimalType(5, 4))))
    gross = F.col("quantity").cast(DecimalType(10, 0)) * F.col("unit_price").cast(DecimalType(12, 2))
    return F.bround(gross * factor.cast(DecimalType(6, 4)), 2)


def fct_orders(orders: DataFrame, items: DataFrame, dim_customers: DataFrame, start: datetime,
               end: datetime) -> DataFrame:
    """Orders placed in ``[start, end)`` with their lines summed and the customer version of the moment.

    In: ``orders`` (``silver.orders``: one row per order, current state),
    ``items`` (``silver.order_items``), ``dim_customers``
    (:func:`spark_jobs.gold.dims.dim_customers`).

    Grain: one row per order with ``start <= placed_at < end``. Columns:
    ``order_id``, ``customer_id`` bigint; ``customer_key`` bigint (the
    customer's non-deleted version with ``valid_from <= placed_at <
    coalesce(valid_to, +inf)``, NULL if none; if versions overlap, the latest
    ``valid_from``); ``status`` (current), ``currency``, ``total``
    decimal(14,2); ``item_count`` bigint (lines), ``units`` bigint (sum of
    quantity); ``items_amount`` decimal(14,2) = sum over lines of
    ``bround(quantity * unit_price * (1 - coalesce(discount, 0)), 2)``
    (half-even per line, exact); ``placed_at`` timestamp; ``order_date`` date
    (UTC date of ``placed_at``, the partition column). An order without lines
    has 0, 0, 0.00.
    """
    placed = orders.where(_interval("placed_at", start, end)).select(
        "order_id", "customer_id", "status", "currency", "total", "placed_at")
    lines = (items.join(placed.select("order_id"), "order_id", "left_semi").groupBy("order_id")
             .agg(*_exprs(ORDER_LINES), F.sum(_line_amount()).alias("_items_amount")))
    dim = dim_customers.where(~F.col("is_deleted")).select(
        F.col("customer_id").alias("_d_customer_id"), "customer_key", F.col("valid_from").alias("_d_from"),
        F.col("valid_to").alias("_d_to"))
    in_version = ((F.col("customer_id") == F.col("_d_customer_id")) & (F.col("_d_from") <= F.col("placed_at"))
                  & (F.col("_d_to").isNull() | (F.col("placed_at") < F.col("_d_to"))))
    pick = Window.partitionBy("order_id").orderBy(F.col("_d_from").desc_nulls_last(), F.col("customer_key"))
    with_customer = (placed.join(dim, in_version, "left")
                     .withColumn("_pick", F.row_number().over(pick)).where(F.col("_pick") == 1))
    joined = with_customer.join(lines, "order_id", "left")
    facts = dict(zip(ORDER_FACTS, _exprs(ORDER_FACTS), strict=True))
    return joined.select(
        F.col("order_id").cast("bigint"), F.col("customer_id").cast("bigint"),
        F.col("customer_key").cast("bigint"), F.col("status").cast("string"), F.col("currency").cast("string"),
        facts["total"], facts["item_count"], facts["units"],
        F.coalesce(F.col("_items_amount"), F.lit(0)).cast(MONEY).alias("items_amount"),
        F.col("placed_at").cast("timestamp"), facts["order_date"],
    )


def fct_daily_sales(fct_orders: DataFrame) -> DataFrame:
    """:func:`fct_orders` rows -> daily sales per currency.

    Grain: one row per (``order_date``, ``currency``) with at least one order.
    Columns: ``order_date`` date, ``currency``; ``orders`` bigint (all
    statuses); ``paid_orders`` bigint (status paid or shipped); ``revenue``
    decimal(18,2) (sum of ``total`` of paid + shipped orders, 0.00 if none);
    ``refunded_amount`` decimal(18,2) (sum of ``total`` of refunded orders,
    0.00 if none); ``cancelled_orders`` bigint; ``units`` bigint (units of
    paid + shipped orders); ``customers`` bigint (distinct ``customer_id``
    over all orders).
    """
    return (fct_orders.groupBy("order_date", "currency").agg(*_exprs(DAILY_SALES))
            .select(F.col("order_date").cast("date"), F.col("currency").cast("string"), *DAILY_SALES))


def fct_daily_funnel(events: DataFrame, start: datetime, end: datetime) -> DataFrame:
    """Clickstream events with ``start <= event_time < end`` -> the daily session funnel.

    In: ``silver.events`` (``event_id``, ``event_type``, ``session_id``,
    ``event_time``; other columns ignored). Each step counts the distinct
    sessions with at least one event of that type that day, independently (a
    session that checks out without a page view that day still counts at
    checkout), so a ratio can exceed 1.

    Grain: one row per ``event_date`` (UTC date of ``event_time``) with at least
    one event. Columns: ``event_date`` date; ``sessions_viewed``,
    ``sessions_carted``, ``sessions_checked_out``, ``sessions_purchased``,
    ``purchases`` (distinct purchase ``event_id``: a re-sent event counts once)
    bigint; ``view_to_cart``, ``cart_to_checkout``, ``checkout_to_purchase``,
    ``view_to_purchase`` double (sessions ratio, NULL when the denominator is 0).
    """
    daily = (events.where(_interval("event_time", start, end))
             .groupBy(utc_date("event_time").alias("event_date")).agg(*_exprs(DAILY_FUNNEL_COUNTS)))
    return daily.select("event_date", *DAILY_FUNNEL_COUNTS, *_exprs(DAILY_FUNNEL_RATIOS))
