"""``lake bench events``: ingest, catch-up and hot-table freshness of the events path, in one run.

1. Steady load: ``lake loadgen events --rate R --duration D`` while the
   streaming app runs, after ``--warmup`` seconds of the same load (not
   measured: a driver started just before warms its JIT and Python workers).
   Reports events produced per second (the loadgen's delivery reports), events
   landed in every table per second (the ledger rows for those offsets, from
   the first batch's start, its ingest time, to the ledger commit of the
   last), the rate through the hot path, freshness p50/p95/max (for every
   on-time event of the run, the moment the hot tables' commit of its batch
   finished minus its produce time, Kafka ``CreateTime``), and the mean seconds
   per batch step (the ledger's ``step_seconds``).
2. Catch-up: the app is stopped, a backlog of ``--backlog`` events is produced,
   the app is started again; the ingest rate is backlog events / time from the
   start of the backlog's first batch to the ledger commit of its last, and the
   wall time including the driver's start-up is printed too. Meanwhile the CPU
   time of the app's processes and threads is read from ``/proc`` when its
   first batch begins and when the backlog is in (:func:`cpu_split`): the driver's share is
   (driver Python process + the JVM's driver-side threads) / everything.
3. Raw ceiling, same run, same backlog: a plain confluent-kafka consumer reads
   the backlog's offsets without writing anything; catch-up / ceiling is the
   ratio the app reaches of what the broker can hand out on this machine.

Figures only: nothing here asserts a target (machines are shared and noisy).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from spark_jobs import kafka_auth
from spark_jobs.bench.cdc import NO_BARS, Bars, log_offset, log_since, percentile
from spark_jobs.bench.proc_cpu import cpu_snapshot, cpu_split, stream_executors_of
from spark_jobs.settings import Settings, load_settings
from spark_jobs.stack import stream_control as control
from spark_jobs.stack import supervisor
from spark_jobs.waits import poll

log = logging.getLogger(__name__)

#: The warm-up's loadgen seed is ``--seed`` plus this (event ids come from the seed: never reuse one on a state).
WARMUP_SEED_OFFSET = 1_000_000


def _loadgen(settings: Settings, rate: float, duration: float, seed: int, manifest: Path,
             extra: Sequence[str] = ()) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "spark_jobs.cli", "loadgen", "events", "--rate", str(rate), "--duration",
           str(duration), "--seed", str(seed), "--manifest", str(manifest), *extra]
    log.info(f"bench events: {' '.join(cmd[2:])}")
    subprocess.run(cmd, check=True)
    doc: dict[str, Any] = json.loads(manifest.read_text())
    return doc


def _produced_per_second(manifest: dict[str, Any]) -> float:
    """Delivered records / seconds from the first produce call to the final flush (the loadgen's manifest)."""
    span = float(manifest.get("elapsed_with_flush_s") or 0)
    return float(manifest.get("delivered", manifest["total_sent"])) / span if span > 0 else float("nan")


def raw_ceiling(settings: Settings, ranges: dict[int, tuple[int, int]],
                progress: Callable[[int], None] | None = None) -> tuple[int, float]:
    """Records/s a plain consumer reads ``ranges`` of the events topic, writing nothing.

    ``progress`` gets the records still to read after each fetch (a progress bar)."""
    from confluent_kafka import Consumer, TopicPartition

    from spark_jobs.contracts.clickstream import TOPIC

    consumer = Consumer({**kafka_auth.client_conf(settings, "tools"), "group.id": f"_lake_bench_{time.time()}",
                         "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                         "max.partition.fetch.bytes": 10485760})
    consumer.assign([TopicPartition(TOPIC, p, lo) for p, (lo, _hi) in ranges.items()])
    remaining = {p: hi for p, (_lo, hi) in ranges.items()}
    following = {p: lo for p, (lo, _hi) in ranges.items()}  # the next offset to read, per partition
    n = 0
    started = time.monotonic()
    try:
        while remaining and time.monotonic() - started < 600:
            for msg in consumer.consume(num_messages=10000, timeout=1.0):
                if msg.error():
                    continue
                p, off = msg.partition(), msg.offset()
                if p is not None and off is not None and p in remaining and off <= remaining[p]:
                    n += 1
                    following[p] = off + 1
                    if off == remaining[p]:
                        del remaining[p]
            if progress is not None:
                progress(sum(hi + 1 - following[p] for p, hi in remaining.items()))
    finally:
        consumer.close()
    seconds = time.monotonic() - started
    return n, n / seconds if seconds > 0 else float("nan")


def _rows_reading(spark: Any, table: str, ranges: dict[int, tuple[int, int]]) -> list[Any]:
    """Rows of a stream ledger (``offsets``: partition -> "first-last") whose batch read any offset in ``ranges``."""
    out = []
    for r in spark.table(table).orderBy("batch_id").collect():
        for p, span in (r.offsets or {}).items():
            lo, hi = (int(x) for x in span.split("-"))
            want = ranges.get(int(p))
            if want and lo <= want[1] and hi >= want[0]:
                out.append(r)
                break
    return out


def _ledger_rows(spark: Any, ranges: dict[int, tuple[int, int]]) -> list[Any]:
    """``ops.stream_events_ledger`` rows of the archive batches that read any offset in ``ranges``."""
    from spark_jobs.streaming.archive import LEDGER

    return _rows_reading(spark, LEDGER, ranges)


def _hot_rows(spark: Any, ranges: dict[int, tuple[int, int]]) -> list[Any]:
    """``ops.stream_hot_ledger`` rows of the hot batches that read any offset in ``ranges``."""
    from spark_jobs.streaming.hot import HOT_LEDGER

    return _rows_reading(spark, HOT_LEDGER, ranges)


def _rates(rows: list[Any], hot: list[Any]) -> dict[str, Any]:
    """Records/s of ``rows`` (archive ledger rows): landed in every table (from the first batch's start, its
    ingest time, to the ledger commit of the last one), and through the hot tables (``hot``: their ledger rows, from
    the first batch's start to the last hot commit)."""
    landed = sum(int(r.received) for r in rows)
    land_span = _archive_span(rows)
    hot_records = sum(int(r.received) for r in hot)
    hot_span = (hot[-1].hot_committed_at.timestamp() - (hot[0].hot_committed_at.timestamp() - hot[0].batch_seconds)
                if hot else 0)
    return {"records": landed, "batches": len(rows), "hot_batches": len(hot),
            "hot_per_s": round(hot_records / hot_span, 1) if hot_span > 0 else None,
            "landed_per_s": round(landed / land_span, 1) if land_span > 0 else None}


def _archive_span(rows: list[Any]) -> float:
    """Seconds from the first archive batch's start (its ingest time) to the last one's ledger commit."""
    return float(rows[-1].committed_at.timestamp() - rows[0].max_ingest_time.timestamp())


def hot_breakdown(rows: list[Any]) -> dict[str, Any]:
    """Per hot batch: mean records, seconds, Spark jobs and Delta commits, and seconds per stage."""
    if not rows:
        return {"batches": 0}
    n = len(rows)
    return {"batches": n, "records_mean": round(sum(int(r.received) for r in rows) / n, 1),
            "seconds_mean": round(sum(float(r.batch_seconds) for r in rows) / n, 3),
            "seconds_p95": round(percentile([float(r.batch_seconds) for r in rows], 0.95), 3),
            "per_batch": {"spark_jobs": round(sum(int(r.spark_jobs or 0) for r in rows) / n, 1),
                          "delta_commits": round(sum(int(r.delta_commits or 0) for r in rows) / n, 1)},
            "stage_seconds_mean": step_means(rows)}


def archive_breakdown(rows: list[Any]) -> dict[str, Any]:
    """Per archive batch (``ops.stream_events_ledger`` rows, whose step map carries the jobs and commits too)."""
    if not rows:
        return {"batches": 0}
    means = step_means(rows)
    counts = {k: means.pop(k) for k in ("spark_jobs", "delta_commits") if k in means}
    n = len(rows)
    return {"batches": n, "records_mean": round(sum(int(r.received) for r in rows) / n, 1),
            "seconds_mean": round(sum(float(r.batch_seconds) for r in rows) / n, 3),
            "per_batch": counts, "stage_seconds_mean": means, **busy(rows)}


def busy(rows: list[Any]) -> dict[str, Any]:
    """How loaded the events query was over ``rows`` (archive ledger rows, in batch order): ``busy_share``, the
    share of the wall time from the first batch's start (its ingest time) to the last ledger commit that its
    batches ran; ``batch_us_per_record``, their seconds per record. A steady load near a busy share of 1 means
    batches grow until they match the load, so freshness swings with small changes in cost (docs/benchmarks.md,
    2026-12-07)."""
    if not rows:
        return {}
    span = _archive_span(rows)
    running = sum(float(r.batch_seconds) for r in rows)
    records = sum(int(r.received) for r in rows)
    return {"busy_share": round(running / span, 3) if span > 0 else None,
            "batch_us_per_record": round(running / records * 1e6, 1) if records else None}


def step_means(rows: list[Any]) -> dict[str, float]:
    """Mean seconds per batch step over ``rows`` (the ledger's ``step_seconds``)."""
    sums: dict[str, float] = {}
    for r in rows:
        for step, seconds in (r.step_seconds or {}).items():
            sums[step] = sums.get(step, 0.0) + float(seconds)
    return {step: round(total / len(rows), 3) for step, total in sorted(sums.items())} if rows else {}


# -- CPU split from /proc ---------------------------------------------------------------------------------------

def freshness(spark: Any, ranges: dict[int, tuple[int, int]]) -> list[float]:
    """Seconds from produce time (Kafka ``CreateTime``) to the hot commit of the hot batch that read it, per
    on-time event in ``ranges`` (the hot ledger's offset ranges, joined on partition and offset)."""
    from pyspark.sql import functions as F

    from spark_jobs.reconcile import in_ranges
    from spark_jobs.streaming.archive import SILVER
    from spark_jobs.streaming.hot import HOT_LEDGER

    silver = spark.table(SILVER).where(in_ranges(F.col("_partition"), F.col("_offset"), ranges) & ~F.col("_late"))
    spans = (spark.table(HOT_LEDGER).select(F.explode("offsets").alias("p", "span"), "hot_committed_at")
             .select(F.col("p").cast("int").alias("p"),
                     F.split("span", "-").getItem(0).cast("long").alias("lo"),
                     F.split("span", "-").getItem(1).cast("long").alias("hi"), "hot_committed_at"))
    lat = silver.join(spans, (F.col("_partition") == F.col("p")) & F.col("_offset").between(F.col("lo"), F.col("hi")))
    lat = lat.select((F.col("hot_committed_at").cast("double") - F.col("_kafka_timestamp").cast("double")).alias("s"))
    return [float(r.s) for r in lat.collect()]


def _at_first_batch(settings: Settings, log_from: int, timeout: float = 600) -> dict[str, Any]:
    """Wait until the restarted app begins its first batch (its log line), then :func:`cpu_snapshot` it: the
    JVM's start and the query's planning are left out, the whole catch-up is in."""
    from spark_jobs.streaming.archive import FIRST_BATCH_MARKER

    def first_batch_began() -> bool | None:
        return True if FIRST_BATCH_MARKER in (log_since(settings, log_from) or "") else None

    if poll(first_batch_began, timeout, every=0.1) is None:
        return {}
    pid = (supervisor.program_info(settings, control.PROGRAM) or {}).get("pid")
    return cpu_snapshot(int(pid), stream_executors_of(settings)) if pid else {}


def _uptime(pid: int) -> float | None:
    """Seconds since process ``pid`` (the stream's driver) started, None if it is not running."""
    import psutil

    try:
        return round(time.time() - psutil.Process(pid).create_time(), 1) if pid else None
    except psutil.Error:
        return None


def bench(*, rate: float, duration: float, backlog: int, backlog_rate: float, seed: int, warmup: float,
          skip_steady: bool, skip_catchup: bool, bars: Bars = NO_BARS) -> dict[str, Any] | None:
    """Run the bench (module docstring); returns its figures, or None (logged why) when the app did not catch up.

    ``bars`` shows the catch-ups and the raw read; the loads are ``lake loadgen events`` runs, which draw their
    own bar on a terminal (a second live bar here would garble it)."""
    from spark_jobs.reconcile import manifest_ranges
    from spark_jobs.session import build_session

    settings = load_settings()
    work = settings.run_dir / "bench-events"
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    spark = build_session(settings, "lake-bench-events", short_lived=True)
    spark.sparkContext.setLogLevel("ERROR")

    def caught_up(description: str, timeout: float) -> bool:
        with bars.remaining(f"bench events: {description} (records to apply)") as left:
            return control.wait(settings, timeout, progress=left)

    if not skip_steady:
        control.start(settings)
        if not caught_up("catching up before the steady run", 900):
            log.error("bench events: the app did not catch up before the steady run")
            return None
        if warmup > 0:  # a driver started just before warms up (JIT, Python workers) in its first batches
            _loadgen(settings, rate, warmup, seed + WARMUP_SEED_OFFSET, work / "warmup.json")
            if not caught_up("catch-up after the warm-up", 900):
                log.error("bench events: the app did not catch up after the warm-up")
                return None
        pid = int((supervisor.program_info(settings, control.PROGRAM) or {}).get("pid") or 0)
        uptime = _uptime(pid)
        cpu_before = cpu_snapshot(pid, stream_executors_of(settings)) if pid else {}
        steady = _loadgen(settings, rate, duration, seed, work / "steady.json")
        if not caught_up("applying the steady load", 900):
            log.error("bench events: the app did not catch up after the steady run")
            return None
        cpu = cpu_split(cpu_before, cpu_snapshot(pid, stream_executors_of(settings))) if cpu_before else None
        ranges = manifest_ranges(steady)
        rows = _ledger_rows(spark, ranges)
        hot = _hot_rows(spark, ranges)
        rates = _rates(rows, hot)
        fresh = freshness(spark, ranges)
        results["steady"] = {
            "target_rate": rate, "produced": steady["total_sent"],
            "produced_per_s": round(_produced_per_second(steady), 1),
            "landed_per_s": rates["landed_per_s"], "hot_per_s": rates["hot_per_s"],
            "batches": len(rows), "batch_seconds_p50": round(percentile([r.batch_seconds for r in rows], 0.5), 2),
            "freshness_events": len(fresh),
            "freshness_p50_s": round(percentile(fresh, 0.5), 2), "freshness_p95_s": round(percentile(fresh, 0.95), 2),
            "freshness_max_s": round(max(fresh), 2) if fresh else None,
            "hot_batches": hot_breakdown(hot), "archive_batches": archive_breakdown(rows),
            # A stream started minutes before spends a third of its JVM's CPU compiling Spark's planning code
            # (jvm_shared: JIT and GC): compare runs on streams of a like age (docs/benchmarks.md).
            "stream_uptime_s_at_start": uptime, "cpu_of_the_steady_run": cpu,
        }
        log.info(f"bench events steady: {json.dumps(results['steady'])}")

    if not skip_catchup:
        control.stop(settings)
        # The loadgen sends exactly round(rate * duration) records.
        backlog_doc = _loadgen(settings, backlog_rate, backlog / backlog_rate, seed + 1, work / "backlog.json")
        ranges = manifest_ranges(backlog_doc)
        with bars.remaining("bench events: raw ceiling (records to read)") as to_read:
            n_raw, raw_rate = raw_ceiling(settings, ranges, progress=to_read)
        with bars.remaining("bench events: catch-up of the backlog (records to apply)") as left:
            t0 = time.monotonic()
            log_from = log_offset(settings)
            control.start(settings)
            cpu_before = _at_first_batch(settings, log_from)
            caught = control.wait(settings, 3600, progress=left)
            wall = time.monotonic() - t0
        if not caught:
            log.error("bench events: the app did not catch up with the backlog")
            return None
        pid = int((supervisor.program_info(settings, control.PROGRAM) or {}).get("pid") or 0)
        cpu = cpu_split(cpu_before, cpu_snapshot(pid, stream_executors_of(settings))) if cpu_before else None
        rows = _ledger_rows(spark, ranges)
        hot = _hot_rows(spark, ranges)
        rates = _rates(rows, hot)
        ingest_rate = float(rates["landed_per_s"] or "nan")
        results["catchup"] = {
            "backlog": backlog_doc["total_sent"], "produced_per_s": round(_produced_per_second(backlog_doc), 1),
            "batches": len(rows), "ingest_per_s": round(ingest_rate, 1), "hot_per_s": rates["hot_per_s"],
            "wall_seconds_incl_startup": round(wall, 1),
            "raw_ceiling_records": n_raw, "raw_ceiling_per_s": round(raw_rate, 1),
            "ingest_to_ceiling_ratio": round(ingest_rate / raw_rate, 3) if raw_rate else None,
            "hot_batches": hot_breakdown(hot), "archive_batches": archive_breakdown(rows),
            "batch_records_mean": round(rates["records"] / len(rows)),
            "cpu_from_the_first_batch": cpu,
        }
        log.info(f"bench events catch-up: {json.dumps(results['catchup'])}")
    return results
