"""The gold job's interval rules (no Spark): what a DAG run computes, and the errors that say why not."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from spark_jobs.jobs.gold import PARTITION, STEPS, Interval, IntervalError, resolve_interval

D = datetime(2026, 11, 19, tzinfo=UTC)


def test_run_interval_is_used_as_given() -> None:
    iv = resolve_interval(D, D + timedelta(days=1))
    assert (iv.start, iv.end) == (D, D + timedelta(days=1))
    assert iv.days == [date(2026, 11, 19)]
    assert iv.predicate("order_date") == "order_date >= DATE'2026-11-19' AND order_date < DATE'2026-11-20'"


def test_day_param_overrides_the_interval() -> None:
    iv = resolve_interval(None, None, "2026-11-17")
    assert (iv.start, iv.end) == (datetime(2026, 11, 17, tzinfo=UTC), datetime(2026, 11, 18, tzinfo=UTC))


def test_iso_strings_and_other_offsets_become_utc() -> None:
    cet = timezone(timedelta(hours=1))
    iv = resolve_interval("2026-11-19T01:00:00+01:00", datetime(2026, 11, 21, 1, tzinfo=cet))
    assert iv.days == [date(2026, 11, 19), date(2026, 11, 20)]


@pytest.mark.parametrize(("start", "end", "day", "message"), [
    (None, None, None, "has no data interval"),
    (D, D, None, "is empty (start >= end)"),
    (D + timedelta(hours=1), D + timedelta(days=1, hours=1), None, "not midnight UTC"),
    (datetime(2026, 11, 19), datetime(2026, 11, 20), None, "has no time zone"),
    ("yesterday", D, None, "not an ISO-8601"),
    (None, None, "19/11/2026", "use YYYY-MM-DD"),
])
def test_unusable_intervals_fail_saying_why(start: object, end: object, day: str | None, message: str) -> None:
    with pytest.raises(IntervalError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve_interval(start, end, day)  # type: ignore[arg-type]


def test_every_fact_is_partitioned_by_its_date_and_built_after_the_dimensions() -> None:
    assert set(PARTITION) == {"fct_orders", "fct_daily_sales", "fct_daily_funnel"}
    assert STEPS.index("fct_orders") > max(STEPS.index("dim_customers"), STEPS.index("dim_products"))
    assert STEPS.index("fct_daily_sales") > STEPS.index("fct_orders")
    assert str(Interval(D, D + timedelta(days=1))).startswith("[2026-11-19T00:00:00+00:00")
