"""``lake bench cdc``: capture, apply and latency figures of the CDC path, measured in one run.

1. Steady load: the seeded loadgen at ``--rate`` for ``--duration`` seconds
   while the streaming app runs. Reports changes committed per second in
   PostgreSQL, records captured per second (Kafka end offsets), changes applied
   per second, and commit-to-silver latency p50/p95/max: for every row change
   MERGEd into ``silver.<t>`` in the run (its change data feed), the Delta commit time minus the
   PostgreSQL commit time Debezium carried (``source.ts_ms``).
   Before it, ``--warmup`` seconds of the same load (not measured) bring the
   driver's JVM to its steady state: the app is long-running, and its first
   minutes on a fresh JVM are dominated by JIT compilation and class loading.
2. Catch-up: the app is stopped, a backlog is generated at full speed, the app
   is started again; backlog records per second, reported twice: until
   ``lake stream wait`` holds, including the driver's start (JVM, session,
   tables), and from the start of its first batch (the status file's
   ``committed_at`` minus ``batch_seconds``) to the newest silver commit,
   the one that applied the last backlog change; and the driver's share of the CPU meanwhile
   (:mod:`spark_jobs.bench.proc_cpu`: driver process and JVM threads vs Spark task threads and Python
   workers; on a cluster the executors' JVMs are not counted).
3. The analysts' probe query ``SELECT count(*), sum(total) FROM silver.orders`` (best of three).

Figures only: nothing here asserts a target (machines are shared and noisy).

``--driver supervised`` (default) measures the app as ``lake stream start`` runs it
(every query in ``LAKE_STREAM_QUERIES``); ``--driver own`` runs the streaming app
as a child process of the benchmark with ``LAKE_STREAM_QUERIES=cdc`` only, so
another query's work does not blur the CDC figures (stop the supervised app
first).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_jobs.bench.proc_cpu import cpu_snapshot, cpu_split, stream_executors_of
from spark_jobs.loadgen.cdc.runner import DEFAULT_CONNECTIONS
from spark_jobs.settings import Settings
from spark_jobs.waits import poll

log = logging.getLogger(__name__)


@contextmanager
def _no_timed(description: str, seconds: float) -> Iterator[None]:
    yield


@contextmanager
def _no_remaining(description: str) -> Iterator[Callable[[int], None]]:
    yield lambda n: None


@dataclass(frozen=True)
class Bars:
    """Progress bars for a bench's phases, given by the CLI (spark_jobs.cli.progress); none by default.

    ``timed(description, seconds)`` wraps a paced load of known duration; ``remaining(description)`` yields
    ``left(n)``, called with the records still to apply while the stream catches up.
    """

    timed: Callable[[str, float], AbstractContextManager[None]] = _no_timed
    remaining: Callable[[str], AbstractContextManager[Callable[[int], None]]] = _no_remaining


#: No bars: the benches' default (library callers, tests).
NO_BARS = Bars()


#: Records the catch-up target (>= 5,000/s, issue 31) is measured over: a smaller backlog is one or two batches,
#: mostly the restarted stream's first one (a new JVM and Python workers).
CATCH_UP_MIN_RECORDS = 300_000
#: Seconds the bench waits after the backlog load for Debezium to flush it into Kafka.
_FLUSH_S = 15


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[idx]


def _total_end_offsets(settings: Settings) -> int:
    from spark_jobs.streaming.progress import kafka_end_offsets

    return sum(kafka_end_offsets(settings).values())


def _silver_heads(spark: Any) -> dict[str, tuple[int, float | None]]:
    """Newest Delta version of each CDC silver table and its commit time (epoch s; None for no commit yet)."""
    from spark_jobs.contracts.shop import CDC_TABLES

    out: dict[str, tuple[int, float | None]] = {}
    for c in CDC_TABLES.values():
        # Changes land in silver.<t> by the stream's MERGE; its other commits (OPTIMIZE, VACUUM) apply nothing new.
        row = (spark.sql(f"DESCRIBE HISTORY {c.silver} LIMIT 100").where("operation = 'MERGE'")
               .orderBy("version", ascending=False).select("version", "timestamp").first())
        out[c.silver] = (int(row[0]), row[1].timestamp() if row[1] is not None else None) if row else (0, None)
    return out


def _require_running_connector(settings: Settings) -> None:
    """Fail early, naming the fix, when no Debezium connector runs (the load would reach no silver table)."""
    from spark_jobs.stack.connectors import status_report

    if not any(c["state"] == "RUNNING" and c["tasks"] and all(t == "RUNNING" for t in c["tasks"])
               for c in status_report(settings)):
        raise RuntimeError(f"no running connector on Kafka Connect at {settings.connect_url}: the load would "
                           "not reach Kafka; run `lake connectors apply` (then `lake connectors status`)")


def _latencies(spark: Any, since: dict[str, int]) -> list[float]:
    """Seconds from PostgreSQL commit to the silver commit, per changed row since ``since`` versions.

    The silver commit of a change is the MERGE that applied it (its change data feed's insert or
    update post-image; a delete's feed row is the old row, so it is left out).
    """
    from pyspark.sql import functions as F

    values: list[float] = []
    for table, version in since.items():
        changes = (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", version + 1)
                   .table(table)
                   .where(F.col("_change_type").isin("insert", "update_postimage"))
                   .select((F.col("_commit_timestamp").cast("double") - F.col("_source_ts").cast("double")).alias("s")))
        values += [float(r.s) for r in changes.collect() if r.s is not None]
    return values


class _Driver:
    """Start/stop the streaming app: the supervised program, or a child process running only ``cdc``."""

    def __init__(self, settings: Settings, mode: str) -> None:
        self.settings = settings
        self.mode = mode
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        from spark_jobs.stack import stream_control as control

        if self.mode == "supervised":
            control.start(self.settings)
            return
        env = {**os.environ, "LAKE_STREAM_QUERIES": "cdc"}
        log_file = open(self.settings.run_dir / "bench-stream.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "spark_jobs.streaming.app"], env=env, stdout=log_file,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        log.info(f"bench: streaming app (cdc only) pid {self.proc.pid}, log {log_file.name}")

    def pid(self) -> int | None:
        """The Python driver's pid (its JVM and Python workers are its descendants)."""
        from spark_jobs.stack import supervisor

        if self.mode == "supervised":
            info = supervisor.program_info(self.settings, "stream") or {}
            return int(info["pid"]) if info.get("pid") else None
        return self.proc.pid if self.proc is not None else None

    def stop(self) -> None:
        from spark_jobs.stack import stream_control as control

        if self.mode == "supervised":
            control.stop(self.settings)
            return
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # stops the queries after the current batch
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


def bench_cdc(settings: Settings, rate: float, duration: float, backlog_seconds: float, seed: int,
              driver_mode: str = "supervised", warmup: float = 60, async_commit: bool = False,
              connections: int = DEFAULT_CONNECTIONS, bars: Bars = NO_BARS) -> dict[str, Any]:
    """Run the bench (module docstring) and return its figures; ``bars`` shows its phases."""
    driver = _Driver(settings, driver_mode)
    try:
        return _bench_cdc(settings, rate, duration, backlog_seconds, seed, driver, warmup, async_commit, connections,
                          bars)
    finally:
        if driver_mode == "own":
            driver.stop()  # never leave our child driver running


def _cdc_status(settings: Settings) -> dict[str, Any]:
    from spark_jobs.streaming.common import read_json, status_path

    return read_json(status_path(settings)) or {}


def _first_batch_start(settings: Settings, after_batch: int | None, timeout: float) -> float | None:
    """Wall-clock start (epoch s) of the first batch committed with an id above ``after_batch``."""
    from datetime import datetime

    def started() -> float | None:
        doc = _cdc_status(settings)
        batch = doc.get("batch_id")
        if batch is not None and (after_batch is None or int(batch) > after_batch) and doc.get("committed_at"):
            return datetime.fromisoformat(doc["committed_at"]).timestamp() - float(doc.get("batch_seconds", 0))
        return None

    return poll(started, timeout, every=0.2)


def _query_running(settings: Settings, query: str, log_from: int, timeout: float) -> bool:
    """Wait until the streaming app's log (past ``log_from``) says ``query`` is running; False after ``timeout``."""
    needle = f"lake stream: query {query} ("

    def running() -> bool | None:
        text = log_since(settings, log_from) or ""
        return True if any(needle in line and " running, " in line for line in text.splitlines()) else None

    return bool(poll(running, timeout, every=0.2))


def _stream_log(settings: Settings) -> Path:
    from spark_jobs.stack import stream_control as control
    from spark_jobs.stack import supervisor

    return supervisor.log_path(settings, control.PROGRAM)


def log_since(settings: Settings, log_from: int) -> str | None:
    """The streaming app's log past byte ``log_from`` (:func:`log_offset`; None: no log yet)."""
    path = _stream_log(settings)
    if not path.exists():
        return None
    with path.open("rb") as f:
        f.seek(log_from)
        return f.read().decode("utf-8", "replace")


def log_offset(settings: Settings) -> int:
    """Where the streaming app's log ends now (what it logs after this is read by :func:`log_since`)."""
    path = _stream_log(settings)
    return path.stat().st_size if path.exists() else 0


def batch_breakdown(settings: Settings, query: str, log_from: int) -> dict[str, Any]:
    """Per batch of ``query`` logged since ``log_from`` (``lake stream: query=... batch=... k=v`` lines): how many,
    mean records and seconds, mean Spark jobs and Delta commits, and mean seconds per stage."""
    import re

    text = log_since(settings, log_from)
    if text is None:
        return {}
    line = re.compile(rf"lake stream: query={re.escape(query)} batch=(\d+) records=(\d+) seconds=([0-9.]+) ?(.*)")
    batches = []
    for m in line.finditer(text):
        steps = {k: float(v) for k, v in (kv.split("=", 1) for kv in m.group(4).split() if "=" in kv)}
        batches.append((int(m.group(2)), float(m.group(3)), steps))
    if not batches:
        return {"batches": 0}
    n = len(batches)
    sums: dict[str, float] = {}
    for _r, _s, steps in batches:
        for k, v in steps.items():
            sums[k] = sums.get(k, 0.0) + v
    counts = {k: round(v / n, 1) for k, v in sums.items() if k.endswith(("jobs", "delta_commits"))}
    return {"batches": n, "records_mean": round(sum(b[0] for b in batches) / n, 1),
            "seconds_mean": round(sum(b[1] for b in batches) / n, 3),
            "seconds_p95": round(percentile([b[1] for b in batches], 0.95), 3),
            "per_batch": counts,
            "stage_seconds_mean": {k: round(v / n, 3) for k, v in sorted(sums.items()) if k not in counts}}


def _silver_query_seconds(spark: Any, runs: int = 3) -> dict[str, Any]:
    """Best of ``runs`` of the analysts' probe query on silver.orders, with the table's size."""
    timings = []
    for _ in range(runs):
        t = time.monotonic()
        row = spark.sql("SELECT count(*) AS n, sum(total) AS total FROM silver.orders").first()
        timings.append(time.monotonic() - t)
    return {"rows": int(row["n"]), "best_s": round(min(timings), 3), "runs_s": [round(x, 3) for x in timings]}


def _bench_cdc(settings: Settings, rate: float, duration: float, backlog_seconds: float, seed: int,
               driver: _Driver, warmup: float, async_commit: bool, connections: int, bars: Bars) -> dict[str, Any]:
    from functools import partial

    from spark_jobs.loadgen.cdc.runner import run
    from spark_jobs.session import build_session
    from spark_jobs.stack import stream_control as control

    loadgen = partial(run, connections=connections)

    def caught_up(description: str, timeout: float) -> bool:
        with bars.remaining(f"bench cdc: {description} (records to apply)") as left:
            return control.wait(settings, timeout, progress=left)

    _require_running_connector(settings)
    spark = build_session(settings, "lake-bench", short_lived=True)
    spark.sparkContext.setLogLevel("ERROR")
    driver.start()
    log.info("bench: waiting until the stream is caught up before measuring")
    if not caught_up("catching up before measuring", 900):
        raise RuntimeError("stream did not catch up before the benchmark; see lake stream status")
    if warmup > 0:
        log.info(f"bench: warm-up load at {rate:.0f} changes/s for {warmup:.0f}s (not measured)")
        with bars.timed("bench cdc: warm-up load", warmup):
            loadgen(settings, rate=rate, duration=warmup, seed=seed + 1000, synchronous_commit=not async_commit)
        if not caught_up("catch-up after the warm-up", 1800):
            raise RuntimeError("stream did not catch up after the warm-up; see lake stream status")
    versions = {table: version for table, (version, _at) in _silver_heads(spark).items()}
    offsets0 = _total_end_offsets(settings)
    steady_log = log_offset(settings)
    t0 = time.monotonic()
    log.info(f"bench: steady load at {rate:.0f} changes/s for {duration:.0f}s")
    with bars.timed("bench cdc: steady load", duration):
        report = loadgen(settings, rate=rate, duration=duration, seed=seed, synchronous_commit=not async_commit)
    load_s = time.monotonic() - t0
    captured_by_end = _total_end_offsets(settings) - offsets0
    ok = caught_up("applying the steady load", 1800)
    applied_s = time.monotonic() - t0
    captured = _total_end_offsets(settings) - offsets0
    lat = _latencies(spark, versions)
    steady = {
        "changes_committed": report.total_changes,
        "committed_per_s": round(report.total_changes / load_s, 1),  # incl. the loadgen's start (reading the rows)
        "loadgen_committed_per_s": round(report.actual_rate, 1),  # over the loadgen's paced run alone
        "records_captured": captured,
        "captured_per_s_during_load": round(captured_by_end / load_s, 1),
        "applied_per_s_until_caught_up": round(captured / applied_s, 1) if ok else None,
        "caught_up": ok,
        "latency_rows": len(lat),
        "latency_p50_s": round(percentile(lat, 0.50), 2),
        "latency_p95_s": round(percentile(lat, 0.95), 2),
        "latency_max_s": round(max(lat), 2) if lat else None,
        "batches": batch_breakdown(settings, "lake_cdc", steady_log),
    }
    log.info("bench: steady " + json.dumps(steady))

    log.info(f"bench: building a backlog for {backlog_seconds:.0f}s with the stream stopped")
    driver.stop()
    before = _total_end_offsets(settings)
    with bars.timed("bench cdc: backlog build", backlog_seconds):
        loadgen(settings, rate=1_000_000, duration=backlog_seconds, seed=seed + 1, synchronous_commit=not async_commit)
    with bars.timed("bench cdc: Debezium flushes the backlog into Kafka", _FLUSH_S):
        time.sleep(_FLUSH_S)
    backlog = _total_end_offsets(settings) - before
    last = _cdc_status(settings).get("batch_id")
    batch_before = int(last) if last is not None else None
    catchup_log = log_offset(settings)
    with bars.remaining("bench cdc: catch-up of the backlog (records to apply)") as left:
        t1 = time.monotonic()
        driver.start()
        # The CPU window opens when the CDC query runs (its first batch starts then), not once that batch is
        # committed: a backlog applied in one batch was outside the window (0.9 CPU-s reported for a 35 s batch).
        _query_running(settings, "lake_cdc", catchup_log, 900)
        driver_pid = driver.pid()
        cpu0 = cpu_snapshot(driver_pid, stream_executors_of(settings)) if driver_pid else None
        first_start = _first_batch_start(settings, batch_before, 900)
        ok2 = control.wait(settings, 3600, progress=left)
        drain_s = time.monotonic() - t1
    cpu = {"cpu": cpu_split(cpu0, cpu_snapshot(driver_pid, stream_executors_of(settings)))} if cpu0 and driver_pid else {}
    driver.stop()
    # The backlog is applied when the last silver commit holding it lands: with the loadgen stopped, no
    # later change reaches silver (heartbeat-only batches commit no silver version), so that is the
    # newest silver commit. `lake stream wait` returns later than that (it polls, and confirms with the
    # next heartbeat); its time is the "incl. driver start" figure.
    applied_at = max((at for _v, at in _silver_heads(spark).values() if at is not None), default=None)
    from_first = applied_at - first_start if first_start is not None and applied_at is not None else None
    catch_up = {"backlog_records": backlog, "drain_s_incl_driver_start": round(drain_s, 1),
                "catch_up_per_s": round(backlog / drain_s, 1) if ok2 else None,
                "drain_s_from_first_batch": round(from_first, 1) if from_first else None,
                "catch_up_per_s_from_first_batch": round(backlog / from_first, 1) if ok2 and from_first else None,
                "caught_up": ok2, "backlog_below_target_minimum": backlog < CATCH_UP_MIN_RECORDS, **cpu,
                "batches": batch_breakdown(settings, "lake_cdc", catchup_log)}
    log.info("bench: catch-up " + json.dumps(catch_up))
    if backlog < CATCH_UP_MIN_RECORDS:
        log.warning(f"bench: the backlog held {backlog:,} records, fewer than the {CATCH_UP_MIN_RECORDS:,} the catch-up "
                    "target is measured over: its figure is mostly the stream's start; give more --backlog-seconds")
    query_s = _silver_query_seconds(spark)
    log.info(f"bench: SELECT count(*), sum(total) FROM silver.orders: {query_s}")
    p95 = percentile(lat, 0.95)
    ratios = {
        "latency_p95_vs_target_5s": round(p95 / 5.0, 2) if lat else None,
        "applied_vs_committed": round((captured / applied_s) / (report.total_changes / load_s), 2) if ok else None,
        "catch_up_vs_target_5000": round(backlog / drain_s / 5000.0, 3) if ok2 else None,
        "catch_up_from_first_batch_vs_target_5000":
            round(backlog / from_first / 5000.0, 3) if ok2 and from_first else None,
    }
    log.info("bench: ratios " + json.dumps(ratios))
    return {"steady": steady, "catch_up": catch_up, "ratios": ratios, "silver_orders_query": query_s,
            "driver": driver.mode,
            "loadgen_commit": "async" if async_commit else "sync", "loadgen_connections": connections}
