"""``lake verify`` and ``lake reconcile``: compare what the lake holds with its sources."""

from __future__ import annotations

import json
from pathlib import Path

import click

from spark_jobs.cli.base import LakeGroup, json_option


@click.group("reconcile", cls=LakeGroup)
def reconcile() -> None:
    """Ledgers: what was sent vs what the lake holds."""


@reconcile.command("events")
@click.option("--manifest", type=click.Path(path_type=Path),
              help="a `lake loadgen events` manifest: scope and what was sent")
@click.option("--all-windows", is_flag=True,
              help="compare open hot windows too (after `lake stream wait`, with no load running)")
@json_option()
def reconcile_events(manifest: Path | None, all_windows: bool, as_json: bool) -> int:
    """Sent = silver (unique) + duplicates removed + quarantined; exit 1 if it does not balance."""
    from spark_jobs import reconcile as ledger
    from spark_jobs.settings import load_settings

    if manifest and not manifest.is_file():
        raise click.BadParameter(f"{manifest}: no such file (lake loadgen events prints where it wrote it)",
                                 param_hint="--manifest")
    report = ledger.run(load_settings(), manifest, all_windows)
    click.echo(json.dumps(report, indent=2, default=str) if as_json else ledger.render(report))
    return 0 if report["ok"] else 1


@click.group("verify", cls=LakeGroup)
def verify() -> None:
    """Compare lake tables with their sources."""


@verify.command("cdc")
@json_option()
def verify_cdc(as_json: bool) -> int:
    """Every silver CDC table equals its PostgreSQL table, column by column; exit 1 on a difference."""
    from spark_jobs.settings import load_settings
    from spark_jobs.verify import verify_cdc as compare

    diffs = compare(load_settings())
    if as_json:
        click.echo(json.dumps(diffs, indent=2, ensure_ascii=False))
    else:
        for table, lines in diffs.items():
            click.echo(f"{table}: {'equal to PostgreSQL' if not lines else f'{len(lines)} difference(s)'}")
            for line in lines:
                click.echo(f"  {line}")
    return 0 if not any(diffs.values()) else 1
