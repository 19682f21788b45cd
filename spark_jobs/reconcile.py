"""``lake reconcile events``: the ledger of the clickstream, from the tables, record by record.

For the Kafka offsets in scope (a loadgen run's manifest, or the whole topic):

* ``received``    records in ``bronze.events__clickstream`` (each (partition, offset) once);
* ``in_silver``   records whose coordinates are in ``silver.events`` (unique events);
* ``quarantined`` records in ``quarantine.events``, by reason;
* ``duplicates``  records in neither, each matched by its ``event_id`` to the
  copy that is in silver (a re-sent event removed by the app);
* ``unaccounted`` records in none of the above: anything here is data loss.

The ledger balances when ``received = in_silver + duplicates + quarantined``
with nothing unaccounted, no coordinates twice in any table and no
``event_id`` twice in silver. With ``--manifest`` it is also compared, per
category, with what the loadgen says it sent (total, unique valid, late,
duplicates, each malformed kind, per event type, purchase revenue).

It also checks the hot tables: every window the watermark has closed equals the
same aggregation computed in batch from ``silver.events``.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

#: Loadgen manifest key of each malformed kind -> the quarantine reason code it must get.
BAD_KINDS = ("not_json", "wrong_type", "missing_field", "oversized")


def in_ranges(partition: Column, offset: Column, ranges: dict[int, tuple[int, int]] | None) -> Column:
    from pyspark.sql import functions as F

    if ranges is None:
        return F.lit(True)
    cond = F.lit(False)
    for p, (lo, hi) in ranges.items():
        cond = cond | ((partition == p) & offset.between(lo, hi))
    return cond


def manifest_ranges(manifest: dict[str, Any]) -> dict[int, tuple[int, int]]:
    """``{"offsets": {"0": [lo, hi], ...}}`` (the loadgen's delivery reports) -> ``{0: (lo, hi)}``."""
    raw = manifest.get("offsets") or manifest.get("partition_offsets") or {}
    return {int(p): (int(v[0]), int(v[1])) for p, v in raw.items()}


def ledger(spark: SparkSession, ranges: dict[int, tuple[int, int]] | None) -> dict[str, Any]:
    """Counts and integrity checks over the tables for ``ranges`` (None = everything)."""
    from pyspark.sql import functions as F

    from spark_jobs.silver.clickstream import parse_events
    from spark_jobs.streaming.archive import BRONZE, QUARANTINE, SILVER

    bronze = spark.table(BRONZE).where(in_ranges(F.col("partition"), F.col("offset"), ranges)).persist()
    silver_all = spark.table(SILVER)
    silver = silver_all.where(in_ranges(F.col("_partition"), F.col("_offset"), ranges)).persist()
    quarantine = spark.table(QUARANTINE).where(in_ranges(F.col("partition"), F.col("offset"), ranges)).persist()
    coords = ["partition", "offset"]
    s_coords = silver.select(F.col("_partition").alias("partition"), F.col("_offset").alias("offset"))
    q_coords = quarantine.select(*coords)
    rest = bronze.join(s_coords, coords, "left_anti").join(q_coords, coords, "left_anti")
    valid_rest, _ = parse_events(rest)
    in_silver_ids = silver_all.select("event_id").distinct()
    duplicates = valid_rest.join(in_silver_ids, "event_id", "left_semi").count()
    received = bronze.count()
    in_silver = silver.count()
    quarantined = quarantine.count()
    by_reason = {r.reason: int(r.n) for r in quarantine.groupBy("reason").agg(F.count(F.lit(1)).alias("n")).collect()}
    out: dict[str, Any] = {
        "received": received,
        "in_silver": in_silver,
        "duplicates": duplicates,
        "quarantined": quarantined,
        "quarantined_by_reason": dict(sorted(by_reason.items())),
        "unaccounted": received - in_silver - duplicates - quarantined,
        "bronze_coordinates_twice": received - bronze.select(*coords).distinct().count(),
        "quarantine_coordinates_twice": quarantined - q_coords.distinct().count(),
        "silver_event_ids_twice": silver_all.count() - in_silver_ids.count(),
        "silver_late_beyond_watermark": silver.where(F.col("_late")).count(),
        # The loadgen's late events carry an event_time 1-30 minutes before they were produced.
        "silver_sent_late": silver.where(F.col("_kafka_timestamp").cast("double")
                                         - F.col("event_time").cast("double") >= 60).count(),
        "silver_by_event_type": {r.event_type: int(r.n) for r in
                                 silver.groupBy("event_type").agg(F.count(F.lit(1)).alias("n")).collect()},
        "silver_purchase_revenue": str(silver.where(F.col("event_type") == "purchase")
                                       .agg(F.coalesce(F.sum("revenue"), F.lit(0)).cast("decimal(38,2)")).collect()[0][0]),
    }
    for frame in (bronze, silver, quarantine):
        frame.unpersist()
    out["balanced"] = (out["unaccounted"] == 0 and out["bronze_coordinates_twice"] == 0
                       and out["quarantine_coordinates_twice"] == 0 and out["silver_event_ids_twice"] == 0)
    return out


def compare_manifest(found: dict[str, Any], manifest: dict[str, Any]) -> list[str]:
    """Differences between what the loadgen sent and what the tables hold, per category."""
    problems: list[str] = []

    def check(what: str, sent: Any, got: Any) -> None:
        if sent != got:
            problems.append(f"{what}: sent {sent}, lake has {got}")

    check("records (bronze)", manifest["total_sent"], found["received"])
    check("unique valid events (silver)", manifest["valid_unique"], found["in_silver"])
    check("duplicates removed", manifest["duplicates"], found["duplicates"])
    check("late events (silver)", manifest["late"], found["silver_sent_late"])
    bad = manifest.get("bad", {})
    for kind in BAD_KINDS:
        check(f"malformed {kind} (quarantine)", int(bad.get(kind, 0)), found["quarantined_by_reason"].get(kind, 0))
    other = {k: v for k, v in found["quarantined_by_reason"].items() if k not in BAD_KINDS}
    if other:
        problems.append(f"quarantined for reasons the loadgen did not send: {other}")
    for event_type, n in sorted((manifest.get("by_event_type") or {}).items()):
        check(f"{event_type} events (silver)", int(n), found["silver_by_event_type"].get(event_type, 0))
    if "purchase_revenue" in manifest:
        check("purchase revenue (silver)", Decimal(str(manifest["purchase_revenue"])),
              Decimal(found["silver_purchase_revenue"]))
    return problems


#: What each hot table must hold per window, written as SQL over ``silver.events`` on its own: not the
#: DataFrame code the stream aggregates with (``spark_jobs.hot.windows``), so a bug there cannot hide itself.
_EXPECTED_METRICS = {
    "hot.sales_per_minute": """
        count_if(NOT _late AND event_type = 'purchase') AS orders,
        CAST(coalesce(sum(CASE WHEN NOT _late AND event_type = 'purchase' THEN revenue END), 0) AS DECIMAL(38,2))
          AS revenue""",
    "hot.active_users_5m": """
        CAST(count(DISTINCT CASE WHEN NOT _late THEN user_id END) AS BIGINT) AS active_users""",
    "hot.funnel_15m": """
        count_if(NOT _late AND event_type = 'page_view') AS page_views,
        count_if(NOT _late AND event_type = 'add_to_cart') AS add_to_carts,
        count_if(NOT _late AND event_type = 'checkout') AS checkouts,
        count_if(NOT _late AND event_type = 'purchase') AS purchases""",
}


def expected_windows_sql(table: str, minutes: int, source: str = "silver.events") -> str:
    """``table``'s rows (window, metrics, late events) computed in plain SQL from ``source``."""
    width = minutes * 60
    return f"""
        SELECT window_start, window_start + make_interval(0, 0, 0, 0, 0, {minutes}, 0) AS window_end,
               {_EXPECTED_METRICS[table]},
               count_if(_late) AS late_events
        FROM (SELECT *, timestamp_seconds(floor(unix_seconds(event_time) / {width}) * {width}) AS window_start
              FROM {source})
        GROUP BY window_start"""


def hot_check(spark: SparkSession, all_windows: bool = False) -> dict[str, Any]:
    """Per hot table: closed windows, and those that differ from the batch aggregation of silver.

    ``all_windows`` compares open windows too: right for a quiet stream that has consumed everything
    (``lake stream wait``), a false alarm while events are still arriving.
    """
    from pyspark.sql import functions as F

    from spark_jobs.hot.windows import HOT_VIEWS, comparable
    from spark_jobs.streaming.archive import LEDGER, SILVER

    row = spark.table(LEDGER).agg(F.max("watermark_after").alias("wm")).first()
    watermark = row.wm if row else None
    out: dict[str, Any] = {"watermark": watermark.isoformat() if watermark else None, "tables": {}}
    if watermark is None:
        return out
    silver = spark.table(SILVER).persist()
    silver.createOrReplaceTempView("_reconcile_silver")
    for view in HOT_VIEWS:
        closed = F.col("window_end") <= F.lit(watermark)
        scope = F.lit(True) if all_windows else closed
        hot_all = comparable(spark.table(view.table), view)
        hot = hot_all.where(scope)
        batch = comparable(spark.sql(expected_windows_sql(view.table, view.minutes, "_reconcile_silver")), view
                           ).where(scope)
        only_hot = hot.exceptAll(batch)
        only_batch = batch.exceptAll(hot)
        out["tables"][view.table] = {
            "windows": hot_all.count(),
            "closed_windows": hot_all.where(closed).count(),
            "compared": "all windows" if all_windows else "closed windows",
            "differing_windows": sorted({str(r.window_start) for r in only_hot.union(only_batch).collect()}),
        }
    silver.unpersist()
    return out


def run(settings: Settings, manifest_path: Path | None, all_windows: bool = False) -> dict[str, Any]:
    from spark_jobs.session import build_session

    manifest = json.loads(manifest_path.read_text()) if manifest_path else None
    spark = build_session(settings, "lake-reconcile", short_lived=True)
    spark.sparkContext.setLogLevel("ERROR")
    found = ledger(spark, manifest_ranges(manifest) if manifest else None)
    problems = compare_manifest(found, manifest) if manifest else []
    hot = hot_check(spark, all_windows)
    for name, t in hot["tables"].items():
        if t["differing_windows"]:
            problems.append(f"{name}: {len(t['differing_windows'])} closed window(s) differ from the batch "
                            f"aggregation of silver.events: {t['differing_windows'][:5]}")
    if not found["balanced"]:
        problems.append("ledger does not balance (see unaccounted / *_twice)")
    return {"scope": str(manifest_path) if manifest_path else "whole topic", "ledger": found, "hot": hot,
            "problems": problems, "ok": not problems}


def render(report: dict[str, Any]) -> str:
    led = report["ledger"]
    lines = [f"events ledger ({report['scope']})",
             f"  received (bronze)            {led['received']:>10}",
             f"  = unique events (silver)     {led['in_silver']:>10}   of which sent late {led['silver_sent_late']}, "
             f"beyond the watermark {led['silver_late_beyond_watermark']}",
             f"  + duplicates removed         {led['duplicates']:>10}",
             f"  + quarantined                {led['quarantined']:>10}   {led['quarantined_by_reason']}",
             f"  + unaccounted                {led['unaccounted']:>10}",
             f"  twice: bronze {led['bronze_coordinates_twice']}, quarantine {led['quarantine_coordinates_twice']}, "
             f"silver event_id {led['silver_event_ids_twice']}",
             f"  hot tables (watermark {report['hot']['watermark']}):"]
    for name, t in report["hot"]["tables"].items():
        lines.append(f"    {name:<24} {t['windows']} window(s), {t['closed_windows']} closed; "
                     f"{t['compared']}: {len(t['differing_windows'])} differ from batch")
    lines.append("BALANCED" if report["ok"] else "NOT BALANCED:\n  " + "\n  ".join(report["problems"]))
    return "\n".join(lines)
