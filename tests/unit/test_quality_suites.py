"""expectations/*.yml: every file loads, bad files are refused naming the file, and the custom SQL rules
(total vs items, referential integrity, daily sales vs orders, freshness, volume) pass clean rows and
report exactly the bad ones."""

from __future__ import annotations

import dataclasses
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.quality import runner
from spark_jobs.quality.checks import LIVE_TABLES
from spark_jobs.quality.suites import EXPECTATIONS_DIR, SuiteError, load_all, load_suite, load_suite_file, suite_files

GOLD = ("gold.dim_customers", "gold.dim_products", "gold.fct_orders", "gold.fct_daily_sales", "gold.fct_daily_funnel")
NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
OLD = NOW - timedelta(hours=1)


def test_every_suite_file_parses_and_every_table_has_one():
    suites = load_all()
    assert set(suites) == {*LIVE_TABLES, *GOLD}
    for table, suite in suites.items():
        assert suite.path == EXPECTATIONS_DIR / f"{table}.yml"
        assert {e.severity for e in suite.expectations} <= {"warn", "quarantine", "block"}
        assert any(e.type == "expect_table_columns_to_match_set" for e in suite.expectations), table


def test_the_dag_checks_the_live_tables():
    """One task per live table of the registry (silver and hot), each with its suite file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "lake_dq_streaming_under_test", Path(__file__).resolve().parents[2] / "dags" / "lake_dq_streaming.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert {t.task_id for t in module.dag.tasks} >= {name.replace(".", "__") for name in LIVE_TABLES}
    assert {n.partition(".")[0] for n in LIVE_TABLES} == {"silver", "hot"}
    for name in LIVE_TABLES:
        load_suite(name)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


GOOD = """table: silver.orders
row_keys: [order_id]
expectations:
  - type: expect_column_values_to_not_be_null
    kwargs: {column: order_id}
    severity: %s
"""


def test_unknown_severity_is_refused_naming_the_file(tmp_path):
    path = write(tmp_path, "silver.orders.yml", GOOD % "fatal")
    with pytest.raises(SuiteError, match=rf"{path}: expectation #1 \(expect_column_values_to_not_be_null\): "
                                         r"severity must be one of warn, quarantine, block, got 'fatal'"):
        load_suite_file(path)


def test_unknown_expectation_type_is_refused_naming_the_file(tmp_path):
    path = write(tmp_path, "silver.orders.yml", (GOOD % "warn").replace("to_not_be_null", "to_not_be_nul"))
    with pytest.raises(SuiteError, match=rf"{path}: expectation #1: unknown expectation type "
                                         r"'expect_column_values_to_not_be_nul'; did you mean "
                                         r"expect_column_values_to_not_be_null\?"):
        load_suite_file(path)


def test_bad_kwargs_quarantine_of_table_checks_and_unknown_placeholders_are_refused(tmp_path):
    bad_kwargs = (GOOD % "warn").replace("{column: order_id}", "{columm: order_id}")
    with pytest.raises(SuiteError, match="GX rejects kwargs"):
        load_suite_file(write(tmp_path, "silver.orders.yml", bad_kwargs))
    table_level = """table: silver.orders
row_keys: [order_id]
expectations:
  - {type: expect_table_row_count_to_be_between, kwargs: {min_value: 1}, severity: quarantine}
"""
    with pytest.raises(SuiteError, match="severity quarantine needs a row-level expectation"):
        load_suite_file(write(tmp_path, "silver.orders.yml", table_level))
    placeholder = """table: silver.orders
expectations:
  - type: unexpected_rows_expectation
    kwargs: {unexpected_rows_query: "SELECT * FROM {batch} WHERE x < {yesterday}"}
    severity: warn
