"""``lake restore-path``: bring a deleted or overwritten table path back from the bucket's old versions."""

from __future__ import annotations

from datetime import datetime

import click

from spark_jobs.cli.base import LakeCommand


def parse_time(text: str) -> datetime:
    """ISO 8601 with a time zone (``2026-11-26T20:00:00Z``, ``...+01:00``)."""
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an ISO 8601 time (e.g. 2026-11-26T20:00:00Z)") from None
    if at.tzinfo is None:
        raise click.BadParameter(f"{text!r} has no time zone; add Z for UTC (e.g. {text}Z)")
    return at


@click.command("restore-path", cls=LakeCommand)
@click.argument("target")
@click.option("--at", "at_text", required=True, metavar="TIME",
              help="ISO 8601 time with zone: restore every object under TARGET as it was then")
@click.option("--dry-run", is_flag=True, help="list what would be copied back or deleted; change nothing")
def restore_path(target: str, at_text: str, dry_run: bool) -> int:
    """Restore every object under TARGET (a table name like ops.smoke, or an s3a://lake/... path) to its version
    at --at: versions written by then are copied back, objects created later get a delete marker. Old versions
    are kept LAKE_S3_NONCURRENT_DAYS days. Stop the table's writer first (docs/operations.md, Versioning and restore)."""
    from spark_jobs.cli.base import fail
    from spark_jobs.settings import load_settings
    from spark_jobs.stack import s3_restore

    at = parse_time(at_text)
    try:
        actions = s3_restore.restore(load_settings(), target, at, dry_run=dry_run)
    except ValueError as exc:
        return fail("lake restore-path", str(exc))
    for a in actions:
        click.echo(f"{'would ' if dry_run else ''}{a.kind:<6} {a.key}"
                   + (f"  (version {a.version_id} of {a.last_modified.isoformat()})" if a.last_modified else ""))
    click.echo(f"lake restore-path: {len(actions)} object(s) {'to change' if dry_run else 'changed'}", err=True)
    return 0
