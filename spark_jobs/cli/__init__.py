"""The ``lake`` command line: one Click group per area, each in its own module of this package.

Shell completion (bash): ``eval "$(_LAKE_COMPLETE=bash_source lake)"`` (zsh: ``zsh_source``, fish: ``fish_source``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import click

from spark_jobs import logs
from spark_jobs.cli.base import CONTEXT, LakeGroup


@click.group(cls=LakeGroup, context_settings=CONTEXT)
@click.option("-v", "--verbose", is_flag=True, help="show debug messages too")
def lake(verbose: bool) -> None:
    """Lakestream: batch + stream data lake."""
    logs.setup(verbose)
    # What lake writes (state dir, reports, Spark's local files) is the user's alone, like the stack's programs.
    os.umask(0o077)


@lake.command("settings")
@click.option("--example", is_flag=True,
              help="print every setting with its default and description instead (the text of .env.example)")
def settings_cmd(example: bool) -> None:
    """Print the resolved settings (secrets masked)."""
    if example:
        from spark_jobs.settings import env_example

        click.echo(env_example.render(), nl=False)
        return
    from spark_jobs.settings import load_settings

    for key, value in load_settings().redacted().items():
        click.echo(f"{key} = {value}")


def _register() -> None:
    from spark_jobs.cli import (
        bench,
        connectors,
        dq,
        gold,
        job,
        loadgen,
        replay,
        restore,
        sql,
        stack,
        stream,
        verify,
    )

    for command in (stack.group, connectors.group, stream.group, loadgen.group, bench.group, gold.group, dq.group,
                    verify.reconcile, verify.verify, sql.sql, job.group, restore.restore_path, replay.group):
        lake.add_command(command)


_register()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``lake`` with ``argv`` (default: the process's); returns the exit code.

    A usage error (unknown command or option, bad value) prints Click's message and exits 2; an error of the
    stack, settings, connectors or suites prints ``lake: <what and the fix>`` and returns 2.
    """
    from spark_jobs.quality.suites import SuiteError
    from spark_jobs.settings import SettingsError
    from spark_jobs.stack.connectors import ConnectorError
    from spark_jobs.stack.errors import StackError

    try:
        rv = lake.main(args=list(sys.argv[1:] if argv is None else argv), prog_name="lake", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None
    except click.Abort:  # Ctrl-C outside a command's own handling (the sql shell's prompt, a wait)
        click.echo("Aborted!", err=True)
        return 130
    except (StackError, SettingsError, FileNotFoundError, ConnectorError, SuiteError) as exc:
        click.echo(f"lake: {exc}", err=True)
        return 2
    return rv if isinstance(rv, int) else 0


def entry() -> int:
    """The ``lake`` console script: started by root, it first becomes the unprivileged service user
    (:mod:`spark_jobs.stack.service_user`), then runs :func:`main`."""
    if os.geteuid() == 0:
        from spark_jobs.settings import SettingsError, load_settings
        from spark_jobs.stack.errors import StackError
        from spark_jobs.stack.service_user import run_as_service_user

        logs.setup()
        try:
            # Not the state dir's .env: the service user writes it, and these settings decide privilege.
            run_as_service_user(load_settings(dotenv=False))
        except (StackError, SettingsError) as exc:
            click.echo(f"lake: {exc}", err=True)
            return 2
    return main()
