"""``lake connectors``: Kafka Connect connectors from ``connectors/*.json``."""

from __future__ import annotations

import json

import click

from spark_jobs.cli.base import LakeGroup, json_option


@click.group("connectors", cls=LakeGroup)
def group() -> None:
    """Kafka Connect connectors from connectors/*.json."""


@group.command("apply")
@click.option("--timeout", type=float, default=120, show_default=True, help="seconds to wait until all run")
def apply(timeout: float) -> int:
    """Register or update every connector (idempotent) and wait until running."""
    from spark_jobs.settings import load_settings
    from spark_jobs.stack import connectors

    connectors.apply(load_settings(), timeout=timeout)
    return 0


@group.command("status")
@json_option("one JSON array, for scripts")
def status(as_json: bool) -> int:
    """State of each connector and its replication slot lag; exit 1 unless all run and no slot is lost."""
    from spark_jobs.settings import load_settings
    from spark_jobs.stack import connectors

    rows = connectors.status_report(load_settings())
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        for row in rows:
            click.echo(f"{row['name']:<20} {row['state']:<10} tasks={','.join(row['tasks']) or '-'} "
                       f"slot_lag_bytes={row['slot_lag_bytes']} wal_status={row['wal_status'] or '-'} "
                       f"safe_wal_size={connectors.format_bytes(row['safe_wal_size'])}")
            for warning in row["warnings"]:
                click.echo(f"WARNING: {warning}")
    return 0 if all(r["state"] == "RUNNING" and not r["slot_lost"] for r in rows) else 1
