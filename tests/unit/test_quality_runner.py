"""spark_jobs.quality: severities on inline DataFrames with exact unexpected rows, the summary, Data Docs."""

from __future__ import annotations

import json
import urllib.parse
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from spark_jobs.quality import docs, runner
from spark_jobs.quality.store import quarantine_frame, results_rows
from spark_jobs.quality.suites import parse_suite

INTERVAL = (datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 2, tzinfo=UTC))
NOW = datetime(2026, 3, 2, 0, 30, tzinfo=UTC)
ORDERS = "order_id long, customer_id long, status string, total decimal(14,2)"


def _served_path(settings: Any, url: str) -> Path:
    """The file under the Data Docs folder that the stack's dq-docs server serves at ``url``."""
    return docs.data_docs_dir(settings) / urllib.parse.unquote(urllib.parse.urlparse(url).path).lstrip("/")


def suite(*expectations: dict[str, Any], keys: tuple[str, ...] = ("order_id",), table: str = "gold.fct_orders"):
    return parse_suite({"table": table, "row_keys": list(keys), "expectations": list(expectations)}, "<test>")


def run(spark: Any, df: Any, s: Any, **kw: Any) -> runner.DqOutcome:
    return runner.validate_suite(spark, df, s, interval=INTERVAL, run_id="run-1", dag_id="dag", task_id="task",
                                 now=NOW, **kw)


def orders(spark: Any, rows: list[tuple[Any, ...]]) -> Any:
    return spark.createDataFrame(rows, ORDERS)


CLEAN = [(1, 10, "paid", Decimal("5.00")), (2, 11, "pending", Decimal("0.00"))]
STATUS = {"name": "status_known", "type": "expect_column_values_to_be_in_set",
          "kwargs": {"column": "status", "value_set": ["pending", "paid", "shipped", "cancelled", "refunded"]}}


def with_severity(exp: dict[str, Any], severity: str) -> dict[str, Any]:
    return {**exp, "severity": severity}


def ids(df: Any) -> list[int]:
    return sorted(r["order_id"] for r in df.collect())


def test_all_pass_publishes_everything(spark):
    out = run(spark, orders(spark, CLEAN), suite(with_severity(STATUS, "block")))
    assert [(r.expectation, r.success, r.unexpected_count) for r in out.results] == [("status_known", True, 0)]
    assert not out.blocked and out.quarantined is None
    assert ids(out.passed) == [1, 2]
    assert "0 of 1 expectations failed; all passed" in out.summary()


def test_warn_records_only(spark):
    df = orders(spark, [*CLEAN, (3, 12, "lost", Decimal("1.00"))])
    out = run(spark, df, suite(with_severity(STATUS, "warn")))
    (r,) = out.results
    assert (r.success, r.severity, r.unexpected_count) == (False, "warn", 1)
    assert r.sample_rows == [{"order_id": 3, "status": "lost"}]
    assert not out.blocked and out.quarantined is None
    assert ids(out.passed) == [1, 2, 3]


def test_quarantine_moves_exactly_the_failing_rows_and_counts_reconcile(spark):
    df = orders(spark, [*CLEAN, (3, 12, "lost", Decimal("1.00")), (4, 13, "paid", Decimal("-2.00")),
                        (5, None, "gone", Decimal("-1.00"))])
    money = {"name": "total_not_negative", "type": "expect_column_values_to_be_between",
             "kwargs": {"column": "total", "min_value": 0}, "severity": "quarantine"}
    out = run(spark, df, suite(with_severity(STATUS, "quarantine"), money))
    assert [(r.expectation, r.unexpected_count) for r in out.results] == [("status_known", 2), ("total_not_negative", 2)]
    assert not out.blocked
    assert ids(out.passed) == [1, 2]
    assert out.quarantined is not None
    got = sorted((r["order_id"], list(r[runner.EXPECTATIONS_COLUMN])) for r in out.quarantined.collect())
    assert got == [(3, ["status_known"]), (4, ["total_not_negative"]), (5, ["status_known", "total_not_negative"])]
    assert out.passed.count() + out.quarantined.count() == df.count()
    q = quarantine_frame(out, out.quarantined).orderBy("row_json").collect()
    assert [(r["run_id"], r["table_name"], r["expectation"]) for r in q] == [
        ("run-1", "gold.fct_orders", "status_known"), ("run-1", "gold.fct_orders", "total_not_negative"),
        ("run-1", "gold.fct_orders", "status_known, total_not_negative")]
    assert json.loads(q[0]["row_json"]) == {"order_id": 3, "customer_id": 12, "status": "lost", "total": 1.0}
    assert q[0]["interval_start"] == INTERVAL[0].replace(tzinfo=None)


