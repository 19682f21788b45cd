"""``lake bench replay``: how fast a replay rebuilds tables from bronze, beside the stream's rate on the same records.

Per table it runs a dry replay (build, plus the suite with ``--with-dq``; no diff shortcut, no switch: the live tables
and the stream are not touched) and prints the bronze records replayed per second, the seconds, and the Spark jobs
the build issued. Beside it, the stream's own rate over the same archive: ``ops.stream_events_ledger`` records every
events micro-batch (records, seconds), so its catch-up batches give records per second of the stream for the events
path: batches of at least half of ``LAKE_EVENTS_MAX_OFFSETS_PER_TRIGGER`` (the stream that far behind: a backlog;
a lower bar counts the steady batches of a loaded stream too, and makes the ratio flatter the replay: see
docs/benchmarks.md). The CDC query keeps no per-batch table; its catch-up rate is ``lake bench cdc``'s
``catch_up_per_s`` (docs/benchmarks.md). Prints figures, never asserts (the target, a replay >= 5x the stream's
catch-up, is a ratio to read).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from spark_jobs.replay.targets import EVENTS_BRONZE, ReplayTarget
from spark_jobs.settings import Settings

log = logging.getLogger(__name__)


def stream_events_rate(spark: Any, ledger_location: str, backlog_records: int) -> dict[str, Any]:
    """The events query's archive rate from its ledger: all batches, and its catch-up batches alone."""
    from pyspark.sql import functions as F

    ledger = spark.read.format("delta").load(ledger_location)

    def rate(rows: Any) -> dict[str, Any]:
        r = rows.agg(F.count(F.lit(1)).alias("batches"), F.sum("received").alias("records"),
                     F.sum("batch_seconds").alias("seconds")).first()
        records, seconds = int(r["records"] or 0), float(r["seconds"] or 0.0)
        return {"batches": int(r["batches"]), "records": records, "seconds": round(seconds, 1),
                "records_per_s": round(records / seconds, 1) if seconds else None}

    return {"all_batches": rate(ledger.where(F.col("received") > 0)),
            "catch_up_batches": rate(ledger.where(F.col("received") >= backlog_records))}


def catch_up_records(settings: Settings) -> int:
    """The least records of an events batch counted as catch-up: half the most a batch may read."""
    return max(1, settings.events_max_offsets_per_trigger // 2)


def bench_replay(settings: Settings, targets: Sequence[ReplayTarget], with_dq: bool) -> dict[str, Any]:
    """A dry replay of each of ``targets``, timed; the stream's events rate beside it (module docstring)."""
    from spark_jobs.replay import jobs
    from spark_jobs.replay.build import in_range
    from spark_jobs.replay.run import EVENTS_LEDGER, ReplayConfig, Replayer
    from spark_jobs.stack.stream_control import SupervisedStream

    out: dict[str, Any] = {"tables": {}}
    with jobs.one_replay(settings, "lake bench replay"):
        spark = jobs.session(settings)
        lake = jobs.lake_for(spark, settings)
        config = ReplayConfig(settings.events_watermark_minutes, settings.replay_rollback_hours,
                              settings.replay_diff_sample)
        replayer = Replayer(spark, lake, config, SupervisedStream(settings), jobs.claim_queries(settings),
                            gate=jobs.dq_gate(spark, settings, "bench") if with_dq else None,
                            kafka=jobs.kafka_range(spark, settings), run="bench")
        tracker = spark.sparkContext.statusTracker()
        for target in targets:
            group = f"lake-bench-replay-{target.live}"
            spark.sparkContext.setJobGroup(group, f"lake bench replay {target.live}")
            started = time.monotonic()
            report = replayer.replay([target], dry_run=True)
            seconds = time.monotonic() - started
            spark.sparkContext.setJobGroup("lake-bench-replay-count", "count")
            (rep,) = report.targets
            point = rep.point if target.kind != "hot" else replayer.events_point
            records = lake.read(target.bronze).where(in_range(None, point)).count()
            figures = {"bronze": target.bronze, "bronze_records": records, "seconds": round(seconds, 1),
                       "records_per_s": round(records / seconds, 1) if seconds else None,
                       "spark_jobs": len(tracker.getJobIdsForGroup(group)), "counts": rep.counts,
                       "blocked": rep.blocked}
            log.info("bench replay: %s %s", target.live, figures)
            out["tables"][target.live] = figures
        if lake.exists(EVENTS_LEDGER):
            backlog = catch_up_records(settings)
            stream = stream_events_rate(spark, lake.location(EVENTS_LEDGER), backlog)
            stream["catch_up_rule"] = f"batches of at least {backlog} records (half of LAKE_EVENTS_MAX_OFFSETS_PER_TRIGGER)"
            out["stream_events"] = stream
            catch_up = stream["catch_up_batches"]["records_per_s"] or stream["all_batches"]["records_per_s"]
            out["ratios"] = {t: round(f["records_per_s"] / catch_up, 2) for t, f in out["tables"].items()
                             if f["bronze"] == EVENTS_BRONZE and f["records_per_s"] and catch_up}
        out["stream_cdc"] = "no per-batch table: see `lake bench cdc` catch_up_per_s (docs/benchmarks.md)"
    return out
