"""``lake bench``: benchmarks that print figures (never assert); docs/benchmarks.md records them."""

from __future__ import annotations

import json
from datetime import date
from typing import TYPE_CHECKING

import click

from spark_jobs.cli import progress
from spark_jobs.cli.base import ISO_DATE, LakeGroup, at_least, comma_list, json_option
from spark_jobs.loadgen.cdc.runner import DEFAULT_CONNECTIONS

if TYPE_CHECKING:
    from spark_jobs.bench.cdc import Bars


@click.group("bench", cls=LakeGroup)
def group() -> None:
    """Benchmarks that print figures (never assert)."""


def phase_bars() -> Bars:
    """The bars of a bench's phases: rich's on a terminal (spark_jobs.cli.progress), none otherwise."""
    from spark_jobs.bench.cdc import NO_BARS, Bars

    return Bars(timed=progress.timed, remaining=progress.remaining) if progress.enabled() else NO_BARS


@group.command("cdc")
@click.option("--rate", type=float, default=1000, show_default=True, help="steady load, changes/s")
@click.option("--duration", type=float, default=60, show_default=True, help="steady load seconds")
@click.option("--backlog-seconds", type=float, default=150, show_default=True,
              help="seconds of full-speed load while the stream is stopped (the catch-up backlog; 150 s gives the "
                   ">= 300,000 records the catch-up target is measured over, on the reference machine)")
@click.option("--seed", type=int, default=1, show_default=True, help="loadgen seed")
@click.option("--warmup", type=float, default=60, show_default=True, help="seconds of unmeasured load first")
@click.option("--driver", type=click.Choice(("supervised", "own")), default="supervised", show_default=True,
              help="supervised: `lake stream start`; own: a child driver with LAKE_STREAM_QUERIES=cdc")
@click.option("--async-commit", is_flag=True,
              help="the loadgen's sessions commit with synchronous_commit=off (as `lake loadgen cdc --async-commit`): "
                   "a higher reachable rate where WAL flushes limit it; latency is still from the PostgreSQL commit")
@click.option("--connections", type=int, default=DEFAULT_CONNECTIONS, show_default=True, callback=at_least(1),
              help="the loadgen's sessions (as `lake loadgen cdc --connections`)")
def cdc(rate: float, duration: float, backlog_seconds: float, seed: int, warmup: float, driver: str,
        async_commit: bool, connections: int) -> int:
    """Capture/apply rate, commit-to-silver latency, catch-up rate."""
    from spark_jobs.bench.cdc import bench_cdc
    from spark_jobs.settings import load_settings

    result = bench_cdc(load_settings(), rate, duration, backlog_seconds, seed, driver, warmup, async_commit,
                       connections, bars=phase_bars())
    click.echo(json.dumps(result, indent=2))
    return 0


@group.command("events")
@click.option("--rate", type=float, default=5000, show_default=True, help="steady produce rate, events/s")
@click.option("--duration", type=float, default=60, show_default=True, help="steady load seconds")
@click.option("--backlog", type=int, default=1_000_000, show_default=True, help="catch-up backlog size")
@click.option("--backlog-rate", type=float, default=100_000, show_default=True,
              help="produce rate while building the backlog")
@click.option("--seed", type=int, default=42, show_default=True, help="loadgen seed")
@click.option("--warmup", type=float, default=10, show_default=True,
              help="seconds of load at --rate before the steady run, not measured")
@click.option("--skip-steady", is_flag=True, help="only the catch-up")
@click.option("--skip-catchup", is_flag=True, help="only the steady run")
def events(rate: float, duration: float, backlog: int, backlog_rate: float, seed: int, warmup: float,
           skip_steady: bool, skip_catchup: bool) -> int:
    """Produce/ingest rates, catch-up, hot-table freshness, raw ceiling; exit 1 if the app did not catch up."""
    from spark_jobs.bench.events import bench

    results = bench(rate=rate, duration=duration, backlog=backlog, backlog_rate=backlog_rate, seed=seed,
                    warmup=warmup, skip_steady=skip_steady, skip_catchup=skip_catchup, bars=phase_bars())
    if results is None:
        return 1
    click.echo(json.dumps(results, indent=2))
    return 0


@group.command("soak")
@click.option("--minutes", type=float, default=30, show_default=True, help="minutes of load")
@click.option("--cdc-rate", type=float, default=1000, show_default=True, help="CDC changes/s (lake loadgen cdc)")
@click.option("--events-rate", type=float, default=5000, show_default=True, help="events/s (lake loadgen events)")
@click.option("--seed", type=int, default=7, show_default=True,
              help="loadgen seed (event ids come from it: a new one on each run against the same state)")
@click.option("--window-minutes", type=float, default=5, show_default=True,
              help="the first and last windows whose latencies are compared")
