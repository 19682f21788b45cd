"""``lake bench dq``: seconds per data-quality suite and per million rows validated (printed, never asserted).

Validates, on the stack's Spark Connect server, what the DAGs validate:

* each silver table as ``lake_dq_streaming`` does (the live frame: a CDC view whole, ``silver.events`` its last
  event dates), not persisted;
* a gold day as the ``lake_gold_daily`` gate does: the day's rows of each gold fact (the dimensions whole),
  persisted first like the gate's computed rows.

Each suite runs ``--repeat`` times (the best and the median are printed) with its Data Docs page rendered
into a temporary GX project, so the served site and ``ops.dq_results`` are not touched.
"""

from __future__ import annotations

import logging
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from spark_jobs.contracts.tables import gold_steps, live_tables

log = logging.getLogger(__name__)

#: The suites benched: the registry's live silver tables and its gold tables.
SILVER = tuple(t for t in live_tables() if t.startswith("silver."))
GOLD = tuple(t.name for t in gold_steps())


def _latest_full_day(spark: Any) -> date | None:
    """The newest ``order_date`` of ``gold.fct_orders`` before today (UTC): a complete gold day."""
    today = datetime.now(UTC).date()
    row = spark.sql(f"SELECT max(order_date) AS d FROM gold.fct_orders WHERE order_date < DATE'{today}'").first()
    return None if row is None else row["d"]


def bench(tables: Sequence[str], day: date | None, repeat: int,
          progress: Callable[[int], None] | None = None) -> int:
    """Validate each suite of ``tables`` ``repeat`` times on Spark Connect; log a table of the timings.

    ``progress`` gets the number of suites done after each (a progress bar).
    """
    from spark_jobs.quality.checks import table_frame
    from spark_jobs.quality.runner import validate_suite
    from spark_jobs.quality.suites import load_suite
    from spark_jobs.session import connect_session
    from spark_jobs.settings import load_settings

    settings = load_settings()
    spark = connect_session(settings)
    day = day or _latest_full_day(spark)
    tmp = Path(tempfile.mkdtemp(prefix="lake-bench-dq-"))
    # Data Docs go to a throwaway GX project: the bench must not add pages to the served site.
    bench_settings = settings.model_copy(update={"state_dir": tmp})
    log.info(f"bench dq: {len(tables)} suite(s), gold day {day}, {repeat} run(s) each, Spark Connect "
             f"{settings.host}:{settings.spark_connect_port}")
    log.info(f"{'suite':<24} {'rows':>9} {'expect.':>7} {'best s':>8} {'median s':>9} {'s per 1M rows':>14}")
    total_s, total_rows = 0.0, 0
    try:
        for done, table in enumerate(tables, 1):
            suite = load_suite(table)
            gold = table.startswith("gold.")
            if gold and suite.meta.get("date_column"):
                if day is None:
                    log.info(f"{table:<24} skipped: gold.fct_orders has no complete day (lake gold build)")
                    if progress is not None:
                        progress(done)
                    continue
                df, interval = table_frame(spark, suite, day=day)
            else:
                df, interval = table_frame(spark, suite)
            if gold:
                df = df.persist()
            try:
                rows = df.count()
                times = []
                for i in range(repeat):
                    t0 = time.perf_counter()
                    outcome = validate_suite(spark, df, suite, interval=interval, run_id=f"bench_dq_{i}",
                                             dag_id="lake_bench_dq", task_id=table, settings=bench_settings,
                                             build_docs=True)
                    times.append(time.perf_counter() - t0)
                failed = ", ".join(f"{r.severity}:{r.expectation}" for r in outcome.failed) or "-"
            finally:
                if gold:
                    df.unpersist()
            best, median = min(times), statistics.median(times)
            per_m = f"{median / rows * 1e6:.1f}" if rows else "-"
            total_s, total_rows = total_s + median, total_rows + rows
            log.info(f"{table:<24} {rows:>9} {len(suite.expectations):>7} {best:>8.2f} {median:>9.2f} {per_m:>14}"
                     f"  failed: {failed}")
            if progress is not None:
                progress(done)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if total_rows:
        log.info(f"{'all (median sum)':<24} {total_rows:>9} {'':>7} {'':>8} {total_s:>9.2f} "
                 f"{total_s / total_rows * 1e6:>14.1f}")
    return 0
