"""``lake bench gold``: the batch layer's figures, measured in one run (printed, never asserted).

1. Backfill seconds: ``lake_gold_daily`` over N days through Airflow's REST API (reprocess all), from
   the POST to the last run's success, the way a user's backfill runs.
2. Spark vs DuckDB on the same input: the orders and items of those days written once as Parquet
   (local files), then ``fct_daily_sales`` for the N days computed by Spark (the stack's Spark Connect
   server: the engine the DAG uses) and by DuckDB (in process), each timed over ``--repeat`` runs
   (best taken), the two results compared row for row, and the ratio printed. ``--scales`` repeats
   the comparison on the input copied K times (order ids shifted per copy): at a few thousand orders
   Spark's fixed cost per query (planning, job scheduling over Connect) is the whole figure, so the
   ratio is shown as the input grows too.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DUCKDB_DAILY_SALES = """
WITH lines AS (
  SELECT order_id, sum(quantity) AS units,
         sum(round_even(quantity * unit_price * (1 - coalesce(discount, 0)), 2)) AS items_amount
  FROM read_parquet('{items}') GROUP BY order_id
), f AS (
  SELECT o.order_id, o.customer_id, o.status, o.currency, o.total, coalesce(l.units, 0) AS units,
         CAST(timezone('UTC', o.placed_at) AS DATE) AS order_date
  FROM read_parquet('{orders}') o LEFT JOIN lines l USING (order_id)
  WHERE o.placed_at >= TIMESTAMPTZ '{start}' AND o.placed_at < TIMESTAMPTZ '{end}'
)
SELECT order_date, currency, count(*) AS orders,
       count(*) FILTER (WHERE status IN ('paid', 'shipped')) AS paid_orders,
       coalesce(sum(total) FILTER (WHERE status IN ('paid', 'shipped')), 0) AS revenue,
       coalesce(sum(total) FILTER (WHERE status = 'refunded'), 0) AS refunded_amount,
       count(*) FILTER (WHERE status = 'cancelled') AS cancelled_orders,
       coalesce(sum(units) FILTER (WHERE status IN ('paid', 'shipped')), 0) AS units,
       count(DISTINCT customer_id) AS customers
