"""``lake dq``: data quality; suites in expectations/, results in ops.dq_results."""

from __future__ import annotations

import json
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


def _nothing_recorded(table: str | None) -> str:
    from spark_jobs.quality.store import RESULTS_TABLE

    return f"no validations recorded in {RESULTS_TABLE}" + (f" for {table}" if table else "")


@group.command("status")
@click.option("--table", help="only this table, e.g. silver.orders")
@json_option()
def status(table: str | None, as_json: bool) -> int:
    """Latest verdict per table; exit 1 if one is BLOCK."""
    from spark_jobs.quality import checks

    verdicts = checks.recorded_verdicts(_reader(), table)
    if as_json:
        click.echo(json.dumps({"tables": verdicts}, indent=2))
    elif not verdicts:
        click.echo(_nothing_recorded(table))
    else:
        for v in verdicts:
            click.echo(f"{v['table']:<24} {v['verdict']:<10} {v['validated_at']}  {v['failed']}/"
                       f"{v['expectations']} failed  run={v['run_id']}  {', '.join(v['failures'])}")
    return 1 if any(v["verdict"] == "BLOCK" for v in verdicts) else 0


@group.command("history")
@click.option("--table", help="only this table, e.g. gold.fct_daily_sales")
@click.option("--limit", type=int, default=50, show_default=True, help="how many validations")
def history(table: str | None, limit: int) -> int:
    """Validations newest first with their pass rate (the trend)."""
    from spark_jobs.quality import checks

    rows = checks.recorded_history(_reader(), table, limit)
    for h in rows:
        rate = "-" if h["pass_rate"] is None else f"{100 * h['pass_rate']:.1f}%"
        click.echo(f"{h['validated_at']}  {h['table']:<24} pass {rate:>6} ({h['passed']}/{h['expectations']})"
                   f"  blocking={h['blocking']}  run={h['run_id']}")
    if not rows:
        click.echo(_nothing_recorded(table))
    return 0


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
    outcome = checks.run_now(build_session(settings, "lake-dq-run", short_lived=True), settings, table, day, settle_seconds)
    click.echo(outcome.summary())
    return 1 if outcome.blocked else 0
