"""``lake bench soak``: CDC and events load at once for a long run; does the stream hold its latency, files, heap?

What it does, in one run against the supervised streaming app (``lake stream start``):

1. waits until the app is caught up, notes each silver CDC table's Delta version and files;
2. runs ``lake loadgen cdc`` at ``--cdc-rate`` and ``lake loadgen events`` at ``--events-rate`` side by side for
   ``--minutes``, sampling every ``--sample-seconds`` the stream's lag (``lake stream status``' figures) and its
   JVM's old generation (``jstat -gc``: G1's old-generation occupancy); at the end of the first window and once
   the load is over, the heap after a full GC (:func:`live_heap_mb`): the live set a leak would grow. The old
   generation's floor alone is not that: G1 collects the old generation only once it passes its occupancy
   threshold (45 % of the heap), so garbage below it shows as a rising floor;
3. waits until the app has applied everything, then reports, for the first and the last ``--window-minutes`` of
   the load: CDC commit-to-silver p50/p95 (the change data feed's commit time minus the PostgreSQL commit time
   Debezium carried, as ``lake bench cdc``) and events freshness p50/p95 (Kafka time -> hot commit, as ``lake bench
   events``), with the last/first ratio; files per silver table at the start and the end (and deletion vectors,
   off for silver CDC tables by design); the heap floor per window and the live heap after the first window and
   after the load, with their ratio. The two full GCs pause the stream (a second or two) between the windows
   measured, never inside them.

It prints figures and never asserts them (docs/benchmarks.md records them).
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import threading
import time
from typing import Any

from spark_jobs.bench.cdc import NO_BARS, Bars, _require_running_connector, percentile
from spark_jobs.settings import Settings
from spark_jobs.stack import stream_control as control
from spark_jobs.stack import supervisor

log = logging.getLogger(__name__)


def jvm_of(driver_pid: int) -> int | None:
    """The streaming app's JVM: the java child of its Python driver (``local[*]``: tasks run in it)."""
    import psutil

    try:
        for child in psutil.Process(driver_pid).children(recursive=True):
            if child.name() == "java":
                return int(child.pid)
    except psutil.Error:
        return None
    return None


def old_gen_mb(jvm_pid: int) -> float | None:
    """G1 old-generation occupancy of ``jvm_pid`` in MB (``jstat -gc``'s OU column), None if jstat cannot say."""
    jstat = shutil.which("jstat") or "/usr/lib/jvm/java-17-openjdk-amd64/bin/jstat"
    try:
        out = subprocess.run([jstat, "-gc", str(jvm_pid)], capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line.split() for line in out.stdout.strip().splitlines()]
    if len(lines) < 2 or "OU" not in lines[0]:
        return None
    return round(float(lines[1][lines[0].index("OU")]) / 1024, 1)


def live_heap_mb(jvm_pid: int) -> float | None:
    """The heap ``jvm_pid`` holds after a full GC, in MB: ``jcmd <pid> GC.run`` (a System.gc(), which G1 runs as a
    full collection), then the old generation (:func:`old_gen_mb`: a full GC leaves the young generation empty).
    None if either tool cannot say (not a JVM, another user's JVM without root)."""
    if old_gen_mb(jvm_pid) is None:  # not a JVM jstat can read: jcmd's attach would send it a SIGQUIT
        return None
    jcmd = shutil.which("jcmd") or "/usr/lib/jvm/java-17-openjdk-amd64/bin/jcmd"
    try:
        subprocess.run([jcmd, str(jvm_pid), "GC.run"], capture_output=True, text=True, timeout=120, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return old_gen_mb(jvm_pid)


def silver_files(spark: Any) -> dict[str, dict[str, int]]:
    """Files and deletion vectors of each silver CDC table's current version."""
    from spark_jobs.contracts.shop import CDC_TABLES

    out = {}
    for c in CDC_TABLES.values():
        detail = spark.sql(f"DESCRIBE DETAIL {c.silver}").select("numFiles", "location").first()
        out[c.silver] = {"files": int(detail.numFiles), "deletion_vectors": _deletion_vectors(spark, detail.location)}
    return out


def _deletion_vectors(spark: Any, location: str) -> int:
    """Files of the table's current version that carry a deletion vector (its Delta state's ``add`` actions)."""
    state = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, location).update(
        False, spark._jvm.scala.Option.empty(), spark._jvm.scala.Option.empty())
    found = state.numDeletionVectorsOpt()  # a scala.Option: py4j cannot call getOrElse (it takes a function)
    return int(found.get()) if found.isDefined() else 0