def test_quarantine_of_duplicate_keys_moves_every_copy(spark):
    unique = {"type": "expect_column_values_to_be_unique", "kwargs": {"column": "order_id"}, "severity": "quarantine"}
    df = orders(spark, [*CLEAN, (2, 11, "paid", Decimal("1.00"))])
    out = run(spark, df, suite(unique))
    assert out.results[0].unexpected_count == 2
    assert ids(out.passed) == [1]
    assert out.quarantined is not None and ids(out.quarantined) == [2, 2]


def test_quarantine_by_custom_sql_rule(spark):
    rule = {"name": "total_matches_items", "type": "unexpected_rows_expectation", "severity": "quarantine",
            "kwargs": {"unexpected_rows_query": "SELECT order_id, total FROM {batch} WHERE total > 4"}}
    out = run(spark, orders(spark, CLEAN), suite(rule))
    (r,) = out.results
    assert (r.success, r.unexpected_count) == (False, 1)
    assert r.sample_rows == [{"order_id": 1, "total": "5.00"}]
    assert ids(out.passed) == [2]
    assert out.quarantined is not None and ids(out.quarantined) == [1]


def test_block_sets_blocked_and_keeps_rows(spark):
    not_null = {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "customer_id"},
                "severity": "block"}
    df = orders(spark, [*CLEAN, (3, None, "paid", Decimal("1.00"))])
    out = run(spark, df, suite(not_null, with_severity(STATUS, "warn")))
    assert out.blocked
    assert [(r.expectation, r.success) for r in out.results] == [
        ("column_values_to_not_be_null:customer_id", False), ("status_known", True)]
    assert out.results[0].sample_rows == [{"order_id": 3, "customer_id": None}]
    assert ids(out.passed) == [1, 2, 3]


def test_an_expectation_gx_cannot_evaluate_fails_and_blocks_when_quarantine(spark):
    missing = {"type": "expect_column_values_to_be_between", "kwargs": {"column": "nope", "min_value": 0},
               "severity": "quarantine"}
    out = run(spark, orders(spark, CLEAN), suite(missing))
    (r,) = out.results
    assert not r.success and r.error
    assert out.blocked and out.quarantined is None


def test_summary_names_table_interval_expectation_count_and_samples(spark):
    df = orders(spark, [(i, 1, "lost", Decimal("1.00")) for i in range(1, 31)])
    block = with_severity(STATUS, "block")
    out = run(spark, df, suite(block))
    text = out.summary()
    lines = text.splitlines()
    assert lines[0] == ("DQ gold.fct_orders interval [2026-03-01T00:00:00+00:00, 2026-03-02T00:00:00+00:00) run run-1 "
                        "(dag dag, task task): 1 of 1 expectations failed; BLOCKED (a block expectation failed: do not "
                        "publish)")
    assert lines[1].startswith("  FAILED [block] status_known (expect_column_values_to_be_in_set): unexpected 30, "
                               "observed 30 unexpected of 30 rows")
    samples = [line for line in lines if line.startswith("    sample: ")]
    assert len(samples) == 20
    assert samples[0] == '    sample: {"order_id": 1, "status": "lost"}'


def test_cross_table_rule_and_interval_placeholders(spark):
    spark.createDataFrame([(10,), (11,)], "customer_id long").createOrReplaceTempView("t_customers")
    rule = {"name": "customer_exists", "type": "unexpected_rows_expectation", "severity": "warn", "kwargs": {
        "unexpected_rows_query": "SELECT o.order_id, o.customer_id FROM {batch} o LEFT ANTI JOIN "
                                 "{table:silver.customers} c ON o.customer_id = c.customer_id "
                                 "WHERE {interval_start} < {interval_end} AND {interval_start_date} = DATE'2026-03-01'"}}
    df = orders(spark, [*CLEAN, (3, 99, "paid", Decimal("1.00"))])
    out = run(spark, df, suite(rule), tables={"silver.customers": "t_customers"})
    (r,) = out.results
    assert (r.success, r.unexpected_count, r.sample_rows) == (False, 1, [{"order_id": 3, "customer_id": 99}])


