"""Hot window aggregates: per-batch deltas add up to the batch aggregation, late events only counted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from spark_jobs.hot.events import (
    ACTIVE_USERS_5M,
    FUNNEL_15M,
    HOT_VIEWS,
    SALES_PER_MINUTE,
    HotView,
    batch_aggregate,
    merge_sql,
    window_deltas,
)

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SCHEMA = "event_type STRING, user_id BIGINT, event_time TIMESTAMP, revenue DECIMAL(18,2), _late BOOLEAN"


def _events(spark: Any, rows: list[tuple[str, int, datetime, Decimal | None, bool]]) -> Any:
    return spark.createDataFrame(rows, SCHEMA)


ROWS = [
    ("page_view", 1, T0 + timedelta(seconds=5), None, False),
    ("add_to_cart", 1, T0 + timedelta(seconds=20), None, False),
    ("purchase", 1, T0 + timedelta(seconds=50), Decimal("10.10"), False),
    ("purchase", 2, T0 + timedelta(seconds=59, microseconds=999999), Decimal("0.01"), False),
    ("purchase", 3, T0 + timedelta(minutes=1), Decimal("5.00"), False),  # next minute: window end is exclusive
    ("page_view", 2, T0 + timedelta(minutes=3), None, False),
    ("purchase", 4, T0 + timedelta(seconds=30), Decimal("99.99"), True),  # arrived after its window closed
    ("checkout", 5, T0 + timedelta(minutes=16), None, False),
]


def _by_window(frame: Any) -> dict[datetime, dict[str, Any]]:
    return {r["window_start"].astimezone(UTC): r.asDict() for r in frame.collect()}


def test_sales_per_minute_exact_revenue_and_late_counted_not_added(spark: Any) -> None:
    got = _by_window(window_deltas(_events(spark, ROWS), SALES_PER_MINUTE))
    first = got[T0]
    assert first["orders"] == 2 and first["revenue"] == Decimal("10.11") and first["late_events"] == 1
    assert got[T0 + timedelta(minutes=1)]["orders"] == 1
    assert got[T0 + timedelta(minutes=3)]["orders"] == 0  # a window with only a page view still shows up


def test_active_users_are_distinct_and_funnel_counts_each_stage(spark: Any) -> None:
    users = _by_window(window_deltas(_events(spark, ROWS), ACTIVE_USERS_5M))
    assert users[T0]["active_users"] == 3 and users[T0]["user_ids"] == [1, 2, 3]
    funnel = _by_window(window_deltas(_events(spark, ROWS), FUNNEL_15M))
    assert (funnel[T0]["page_views"], funnel[T0]["add_to_carts"], funnel[T0]["checkouts"],
            funnel[T0]["purchases"], funnel[T0]["late_events"]) == (2, 1, 0, 3, 1)
    assert funnel[T0 + timedelta(minutes=15)]["checkouts"] == 1


def _combine(view: HotView, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """What merge_sql does to a matched row (Python model of the MERGE's SET clause)."""
    out = dict(a)
    for name in view.metric_names:
        if name != "active_users":
            out[name] = a[name] + b[name]
    if view.user_set:
        out["user_ids"] = sorted(set(a["user_ids"]) | set(b["user_ids"]))
        out["active_users"] = len(out["user_ids"])
    out["late_events"] = a["late_events"] + b["late_events"]
    return out


@pytest.mark.parametrize("view", HOT_VIEWS, ids=lambda v: v.table)
def test_batches_merged_one_by_one_equal_the_batch_aggregation(spark: Any, view: HotView) -> None:
    merged: dict[datetime, dict[str, Any]] = {}
    for part in (ROWS[:3], ROWS[3:5], ROWS[5:]):  # three micro-batches
        for start, delta in _by_window(window_deltas(_events(spark, part), view)).items():
            merged[start] = _combine(view, merged[start], delta) if start in merged else delta
    whole = _by_window(batch_aggregate(_events(spark, ROWS), view))
    cols = ("window_end", *view.metric_names, "late_events")
    assert {k: {c: v[c] for c in cols} for k, v in merged.items()} == {
        k: {c: v[c] for c in cols} for k, v in whole.items()}


def test_merge_is_guarded_by_the_batch_id_so_a_replay_changes_nothing() -> None:
    sql = merge_sql(SALES_PER_MINUTE, "hot.sales_per_minute", "src")
    assert "WHEN MATCHED AND t._last_batch < s._batch THEN UPDATE" in sql
    assert "orders = t.orders + s.orders" in sql and "_last_batch = s._batch" in sql
    users = merge_sql(ACTIVE_USERS_5M, "hot.active_users_5m", "src")
    assert "array_union(t.user_ids, s.user_ids)" in users
