"""The gold tables' transforms as the registry names them (``LakeTable.transform``): each reads its inputs through
``read`` (a lake table name -> DataFrame) and returns the table's rows for the UTC days ``[start, end)``; the pure
transforms they call are in :mod:`.dims` and :mod:`.facts`. What each reads is declared beside it in the registry
(``LakeTable.reads``): a step reads nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.contracts.shop import CUSTOMERS, PRODUCTS
from spark_jobs.gold import dims, facts
from spark_jobs.gold.history import cdc_history

#: A lake table by name (the catalog's table, or a test's frame).
Read = Callable[[str], DataFrame]

__all__ = ["Read", "dim_customers", "dim_products", "fct_daily_funnel", "fct_daily_sales", "fct_orders"]


def dim_customers(read: Read, start: datetime, end: datetime) -> DataFrame:
    """SCD2 customers from the whole ordered CDC history in bronze (whole table: the interval does not narrow it)."""
    return dims.dim_customers(cdc_history(read(CUSTOMERS.bronze), CUSTOMERS))


def dim_products(read: Read, start: datetime, end: datetime) -> DataFrame:
    """SCD2 products from the whole ordered CDC history in bronze."""
    return dims.dim_products(cdc_history(read(PRODUCTS.bronze), PRODUCTS))


def fct_orders(read: Read, start: datetime, end: datetime) -> DataFrame:
    """Orders placed in ``[start, end)`` from silver, with the customer version of the moment."""
    return facts.fct_orders(read("silver.orders"), read("silver.order_items"), read("gold.dim_customers"), start, end)


def fct_daily_sales(read: Read, start: datetime, end: datetime) -> DataFrame:
    """Daily sales per currency from ``gold.fct_orders`` of the interval's days."""
    orders = read("gold.fct_orders")
    return facts.fct_daily_sales(orders.where((F.col("order_date") >= F.lit(start.date()))
                                              & (F.col("order_date") < F.lit(end.date()))))


def fct_daily_funnel(read: Read, start: datetime, end: datetime) -> DataFrame:
    """The daily session funnel from ``silver.events`` of the interval."""
    return facts.fct_daily_funnel(read("silver.events"), start, end)
