"""The serving views' SQL and their creation in the shared catalog.

For each gold daily fact with a speed counterpart:

* ``serving.speed_<view>``: the fact computed over current silver, every day, with the rules of
  :mod:`spark_jobs.gold.rules` (the gold transforms apply the same SQL);
* ``serving.<view>``: same grain and columns as the gold fact; a day ``<=`` the batch watermark
  (:mod:`spark_jobs.serving.watermark`) comes from gold, a later day from the speed view.

The watermark is read once per query (one scan of ``ops.serving_watermark``, cross-joined to the union of both
layers, each row tagged with its layer), so every row of one answer is judged against the same watermark: a day
is either gold's or speed's, never both and never neither. The switch of day D is the commit that moves the
watermark to D, and the gold DAG commits D's gold before it moves the watermark (docs/architecture.md, "Serving layer").

Views, not tables: Spark stores their SQL in the Hive metastore, so the Thrift server (JDBC), Spark Connect
(``lake sql``) and any later session resolve them against the current Delta versions, with nothing to refresh.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_jobs.gold.rules import DAILY_FUNNEL_COUNTS, DAILY_FUNNEL_RATIOS, DAILY_SALES, ORDER_FACTS, ORDER_LINES
from spark_jobs.gold.rules import utc_date_sql as _utc_date
from spark_jobs.serving.watermark import WATERMARK_TABLE, current_watermark_sql

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_jobs.settings import Settings

log = logging.getLogger(__name__)

SERVING_DB = "serving"
#: Maps a lake table name to the name to use (unit tests put the lake in other databases).
Names = Callable[[str], str]


def _same(name: str) -> str:
    return name


def _select(rules: Mapping[str, str]) -> str:
    return ", ".join(f"{sql} AS {name}" for name, sql in rules.items())


def speed_daily_sales_sql(name: Names = _same) -> str:
    """``gold.fct_daily_sales`` rows for every day, from current ``silver.orders`` and ``silver.order_items``.

    The per-order facts and the daily rule are gold's (:data:`~spark_jobs.gold.rules.ORDER_LINES`,
    :data:`~spark_jobs.gold.rules.ORDER_FACTS`, :data:`~spark_jobs.gold.rules.DAILY_SALES`); an order's
    status is its current one, as when gold computes a day.
    """
    orders = (f"SELECT o.order_id, o.customer_id, o.status, o.currency, {_select(ORDER_FACTS)} "
              f"FROM {name('silver.orders')} o LEFT JOIN "
              f"(SELECT order_id, {_select(ORDER_LINES)} FROM {name('silver.order_items')} GROUP BY order_id) l "
              "ON o.order_id = l.order_id")
    return (f"SELECT order_date, CAST(currency AS STRING) AS currency, {_select(DAILY_SALES)} "
            f"FROM ({orders}) GROUP BY order_date, currency")


def speed_daily_funnel_sql(name: Names = _same) -> str:
    """``gold.fct_daily_funnel`` rows for every day, from current ``silver.events`` (gold's funnel rules)."""
    counts = (f"SELECT {_utc_date('event_time')} AS event_date, {_select(DAILY_FUNNEL_COUNTS)} "
              f"FROM {name('silver.events')} GROUP BY {_utc_date('event_time')}")
    return f"SELECT event_date, {', '.join(DAILY_FUNNEL_COUNTS)}, {_select(DAILY_FUNNEL_RATIOS)} FROM ({counts})"


@dataclass(frozen=True)
class ServingView:
    """One serving view: its gold fact, its day column, its speed SQL and the tables that SQL reads."""

    name: str
    gold: str
    day: str
    columns: tuple[str, ...]
    speed: Callable[[Names], str]
    silver: tuple[str, ...]

    @property
    def speed_view(self) -> str:
        db, _, table = self.name.partition(".")
        return f"{db}.speed_{table}"

    @property
    def sources(self) -> tuple[str, ...]:
        """The tables the two views read (all must exist before the views can be created)."""
        return (self.gold, *self.silver, WATERMARK_TABLE)

    def serving_sql(self, name: Names = _same) -> str:
        """``self.gold`` for days <= the watermark, ``self.speed_view`` after it, one watermark read per query."""
        cols = ", ".join(self.columns)
        return (f"SELECT {', '.join(f'u.{c}' for c in self.columns)} FROM ("
                f"SELECT 'gold' AS _layer, {cols} FROM {name(self.gold)} "
                f"UNION ALL SELECT 'speed' AS _layer, {cols} FROM {name(self.speed_view)}) u "
                f"CROSS JOIN ({current_watermark_sql(name(WATERMARK_TABLE))}) w "
                f"WHERE CASE WHEN u._layer = 'gold' THEN u.{self.day} <= w.watermark "
                f"ELSE u.{self.day} > w.watermark END")


SALES_COLUMNS = ("order_date", "currency", *DAILY_SALES)
FUNNEL_COLUMNS = ("event_date", *DAILY_FUNNEL_COUNTS, *DAILY_FUNNEL_RATIOS)

VIEWS: tuple[ServingView, ...] = (
    ServingView("serving.daily_sales", "gold.fct_daily_sales", "order_date", SALES_COLUMNS, speed_daily_sales_sql,
                ("silver.orders", "silver.order_items")),
    ServingView("serving.daily_funnel", "gold.fct_daily_funnel", "event_date", FUNNEL_COLUMNS,
                speed_daily_funnel_sql, ("silver.events",)),
)
#: The gold tables whose ``block`` rules must pass for a day before the watermark covers it (daily sales is
#: built from fct_orders).
GOLD_TABLES = ("gold.fct_orders", *(v.gold for v in VIEWS))


def _comment(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def create_views(spark: SparkSession, views: tuple[ServingView, ...] = VIEWS, name: Names = _same) -> None:
    """``CREATE OR REPLACE VIEW`` the speed and serving views (idempotent; a changed definition replaces the old)."""
    for view in views:
        spark.sql(f"CREATE OR REPLACE VIEW {name(view.speed_view)} COMMENT "
                  f"{_comment(f'speed layer: {view.gold} rows computed from current silver, every day')} "
                  f"AS {view.speed(name)}")
        spark.sql(f"CREATE OR REPLACE VIEW {name(view.name)} COMMENT "
                  f"{_comment(f'{view.gold} up to the batch watermark ({WATERMARK_TABLE}), {view.speed_view} after')}"
                  f" AS {view.serving_sql(name)}")


def ensure_serving(spark: SparkSession, settings: Settings, replace: bool = True) -> list[str]:
    """Create the ``serving`` database, the watermark table and every view whose sources exist; lines to report.

    ``replace`` re-creates views that exist (``lake stack up``: a changed definition applies); without it only
    missing views are created (the gold DAG's watermark task: no catalog writes on every run).
    A view whose gold or silver tables do not exist yet (a fresh lake: the streaming app creates silver, the
    gold DAG's first run creates gold) is reported and left for later: the gold DAG's watermark task and every
    ``lake stack up`` call this again.
    """
    from spark_jobs.serving.watermark import ensure_watermark_table
    from spark_jobs.table_io import ensure_database

    ensure_database(spark, settings, SERVING_DB)
    ensure_watermark_table(spark, settings)
    todo, lines = [], []
    for view in VIEWS:
        if not replace and all(spark.catalog.tableExists(v) for v in (view.speed_view, view.name)):
            continue
        missing = [t for t in view.sources if not spark.catalog.tableExists(t)]
        if missing:
            lines.append(f"{view.name}: waits for {', '.join(missing)} (created by the streaming app and the gold "
                         "DAG; the view follows at the next watermark move or `lake stack up`)")
        else:
            todo.append(view)
            lines.append(f"{view.name}: ready ({view.gold} up to the watermark, {view.speed_view} after)")
    create_views(spark, tuple(todo))
    return lines


def bootstrap(settings: Settings) -> None:
    """``lake stack up`` (once Spark Connect is healthy): the serving database, watermark table and views.

    The Connect session is stopped and pyspark's process-wide Connect mark cleared afterwards: ``lake stack up``
    goes on to start other programs, which must not inherit ``SPARK_CONNECT_MODE_ENABLED``.
    """
    import os

    from spark_jobs.session import connect_session

    spark = connect_session(settings)
    try:
        for line in ensure_serving(spark, settings):
            log.info(f"  {line}")
    finally:
        spark.stop()
        for name in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE"):
            os.environ.pop(name, None)