def test_results_rows_one_per_expectation(spark):
    out = run(spark, orders(spark, CLEAN), suite(with_severity(STATUS, "warn")))
    (row,) = results_rows(out)
    assert row[:10] == ("run-1", "dag", "task", "gold.fct_orders", INTERVAL[0], INTERVAL[1], "status_known",
                        "expect_column_values_to_be_in_set", "warn", True)
    assert row[11:] == (0, "[]", NOW)


def test_data_docs_site_is_built(spark, tmp_path, monkeypatch):
    from spark_jobs.settings import load_settings

    monkeypatch.setenv("LAKE_STATE_DIR", str(tmp_path))
    settings = load_settings()
    out = run(spark, orders(spark, CLEAN), suite(with_severity(STATUS, "warn")), settings=settings, build_docs=True)
    site = docs.data_docs_dir(settings)
    assert (site / "index.html").is_file()
    # The URL the log shows is the page on the stack's dq-docs server, which serves this folder.
    assert out.docs_url and out.docs_url.startswith(f"http://{settings.host}:{settings.dq_docs_port}/validations/")
    page = _served_path(settings, out.docs_url)
    assert page.is_file()
    assert page.relative_to(site).parts[:3] == ("validations", "gold", "fct_orders")
    assert "pending" in page.read_text()  # the rendered value set of status_known
    assert (site / "expectations" / "gold" / "fct_orders.html").is_file()


def test_sql_rules_run_together_each_with_its_count_and_sorted_sample(spark):
    big = {"name": "big_total", "type": "unexpected_rows_expectation", "severity": "warn",
           "kwargs": {"unexpected_rows_query": "SELECT order_id, total FROM {batch} WHERE total > 0.5"}}
    unpaid = {"name": "pending", "type": "unexpected_rows_expectation", "severity": "warn",
              "kwargs": {"unexpected_rows_query": "SELECT order_id, status FROM {batch} WHERE status = 'pending'"}}
    none = {"name": "none", "type": "unexpected_rows_expectation", "severity": "block",
            "kwargs": {"unexpected_rows_query": "SELECT order_id FROM {batch} WHERE total < 0"}}
    df = orders(spark, [*CLEAN, (3, 12, "paid", Decimal("7.50")), (4, 13, "pending", Decimal("0.00"))])
    out = run(spark, df, suite(big, unpaid, none))
    got = [(r.expectation, r.success, r.unexpected_count, r.sample_rows, r.error) for r in out.results]
    assert got == [
        ("big_total", False, 2, [{"order_id": 1, "total": "5.00"}, {"order_id": 3, "total": "7.50"}], None),
        ("pending", False, 2, [{"order_id": 2, "status": "pending"}, {"order_id": 4, "status": "pending"}], None),
        ("none", True, 0, [], None)]
    assert not out.blocked


def test_a_broken_sql_rule_fails_alone_and_the_others_still_count(spark):
    broken = {"name": "broken", "type": "unexpected_rows_expectation", "severity": "warn",
              "kwargs": {"unexpected_rows_query": "SELECT order_id FROM {batch} WHERE no_such_column > 0"}}
    good = {"name": "big_total", "type": "unexpected_rows_expectation", "severity": "quarantine",
            "kwargs": {"unexpected_rows_query": "SELECT order_id, total FROM {batch} WHERE total > 4"}}
    out = run(spark, orders(spark, CLEAN), suite(broken, good))
    by_name = {r.expectation: r for r in out.results}
    assert not by_name["broken"].success and "no_such_column" in (by_name["broken"].error or "")
    assert (by_name["big_total"].success, by_name["big_total"].unexpected_count) == (False, 1)
    assert not out.blocked  # a broken warn rule is recorded; only a broken quarantine or block rule blocks
    assert ids(out.passed) == [2]


