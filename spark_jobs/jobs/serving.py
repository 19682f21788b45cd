"""The gold DAG's last task: make sure the serving views exist, then move the batch watermark for the run's day.

Runs after every gold task of the run succeeded (each one's data-quality gate passed and its rows were committed),
so gold for the run's day is in the tables before the watermark commit that switches the day to gold.
"""

from __future__ import annotations

import logging
from datetime import date, datetime
from typing import Any

log = logging.getLogger(__name__)


def watermark_task(day: str | None, start: datetime | str | None, end: datetime | str | None, *, backfill: bool,
                   run_id: str, dag_id: str, task_id: str) -> dict[str, Any]:
    """Ensure the serving views, move ``ops.serving_watermark`` for the run's day; the move as a dict.

    The dict (``watermark``, ``previous`` as YYYY-MM-DD or None, ``moved``, ``backfill``) becomes the extra of
    the serving Assets' event. Raises :class:`~spark_jobs.jobs.gold.IntervalError` (not worth a retry) when the
    run has no usable interval.
    """
    from spark_jobs.jobs.gold import resolve_interval
    from spark_jobs.serving.views import GOLD_TABLES, ensure_serving
    from spark_jobs.serving.watermark import move, passed_days
    from spark_jobs.session import connect_session
    from spark_jobs.settings import load_settings

    interval = resolve_interval(start, end, day)
    settings = load_settings()
    spark = connect_session(settings)
    for line in ensure_serving(spark, settings, replace=False):
        log.info(line)
    built = set(interval.days)  # this run's gold tasks all succeeded: its days passed their gates

    def passed(after: date | None) -> set[date]:
        return passed_days(spark, GOLD_TABLES, after) | built

    chosen = move(spark, interval.days[-1], backfill=backfill, run_id=run_id, dag_id=dag_id, task_id=task_id,
                  tables=GOLD_TABLES, passed=passed)
    log.info(chosen.line())
    return {"watermark": chosen.watermark.isoformat() if chosen.watermark else None,
            "previous": chosen.previous.isoformat() if chosen.previous else None,
            "moved": chosen.moved, "backfill": chosen.backfill}
