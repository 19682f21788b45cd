"""``lake loadgen``: seeded load against the sources (the shop database, the clickstream topic)."""

from __future__ import annotations

import json
import os
import pwd
import time
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import click

from spark_jobs.cli import progress
from spark_jobs.cli.base import ISO_DATE, LakeGroup, at_least, fail, json_option
from spark_jobs.contracts.clickstream import TOPIC
from spark_jobs.loadgen.cdc.runner import DEFAULT_CONNECTIONS


@click.group("loadgen", cls=LakeGroup)
def group() -> None:
    """Generate load against the sources."""


@group.command("cdc")
@click.option("--rate", type=float, required=True, help="target committed row changes per second")
@click.option("--duration", type=float, required=True, help="seconds to run")
@click.option("--seed", type=int, default=0, show_default=True, help="random seed")
@click.option("--max-changes", type=int, default=None, help="stop before committing more than this many changes")
@click.option("--async-commit", is_flag=True,
              help="SET synchronous_commit = off in the loadgen's sessions (faster; CDC sees commits up to ~200 ms later)")
@click.option("--connections", type=int, default=DEFAULT_CONNECTIONS, show_default=True, callback=at_least(1),
              help="sessions running transactions at once; transactions on the same rows keep their planned order, "
                   "so the rows left behind do not depend on this; 1 commits in plan order")
def cdc(rate: float, duration: float, seed: int, max_changes: int | None, async_commit: bool, connections: int) -> int:
    """Seeded OLTP workload against the shop database."""
    from spark_jobs.loadgen.cdc.execute import LoadgenError
    from spark_jobs.loadgen.cdc.runner import run
    from spark_jobs.settings import SettingsError, load_settings

    try:
        settings = load_settings()
        click.echo(f"loadgen cdc: {rate:g} changes/s for {duration:g}s, seed {seed}, {connections} connection(s) "
                   f"against {settings.pg_host}:{settings.pg_port}/{settings.pg_shop_db}")
        with progress.timed("loadgen cdc", duration):
            report = run(settings, rate, duration, seed, max_changes, progress=click.echo,
                         synchronous_commit=not async_commit, connections=connections)
    except (LoadgenError, SettingsError, ValueError) as exc:
        return fail("lake loadgen cdc", exc)
    click.echo(report.summary())
    return 0


def _check_writable(path: Path) -> None:
    from spark_jobs.stack.service_user import nearest_existing

    folder = nearest_existing(path.parent)
    if not os.access(folder, os.W_OK | os.X_OK):
        who = pwd.getpwuid(os.geteuid()).pw_name
        raise ValueError(f"--manifest {path}: OS user {who} cannot write to {folder} (started by root, lake runs as "
                         "the service user LAKE_SERVICE_USER); choose a folder it can write, e.g. under the state dir")


@group.command("events")
@click.option("--rate", type=float, required=True, help="records per second")
@click.option("--duration", type=float, required=True, help="seconds; the run sends round(rate*duration) records")
@click.option("--seed", type=int, default=0, show_default=True, help="random seed")
@click.option("--late", type=float, default=0.0, show_default=True,
              help="fraction of records that are late valid events (1-30 min)")
@click.option("--dup", type=float, default=0.0, show_default=True,
              help="fraction of records that re-send an earlier valid event")
@click.option("--bad", type=float, default=0.0, show_default=True,
              help="fraction of malformed records (not_json, wrong_type, missing_field, oversized)")
