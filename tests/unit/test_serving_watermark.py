"""The batch watermark: forwards over unbroken passed days only, never backwards without the backfill flag."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.contracts.tables import schema_of
from spark_jobs.serving.watermark import (
    NO_WATERMARK,
    current_watermark_sql,
    decide,
    move,
    passed_days,
    read_current,
    unserved_days,
)

D1, D2, D3, D4, D5 = (date(2026, 3, d) for d in range(1, 6))


def test_first_move_starts_at_the_earliest_passed_day() -> None:
    m = decide(None, D3, {D2, D3, D5}, needed={D2, D3, D4, D5})
    assert (m.previous, m.watermark, m.moved, m.backfill) == (None, D3, True, False)
    assert decide(None, D3, set()).moved is False


def test_moves_forward_over_every_passed_day_even_past_the_runs_day() -> None:
    # A backfill of D2 after D3 and D4 were built: the watermark covers all three.
    assert decide(D1, D2, {D2, D3, D4}, needed={D2, D3, D4}).watermark == D4


def test_a_day_with_data_but_without_passing_gold_stops_the_watermark() -> None:
    m = decide(D1, D3, {D3, D4}, needed={D2, D3, D4})  # D2: never built (catchup off), blocked, or still running
    assert (m.watermark, m.moved) == (D1, False)
    assert "2026-03-02 has data in silver" in m.reason and "lake gold backfill --start 2026-03-02" in m.reason
    assert decide(D1, D4, {D2, D4, D5}, needed={D2, D3, D4, D5}).watermark == D2


def test_a_day_without_data_does_not_stop_the_watermark() -> None:
    # D2 has no order and no event: gold and speed are both empty for it, so gold may serve it.
    assert decide(D1, D3, {D3}, needed={D3}).watermark == D3


def test_never_moves_backwards_without_the_backfill_flag() -> None:
    m = decide(D3, D2, {D1, D2, D3})
    assert (m.watermark, m.moved, m.backfill) == (D3, False, False)
    assert decide(D3, D3, {D3}).moved is False


def test_backfill_flag_moves_it_backwards_and_says_so() -> None:
    m = decide(D3, D2, {D2}, backfill=True)
    assert (m.previous, m.watermark, m.moved, m.backfill) == (D3, D2, True, True)
    assert "(backfill)" in m.line()
    assert decide(D2, D2, {D2}, backfill=True).moved is False


@pytest.fixture(scope="module")
def ops(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    from spark_jobs.contracts.tables import schema_of

    root = Path(tmp_path_factory.mktemp("serving_watermark"))
    spark.sql(f"CREATE DATABASE IF NOT EXISTS ut_wm_ops LOCATION '{root}'")
    spark.createDataFrame([], schema_of("ops.serving_watermark")).write.format("delta").saveAsTable("ut_wm_ops.serving_watermark")
    return "ut_wm_ops.serving_watermark"


def _history(spark: Any, table: str) -> list[tuple[Any, ...]]:
    rows = spark.sql(f"SELECT seq, watermark, previous, backfill, run_id FROM {table} ORDER BY seq").collect()
    return [tuple(r) for r in rows]


def test_move_records_one_row_per_move_and_a_retry_writes_nothing(spark: Any, ops: str) -> None:
    def run(day: date, passed: set[date], backfill: bool = False, run_id: str = "r") -> Any:
        return move(spark, day, backfill=backfill, run_id=run_id, dag_id="lake_gold_daily",
                    task_id="serving_watermark", tables=(), table=ops, passed=lambda after: passed,
                    unserved=lambda after, until: (passed, set()))

    assert spark.sql(current_watermark_sql(ops)).first()[0] == NO_WATERMARK
    assert run(D2, {D1, D2}, run_id="a").watermark == D2
    versions = spark.sql(f"DESCRIBE HISTORY {ops}").count()
    assert run(D2, {D1, D2}, run_id="a-retry").moved is False  # a retry of the same run
    assert run(D1, {D1}, run_id="old").moved is False           # a re-run of an older day
    assert spark.sql(f"DESCRIBE HISTORY {ops}").count() == versions, "no move, no commit"
    assert run(D1, {D1}, backfill=True, run_id="bf").watermark == D1
    assert read_current(spark, ops) == (2, D1)
    assert spark.sql(current_watermark_sql(ops)).first()[0] == D1
    assert _history(spark, ops) == [(1, D2, None, False, "a"), (2, D1, D2, True, "bf")]


def _result(table: str, day: date, ok: bool, severity: str, at: int, run: str) -> tuple[Any, ...]:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return (run, "lake_gold_daily", table.removeprefix("gold."), table, start, start + timedelta(days=1),
            "e1", "t", severity, ok, None, None, None, datetime(2026, 3, 9, 0, at, tzinfo=UTC))


def test_passed_days_take_each_tables_latest_validation_and_only_block_failures_count(spark: Any, ops: str) -> None:
    sales, funnel = "gold.fct_daily_sales", "gold.fct_daily_funnel"
    rows = [
        _result(sales, D1, True, "block", 1, "r1"), _result(funnel, D1, False, "warn", 1, "r1"),  # warn: passes
        _result(sales, D2, True, "block", 1, "r2"), _result(funnel, D2, False, "block", 1, "r2"),
        _result(funnel, D2, True, "block", 2, "r2b"),                                            # cleared, fixed
        _result(sales, D3, True, "block", 1, "r3"), _result(sales, D3, False, "block", 2, "r3b"),  # re-run blocked
        _result(funnel, D3, True, "block", 1, "r3"),
        _result(sales, D4, True, "block", 1, "r4"),                                              # funnel not built
    ]
    spark.createDataFrame(rows, schema_of("ops.dq_results")).write.format("delta").saveAsTable("ut_wm_ops.dq_results")
    passed = passed_days(spark, (sales, funnel), None, results="ut_wm_ops.dq_results")
    assert passed == {D1, D2}
    assert passed_days(spark, (sales, funnel), D1, results="ut_wm_ops.dq_results") == {D2}
    assert passed_days(spark, (sales,), D2, results="ut_wm_ops.dq_results") == {D4}
    assert passed_days(spark, (sales,), None, results="ut_wm_ops.no_such_table") == set()


def test_unserved_days_are_days_with_silver_data_and_which_of_them_gold_lacks(spark: Any, ops: str) -> None:
    from spark_jobs.contracts.shop import ORDERS
    from tests.unit.test_gold_facts import EVENTS

    root = Path(spark.sql("DESCRIBE DATABASE ut_wm_ops").where("info_name = 'Location'").first()[1]).parent

    def name(table: str) -> str:
        return f"ut_us_{table}"

    for db in ("silver", "gold"):
        spark.sql(f"CREATE DATABASE IF NOT EXISTS ut_us_{db} LOCATION '{root}/ut_us_{db}'")
    noon = [datetime(d.year, d.month, d.day, 12, tzinfo=UTC) for d in (D1, D2, D3, D4, D5)]
    orders = [(i, 1, "paid", "EUR", None, None, None, noon[i], noon[i]) for i in (0, 1, 4)]     # D1, D2, D5
    spark.createDataFrame(orders, ORDERS.schema).write.format("delta").saveAsTable(name("silver.orders"))
    events = [(f"e{i}", "page_view", 1, "s", noon[i], noon[i].date(), None) for i in (1, 2)]  # D2, D3
    spark.createDataFrame(events, EVENTS).write.format("delta").saveAsTable(name("silver.events"))
    spark.sql(f"CREATE TABLE {name('gold.fct_daily_sales')} (order_date DATE) USING delta")
    spark.sql(f"INSERT INTO {name('gold.fct_daily_sales')} VALUES (DATE'2026-03-01'), (DATE'2026-03-05')")
    # no gold.fct_daily_funnel yet: every event day is unbuilt
    assert unserved_days(spark, D1, D5, name) == ({D2, D3, D5}, {D2, D3})
    assert unserved_days(spark, NO_WATERMARK, D2, name) == ({D1, D2}, {D2})
    assert unserved_days(spark, D5, D5 + timedelta(days=3), name) == (set(), set())


def test_the_watermark_table_is_created_in_sql_with_its_schema_and_comment(spark, ops, tmp_path, monkeypatch):
    """Plain SQL (Spark Connect has no DeltaTable builder): the schema, the location and the comment; a location
    that could end the SQL literal is refused."""
    import spark_jobs.table_io as table_io
    from spark_jobs.contracts.tables import schema_of
    from spark_jobs.settings import load_settings

    monkeypatch.setattr(table_io, "table_location", lambda settings, name: f"file://{tmp_path}/created")
    declared = schema_of("ops.serving_watermark")
    table_io.create_table_sql(spark, load_settings({}), "ut_wm_ops.created", declared, "one row per move")
    created = spark.table("ut_wm_ops.created")
    assert [(f.name, f.dataType, f.nullable) for f in created.schema.fields] == [
        (f.name, f.dataType, f.nullable) for f in schema_of("ops.serving_watermark").fields]
    detail = spark.sql("DESCRIBE DETAIL ut_wm_ops.created").first()
    assert detail["location"].endswith("/created") and detail["description"] == "one row per move"
    monkeypatch.setattr(table_io, "table_location", lambda settings, name: "file:///tmp/x' OR '1")
    with pytest.raises(ValueError, match="holds a quote or backslash"):
        table_io.create_table_sql(spark, load_settings({}), "ut_wm_ops.other", schema_of("ops.serving_watermark"), "c")
