"""The batch watermark: the last day the serving views take from gold (``ops.serving_watermark``).

The table is a log, one row per move (``seq`` 1, 2, ...): the current watermark is the row with the highest
``seq``, earlier rows (and Delta's history) say who moved it when and why. Only the gold DAG moves it, in a
task after its day's gold tasks (their data-quality gates included) succeeded, through :func:`move`:

* forwards, to the last day whose gold tables (:data:`spark_jobs.serving.views.GOLD_TABLES`) passed their
  ``block`` rules in their latest validation (``ops.dq_results``), but not past a day that has data in silver
  and no such gold (never built, catchup off, its gate blocked, or its run still going): no day with data is
  served from gold before its gold exists, and a day without data (gold and speed both empty) does not stop it;
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

from spark_jobs.contracts.tables import schema_of
from spark_jobs.gold.rules import utc_date_sql

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_jobs.settings import Settings

WATERMARK_TABLE = "ops.serving_watermark"
DQ_RESULTS = "ops.dq_results"
#: The watermark before any move: every day is after it, so everything comes from the speed views.
NO_WATERMARK = date(1, 1, 1)


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


def decide(current: date | None, day: date, passed: Iterable[date], backfill: bool = False,
           needed: Iterable[date] = ()) -> Move:
    """Where the watermark goes after the gold run of ``day``.

    ``passed``: days whose gold passed its block rules; ``needed``: days after the watermark that have data in
    silver (their gold must have passed before the watermark may cover them). Forwards only, to the last passed
    day before the first needed day that has not passed (from the earliest passed day when there is no
    watermark yet); ``backfill`` sets it to ``day`` whatever the direction.
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
    need = set(needed)
    if current is None and not ok | need:
        return Move(None, None, False, "no day has gold that passed its block rules yet")
    low = current if current is not None else min(ok | need) - timedelta(days=1)
    missing = sorted(d for d in need if d > low and d not in ok)
    reachable = [d for d in ok if d > low and (not missing or d < missing[0])]
    if not reachable and not missing:
        return Move(current, current, False, f"no day after {low} has gold that passed its block rules yet")
    if not reachable:
        first = missing[0]
        return Move(current, current, False, f"{first} has data in silver but no gold that passed its block rules "
                                             f"(build it: lake gold backfill --start {first} --end {first})")
    last = max(reachable)
    why = f"every day after {low} up to {last} with data in silver has gold that passed its block rules"
    if missing:
        why += f"; {missing[0]} has not (build it: lake gold backfill --start {missing[0]} --end {missing[0]})"
    return Move(current, last, False, why)


def ensure_watermark_table(spark: SparkSession, settings: Settings) -> None:
    """``CREATE TABLE IF NOT EXISTS`` the watermark table at its warehouse location (plain SQL: this runs on Spark
    Connect, where the streaming app's ``DeltaTable`` builder is not available)."""
    from spark_jobs.table_io import create_table_sql, ensure_database

    ensure_database(spark, settings, WATERMARK_TABLE.partition(".")[0])
    create_table_sql(spark, settings, WATERMARK_TABLE, schema_of(WATERMARK_TABLE),
                     "serving layer batch watermark: one row per move, the current one has the highest seq")


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


def _days(spark: SparkSession, query: str) -> set[date]:
    return {r[0] for r in spark.sql(query).collect()}


def unserved_days(spark: SparkSession, after: date, until: date,
                  name: Callable[[str], str] = str) -> tuple[set[date], set[date]]:
    """Days in (``after``, ``until``]: (those with data in silver, those of them gold has no rows for yet).

    An order day needs rows in ``gold.fct_daily_sales``, an event day in ``gold.fct_daily_funnel``: a day whose
    gate passed in a run still writing is not covered before its rows are committed. A few rows to the driver.
    ``name`` maps a lake table name to the one to read (tests).
    """
    lo, hi = after + timedelta(days=1), until + timedelta(days=1)
    dates = f">= DATE'{lo.isoformat()}' AND {{c}} < DATE'{hi.isoformat()}'"
    sources = {  # silver day query, gold table, gold day column
        "silver.orders": (f"SELECT DISTINCT {utc_date_sql('placed_at')} FROM {name('silver.orders')} "
                   f"WHERE placed_at >= {_ts(lo)} AND placed_at < {_ts(hi)}", "gold.fct_daily_sales", "order_date"),
        # event_date is the UTC date of event_time (and the partition column)
        "silver.events": (f"SELECT DISTINCT event_date FROM {name('silver.events')} "
                          f"WHERE event_date {dates.format(c='event_date')}",
                   "gold.fct_daily_funnel", "event_date"),
    }
    with_data: set[date] = set()
    unbuilt: set[date] = set()
    for source, (silver, gold, column) in sources.items():
        if not spark.catalog.tableExists(name(source)):
            continue
        days = _days(spark, silver)
        built = (_days(spark, f"SELECT DISTINCT {column} FROM {name(gold)} WHERE {column} {dates.format(c=column)}")
                 if spark.catalog.tableExists(name(gold)) else set())
        with_data |= days
        unbuilt |= days - built
    return with_data, unbuilt


def record(spark: SparkSession, seq: int, move: Move, *, run_id: str, dag_id: str, task_id: str,
           table: str = WATERMARK_TABLE) -> None:
    """Insert the row of ``move`` as ``seq`` (insert-only: a ``seq`` already there is left as it is)."""
    from spark_jobs.table_io import insert_if_absent

    values = {"seq": seq, "watermark": move.watermark, "previous": move.previous, "backfill": move.backfill,
              "reason": move.reason, "run_id": run_id, "dag_id": dag_id, "task_id": task_id}
    insert_if_absent(spark, table, schema_of(WATERMARK_TABLE), values, "seq", {"moved_at": "current_timestamp()"})


def move(spark: SparkSession, day: date, *, backfill: bool, run_id: str, dag_id: str, task_id: str,
         tables: Iterable[str], table: str = WATERMARK_TABLE,
         passed: Callable[[date | None], set[date]] | None = None,
         unserved: Callable[[date, date], tuple[set[date], set[date]]] | None = None) -> Move:
    """Read the watermark, :func:`decide` for the run of ``day`` (whose own gold passed: its tasks succeeded),
    and record the move if there is one. ``passed`` and ``unserved`` override the reads of ``ops.dq_results``
    (:func:`passed_days`) and of silver and gold (:func:`unserved_days`), for tests."""
    seq, current = read_current(spark, table)
    ok = (passed or (lambda after: passed_days(spark, tables, after)))(current) | {day}
    needed: set[date] = set()
    if not backfill and (current is None or day > current):
        low = current if current is not None else min(ok) - timedelta(days=1)
        needed, unbuilt = (unserved or (lambda a, b: unserved_days(spark, a, b)))(low, max(ok))
        ok -= unbuilt
    chosen = decide(current, day, ok, backfill, needed)
    if chosen.moved:
        record(spark, seq + 1, chosen, run_id=run_id, dag_id=dag_id, task_id=task_id, table=table)
    return chosen
