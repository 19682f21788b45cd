"""The business rules of the daily facts, once, as Spark SQL expressions.

Two readers use them: the gold transforms (:mod:`spark_jobs.gold.facts`, through ``F.expr``) and the speed
views of the serving layer (:mod:`spark_jobs.serving.views`, SQL stored in the catalog). A persistent view
can only hold SQL text, so SQL is the one form both can share: change a rule here and gold and the serving
speed view change together (``tests/unit/test_serving.py`` checks both give the same figures for the same
input).

Each mapping is ``output column -> expression``, in output order. The expressions name the columns of the
relation they are evaluated over, as stated on each mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["CANCELLED", "DAILY_FUNNEL_COUNTS", "DAILY_FUNNEL_RATIOS", "DAILY_SALES", "FUNNEL_STEPS",
           "ORDER_FACTS", "ORDER_LINES", "PAID_STATUSES", "REFUNDED", "utc_date_sql"]

#: Orders that count as sold (revenue, units).
PAID_STATUSES = ("paid", "shipped")
REFUNDED = "refunded"
CANCELLED = "cancelled"
#: The clickstream funnel, in order: the contract's event types (tests/unit/test_gold_facts.py checks they match).
FUNNEL_STEPS = ("page_view", "add_to_cart", "checkout", "purchase")

_SECONDS_PER_DAY = 86400


def _in(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def utc_date_sql(column: str) -> str:
    """The UTC calendar date of timestamp ``column``, independent of ``spark.sql.session.timeZone``."""
    return f"date_from_unix_date(CAST(floor(unix_seconds({column}) / {_SECONDS_PER_DAY}) AS INT))"


_PAID = f"status IN ({_in(PAID_STATUSES)})"

#: Per order, over its lines (``silver.order_items`` rows grouped by ``order_id``).
ORDER_LINES: Mapping[str, str] = MappingProxyType({
    "_item_count": "count(1)",
    "_units": "sum(quantity)",
})

#: Per order, over an order row (``silver.orders``) left-joined to its :data:`ORDER_LINES` (NULL: no lines).
ORDER_FACTS: Mapping[str, str] = MappingProxyType({
    "total": "CAST(total AS DECIMAL(14,2))",
    "item_count": "CAST(coalesce(_item_count, 0) AS BIGINT)",
    "units": "CAST(coalesce(_units, 0) AS BIGINT)",
    "order_date": utc_date_sql("placed_at"),
})

#: Per (``order_date``, ``currency``), over order rows with :data:`ORDER_FACTS` (``gold.fct_orders`` rows).
DAILY_SALES: Mapping[str, str] = MappingProxyType({
    "orders": "CAST(count(1) AS BIGINT)",
    "paid_orders": f"CAST(count_if({_PAID}) AS BIGINT)",
    "revenue": f"CAST(coalesce(sum(CASE WHEN {_PAID} THEN total END), 0) AS DECIMAL(18,2))",
    "refunded_amount": f"CAST(coalesce(sum(CASE WHEN status = '{REFUNDED}' THEN total END), 0) AS DECIMAL(18,2))",
    "cancelled_orders": f"CAST(count_if(status = '{CANCELLED}') AS BIGINT)",
    "units": f"CAST(coalesce(sum(CASE WHEN {_PAID} THEN units END), 0) AS BIGINT)",
    "customers": "CAST(count(DISTINCT customer_id) AS BIGINT)",
})


def _sessions(event_type: str) -> str:
    return f"CAST(count(DISTINCT CASE WHEN event_type = '{event_type}' THEN session_id END) AS BIGINT)"


_VIEW, _CART, _CHECKOUT, _PURCHASE = FUNNEL_STEPS

#: Per ``event_date`` (:func:`utc_date_sql` of ``event_time``), over ``silver.events`` rows.
DAILY_FUNNEL_COUNTS: Mapping[str, str] = MappingProxyType({
    "sessions_viewed": _sessions(_VIEW),
    "sessions_carted": _sessions(_CART),
    "sessions_checked_out": _sessions(_CHECKOUT),
    "sessions_purchased": _sessions(_PURCHASE),
    # distinct event ids: a re-sent purchase counts once
    "purchases": f"CAST(count(DISTINCT CASE WHEN event_type = '{_PURCHASE}' THEN event_id END) AS BIGINT)",
})


def _ratio(numerator: str, denominator: str) -> str:
    return (f"CASE WHEN {denominator} = 0 THEN CAST(NULL AS DOUBLE) "
            f"ELSE CAST({numerator} AS DOUBLE) / CAST({denominator} AS DOUBLE) END")


#: Per ``event_date``, over one row of :data:`DAILY_FUNNEL_COUNTS`.
DAILY_FUNNEL_RATIOS: Mapping[str, str] = MappingProxyType({
    "view_to_cart": _ratio("sessions_carted", "sessions_viewed"),
    "cart_to_checkout": _ratio("sessions_checked_out", "sessions_carted"),
    "checkout_to_purchase": _ratio("sessions_purchased", "sessions_checked_out"),
    "view_to_purchase": _ratio("sessions_purchased", "sessions_viewed"),
})
