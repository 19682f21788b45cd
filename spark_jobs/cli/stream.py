"""``lake stream``: the streaming app (Kafka -> bronze -> silver, hot tables)."""

from __future__ import annotations

import json

import click

from spark_jobs.cli import progress
from spark_jobs.cli.base import LakeGroup, json_option


@click.group("stream", cls=LakeGroup)
def group() -> None:
    """The streaming app (Kafka -> bronze -> silver)."""


@group.command("run")
def run() -> int:
    """Run in the foreground (exit 3 if another driver runs the same queries)."""
    from spark_jobs.settings import load_settings
    from spark_jobs.streaming import app

    return app.run(load_settings())


@group.command("start")
def start() -> int:
    """Start under the stack's supervisor."""
    from spark_jobs.settings import load_settings
    from spark_jobs.stack import stream_control as control

    control.start(load_settings())
    return 0


@group.command("stop")
def stop() -> int:
    """Stop it (after the current batch)."""
    from spark_jobs.settings import load_settings
    from spark_jobs.stack import stream_control as control

    control.stop(load_settings())
    return 0


@group.command("wait")
@click.option("--timeout", type=float, default=300, show_default=True, help="seconds before giving up (exit 1)")
def wait(timeout: float) -> int:
    """Return once every committed source change is applied."""
    from spark_jobs.settings import load_settings
    from spark_jobs.stack import stream_control as control

    with progress.remaining("stream wait (records applied)") as left:
        return 0 if control.wait(load_settings(), timeout, progress=left) else 1


@group.command("status")
@json_option()
def status(as_json: bool) -> int:
    """Per table: last batch, Kafka lag, age of newest applied change; exit 1 if the app is not running."""
    from spark_jobs.settings import load_settings
    from spark_jobs.stack import stream_control as control

    rep = control.report(load_settings())
    if as_json:
        click.echo(json.dumps(rep, indent=2))
        return 0 if rep["running"] else 1
    click.echo(f"stream {'RUNNING' if rep['running'] else 'STOPPED'} pid={rep['pid']} last_batch={rep['last_batch']} "
               f"committed_at={rep['committed_at']}")
    for name, t in rep["tables"].items():
        if "totals" in t:
            tot = t["totals"]
            click.echo(f"  {name:<22} batch={t['last_batch']} lag={t['kafka_lag']} watermark={t['watermark']} "
                       f"received={tot.get('received', 0)} appended={tot.get('appended', 0)} "
                       f"duplicates={tot.get('duplicates', 0)} quarantined={tot.get('quarantined', 0)} "
                       f"late={tot.get('late', 0)}")
            continue
        if "changes_applied" not in t:  # the hot tables: windows, no per-row changes
            click.echo(f"  {name:<22} batch={t['last_batch']} lag={t['kafka_lag']} committed_at={t['committed_at']} "
                       f"batch_seconds={t['batch_seconds']}")
            continue
        click.echo(f"  {name:<22} batch={t['last_batch']} lag={t['kafka_lag']} applied={t['changes_applied']} "
                   f"newest_age_s={t['newest_change_age_s']}")
    return 0 if rep["running"] else 1
