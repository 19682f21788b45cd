"""``lake replay``: rebuild tables from the bronze archive (Kappa), diff, switch; ``lake replay rollback``."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import click

from spark_jobs.cli.base import LakeGroup


class IsoInstant(click.ParamType[datetime, Any]):
    """An ISO-8601 instant (``2026-11-26T18:00:00Z``); without a zone it is UTC."""

    name = "TIMESTAMP"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            self.fail(f"{value!r} is not an ISO-8601 time; give e.g. 2026-11-26T18:00:00Z", param, ctx)
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class ReplayGroup(LakeGroup):
    """``lake replay TABLE...`` runs the ``run`` command; ``lake replay rollback TABLE`` its own."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group("replay", cls=ReplayGroup)
def group() -> None:
    """Rebuild silver and hot tables from the bronze archive with the stream's transforms (Kappa).

    \b
    lake replay silver.orders hot.* [--until TS] [--dry-run] [--yes]
    lake replay --all --dry-run
    lake replay rollback silver.orders

    Builds shadows (replay.<db>__<table>), runs each table's suite on its shadow (block rules gate), prints a diff
    against the live table, then asks before switching (the streaming app is stopped for the switch and
    restarted). docs/operations.md, "Replay (Kappa)".
    """


@group.command("run")
@click.argument("tables", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="every table a replay can rebuild (silver CDC tables, "
              "silver.events, hot.*)")
@click.option("--until", type=IsoInstant(), default=None,
              help="build from records with a Kafka time up to this instant; the switch still catches up to what "
                   "the stream has archived (the tail), so the live table never goes back in time")
@click.option("--dry-run", is_flag=True, help="build, check and diff only; the shadows stay for inspection")
@click.option("--yes", is_flag=True, help="switch without asking (when the block rules pass)")
def run(tables: tuple[str, ...], everything: bool, until: datetime | None, dry_run: bool, yes: bool) -> int:
    """Replay TABLES (or --all) from bronze into shadows, check, diff and switch. Exit 1 when a block rule failed
    or nothing was switched for want of a confirmation."""
    from spark_jobs.replay import jobs
    from spark_jobs.replay.run import ReplayError, ReplayReport
    from spark_jobs.replay.targets import ReplayTargetError, resolve
    from spark_jobs.settings import load_settings
    from spark_jobs.stack.stream_control import SupervisedStream

    try:
        targets = resolve(list(tables), everything)
    except ReplayTargetError as exc:
        raise click.UsageError(str(exc)) from None

    def confirm(report: ReplayReport) -> bool:
        for line in report.lines():
            click.echo(line)
        if yes:
            return True
        if not sys.stdin.isatty():
            click.echo("lake replay: no terminal to confirm the switch: pass --yes", err=True)
            return False
        return click.confirm(f"Switch {len(targets)} table(s) to their replayed version?", default=False)

    def say(line: str) -> None:
        click.echo(f"[{datetime.now(UTC):%H:%M:%S}] {line}", err=True)

    run_name = "cli:" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    try:
        settings = load_settings()
        report = jobs.replay(settings, targets, until=until, dry_run=dry_run, confirm=confirm, run=run_name,
                             stream=SupervisedStream(settings), say=say)
    except ReplayError as exc:
        raise click.ClickException(str(exc)) from None
    if report.status != "switched" or dry_run:
        for line in report.lines():
            click.echo(line)
    else:
        click.echo("\n".join(line for line in report.lines() if line.startswith(("replay ", "  switched"))))
    return 0 if report.status == "switched" or dry_run else 1


@group.command("rollback")
@click.argument("tables", nargs=-1, required=True)
def rollback(tables: tuple[str, ...]) -> int:
    """Restore TABLES to their version before the last replay switch (Delta RESTORE), then re-apply what the stream
    wrote since; the streaming app is stopped meanwhile."""
    from spark_jobs.replay import jobs
    from spark_jobs.replay.run import ReplayError
    from spark_jobs.replay.targets import ReplayTargetError, resolve
    from spark_jobs.settings import load_settings
    from spark_jobs.stack.stream_control import SupervisedStream

    try:
        targets = resolve(list(tables))
    except ReplayTargetError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        settings = load_settings()
        lines = jobs.rollback(settings, targets, run="cli:" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S"),
                              stream=SupervisedStream(settings), say=lambda line: click.echo(line, err=True))
    except ReplayError as exc:
        raise click.ClickException(str(exc)) from None
    for line in lines:
        click.echo(line)
    return 0


@group.command("gaps")
@click.argument("tables", nargs=-1)
@click.option("--sample", type=int, default=10, show_default=True, help="keys named per hole")
def gaps(tables: tuple[str, ...], sample: int) -> int:
    """Offsets missing from the bronze archive of TABLES (default: all): changes Kafka compacted or deleted before
    the stream read them, with the keys that may lack intermediate versions. Exit 1 if there is a hole."""
    from spark_jobs.replay import jobs
    from spark_jobs.replay.targets import ReplayTargetError, resolve
    from spark_jobs.settings import load_settings

    try:
        targets = resolve(list(tables), everything=not tables)
    except ReplayTargetError as exc:
        raise click.UsageError(str(exc)) from None
    lines = jobs.gaps(load_settings(), targets, sample)
    for line in lines:
        click.echo(line)
    if not lines:
        click.echo(f"no holes in {', '.join(sorted({t.bronze for t in targets}))}")
    return 1 if lines else 0