@click.option("--manifest", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="where to write the JSON manifest (default <run dir>/loadgen-events-<seed>-<time>.json)")
@click.option("--users-from-db", is_flag=True, help="user ids from shop.customers (the default)")
@click.option("--users", type=int, default=None, metavar="N", help="user ids 1..N instead of the database")
@click.option("--topic", default=TOPIC, show_default=True, help="topic; created if missing")
@click.option("--partitions", type=int, default=3, show_default=True, help="partitions when the topic is created")
def events(rate: float, duration: float, seed: int, late: float, dup: float, bad: float, manifest: Path | None,
           users_from_db: bool, users: int | None, topic: str, partitions: int) -> int:
    """Seeded clickstream to events.clickstream (late, duplicate, bad); exit 1 if a record was not delivered."""
    from spark_jobs.kafka_topics import events_topic_config
    from spark_jobs.loadgen.clickstream import ClickstreamGenerator, LoadgenError, load_users, run, summary
    from spark_jobs.loadgen.producer import EventProducer, ProducerError, ensure_topic
    from spark_jobs.settings import SettingsError, load_settings

    if users_from_db and users is not None:
        raise click.UsageError("--users and --users-from-db exclude each other: give one (default: --users-from-db)")
    prog = "lake loadgen events"
    try:
        settings = load_settings()
        if users is not None:
            if users < 1:
                raise ValueError(f"--users must be >= 1, got {users}")
            user_ids = list(range(1, users + 1))
        else:
            user_ids = load_users(settings)
        generator = ClickstreamGenerator(seed, user_ids, late=late, dup=dup, bad=bad)
        if manifest is not None:
            _check_writable(manifest)  # before sending anything: a manifest that cannot be written loses the run
        ensure_topic(settings, topic, partitions, config=events_topic_config(settings))
        producer = EventProducer(settings, topic, client_id="lake-loadgen-events")
        click.echo(f"loadgen events: {rate:g} records/s for {duration:g}s, seed {seed}, {len(user_ids)} users -> "
                   f"{topic} at {settings.kafka_bootstrap} (late {late:g}, dup {dup:g}, bad {bad:g})")
        with progress.timed("loadgen events", duration):
            result = run(producer, generator, rate=rate, duration=duration, progress=click.echo)
    except (LoadgenError, ProducerError, SettingsError, ValueError) as exc:
        return fail(prog, exc)
    path = manifest or settings.run_dir / f"loadgen-events-{seed}-{int(time.time())}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.manifest, indent=2) + "\n", encoding="utf-8")
    click.echo(summary(result.manifest))
    click.echo(f"  manifest: {path}")
    if not result.delivered_all:
        return fail(prog, f"{result.manifest['delivery_failed']} record(s) were not delivered to {topic} at "
                          f"{settings.kafka_bootstrap}", 1)
    return 0


@group.command("history")
@click.option("--days", type=int, default=7, show_default=True, help="how many past UTC days")
@click.option("--seed", type=int, default=0, show_default=True,
              help="random seed; it also picks the id range [1e6*(seed+1), 1e6*(seed+2))")
@click.option("--orders-per-day", type=int, default=200, show_default=True, help="orders placed per day")
@click.option("--events-per-day", type=int, default=2000, show_default=True, help="clickstream events per day")
@click.option("--end-date", type=ISO_DATE, default=None,
              help="first day NOT written (default today, UTC); at most today")
@click.option("--dry-run", is_flag=True, help="plan and print the counts; write nothing")
@json_option("print the summary as one JSON object (progress to stderr)")
def history(days: int, seed: int, orders_per_day: int, events_per_day: int, end_date: date | None, dry_run: bool,
            as_json: bool) -> int:
    """Seeded past N days of the shop: PostgreSQL rows and clickstream events."""
    from spark_jobs.loadgen.history import HistoryError, destination, format_summary, summary, write_history
    from spark_jobs.loadgen.history_plan import PlanError, plan_history
    from spark_jobs.loadgen.producer import InvalidEventError, ProducerError
    from spark_jobs.settings import SettingsError, load_settings

    today = datetime.now(UTC).date()
    end = end_date or today
    try:
        if end > today:
            raise PlanError(f"--end-date {end} is after today ({today}, UTC): the history would be in the future")
        plan = plan_history(seed, days, end, orders_per_day=orders_per_day, events_per_day=events_per_day)
        if dry_run:
            counts = {t: Counter(c) for t, c in plan.counts().items()}
            result = summary(plan, counts, Counter(plan.event_counts()), 0, 0.0)
        else:
            settings = load_settings()
            click.echo(f"loadgen history: seed {seed}, {days} day(s) {plan.start.date()} .. "
                       f"{(plan.end - timedelta(days=1)).date()}, {len(plan.txs):,} transactions -> "
                       f"{destination(settings)}, {events_per_day * days:,} events -> {TOPIC} at "
                       f"{settings.kafka_bootstrap}", err=as_json)
            with progress.steps("loadgen history (days)", plan.days) as advance:
                done = 0

                def day_written(line: str) -> None:
                    nonlocal done
                    click.echo(line, err=as_json)
                    done += 1
                    advance(done)

                result = write_history(plan, settings, progress=day_written)
    except (PlanError, HistoryError, ProducerError, InvalidEventError, SettingsError) as exc:
        return fail("lake loadgen history", exc)
    click.echo(json.dumps(result) if as_json else format_summary(result))
    if dry_run and not as_json:
        click.echo("  (dry run: nothing was written)")
    return 0