@click.option("--sample-seconds", type=float, default=60, show_default=True, help="heap and lag sampling interval")
def soak(minutes: float, cdc_rate: float, events_rate: float, seed: int, window_minutes: float,
         sample_seconds: float) -> int:
    """CDC and events load at once: first vs last window p95s, silver files, stream heap (figures, no asserts)."""
    from spark_jobs.bench.soak import bench_soak
    from spark_jobs.settings import load_settings

    if minutes < 2 * window_minutes:
        raise click.BadParameter(f"{minutes:g}: at least twice --window-minutes ({window_minutes:g})",
                                 param_hint="--minutes")
    result = bench_soak(load_settings(), minutes, cdc_rate, events_rate, seed, window_minutes, sample_seconds,
                        bars=phase_bars())
    click.echo(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=2))
    return 0


def _scales(ctx: click.Context, param: click.Parameter, value: str) -> list[int]:
    try:
        scales = [int(k) for k in comma_list(value)]
    except ValueError:
        scales = []
    if not scales or min(scales) < 1:
        raise click.BadParameter(f"{value!r}: give whole numbers >= 1, e.g. 1,10,100")
    return scales


@group.command("gold")
@click.option("--days", type=int, default=7, show_default=True, callback=at_least(1),
              help="the last N complete UTC days")
@click.option("--end", type=ISO_DATE, default=None, help="day after the last day  [default: today, UTC]")
@click.option("--repeat", type=int, default=3, show_default=True, callback=at_least(1),
              help="runs per engine; the best is reported")
@click.option("--skip-backfill", is_flag=True, help="only the Spark vs DuckDB comparison")
@click.option("--scales", default="1,10,100", show_default=True, callback=_scales,
              help="comma-separated copies of the input to compare the engines on")
def gold(days: int, end: date | None, repeat: int, skip_backfill: bool, scales: list[int]) -> int:
    """Backfill seconds, Spark vs DuckDB on fct_daily_sales; exit 1 if the engines' results differ."""
    from spark_jobs.bench.gold import bench

    with progress.steps("bench gold (scales)", len(scales)) as done:
        return bench(days, end, repeat, skip_backfill, scales, progress=done)


def _dq_tables(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str]:
    from spark_jobs.bench.dq import GOLD, SILVER

    if value is None:
        return [*SILVER, *GOLD]
    tables = comma_list(value)
    unknown = [t for t in tables if t not in SILVER + GOLD]
    if unknown:
        raise click.BadParameter(f"no benchmark for {', '.join(unknown)}; choose from {', '.join(SILVER + GOLD)}")
    return tables


@group.command("dq")
@click.option("--day", type=ISO_DATE, default=None,
              help="gold day to validate  [default: newest complete day in gold.fct_orders]")
@click.option("--tables", default=None, callback=_dq_tables, help="comma-separated suites to run  [default: all]")
@click.option("--repeat", type=int, default=3, show_default=True, callback=at_least(1), help="runs per suite")
def dq(day: date | None, tables: list[str], repeat: int) -> int:
    """Seconds per data-quality suite and per million rows (silver, a gold day)."""
    from spark_jobs.bench.dq import bench

    with progress.steps("bench dq (suites)", len(tables)) as done:
        return bench(tables, day, repeat, progress=done)


@group.command("replay")
@click.argument("tables", nargs=-1)
@click.option("--with-dq", is_flag=True, help="time each shadow's suite too")
def replay(tables: tuple[str, ...], with_dq: bool) -> int:
    """Records replayed per second from bronze per table (a dry replay: nothing switched), beside the stream's
    events catch-up rate from its ledger. TABLES default: all."""
    from spark_jobs.bench.replay import bench_replay
    from spark_jobs.replay.targets import ReplayTargetError, resolve
    from spark_jobs.settings import load_settings

    try:
        targets = resolve(list(tables), everything=not tables)
    except ReplayTargetError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(json.dumps(bench_replay(load_settings(), targets, with_dq), indent=2, default=str))
    return 0


@group.command("contract")
@click.option("--events", type=int, default=1_000_000, show_default=True, callback=at_least(1),
              help="records to generate (the loadgen's generator, with late, duplicate and bad records)")
@click.option("--seed", type=int, default=42, show_default=True, help="generator seed")
@click.option("--repeat", type=int, default=3, show_default=True, callback=at_least(1),
              help="interleaved rounds (every validator once a round); the best and the median are reported")
@json_option("the figures as one JSON object")
def contract(events: int, seed: int, repeat: int, as_json: bool) -> int:
    """The events contract check, ours against maintained JSON Schema validators, on the same records (one process,
    no Spark): records/s, the ratio to ours, verdict disagreements. Progress goes to stderr."""
    from spark_jobs import logs
    from spark_jobs.bench.contract import CANDIDATES, available, bench
    from spark_jobs.bench.contract_report import table

    logs.progress_to_stderr()
    with progress.steps("bench contract (timed passes)", repeat * sum(map(available, CANDIDATES))) as done:
        result = bench(events, seed, repeat, step=done)
    click.echo(json.dumps(result, indent=2) if as_json else table(result))
    return 0
