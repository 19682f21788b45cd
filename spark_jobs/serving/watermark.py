"""The batch watermark: the last day the serving views take from gold (``ops.serving_watermark``).

The table is a log, one row per move (``seq`` 1, 2, ...): the current watermark is the row with the highest
``seq``, earlier rows (and Delta's history) say who moved it when and why. Only the gold DAG moves it, in a
task after its day's gold tasks (their data-quality gates included) succeeded, through :func:`move`:

* forwards, to the last day of the unbroken run of days after the current watermark whose gold tables
  (:data:`spark_jobs.serving.views.GOLD_TABLES`) passed their ``block`` rules in their latest validation
  (``ops.dq_results``): a day that was never built or failed its gate stops it, so no day is ever served from
  gold before its gold exists;
* never backwards, except when the run says so (``backfill``: the watermark is set to the run's day, earlier
  or later, and the row records ``backfill = true``).

A move is one insert-only MERGE keyed on ``seq``: a retry that finds the watermark already there writes nothing,
and two writers racing for the same ``seq`` conflict instead of both landing (the DAG also serialises the task
with a 1-slot pool).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING

from spark_jobs.gold.rules import utc_date_sql

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from spark_jobs.settings import Settings

WATERMARK_TABLE = "ops.serving_watermark"
DQ_RESULTS = "ops.dq_results"
#: The watermark before any move: every day is after it, so everything comes from the speed views.
NO_WATERMARK = date(1, 1, 1)


def watermark_schema() -> StructType:
    from pyspark.sql.types import BooleanType, DateType, LongType, StringType, StructField, StructType, TimestampType

    s = StringType()
    return StructType([
        StructField("seq", LongType(), False), StructField("watermark", DateType(), False),
        StructField("previous", DateType()), StructField("backfill", BooleanType(), False),
        StructField("reason", s), StructField("run_id", s), StructField("dag_id", s), StructField("task_id", s),
        StructField("moved_at", TimestampType(), False),
    ])


def current_watermark_sql(table: str = WATERMARK_TABLE) -> str:
    """One row, column ``watermark``: the newest move's day, or :data:`NO_WATERMARK` before the first move."""
    return f"SELECT coalesce(max_by(watermark, seq), DATE'{NO_WATERMARK.isoformat()}') AS watermark FROM {table}"


@dataclass(frozen=True)
class Move:
    """What :func:`decide` chose: ``watermark`` is the new value (== ``previous`` when it stays)."""

    previous: date | None
    watermark: date | None
    backfill: bool
    reason: str

    @property
    def moved(self) -> bool:
        return self.watermark != self.previous

    def line(self) -> str:
        before = self.previous.isoformat() if self.previous else "none"
        if not self.moved:
            return f"{WATERMARK_TABLE}: stays at {before}: {self.reason}"
        after = self.watermark.isoformat() if self.watermark else "none"
        return f"{WATERMARK_TABLE}: {before} -> {after}{' (backfill)' if self.backfill else ''}: {self.reason}"


def decide(current: date | None, day: date, passed: Iterable[date], backfill: bool = False) -> Move:
    """Where the watermark goes after the gold run of ``day``; ``passed`` are the days whose gold passed.

    Forwards only, to the last day of the unbroken run of passed days after ``current`` (from the earliest
    passed day when there is no watermark yet); ``backfill`` sets it to ``day`` whatever the direction.
    """
    ok = set(passed)
    if backfill:
        if day == current:
            return Move(current, current, True, f"backfill of {day}: the watermark is already there")
        return Move(current, day, True, f"backfill: the run of {day} sets the watermark to its day (was "
                                        f"{current.isoformat() if current else 'none'})")
    if current is not None and day <= current:
        return Move(current, current, False, f"{day} is not after the watermark: it is served from gold already "
                                             "(moving the watermark back needs the run's backfill flag)")
    first = current + timedelta(days=1) if current is not None else min(ok, default=None)
    last = None
    d = first
    while d is not None and d in ok:
        last, d = d, d + timedelta(days=1)
    if last is None:
        return Move(current, current, False, f"{first} has no gold that passed its block rules yet (build it: "
                                             f"lake gold backfill --start {first} --end {first})")
    return Move(current, last, False, f"gold passed its block rules for every day {first} .. {last}")


