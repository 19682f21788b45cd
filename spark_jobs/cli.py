"""The ``lake`` command line."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from datetime import date

from spark_jobs.settings import SettingsError


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lake", description="Lakestream: batch + stream data lake")
    sub = parser.add_subparsers(dest="command", required=True)

    stack = sub.add_parser("stack", help="the local stack of services")
    ssub = stack.add_subparsers(dest="action", required=True)
    up = ssub.add_parser("up", help="start every service (idempotent) and wait until healthy")
    up.add_argument("services", nargs="*", help="only these services (and those before them)")
    ssub.add_parser("down", help="stop every service; leaves no process behind")
    st = ssub.add_parser("status", help="health of each service")
    st.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    lg = ssub.add_parser("logs", help="last lines of a service's log")
    lg.add_argument("service")
    lg.add_argument("-n", "--lines", type=int, default=100)

    conn = sub.add_parser("connectors", help="Kafka Connect connectors from connectors/*.json")
    csub = conn.add_subparsers(dest="action", required=True)
    ap = csub.add_parser("apply", help="register or update every connector (idempotent) and wait until running")
    ap.add_argument("--timeout", type=float, default=120)
    cst = csub.add_parser("status", help="state of each connector and its replication slot lag")
    cst.add_argument("--json", action="store_true")

    stream = sub.add_parser("stream", help="the streaming app (Kafka -> bronze -> silver)")
    stsub = stream.add_subparsers(dest="action", required=True)
    stsub.add_parser("run", help="run in the foreground")
    stsub.add_parser("start", help="start under the stack's supervisor")
    stsub.add_parser("stop", help="stop it (after the current batch)")
    sst = stsub.add_parser("status", help="per table: last batch, Kafka lag, age of newest applied change")
    sst.add_argument("--json", action="store_true")
    sw = stsub.add_parser("wait", help="return once every committed source change is applied")
    sw.add_argument("--timeout", type=float, default=300)

    loadgen = sub.add_parser("loadgen", help="generate load against the sources")
    lsub = loadgen.add_subparsers(dest="kind", required=True)
    lcdc = lsub.add_parser("cdc", help="seeded OLTP workload against the shop database", add_help=False)
    lcdc.add_argument("args", nargs=argparse.REMAINDER)
    lev = lsub.add_parser("events", help="seeded clickstream to events.clickstream (late, duplicate, bad)", add_help=False)
    lev.add_argument("args", nargs=argparse.REMAINDER)
    lhist = lsub.add_parser("history", help="seeded past N days of the shop: PostgreSQL rows and clickstream events",
                            add_help=False)
    lhist.add_argument("args", nargs=argparse.REMAINDER)

    bench = sub.add_parser("bench", help="benchmarks that print figures (never assert)")
    bsub = bench.add_subparsers(dest="kind", required=True)
    bcdc = bsub.add_parser("cdc", help="capture/apply rate, commit-to-silver latency, catch-up rate", add_help=False)
    bcdc.add_argument("args", nargs=argparse.REMAINDER)
    bev = bsub.add_parser("events", help="produce/ingest rates, catch-up, hot-table freshness, raw ceiling",
                          add_help=False)
    bev.add_argument("args", nargs=argparse.REMAINDER)

    bgold = bsub.add_parser("gold", help="backfill seconds, Spark vs DuckDB on fct_daily_sales", add_help=False)
    bgold.add_argument("args", nargs=argparse.REMAINDER)
    bdq = bsub.add_parser("dq", help="seconds per data-quality suite and per million rows (silver, a gold day)",
                          add_help=False)
    bdq.add_argument("args", nargs=argparse.REMAINDER)

    gold = sub.add_parser("gold", help="gold batch views (what the lake_gold_daily DAG runs)")
    gsub = gold.add_subparsers(dest="action", required=True)
    gbuild = gsub.add_parser("build", help="build gold tables for UTC days on the stack's Spark Connect server",
                             add_help=False)
    gbuild.add_argument("args", nargs=argparse.REMAINDER)
    gback = gsub.add_parser("backfill", help="backfill lake_gold_daily through Airflow's REST API and wait",
                            add_help=False)
    gback.add_argument("args", nargs=argparse.REMAINDER)

    dq = sub.add_parser("dq", help="data quality: suites in expectations/, results in ops.dq_results")
    dsub = dq.add_subparsers(dest="action", required=True)
    dst = dsub.add_parser("status", help="latest verdict per table")
    dst.add_argument("--table")
    dst.add_argument("--json", action="store_true")
    dhist = dsub.add_parser("history", help="validations newest first with their pass rate (the trend)")
    dhist.add_argument("--table")
    dhist.add_argument("--limit", type=int, default=50)
    drun = dsub.add_parser("run", help="validate a table now (whole, or one UTC day) and record the results")
    drun.add_argument("--table", required=True)
    drun.add_argument("--date", type=date.fromisoformat, help="YYYY-MM-DD: only that UTC day (tables with a date)")
    drun.add_argument("--settle-seconds", type=int, default=600,
                      help="cross-table rules judge only changes at least this old (0 once the stream caught up)")

    reconcile = sub.add_parser("reconcile", help="ledgers: what was sent vs what the lake holds")
    rsub = reconcile.add_subparsers(dest="kind", required=True)
    rev = rsub.add_parser("events", help="sent = silver (unique) + duplicates removed + quarantined", add_help=False)
    rev.add_argument("args", nargs=argparse.REMAINDER)

    verify = sub.add_parser("verify", help="compare lake tables with their sources")
    vsub = verify.add_subparsers(dest="kind", required=True)
    vcdc = vsub.add_parser("cdc", help="every silver CDC table equals its PostgreSQL table, column by column")
    vcdc.add_argument("--json", action="store_true")

    sql = sub.add_parser("sql", help="run Spark SQL against the shared catalog")
    sql.add_argument("-e", "--execute", help="statements to run (';'-separated); omit for a shell")
    sql.add_argument("--format", choices=("table", "csv", "json"), default="table")
    sql.add_argument("--local", action="store_true",
                     help="run in a private Spark driver started here (~15-20 s) instead of the stack's Spark "
                          "Connect server")

    job = sub.add_parser("job", help="run a Spark job in this process")
    job.add_argument("name", choices=("smoke",))
    job.add_argument("args", nargs=argparse.REMAINDER)

    sub.add_parser("settings", help="print the resolved settings (secrets masked)")
    return parser


#: Sub-commands whose arguments belong to the module they run (``lake loadgen events --rate 10``):
#: everything after ``<command> <kind>`` is handed over verbatim. argparse's REMAINDER does not
#: do that when the first argument is an option, so these are split off before parsing.
_PASS_THROUGH = {"loadgen", "bench", "reconcile", "job", "gold"}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] | None = None
    if len(argv) >= 2 and argv[0] in _PASS_THROUGH and not argv[1].startswith("-"):
        argv, rest = argv[:2], argv[2:]
        if rest[:1] == ["--"]:
            rest = rest[1:]
    args = _build_parser().parse_args(argv)
    if rest is not None:
        args.args = rest
    # What lake writes (state dir, reports, Spark's local files) is the user's alone, like the stack's programs.
    os.umask(0o077)
    # Library code logs; the user sees its INFO lines as plain output (stack/ progress lines).
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise
    from spark_jobs.connectors import ConnectorError
    from spark_jobs.quality.suites import SuiteError
    from spark_jobs.stack.errors import StackError

    try:
        return _dispatch(args)
    except (StackError, SettingsError, FileNotFoundError, ConnectorError, SuiteError) as exc:
        print(f"lake: {exc}", file=sys.stderr)
        return 2


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "stack":
        from spark_jobs.stack import manager

        if args.action == "up":
            settings = manager.up(args.services or None)
            _print_welcome(settings)
            return 0
        if args.action == "down":
            manager.down()
            return 0
        if args.action == "status":
            report = manager.status()
            if args.json:
                for svc in report["services"].values():
                    svc.pop("detail", None)
                print(json.dumps(report, indent=2))
            else:
                print("\n".join(manager.format_status(report)))
            # Non-zero when a service is down or a program (the stream too) is FATAL/BACKOFF; warnings alone: 0.
            return 0 if report["ok"] else 1
        if args.action == "logs":
            print(manager.logs(args.service, args.lines))
            return 0
    if args.command == "connectors":
        from spark_jobs import connectors
        from spark_jobs.settings import load_settings

        settings = load_settings()
        if args.action == "apply":
            connectors.apply(settings, timeout=args.timeout)
            return 0
        rows_ = connectors.status_report(settings)
        if args.json:
            print(json.dumps(rows_, indent=2))
        else:
            for row in rows_:
                print(f"{row['name']:<20} {row['state']:<10} tasks={','.join(row['tasks']) or '-'} "
                      f"slot_lag_bytes={row['slot_lag_bytes']} wal_status={row['wal_status'] or '-'} "
                      f"safe_wal_size={connectors.format_bytes(row['safe_wal_size'])}")
                for warning in row["warnings"]:
                    print(f"WARNING: {warning}")
        return 0 if all(r["state"] == "RUNNING" and not r["slot_lost"] for r in rows_) else 1
    if args.command == "loadgen":
        if args.kind == "events":
            from spark_jobs.loadgen import events as loadgen_events

            return loadgen_events.main(args.args)
        if args.kind == "history":
            from spark_jobs.loadgen import history as loadgen_history

            return loadgen_history.main(args.args)
        from spark_jobs.loadgen.cdc import cli as loadgen_cdc

        return loadgen_cdc.main(args.args)
    if args.command == "bench":
        if args.kind == "events":
            from spark_jobs import bench_events

            return bench_events.main(args.args)
        if args.kind == "gold":
            from spark_jobs import bench_gold

            return bench_gold.main(args.args)
        if args.kind == "dq":
            from spark_jobs import bench_dq

            return bench_dq.main(args.args)
        from spark_jobs import bench_cdc as bench

        return bench.main(args.args)
    if args.command == "gold":
        if args.action == "backfill":
            from spark_jobs import airflow_api

            return airflow_api.backfill_main(args.args)
        from spark_jobs.jobs import gold as gold_job

        return gold_job.main(args.args)
    if args.command == "dq":
        return _dq(args)
    if args.command == "reconcile":
        from spark_jobs import reconcile

        return reconcile.main(args.args)
    if args.command == "verify":
        from spark_jobs.settings import load_settings
        from spark_jobs.verify import verify_cdc

        diffs = verify_cdc(load_settings())
        if args.json:
            print(json.dumps(diffs, indent=2, ensure_ascii=False))
        else:
            for table, lines in diffs.items():
                print(f"{table}: {'equal to PostgreSQL' if not lines else f'{len(lines)} difference(s)'}")
                for line in lines:
                    print(f"  {line}")
        return 0 if not any(diffs.values()) else 1
    if args.command == "stream":
        return _stream(args)
    if args.command == "sql":
        from spark_jobs import sql

        return sql.run(args.execute, args.format, local=args.local)
    if args.command == "job":
        from spark_jobs.jobs import smoke

        return smoke.main(args.args)
    if args.command == "settings":
        from spark_jobs.settings import load_settings

        for key, value in load_settings().redacted().items():
            print(f"{key} = {value}")
        return 0
    raise AssertionError(f"unhandled command {args.command}")


def _dq(args: argparse.Namespace) -> int:
    from spark_jobs.quality import checks
    from spark_jobs.session import build_session
    from spark_jobs.settings import load_settings

    settings = load_settings()
    if args.action in ("status", "history"):
        from spark_jobs.session import connect_session

        # Reads of ops.dq_results: the stack's warm Spark Connect server answers in seconds (a local JVM: minutes
        # on a busy two-core machine).
        spark = connect_session(settings)
    else:
        spark = build_session(settings, f"lake-dq-{args.action}")
    if args.action == "status":
        return checks.main_status(spark, args.table, args.json)
    if args.action == "history":
        return checks.main_history(spark, args.table, args.limit)
    return checks.main_run(spark, settings, args.table, args.date, args.settle_seconds)


def _stream(args: argparse.Namespace) -> int:
    from spark_jobs import stream_control
    from spark_jobs.settings import load_settings

    settings = load_settings()
    if args.action == "run":
        from spark_jobs import stream

        return stream.run(settings)
    if args.action == "start":
        stream_control.start(settings)
        return 0
    if args.action == "stop":
        stream_control.stop(settings)
        return 0
    if args.action == "wait":
        return 0 if stream_control.wait(settings, args.timeout) else 1
    rep = stream_control.report(settings)
    if args.json:
        print(json.dumps(rep, indent=2))
    else:
        print(f"stream {'RUNNING' if rep['running'] else 'STOPPED'} pid={rep['pid']} last_batch={rep['last_batch']} "
              f"committed_at={rep['committed_at']}")
        for name, t in rep["tables"].items():
            if "totals" in t:
                tot = t["totals"]
                print(f"  {name:<22} batch={t['last_batch']} lag={t['kafka_lag']} watermark={t['watermark']} "
                      f"received={tot.get('received', 0)} appended={tot.get('appended', 0)} "
                      f"duplicates={tot.get('duplicates', 0)} quarantined={tot.get('quarantined', 0)} "
                      f"late={tot.get('late', 0)}")
                continue
            print(f"  {name:<22} batch={t['last_batch']} lag={t['kafka_lag']} applied={t['changes_applied']} "
                  f"newest_age_s={t['newest_change_age_s']}")
    return 0 if rep["running"] else 1


def _print_welcome(settings: object) -> None:
    from spark_jobs import kafka_auth
    from spark_jobs.settings import Settings
    from spark_jobs.stack.configs import THRIFT_USER, thrift_password_path

    assert isinstance(settings, Settings)
    print(
        "\nLakestream stack is up.\n"
        f"  Airflow UI     {settings.airflow_url}  (user {settings.airflow_admin_user}, password: "
        f"LAKE_AIRFLOW_ADMIN_PASSWORD in {settings.state_dir / '.env'})\n"
        f"  Kafka          {settings.kafka_bootstrap}  (SASL/SCRAM: LAKE_KAFKA_*_PASSWORD; README, Kafka security)\n"
        f"  Connect REST   {settings.connect_url}  ({kafka_auth.connect_curl(settings)})\n"
        f"  MinIO (S3)     {settings.s3_endpoint}  console http://{settings.host}:{settings.minio_console_port}\n"
        f"  Metastore      {settings.metastore_uri}\n"
        f"  Spark JDBC     jdbc:hive2://{settings.host}:{settings.thrift_port}/default  (user {THRIFT_USER}, password "
        f"LAKE_THRIFT_PASSWORD; beeline -w {thrift_password_path(settings)})\n"
        f"  Logs           {settings.log_dir}\n"
        "  Try: lake sql -e 'SHOW DATABASES'   |   lake stack status",
        flush=True,
    )


def entry() -> int:
    """The ``lake`` command: started by root, it first becomes the unprivileged service user
    (:mod:`spark_jobs.stack.service_user`); then :func:`main`."""
    if os.geteuid() == 0:
        from spark_jobs.settings import load_settings
        from spark_jobs.stack.errors import StackError
        from spark_jobs.stack.service_user import run_as_service_user

        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
        try:
            run_as_service_user(load_settings())
        except (StackError, SettingsError) as exc:
            print(f"lake: {exc}", file=sys.stderr)
            return 2
    return main()


if __name__ == "__main__":
    raise SystemExit(entry())
