"""Hot window aggregates: per-batch deltas add up to the batch aggregation, late events only counted."""

from __future__ import annotations

import itertools
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
    HotWindows,
    batch_aggregate,
    hot_schema,
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


def _apply(windows: HotWindows, part: list[Any], batch_id: int) -> None:
    windows.add([(t, u, at, rev, late) for t, u, at, rev, late in part], batch_id, T0)


@pytest.mark.parametrize("view", HOT_VIEWS, ids=lambda v: v.table)
@pytest.mark.parametrize("cuts", [(3, 5), (1, 2, 7), ()], ids=["three-batches", "four-batches", "one-batch"])
def test_batches_added_in_the_driver_equal_the_spark_batch_aggregation(spark: Any, view: HotView,
                                                                       cuts: tuple[int, ...]) -> None:
    windows = HotWindows(view)
    bounds = [0, *cuts, len(ROWS)]
    for batch_id, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        _apply(windows, ROWS[lo:hi], batch_id)
    table = spark.createDataFrame(windows.rows(), hot_schema(view))  # the schema a driver commit must fit
    assert table.columns == hot_schema(view).names
    got = _by_window(table)
    whole = _by_window(batch_aggregate(_events(spark, ROWS), view))
    cols = ("window_end", *view.metric_names, "late_events")
    assert {k: {c: v[c] for c in cols} for k, v in got.items()} == {
        k: {c: v[c] for c in cols} for k, v in whole.items()}


def test_untouched_windows_keep_their_last_batch_and_user_sets_union() -> None:
    windows = HotWindows(ACTIVE_USERS_5M)
    _apply(windows, [ROWS[0], ROWS[5]], 7)  # windows 12:00 and 12:00 (minute 3)
    _apply(windows, [ROWS[1], ROWS[7]], 8)  # 12:00 again, and 12:15
    got = {r["window_start"]: r for r in windows.rows()}
    assert got[T0]["user_ids"] == [1, 2] and got[T0]["active_users"] == 2 and got[T0]["_last_batch"] == 8
    assert got[T0 + timedelta(minutes=15)]["_last_batch"] == 8
    _apply(windows, [ROWS[7]], 9)
    got = {r["window_start"]: r for r in windows.rows()}
    assert got[T0]["_last_batch"] == 8 and got[T0]["active_users"] == 2
    assert got[T0 + timedelta(minutes=15)]["user_ids"] == [5] and got[T0 + timedelta(minutes=15)]["_last_batch"] == 9


def test_state_reloaded_from_the_table_rows_continues_exactly() -> None:
    """A restart loads the committed rows back: adding the rest then equals adding everything in one go."""
    for view in HOT_VIEWS:
        straight = HotWindows(view)
        _apply(straight, ROWS, 1)
        first = HotWindows(view)
        _apply(first, ROWS[:4], 0)
        reloaded = HotWindows(view)
        reloaded.load(first.rows())
        _apply(reloaded, ROWS[4:], 1)
        assert reloaded.rows() == straight.rows()


def test_window_start_follows_spark_tumbling_windows_for_naive_utc_times() -> None:
    windows = HotWindows(FUNNEL_15M)
    windows.add([("page_view", 1, datetime(2026, 11, 22, 12, 29, 59, 999999), None, False),  # naive = UTC (Arrow)
                 ("page_view", 1, T0 + timedelta(minutes=30), None, False)], 0, T0)
    starts = [r["window_start"] for r in windows.rows()]
    assert starts == [T0 + timedelta(minutes=15), T0 + timedelta(minutes=30)]