def cdc_latencies(spark: Any, since: dict[str, int]) -> list[tuple[float, float]]:
    """``(PostgreSQL commit epoch s, seconds to the silver commit)`` per change applied after ``since`` versions."""
    from pyspark.sql import functions as F

    values: list[tuple[float, float]] = []
    for table, version in since.items():
        changes = (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", version + 1)
                   .table(table).where(F.col("_change_type").isin("insert", "update_postimage"))
                   .select(F.col("_source_ts").cast("double").alias("t"),
                           (F.col("_commit_timestamp").cast("double") - F.col("_source_ts").cast("double")).alias("s")))
        values += [(float(r.t), float(r.s)) for r in changes.collect() if r.s is not None and r.t is not None]
    return values


def events_freshness(spark: Any, ranges: dict[int, tuple[int, int]]) -> list[tuple[float, float]]:
    """``(Kafka epoch s, seconds to the hot commit)`` per on-time event in ``ranges`` (as ``lake bench events``)."""
    from pyspark.sql import functions as F

    from spark_jobs.reconcile import in_ranges
    from spark_jobs.streaming.archive import SILVER
    from spark_jobs.streaming.hot import HOT_LEDGER

    silver = spark.table(SILVER).where(in_ranges(F.col("_partition"), F.col("_offset"), ranges) & ~F.col("_late"))
    spans = (spark.table(HOT_LEDGER).select(F.explode("offsets").alias("p", "span"), "hot_committed_at")
             .select(F.col("p").cast("int").alias("p"), F.split("span", "-").getItem(0).cast("long").alias("lo"),
                     F.split("span", "-").getItem(1).cast("long").alias("hi"), "hot_committed_at"))
    joined = silver.join(spans, (F.col("_partition") == F.col("p")) & F.col("_offset").between(F.col("lo"),
                                                                                               F.col("hi")))
    rows = joined.select(F.col("_kafka_timestamp").cast("double").alias("t"),
                         (F.col("hot_committed_at").cast("double") - F.col("_kafka_timestamp").cast("double"))
                         .alias("s")).collect()
    return [(float(r.t), float(r.s)) for r in rows]


def window_figures(samples: list[tuple[float, float]], start: float, end: float, minutes: float) -> dict[str, Any]:
    """p50/p95/max of the samples whose time falls in the first and in the last ``minutes`` of ``[start, end]``,
    and the last/first p95 ratio."""
    span = minutes * 60
    first = [s for t, s in samples if start <= t < start + span]
    last = [s for t, s in samples if end - span <= t <= end]

    def figures(values: list[float]) -> dict[str, Any]:
        return {"n": len(values), "p50_s": round(percentile(values, 0.5), 2),
                "p95_s": round(percentile(values, 0.95), 2), "max_s": round(max(values), 2) if values else None}

    p95_first, p95_last = percentile(first, 0.95), percentile(last, 0.95)
    ratio = _ratio(p95_last, p95_first) if first and last else None
    return {"first": figures(first), "last": figures(last), "last_to_first_p95": ratio}


def _ratio(last: float | None, first: float | None) -> float | None:
    """``last / first`` to two places; None without both (or with a first of 0)."""
    return round(last / first, 2) if last is not None and first else None


def _floor(samples: list[tuple[float, float | None]], start: float, end: float) -> float | None:
    values = [v for t, v in samples if start <= t <= end and v is not None]
    return min(values) if values else None


