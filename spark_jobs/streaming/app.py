"""The streaming app (speed layer driver): one Spark driver running every streaming query.

* ``lake_cdc`` (``spark_jobs.streaming.cdc``): Debezium topics -> ``bronze.<topic>``
  -> ``silver.<table>`` (CDC MERGE) + ``quarantine.cdc``;
* ``lake_events`` (``spark_jobs.streaming.archive``): ``events.clickstream``, read, checked and de-duplicated
  once per batch -> first the ``hot.*`` windows + ``ops.stream_hot_ledger`` (:mod:`spark_jobs.streaming.hot`),
  then ``bronze.events__clickstream`` + ``silver.events`` + ``quarantine.events`` + ``ops.stream_events_ledger``,
  in the ``hot`` scheduler pool.

The engine (heap, pools, partitions) is configured from settings by :mod:`spark_jobs.streaming.engine`.

``LAKE_STREAM_QUERIES`` picks which run (``cdc``, ``events``; default both).

Each query has its own checkpoint under ``s3a://<bucket>/checkpoints/<query>`` and
writes its tables idempotently (Delta ``txnAppId``/``txnVersion``), so a driver
killed at any moment restarts where it stopped and writes every batch once. The
driver is the single writer of the tables it owns (bronze, silver, hot,
quarantine) and runs their maintenance itself.

If one query fails, the driver stops the others and exits non-zero, so the
supervisor restarts the whole app from the checkpoints.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import Any

import click

from spark_jobs.settings import Settings, load_settings
from spark_jobs.streaming.common import status_path
from spark_jobs.waits import poll

__all__ = ["main", "run", "status_path"]

log = logging.getLogger(__name__)


def run(settings: Settings) -> int:
    """Start every query and block until one stops (SIGTERM/SIGINT stop them all cleanly).

    Returns 3 without starting Spark when another driver runs one of the queries (:mod:`.streaming.owner`).
    """
    from spark_jobs.streaming.owner import QueryOwned, claim

    try:
        held = claim(settings, query_names(settings))
    except QueryOwned as exc:
        log.error("%s", exc)
        return 3
    try:
        return _run(settings)
    finally:
        held.release()


def query_names(settings: Settings) -> list[str]:
    """The streaming queries ``LAKE_STREAM_QUERIES`` runs: ``cdc`` is ``lake_cdc``, ``events`` is ``lake_events``
    (the hot tables and the archive)."""
    return [f"lake_{q}" for q in settings.stream_query_list]


def _run(settings: Settings) -> int:
    from spark_jobs.jars import build_java_classes, spark_extra_jars, stream_jar
    from spark_jobs.session import build_session, stream_ports_conf
    from spark_jobs.streaming import archive as events
    from spark_jobs.streaming import cdc
    from spark_jobs.streaming.engine import stream_conf

    t0 = time.monotonic()
    build_java_classes(settings)  # done by `lake stack up`; a check here (the jar holds the events' dedup operator)
    spark = build_session(settings, "lake-stream", extra={
        **stream_conf(settings),
        # The lake's jars (as in spark-defaults.conf) and ours: executors need LakeDedup (events_plan.first_seen).
        "spark.jars": ",".join([*map(str, spark_extra_jars(settings)), str(stream_jar(settings))]),
        # The supervised app's RPC and block manager on ports from the settings (a `lake stream run` beside
        # it, e.g. another query, takes random ones on LAKE_HOST like any ad hoc driver).
        **stream_ports_conf(settings, os.environ),
    })
    spark.sparkContext.setLogLevel("WARN")
    log.info("lake stream: Spark session up in %.1f s", time.monotonic() - t0)
    queries = []
    for name, start in (("cdc", cdc.start), ("events", events.start)):
        if name in settings.stream_query_list:
            t = time.monotonic()
            query = start(spark, settings)  # its tables ensured, then the query started
            queries.append(query)
            log.info("lake stream: query %s (%s) running, %.1f s after the start (its tables and start: %.1f s)",
                     query.name, query.id, time.monotonic() - t0, time.monotonic() - t)

    stop_requested = threading.Event()

    def stop(signum: int, _frame: Any) -> None:
        # Only a flag: the main thread is inside a py4j call (awaitAnyTermination), and calling
        # into the JVM from the handler re-enters it ("reentrant call" errors). The loop below
        # sees the flag within 5 s and stops the queries.
        log.info("lake stream: signal %d, stopping after the current batches", signum)
        stop_requested.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while not spark.streams.awaitAnyTermination(5):
        if stop_requested.is_set():
            break
    failed = [q for q in queries if q.exception() is not None]
    for query in queries:
        if query.isActive:
            _stop_between_batches(query)
    for query in failed:
        log.error("lake stream: query %s failed: %s", query.name, query.exception())
    return 1 if failed else 0


def _stop_between_batches(query: Any, wait: float = 60.0) -> None:
    """Stop ``query``, waiting (up to ``wait`` s) for a moment when no micro-batch runs: ``stop()`` interrupts
    a running batch (its work is redone at the next start, so nothing is lost, but the interrupted batch
    logs errors)."""
    poll(lambda: True if not (query.isActive and query.status.get("isTriggerActive")) else None, wait, every=0.1)
    query.stop()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Run every streaming query in the foreground until one stops or SIGTERM: the supervised `stream` program
    (by hand: `lake stream run`). Exit 3: another driver runs one of the queries."""
    from spark_jobs import logs

    logs.setup()
    sys.exit(run(load_settings()))


if __name__ == "__main__":
    main(prog_name="python -m spark_jobs.streaming.app")
