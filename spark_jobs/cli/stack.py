"""``lake stack``: the local stack of services."""

from __future__ import annotations

import json

import click

from spark_jobs.cli.base import LakeGroup, json_option


@click.group("stack", cls=LakeGroup)
def group() -> None:
    """The local stack of services."""


@group.command("up")
@click.argument("services", nargs=-1)
def up(services: tuple[str, ...]) -> int:
    """Start every service (idempotent) and wait until healthy.

    SERVICES: only these services (and those before them).
    """
    from spark_jobs.stack import manager

    settings = manager.up(list(services) or None)
    _print_welcome(settings)
    return 0


@group.command("down")
def down() -> int:
    """Stop every service; leaves no process behind."""
    from spark_jobs.stack import manager

    manager.down()
    return 0


def _interactive() -> bool:
    """Whether someone can answer a question (stdin and stderr on a terminal)."""
    import sys

    return sys.stdin.isatty() and sys.stderr.isatty()


@group.command("clean")
@click.option("--yes", is_flag=True, help="delete without asking (scripts, CI; `make clean FORCE=1`)")
def clean(yes: bool) -> int:
    """Stop the stack, then DELETE its state dir: every secret and all data.

    The state dir is LAKE_STATE_DIR (default .lake in the checkout). It holds the generated passwords and keys
    (.env), PostgreSQL (the shop, Airflow's metadata, the catalog), Kafka's topics and MinIO's bucket with every
    table (bronze is the only copy of the history). Asks on a terminal; elsewhere needs --yes.
    """
    from spark_jobs.cli.base import fail
    from spark_jobs.settings import load_settings
    from spark_jobs.stack import manager

    settings = load_settings()
    state_dir = settings.state_dir
    problem = manager.clean_refusal(state_dir)
    if problem:
        return fail("lake stack clean", f"refusing: {problem}")
    if not state_dir.exists():
        click.echo(f"lake stack clean: {state_dir} does not exist; nothing to delete")
        return 0
    if not yes:
        what = (f"This stops the stack and deletes {state_dir}: every secret (passwords, keys, tokens in .env) and all "
                "data (PostgreSQL, Kafka topics, every lake table in MinIO, logs). It cannot be undone.")
        if not _interactive():
            return fail("lake stack clean", f"{what} Not on a terminal, so not asking: pass --yes "
                        "(make clean FORCE=1) to delete it.")
        if not click.confirm(f"{what}\nDelete {state_dir}?", default=False, err=True):
            click.echo("lake stack clean: nothing deleted", err=True)
            return 1
    manager.clean(settings)
    return 0


@group.command("status")
@json_option()
def status(as_json: bool) -> int:
    """Health of each service; exit 1 when a service is down, a program is FATAL/BACKOFF, the stream keeps
    restarting (more than LAKE_STREAM_MAX_RESTARTS in LAKE_STREAM_RESTART_WINDOW_MINUTES), or a record it has not
    archived is past LAKE_RETENTION_FAIL_FRACTION of its Kafka topic's retention (past the WARN fraction: a warning)."""
    from spark_jobs.stack import manager

    report = manager.status()
    if as_json:
        for svc in report["services"].values():
            svc.pop("detail", None)
        click.echo(json.dumps(report, indent=2))
    else:
        click.echo("\n".join(manager.format_status(report)))
    # Warnings alone exit 0.
    return 0 if report["ok"] else 1


@group.command("logs")
@click.argument("service")
@click.option("-n", "--lines", type=int, default=100, show_default=True, help="how many of the last lines")
def logs(service: str, lines: int) -> int:
    """Last lines of a service's log."""
    from spark_jobs.stack import manager

    click.echo(manager.logs(service, lines))
    return 0


def _print_welcome(settings: object) -> None:
    from spark_jobs import kafka_auth
    from spark_jobs.settings import Settings
    from spark_jobs.stack.configs import THRIFT_USER, thrift_password_path

    assert isinstance(settings, Settings)
    click.echo(
               "\nLakestream stack is up.\n"
               f"  Airflow UI     {settings.airflow_url}  (user {settings.airflow_admin_user}, password: "
               f"LAKE_AIRFLOW_ADMIN_PASSWORD in {settings.state_dir / '.env'})\n"
               f"  Kafka          {settings.kafka_bootstrap}  (SASL/SCRAM: LAKE_KAFKA_*_PASSWORD; "
               "docs/security.md, Kafka security)\n"
               f"  Connect REST   {settings.connect_url}  ({kafka_auth.connect_curl(settings)})\n"
               f"  MinIO (S3)     {settings.s3_endpoint}  console http://{settings.host}:{settings.minio_console_port}\n"
               f"  Catalog        {settings.metastore_uri or 'PostgreSQL ' + settings.metastore_db + ' database (no service)'}\n"
               f"  Spark JDBC     jdbc:hive2://{settings.host}:{settings.thrift_port}/default  (user {THRIFT_USER}, password "
               f"LAKE_THRIFT_PASSWORD; beeline -w {thrift_password_path(settings)})\n"
               f"  Data Docs      http://{settings.host}:{settings.dq_docs_port}/  (user {settings.dq_docs_user}, "
               f"password: LAKE_DQ_DOCS_PASSWORD in {settings.state_dir / '.env'})\n"
               f"  Logs           {settings.log_dir}\n"
               "  Try: lake sql -e 'SHOW DATABASES'   |   lake stack status"
    )