def bench_soak(settings: Settings, minutes: float, cdc_rate: float, events_rate: float, seed: int,
               window_minutes: float = 5, sample_seconds: float = 60, bars: Bars = NO_BARS) -> dict[str, Any]:
    """Run the soak (module docstring) and return its figures."""
    from spark_jobs.bench.cdc import _silver_heads
    from spark_jobs.bench.events import _loadgen
    from spark_jobs.loadgen.cdc.runner import run as cdc_loadgen
    from spark_jobs.reconcile import manifest_ranges
    from spark_jobs.session import build_session

    if minutes < 2 * window_minutes:
        raise ValueError(f"--minutes {minutes:g} must be at least twice --window-minutes {window_minutes:g}")
    _require_running_connector(settings)
    work = settings.run_dir / "bench-soak"
    work.mkdir(parents=True, exist_ok=True)
    spark = build_session(settings, "lake-bench-soak", short_lived=True)
    spark.sparkContext.setLogLevel("ERROR")
    control.start(settings)
    with bars.remaining("bench soak: catching up before the load (records to apply)") as left:
        if not control.wait(settings, 1800, progress=left):
            raise RuntimeError("the stream did not catch up before the soak; see lake stream status")
    versions = {table: version for table, (version, _at) in _silver_heads(spark).items()}
    files_before = silver_files(spark)
    seconds = minutes * 60
    errors: list[str] = []
    manifest: dict[str, Any] = {}

    def events() -> None:
        try:
            manifest.update(_loadgen(settings, events_rate, seconds, seed, work / f"events-{seed}.json",
                                     ["--users", "1000"]))
        except Exception as exc:  # noqa: BLE001 - reported with the figures
            errors.append(f"events loadgen: {exc}")

    def cdc() -> None:
        try:
            cdc_loadgen(settings, rate=cdc_rate, duration=seconds, seed=seed)
        except Exception as exc:  # noqa: BLE001 - reported with the figures
            errors.append(f"cdc loadgen: {exc}")

    start = time.time()
    loads = [threading.Thread(target=fn, name=f"soak-{fn.__name__}", daemon=True) for fn in (events, cdc)]
    for thread in loads:
        thread.start()
    heap: list[tuple[float, float | None]] = []
    lag: list[tuple[float, int]] = []
    live: dict[str, float | None] = {}
    window = window_minutes * 60

    def stream_jvm() -> int | None:
        pid = int((supervisor.program_info(settings, control.PROGRAM) or {}).get("pid") or 0)
        return jvm_of(pid) if pid else None

    with bars.timed(f"bench soak: {minutes:g} min of {cdc_rate:g} changes/s + {events_rate:g} events/s", seconds):
        while any(t.is_alive() for t in loads):
            jvm = stream_jvm()
            if "after_first_window" not in live and time.time() >= start + window:
                live["after_first_window"] = live_heap_mb(jvm) if jvm else None
                log.info(f"bench soak: heap after a full GC at the end of the first window: "
                         f"{live['after_first_window']} MB")
            heap.append((time.time(), old_gen_mb(jvm) if jvm else None))
            lag.append((time.time(), control.total_lag(settings)))
            log.info(f"bench soak: {(time.time() - start) / 60:.1f} min, old gen {heap[-1][1]} MB, "
                     f"lag {lag[-1][1]} records")
            for thread in loads:
                thread.join(timeout=sample_seconds / len(loads))
    end = time.time()
    jvm = stream_jvm()
    live["after_load"] = live_heap_mb(jvm) if jvm else None
    log.info(f"bench soak: heap after a full GC once the load ended: {live['after_load']} MB")
    with bars.remaining("bench soak: applying the rest (records to apply)") as left:
        caught = control.wait(settings, 1800, progress=left)
    result: dict[str, Any] = {
        "minutes": minutes, "cdc_rate": cdc_rate, "events_rate": events_rate, "seed": seed,
        "caught_up_after_s": round(time.time() - end, 1) if caught else None, "errors": errors,
        "cdc_commit_to_silver": window_figures(cdc_latencies(spark, versions), start, end, window_minutes),
        "events_freshness": window_figures(events_freshness(spark, manifest_ranges(manifest)), start, end,
                                           window_minutes) if manifest else None,
        "silver_files": {"start": files_before, "end": silver_files(spark)},
        "stream_old_gen_mb_floor": {"first": _floor(heap, start, start + window), "last": _floor(heap, end - window,
                                                                                                   end)},
        "stream_live_heap_mb": {**live, "ratio": _ratio(live.get("after_load"), live.get("after_first_window"))},
        "stream_lag_max_records": max((n for _t, n in lag), default=None),
        "samples": {"heap_mb": [v for _t, v in heap], "lag": [n for _t, n in lag]},
    }
    (work / f"soak-{seed}.json").write_text(json.dumps(result, indent=2))
    return result