FROM f GROUP BY order_date, currency ORDER BY order_date, currency
"""


def _norm(rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    out = []
    for r in rows:
        out.append(tuple(str(v) if isinstance(v, date) else (Decimal(v).quantize(Decimal("0.01"))
                                                             if isinstance(v, Decimal | float) else v) for v in r))
    return sorted(out)


def _best(fn: Any, repeat: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def bench(days: int, end: date | None, repeat: int, skip_backfill: bool, scales: Sequence[int],
          progress: Callable[[int], None] | None = None) -> int:
    """Backfill the last ``days`` days through Airflow (unless ``skip_backfill``), then time fct_daily_sales on
    Spark and DuckDB at each of ``scales``; logs the figures. Returns 1 if the engines' results differ.
    ``progress`` gets the number of scales compared after each (a progress bar)."""
    import duckdb

    from spark_jobs.gold.facts import fct_daily_sales, fct_orders
    from spark_jobs.session import connect_session
    from spark_jobs.settings import load_settings
    from spark_jobs.stack.airflow_api import GOLD_DAG, AirflowClient

    end_day = end or datetime.now(UTC).date()
    first = end_day - timedelta(days=days)
    start, stop = datetime(first.year, first.month, first.day, tzinfo=UTC), datetime(
        end_day.year, end_day.month, end_day.day, tzinfo=UTC)
    settings = load_settings()
    log.info(f"bench gold: {days} day(s) {first} .. {end_day - timedelta(days=1)}")

    if not skip_backfill:
        client = AirflowClient(settings)
        client.wait_for_dag(GOLD_DAG)
        client.unpause(GOLD_DAG)
        t0 = time.monotonic()
        bf = client.backfill(GOLD_DAG, first, end_day - timedelta(days=1), "completed")
        states = client.wait_backfill(GOLD_DAG, int(bf["id"]),
                                      [first + timedelta(days=i) for i in range(days)], timeout=3600)
        backfill_s = time.monotonic() - t0
        ok = sum(1 for s in states.values() if s == "success")
        log.info(f"backfill: {days} day(s) in {backfill_s:.1f} s ({backfill_s / days:.1f} s a day), "
                 f"{ok}/{days} succeeded")

    spark = connect_session(settings)
    tmp = Path(tempfile.mkdtemp(prefix="lake-bench-gold-"))
    try:
        orders = spark.table("silver.orders").where(
            f"placed_at >= TIMESTAMP'{start.isoformat()}' AND placed_at < TIMESTAMP'{stop.isoformat()}'")
        items = spark.table("silver.order_items").join(orders.select("order_id"), "order_id", "left_semi")
        import pyarrow.parquet as pq

        o_arrow, i_arrow = orders.toArrow(), items.toArrow()
        pq.write_table(o_arrow, tmp / "orders.parquet")
        pq.write_table(i_arrow, tmp / "items.parquet")
        log.info(f"input: {o_arrow.num_rows} orders, {i_arrow.num_rows} items written once as Parquet ({tmp})")
        # The Connect server runs on this machine: it reads the same local Parquet files DuckDB reads.
        def run_spark(orders_path: Path, items_path: Path) -> list[Any]:
            o = spark.read.parquet(str(orders_path))
            i = spark.read.parquet(str(items_path))
            empty_dim = spark.createDataFrame([], "customer_key bigint, customer_id bigint, valid_from timestamp, "
                                                  "valid_to timestamp, is_deleted boolean")
            f = fct_orders(o, i, empty_dim, start, stop)
            return [tuple(r) for r in fct_daily_sales(f).select(
                "order_date", "currency", "orders", "paid_orders", "revenue", "refunded_amount", "cancelled_orders",
                "units", "customers").collect()]

        def run_duckdb(orders_path: Path, items_path: Path) -> list[Any]:
            con = duckdb.connect()
            con.execute("SET TimeZone = 'UTC'")
            sql = DUCKDB_DAILY_SALES.format(items=items_path, orders=orders_path,
                                            start=start.isoformat(), end=stop.isoformat())
            return con.execute(sql).fetchall()

        results = []
        for done, k in enumerate(scales, 1):
            o_path, i_path = _scaled(tmp, k)
            spark_s, spark_rows = _best(partial(run_spark, o_path, i_path), repeat)
            duck_s, duck_rows = _best(partial(run_duckdb, o_path, i_path), repeat)
            same = _norm(spark_rows) == _norm(duck_rows)
            results.append(same)
            log.info(f"fct_daily_sales over {days} day(s), input x{k} ({k * o_arrow.num_rows:,} orders, "
                     f"{k * i_arrow.num_rows:,} items): Spark {spark_s:.2f} s, DuckDB {duck_s:.3f} s (best of "
                     f"{repeat}); Spark/DuckDB = {spark_s / max(duck_s, 1e-9):.1f}x (goal <= 3x); results "
                     f"{'identical' if same else 'DIFFER'} ({len(spark_rows)} rows)")
            if progress is not None:
                progress(done)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(results) else 1


def _scaled(tmp: Path, k: int) -> tuple[Path, Path]:
    """The input copied ``k`` times (order and item ids shifted by 10^12 per copy), as Parquet beside it."""
    import duckdb

    if k == 1:
        return tmp / "orders.parquet", tmp / "items.parquet"
    o_path, i_path = tmp / f"orders_x{k}.parquet", tmp / f"items_x{k}.parquet"
    con = duckdb.connect()
    for src, dst, ids in ((tmp / "orders.parquet", o_path, ("order_id",)),
                          (tmp / "items.parquet", i_path, ("order_id", "item_id"))):
        cols = {c[0] for c in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{src}')").fetchall()}
        shift = ", ".join(f"{c} + copy * 1000000000000 AS {c}" for c in ids if c in cols)
        con.execute(f"COPY (SELECT * REPLACE ({shift}) FROM read_parquet('{src}'), range({k}) t(copy)) "
                    f"TO '{dst}' (FORMAT parquet)")
    return o_path, i_path