def test_samples_are_fetched_only_for_failing_map_expectations(spark):
    not_null = {"name": "customer_id_not_null", "type": "expect_column_values_to_not_be_null",
                "kwargs": {"column": "customer_id"}, "severity": "warn"}
    df = orders(spark, [*CLEAN, (3, None, "paid", Decimal("1.00"))])
    out = run(spark, df, suite(not_null, with_severity(STATUS, "warn")))
    failed, passed = out.results
    assert (failed.success, failed.unexpected_count, failed.sample_rows) == (
        False, 1, [{"order_id": 3, "customer_id": None}])
    assert failed.observed_value == "1 unexpected of 3 rows (33.33%)"
    assert (passed.success, passed.unexpected_count, passed.observed_value, passed.sample_rows) == (
        True, 0, "0 unexpected", [])


def test_freshness_slo_per_table_from_settings_overrides_the_registry(tmp_path):
    import pytest

    from spark_jobs.settings import SettingsError, load_settings

    env = {"LAKE_STATE_DIR": str(tmp_path), "LAKE_DQ_FRESHNESS_TABLES": "silver.products=86400, hot.funnel_15m=60"}
    settings = load_settings(env)
    slo = {t: runner.query_params(t, None, NOW, settings)["freshness_slo_seconds"]
           for t in ("silver.products", "silver.orders", "hot.funnel_15m", "hot.sales_per_minute")}
    assert slo == {"silver.products": "86400", "silver.orders": "900", "hot.funnel_15m": "60",
                   "hot.sales_per_minute": "300"}
    with pytest.raises(SettingsError, match=r"LAKE_DQ_FRESHNESS_TABLES: 'silver\.orders=soon' is not"):
        load_settings({**env, "LAKE_DQ_FRESHNESS_TABLES": "silver.orders=soon"})
    typo = load_settings({**env, "LAKE_DQ_FRESHNESS_TABLES": "silver.order=60"})
    with pytest.raises(SettingsError, match=r"names silver\.order, which declare no freshness SLO; the tables that do: "
                                            r"silver\.customers, "):
        runner.query_params("silver.orders", None, NOW, typo)


def test_the_removed_layer_freshness_settings_name_their_replacement(tmp_path):
    import pytest

    from spark_jobs.settings import SettingsError, load_settings

    env = {"LAKE_STATE_DIR": str(tmp_path)}
    with pytest.raises(SettingsError, match=r"LAKE_DQ_FRESHNESS_SILVER_SECONDS \(environment\) is no longer a setting: "
                                            r".*LAKE_DQ_FRESHNESS_TABLES="):
        load_settings({**env, "LAKE_DQ_FRESHNESS_SILVER_SECONDS": "900"})
    (tmp_path / ".env").write_text("LAKE_DQ_FRESHNESS_HOT_SECONDS=300\n")
    with pytest.raises(SettingsError, match=r"LAKE_DQ_FRESHNESS_HOT_SECONDS \(.*/\.env\) is no longer a setting"):
        load_settings(env)


def test_settle_seconds_fills_the_placeholder_and_must_not_be_negative():
    import pytest

    assert runner.query_params("silver.orders", None, NOW, None)["settle_seconds"] == str(runner.SETTLE_SECONDS)
    assert runner.query_params("silver.orders", None, NOW, None, settle_seconds=0)["settle_seconds"] == "0"
    with pytest.raises(ValueError, match="settle_seconds=-1 must be >= 0"):
        runner.query_params("silver.orders", None, NOW, None, settle_seconds=-1)


def test_a_queued_validation_is_rendered_by_the_docs_service_round(spark, tmp_path, monkeypatch):
    """What an Airflow task does (store and queue, no render) and what the dq-docs service then renders."""
    from spark_jobs.settings import load_settings

    monkeypatch.setenv("LAKE_STATE_DIR", str(tmp_path))
    settings = load_settings()
    out = run(spark, orders(spark, CLEAN), suite(with_severity(STATUS, "warn")), settings=settings, build_docs=True,
              render_docs=False)
    page = _served_path(settings, out.docs_url or "")
    assert not page.exists() and len(list(docs.queue_dir(settings).glob("*.json"))) == 1
    assert docs.render_queued(settings) == 1
    assert page.is_file() and (docs.data_docs_dir(settings) / "index.html").is_file()
    assert not list(docs.queue_dir(settings).glob("*.json"))
    assert docs.render_queued(settings) == 0
