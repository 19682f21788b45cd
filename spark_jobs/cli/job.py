"""``lake job``: Spark jobs run in this process."""

from __future__ import annotations

import click

from spark_jobs.cli.base import LakeGroup
from spark_jobs.jobs import smoke


@click.group("job", cls=LakeGroup)
def group() -> None:
    """Run a Spark job in this process."""


group.add_command(smoke.command)