def ensure_watermark_table(spark: SparkSession, settings: Settings) -> None:
    from spark_jobs.streaming.common import create_table
    from spark_jobs.table_io import ensure_database

    ensure_database(spark, settings, WATERMARK_TABLE.partition(".")[0])
    create_table(spark, settings, WATERMARK_TABLE, watermark_schema())


def read_current(spark: SparkSession, table: str = WATERMARK_TABLE) -> tuple[int, date | None]:
    """(``seq``, watermark) of the newest move; (0, None) before the first."""
    row = spark.sql(f"SELECT seq, watermark FROM {table} ORDER BY seq DESC LIMIT 1").first()
    return (0, None) if row is None else (int(row[0]), row[1])


def _ts(day: date) -> str:
    seconds = int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp())
    return f"timestamp_seconds({seconds})"


def passed_days(spark: SparkSession, tables: Iterable[str], after: date | None,
                results: str = DQ_RESULTS) -> set[date]:
    """Days after ``after`` whose latest one-day validation of every one of ``tables`` passed its ``block`` rules.

    Reads ``ops.dq_results`` (one row per expectation per validation; a validation is one run, task and
    ``validated_at``): a few rows per table and day come back to the driver.
    """
    names = list(tables)
    if not spark.catalog.tableExists(results):
        return set()
    quoted = ", ".join(f"'{t}'" for t in names)
    since = f"AND interval_start >= {_ts(after + timedelta(days=1))}" if after else ""
    rows = spark.sql(
        f"SELECT table_name, day, max_by(ok, validated_at) AS ok FROM ("
        f"SELECT table_name, {utc_date_sql('interval_start')} AS day, run_id, task_id, validated_at, "
        f"bool_and(coalesce(success, false) OR severity <> 'block') AS ok FROM {results} "
        f"WHERE table_name IN ({quoted}) {since} "
        f"AND unix_seconds(interval_end) - unix_seconds(interval_start) = 86400 "
        f"GROUP BY 1, 2, 3, 4, 5) GROUP BY table_name, day").collect()
    ok: dict[date, set[str]] = {}
    for table, day, good in rows:
        if good:
            ok.setdefault(day, set()).add(table)
    return {day for day, good in ok.items() if good >= set(names)}


def _lit(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"CAST({value} AS BIGINT)"
    if isinstance(value, date):
        return f"DATE'{value.isoformat()}'"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def record(spark: SparkSession, seq: int, move: Move, *, run_id: str, dag_id: str, task_id: str,
           table: str = WATERMARK_TABLE) -> None:
    """Insert the row of ``move`` as ``seq`` (insert-only MERGE: a ``seq`` already there is left as it is)."""
    values = {"seq": seq, "watermark": move.watermark, "previous": move.previous, "backfill": move.backfill,
              "reason": move.reason, "run_id": run_id, "dag_id": dag_id, "task_id": task_id}
    row = ", ".join([*(f"{_lit(v)} AS {k}" for k, v in values.items()), "current_timestamp() AS moved_at"])
    spark.sql(f"MERGE INTO {table} t USING (SELECT {row}) s ON t.seq = s.seq WHEN NOT MATCHED THEN INSERT *")


def move(spark: SparkSession, day: date, *, backfill: bool, run_id: str, dag_id: str, task_id: str,
         tables: Iterable[str], table: str = WATERMARK_TABLE,
         passed: Callable[[date | None], set[date]] | None = None) -> Move:
    """Read the watermark, :func:`decide` for the run of ``day`` (whose own gold passed: its tasks succeeded),
    and record the move if there is one. ``passed`` overrides the read of ``ops.dq_results`` (tests)."""
    seq, current = read_current(spark, table)
    lookup = passed or (lambda after: passed_days(spark, tables, after))
    chosen = decide(current, day, lookup(current) | {day}, backfill)
    if chosen.moved:
        record(spark, seq + 1, chosen, run_id=run_id, dag_id=dag_id, task_id=task_id, table=table)
    return chosen
