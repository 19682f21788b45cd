"""``lake sql``: Spark SQL against the shared catalog."""

from __future__ import annotations

import click

from spark_jobs.cli.base import LakeCommand


@click.command("sql", cls=LakeCommand)
@click.option("-e", "--execute", help="statements to run (';'-separated); omit for a shell")
@click.option("--format", "fmt", type=click.Choice(("table", "csv", "json")), default="table", show_default=True,
              help="how rows are printed")
@click.option("--local", is_flag=True,
              help="run in a private Spark driver started here (~15-20 s) instead of the stack's Spark Connect server")
def sql(execute: str | None, fmt: str, local: bool) -> int:
    """Run Spark SQL against the shared catalog; exit 1 if a statement failed."""
    from spark_jobs import logs
    from spark_jobs.cli import sql_shell as shell

    logs.progress_to_stderr()  # stdout is the rows (csv, json lines): nothing else goes there
    return shell.run(execute, fmt, local=local)