"""
    with pytest.raises(SuiteError, match=r"unknown placeholder \{yesterday\}"):
        load_suite_file(write(tmp_path, "silver.orders.yml", placeholder))
    with pytest.raises(SuiteError, match=r"the file is named for silver\.products but says table: silver\.orders"):
        load_suite_file(write(tmp_path, "silver.products.yml", GOOD % "warn"))
    no_keys = (GOOD % "quarantine").replace("row_keys: [order_id]\n", "")
    with pytest.raises(SuiteError, match="needs the suite's row_keys"):
        load_suite_file(write(tmp_path, "silver.orders.yml", no_keys))


def test_json_suites_load(tmp_path):
    path = write(tmp_path, "hot.funnel_15m.json", '{"table": "hot.funnel_15m", "expectations": [{"type": '
                 '"expect_column_to_exist", "kwargs": {"column": "window_start"}, "severity": "block"}]}')
    names = [e.name for e in load_suite_file(path).expectations]
    # The registry's column and type checks of hot.funnel_15m first, then the file's own.
    assert names[0] == "columns" and names[1] == "type:window_start" and names[-1] == "column_to_exist:window_start"


# --------------------------------------------------------------------------- custom rules on inline rows


def only(table: str, *names: str) -> Any:
    suite = load_suite(table)
    picked = tuple(e for e in suite.expectations if e.name in names)
    assert len(picked) == len(names), names
    return dataclasses.replace(suite, expectations=picked)


def check(spark: Any, df: Any, suite: Any, tables: dict[str, str] | None = None,
          interval: tuple[datetime, datetime] | None = None) -> dict[str, tuple[bool, list[Any]]]:
    from spark_jobs.settings import load_settings

    out = runner.validate_suite(spark, df, suite, interval=interval, run_id="r", dag_id="d", task_id="t",
                                settings=load_settings({}), tables=tables, now=NOW)
    return {r.expectation: (r.success, r.sample_rows) for r in out.results}


ORDERS = "order_id long, customer_id long, total decimal(14,2), placed_at timestamp, _source_ts timestamp"
ITEMS = "order_id long, line_no int, product_id long, quantity int, unit_price decimal(12,2), " \
        "discount decimal(5,4), _source_ts timestamp"


def test_order_total_equals_half_even_rounded_lines(spark):
    # 3 * 0.35 * 0.95 = 0.9975 -> 1.00; 1 * 0.05 * 0.5 = 0.025 -> 0.02 (half-even), total 1.02
    spark.createDataFrame([
        (1, 1, 7, 3, Decimal("0.35"), Decimal("0.0500"), OLD), (1, 2, 7, 1, Decimal("0.05"), Decimal("0.5000"), OLD),
        (2, 1, 7, 1, Decimal("10.00"), None, OLD), (3, 1, 7, 1, Decimal("10.00"), None, NOW)], ITEMS
    ).createOrReplaceTempView("t_items")
    orders = spark.createDataFrame([
        (1, 1, Decimal("1.02"), OLD, OLD),   # equal
        (2, 1, Decimal("10.01"), OLD, OLD),  # wrong
        (3, 1, Decimal("99.00"), OLD, OLD),  # wrong but its item changed just now: not settled yet
        (4, 1, Decimal("0.00"), OLD, OLD),   # no lines: 0
        (5, 1, Decimal("5.00"), OLD, OLD),   # no lines but a total
    ], ORDERS)
    got = check(spark, orders, only("silver.orders", "total_equals_items"), {"silver.order_items": "t_items"})
    assert got == {"total_equals_items": (False, [
        {"order_id": 2, "total": "10.01", "items_amount": "10.00"},
        {"order_id": 5, "total": "5.00", "items_amount": "0.00"}])}


def test_orders_reference_customers_and_items_reference_products(spark):
    spark.createDataFrame([(1,), (2,)], "customer_id long").createOrReplaceTempView("t_customers")
    spark.createDataFrame([(7,)], "product_id long").createOrReplaceTempView("t_products")
    orders = spark.createDataFrame([(1, 1, Decimal(0), OLD, OLD), (2, 3, Decimal(0), OLD, OLD),
                                    (3, 4, Decimal(0), NOW, NOW)], ORDERS)
    got = check(spark, orders, only("silver.orders", "customer_exists"), {"silver.customers": "t_customers"})
    assert got == {"customer_exists": (False, [{"order_id": 2, "customer_id": 3, "_source_ts": str(OLD.replace(
        tzinfo=None))}])}
    items = spark.createDataFrame([(1, 1, 7, 1, Decimal(1), None, OLD), (1, 2, 8, 1, Decimal(1), None, OLD)], ITEMS)
    got = check(spark, items, only("silver.order_items", "product_exists"), {"silver.products": "t_products"})
    assert got == {"product_exists": (False, [{"order_id": 1, "line_no": 2, "product_id": 8}])}
    clean = items.where("product_id = 7")
    assert check(spark, clean, only("silver.order_items", "product_exists"), {"silver.products": "t_products"}) == {
        "product_exists": (True, [])}


FCT = "order_id long, customer_id long, status string, currency string, total decimal(14,2), units long, " \
      "order_date date"
DAILY = "order_date date, currency string, orders long, paid_orders long, revenue decimal(18,2), " \
        "refunded_amount decimal(18,2), cancelled_orders long, units long, customers long"


def test_daily_sales_equals_the_aggregate_of_fct_orders(spark):
    d = date(2026, 3, 9)
    spark.createDataFrame([(1, 1, "paid", "EUR", Decimal("5.00"), 2, d), (2, 2, "refunded", "EUR", Decimal("3.00"), 1, d),
                           (3, 1, "cancelled", "USD", Decimal("1.00"), 1, d),
                           (4, 1, "paid", "EUR", Decimal("9.00"), 1, d + timedelta(days=1))], FCT
                          ).createOrReplaceTempView("t_fct_orders")
    interval = (datetime(2026, 3, 9, tzinfo=UTC), datetime(2026, 3, 10, tzinfo=UTC))
    good = [(d, "EUR", 2, 1, Decimal("5.00"), Decimal("3.00"), 0, 2, 2),
            (d, "USD", 1, 0, Decimal("0.00"), Decimal("0.00"), 1, 0, 1)]
    rule = only("gold.fct_daily_sales", "equals_fct_orders_aggregate")
    names = {"gold.fct_orders": "t_fct_orders"}
    assert check(spark, spark.createDataFrame(good, DAILY), rule, names, interval) == {
        "equals_fct_orders_aggregate": (True, [])}
    bad = [(d, "EUR", 2, 1, Decimal("5.01"), Decimal("3.00"), 0, 2, 2)]  # revenue off by a cent, USD missing
    (ok, rows), = check(spark, spark.createDataFrame(bad, DAILY), rule, names, interval).values()
    assert not ok
    assert sorted((r["currency"], r["revenue"], r["expected_revenue"], r["orders"], r["expected_orders"])
                  for r in rows) == [("EUR", "5.01", "5.00", 2, 2), ("USD", None, "0.00", None, 1)]


HOT = "window_start timestamp, window_end timestamp"


def test_hot_freshness_newest_closed_window(spark):
    rule = only("hot.sales_per_minute", "fresh")  # SLO 300 s (default) + the 1-minute window
    def windows(end: datetime) -> Any:
        return spark.createDataFrame([(end - timedelta(minutes=1), end), (NOW, NOW + timedelta(minutes=1))], HOT)
    assert check(spark, windows(NOW - timedelta(minutes=5)), rule) == {"fresh": (True, [])}
    (ok, rows), = check(spark, windows(NOW - timedelta(minutes=7)), rule).values()
    assert not ok and rows[0]["newest_closed_window_end"] == str((NOW - timedelta(minutes=7)).replace(tzinfo=None))


def test_volume_against_trailing_seven_days(spark):
    rule = only("silver.orders", "volume_vs_trailing_7d")
    interval = (datetime(2026, 3, 9, tzinfo=UTC), datetime(2026, 3, 10, tzinfo=UTC))

    def orders(today: int) -> Any:
        rows = [(i * 100 + n, 1, Decimal(0), interval[0] - timedelta(days=i, hours=-1), OLD)
                for i in range(1, 8) for n in range(10)]
        rows += [(n, 1, Decimal(0), interval[0] + timedelta(hours=1), OLD) for n in range(today)]
        return spark.createDataFrame(rows, ORDERS)

    assert check(spark, orders(10), rule, interval=interval) == {"volume_vs_trailing_7d": (True, [])}
    assert check(spark, orders(4), rule, interval=interval) == {
        "volume_vs_trailing_7d": (False, [{"cur": 4, "trailing_mean": "10.000000"}])}


@pytest.mark.parametrize("path", suite_files(), ids=lambda p: p.name)
def test_suite_file_loads(path: Path) -> None:
    assert load_suite_file(path).expectations
