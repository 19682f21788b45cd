"""The ``lake_replay`` DAG's job (``spark-submit spark_jobs/cli/replay_job.py``): the same replay as ``lake replay``,
with the same supervised stream to stop for the switch (so it lives with the command line, not with the data plane's
jobs).

``--tables silver.orders,hot.*`` (or ``all``), ``--until`` (ISO-8601, optional), ``--switch``: without it the run
builds, checks and diffs only (a dry run); with it, the switch follows when every block rule passed (the DAG's
``switch`` param is the user's confirmation). Exit 1 when a block rule failed.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import click

log = logging.getLogger(__name__)


@click.command("replay", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--tables", required=True, help="comma-separated tables or patterns (silver.orders,hot.*), or 'all'")
@click.option("--until", default="", help="ISO-8601 instant; empty: every archived record")
@click.option("--switch", type=bool, default=False, show_default=True,
              help="true: switch when the block rules pass; false: a dry run")
@click.option("--run-id", default=None, help="the Airflow run id, recorded in ops.replays")
def command(tables: str, until: str, switch: bool, run_id: str | None) -> int:
    """Replay TABLES from bronze into shadows, check, diff and (with --switch) switch."""
    from spark_jobs.replay import jobs
    from spark_jobs.replay.targets import resolve
    from spark_jobs.settings import load_settings
    from spark_jobs.stack.stream_control import SupervisedStream

    names = [n.strip() for n in tables.split(",") if n.strip()]
    targets = resolve([] if names == ["all"] else names, everything=names == ["all"])
    instant = None
    if until.strip():
        instant = datetime.fromisoformat(until.strip().replace("Z", "+00:00"))
        instant = instant if instant.tzinfo else instant.replace(tzinfo=UTC)
    settings = load_settings()
    report = jobs.replay(settings, targets, until=instant, dry_run=not switch, confirm=lambda _r: switch,
                         run=run_id or "manual", stream=SupervisedStream(settings))
    for line in report.lines():
        log.info("%s", line)
    return 0 if report.status == "switched" or not switch else 1


if __name__ == "__main__":  # spark-submit spark_jobs/cli/replay_job.py --tables ... [--until ...] [--switch]
    from spark_jobs import logs

    logs.setup()
    try:
        raise SystemExit(command.main(prog_name="replay", standalone_mode=False))
    except click.ClickException as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None
