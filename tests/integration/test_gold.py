"""Batch layer end to end on the real stack: a seeded 2-day history goes through PostgreSQL/Debezium and
Kafka into bronze/silver, a 2-day backfill of ``lake_gold_daily`` is started through Airflow's REST API,
and every day of gold equals what PostgreSQL says, computed here with SQL. A second backfill (reprocess
all) rewrites every gold partition with identical rows (two Delta versions compared). ``lake sql`` and
beeline (Thrift/JDBC) read the gold tables.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from spark_jobs.settings import Settings
from tests.integration.lakehelpers import (
    SALES_SQL,
    beeline,
    close_connect_session,
    connect_sql,
    gold_backfill,
    lake_sql,
    shop_cursor,
    start_streaming,
    wait_stream,
    write_history,
)

#: One wave of the DAG's two concurrent runs (a backfill's concurrency; `make demo` backfills 7). It was 7 here too,
#: and this fixture took 8 min of the suite (2026-11-29).
DAYS = 2
FACTS = {"fct_orders": "order_date", "fct_daily_sales": "order_date", "fct_daily_funnel": "event_date"}


@pytest.fixture(scope="module", autouse=True)
def _connect_session_is_closed_after_this_module() -> Iterator[None]:
    yield
    close_connect_session()


_sql = connect_sql


def _days() -> list[date]:
    today = datetime.now(UTC).date()
    return [today - timedelta(days=n) for n in range(DAYS, 0, -1)]


def _versions() -> dict[str, int]:
    out = {}
    for table in ("dim_customers", "dim_products", *FACTS):
        out[table] = int(_sql(f"DESCRIBE HISTORY gold.{table} LIMIT 1")[0]["version"])
    return out


@pytest.fixture(scope="module")
def gold(stack: Settings) -> Iterator[Settings]:
    start_streaming()
    write_history(DAYS, orders_per_day=120, events_per_day=1500, seeds=range(101, 130))
    wait_stream(900)
    states = gold_backfill(stack, _days(), "completed")
    assert set(states.values()) == {"success"}, states
    yield stack


def test_daily_sales_equal_postgres_for_every_day(gold: Settings) -> None:
    days = _days()
    start = datetime(days[0].year, days[0].month, days[0].day, tzinfo=UTC)
    end = start + timedelta(days=DAYS)
    with shop_cursor(gold) as cur:
        cur.execute(SALES_SQL, (start, end))
        cols = [d[0] for d in cur.description or []]
        expected = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    after_last = days[-1] + timedelta(days=1)
    got = _sql(f"SELECT * FROM gold.fct_daily_sales WHERE order_date >= DATE'{days[0]}' "
               f"AND order_date < DATE'{after_last}' ORDER BY order_date, currency")

    def norm(row: dict[str, Any]) -> tuple[Any, ...]:
        return (str(row["order_date"]), row["currency"].strip(), int(row["orders"]), int(row["paid_orders"]),
                Decimal(str(row["revenue"])), Decimal(str(row["refunded_amount"])), int(row["cancelled_orders"]),
                int(row["units"]), int(row["customers"]))

    assert {str(r["order_date"]) for r in expected} == {d.isoformat() for d in days}, "history covers every day"
    assert [norm(r) for r in got] == [norm(r) for r in expected]


def test_fct_orders_hold_exactly_postgres_orders_of_each_day(gold: Settings) -> None:
    days = _days()
    with shop_cursor(gold) as cur:
        cur.execute("SELECT (placed_at AT TIME ZONE 'UTC')::date, array_agg(order_id ORDER BY order_id) FROM orders "
                    "WHERE placed_at >= %s AND placed_at < %s GROUP BY 1",
                    (days[0], days[-1] + timedelta(days=1)))
        expected = {str(d): list(ids) for d, ids in cur.fetchall()}
    rows = _sql(f"SELECT order_date, order_id FROM gold.fct_orders WHERE order_date >= DATE'{days[0]}' AND order_date < "
                f"DATE'{days[-1] + timedelta(days=1)}'")
    got: dict[str, list[int]] = {}
    for r in rows:
        got.setdefault(str(r["order_date"]), []).append(int(r["order_id"]))
    assert {d: sorted(ids) for d, ids in got.items()} == expected
    # Nothing held back by the data-quality gate on a clean history.
    if _sql("SHOW TABLES IN quarantine LIKE 'dq_gold_fct_orders'"):
        held = _sql("SELECT expectation, row_json FROM quarantine.dq_gold_fct_orders "
                    f"WHERE interval_start >= TIMESTAMP'{days[0]} 00:00:00' AND run_id LIKE 'backfill__%'")
        assert held == []


@pytest.mark.extended  # a second backfill of the days the fixture built
def test_reprocessing_backfill_rewrites_identical_rows(gold: Settings) -> None:
    # Every built day again (a reprocessing run is the same code per day, over the backfill's concurrency).
    days = _days()
    before = _versions()
    states = gold_backfill(gold, days, "completed")
    assert set(states.values()) == {"success"}, states
    after = _versions()
    # Every fact partition was written again; a dimension is rebuilt only when its bronze history or its
    # transforms changed since its last build (no CDC arrived in between: same version, same rows).
    assert all(after[t] > before[t] for t in FACTS), (before, after)
    assert all(after[t] >= before[t] for t in before), (before, after)
    for table, column in {**FACTS, "dim_customers": None, "dim_products": None}.items():
        where = (f"WHERE {column} >= DATE'{days[0]}' AND {column} < DATE'{days[-1] + timedelta(days=1)}'"
                 if column else "")
        old = f"SELECT * FROM gold.{table} VERSION AS OF {before[table]} {where}"
        new = f"SELECT * FROM gold.{table} VERSION AS OF {after[table]} {where}"
        diff = _sql(f"SELECT count(*) AS c FROM (({old}) EXCEPT ALL ({new})) UNION ALL "
                    f"SELECT count(*) AS c FROM (({new}) EXCEPT ALL ({old}))")
        assert [int(r["c"]) for r in diff] == [0, 0], f"gold.{table} differs between versions {before[table]} " \
                                                      f"and {after[table]}"


def test_gold_is_readable_over_jdbc_and_lake_sql(gold: Settings) -> None:
    day = _days()[-1]
    via_sql = lake_sql(f"SELECT count(*) AS c FROM gold.fct_orders WHERE order_date = DATE'{day}'")
    assert int(via_sql[0]["c"]) > 0
    jdbc = beeline(gold, f"SELECT count(*) AS c FROM gold.fct_orders WHERE order_date = DATE'{day}'")
    assert jdbc.returncode == 0, jdbc.stderr[-2000:]
    assert jdbc.stdout.split()[-2:] == ["c", str(via_sql[0]["c"])], jdbc.stdout
    current = _sql("SELECT count(*) AS c FROM gold.dim_customers WHERE is_current")
    assert int(current[0]["c"]) > 0


def test_connect_sessions_have_no_artifact_isolation(stack: Settings) -> None:
    # Spark's own Connect main forces isolation on; then every task's class loader asked the driver's RPC file
    # server for each class Janino probes, and one lookup hanging 120 s failed a query (infra/connect). The
    # stack's server starts with our main, which turns it off; no session can add artifacts (LakeConnectGuard).
    for key in ("spark.sql.artifact.isolation.enabled", "spark.sql.artifact.isolation.alwaysApplyClassloader"):
        assert _sql(f"SET {key}") == [{"key": key, "value": "false"}]
