"""``lake gold``: the gold batch views (what the lake_gold_daily DAG runs)."""

from __future__ import annotations

import time
from datetime import date, timedelta

import click

from spark_jobs.cli import progress
from spark_jobs.cli.base import ISO_DATE, LakeGroup, comma_list, fail
from spark_jobs.stack.airflow_api import ENDED, REPROCESS


@click.group("gold", cls=LakeGroup)
def group() -> None:
    """Gold batch views (what the lake_gold_daily DAG runs)."""


@group.command("build")
@click.option("--start", required=True, metavar="YYYY-MM-DD", help="first day")
@click.option("--end", metavar="YYYY-MM-DD", help="last day (inclusive)  [default: --start]")
@click.option("--tables", default=None,
              help="comma-separated subset of the gold tables (dim_customers,fct_orders,...; a wrong name lists "
                   "them all, from the table registry)  [default: all]")
def build(start: str, end: str | None, tables: str | None) -> int:
    """Build gold tables for UTC days on the stack's Spark Connect server (what the DAG runs per day)."""
    from spark_jobs.jobs.gold import PARTITION, STEPS, Interval, IntervalError, resolve_interval, run
    from spark_jobs.settings import load_settings

    prog = "lake gold build"
    try:
        first = resolve_interval(None, None, start)
        last_end = resolve_interval(None, None, end).end if end else first.end
        if last_end <= first.start:
            raise IntervalError(f"--end {end} must not be before --start {start}")
    except IntervalError as exc:
        return fail(prog, exc)
    steps = comma_list(tables) if tables is not None else list(STEPS)
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        raise click.BadParameter(f"no gold table {', '.join(unknown)}; choose from {','.join(STEPS)}",
                                 param_hint="--tables")
    settings = load_settings()
    day = first.start
    while day < last_end:
        # Dimensions do not depend on the day (rebuilt from the whole history): build them once.
        todo = steps if day == first.start else [s for s in steps if s in PARTITION]
        run(settings, Interval(day, day + timedelta(days=1)), todo, progress=click.echo)
        day += timedelta(days=1)
    return 0


@group.command("backfill")
@click.option("--start", type=ISO_DATE, required=True, help="first day")
@click.option("--end", type=ISO_DATE, required=True, help="last day (inclusive)")
@click.option("--reprocess", type=click.Choice(REPROCESS), default="none", show_default=True,
              help="runs that already exist: none (skip), failed, completed (run every day again)")
@click.option("--max-active-runs", type=int, default=2, show_default=True, help="days built at once")
@click.option("--timeout", type=float, default=1800, show_default=True, help="seconds to wait for every day")
def backfill(start: date, end: date, reprocess: str, max_active_runs: int, timeout: float) -> int:
    """Backfill lake_gold_daily through Airflow's REST API (the runs show in the UI) and wait for them."""
    from spark_jobs.settings import load_settings
    from spark_jobs.stack.airflow_api import GOLD_DAG, AirflowClient, AirflowError

    prog = "lake gold backfill"
    if end < start:
        raise click.BadParameter(f"--end {end} is before --start {start}", param_hint="--end")
    days = [date.fromordinal(o) for o in range(start.toordinal(), end.toordinal() + 1)]
    client = AirflowClient(load_settings())
    try:
        client.wait_for_dag(GOLD_DAG)
        client.unpause(GOLD_DAG)
        bf = client.backfill(GOLD_DAG, start, end, reprocess, max_active_runs)
        click.echo(f"{prog}: backfill {bf['id']} of {GOLD_DAG} for {start}..{end} (reprocess {reprocess}); "
                   "follow it in the Airflow UI")
        t0 = time.monotonic()
        with progress.steps("gold backfill (days)", len(days)) as advance:
            states = client.wait_backfill(
                GOLD_DAG, int(bf["id"]), days, timeout,
                on_states=lambda s: advance(sum(1 for v in s.values() if v in ENDED)))
    except AirflowError as exc:
        return fail(prog, exc, 1)
    bad = {d: s for d, s in states.items() if s != "success"}
    click.echo(f"{prog}: {len(days) - len(bad)}/{len(days)} day(s) succeeded in {time.monotonic() - t0:.0f} s"
               + (f"; not succeeded: {', '.join(f'{d} ({s})' for d, s in sorted(bad.items()))} (see the task logs in "
                  "the UI; 'skipped': no run of the day, e.g. outside the DAG's schedule)" if bad else ""))
    return 1 if bad else 0
