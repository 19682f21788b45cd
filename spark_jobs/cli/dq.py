"""``lake dq``: data quality; suites in expectations/, results in ops.dq_results."""

from __future__ import annotations

from datetime import date
from typing import Any

import click

from spark_jobs.cli.base import ISO_DATE, LakeGroup, json_option


@click.group("dq", cls=LakeGroup)
def group() -> None:
    """Data quality: suites in expectations/, results in ops.dq_results."""


def _reader() -> Any:
    from spark_jobs.session import connect_session
    from spark_jobs.settings import load_settings

    # Reads of ops.dq_results: the stack's warm Spark Connect server answers in seconds (a local JVM: minutes
    # on a busy two-core machine).
    return connect_session(load_settings())


@group.command("status")
@click.option("--table", help="only this table, e.g. silver.orders")
@json_option()
def status(table: str | None, as_json: bool) -> int:
    """Latest verdict per table; exit 1 if one is BLOCK."""
    from spark_jobs.quality import checks

    return checks.main_status(_reader(), table, as_json)


@group.command("history")
@click.option("--table", help="only this table, e.g. gold.fct_daily_sales")
@click.option("--limit", type=int, default=50, show_default=True, help="how many validations")
def history(table: str | None, limit: int) -> int:
    """Validations newest first with their pass rate (the trend)."""
    from spark_jobs.quality import checks

    return checks.main_history(_reader(), table, limit)


@group.command("run")
@click.option("--table", required=True, help="the table to validate, e.g. silver.orders")
@click.option("--date", "day", type=ISO_DATE, help="only that UTC day (tables with a date)")
@click.option("--settle-seconds", type=int, default=600, show_default=True,
              help="cross-table rules judge only changes at least this old (0 once the stream caught up)")
def run(table: str, day: date | None, settle_seconds: int) -> int:
    """Validate a table now (whole, or one UTC day) and record the results; exit 1 if blocked."""
    from spark_jobs.quality import checks
    from spark_jobs.session import build_session
    from spark_jobs.settings import load_settings

    settings = load_settings()
    return checks.main_run(build_session(settings, "lake-dq-run"), settings, table, day, settle_seconds)
