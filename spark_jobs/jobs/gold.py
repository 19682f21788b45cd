"""Gold batch views: read -> transform -> write, one table per step, exactly one data interval per run.

Steps (the daily DAG ``lake_gold_daily`` runs one task each, in this order):

* ``dim_customers`` / ``dim_products``: SCD2 rebuilt from the whole ordered CDC history in bronze
  (``spark_jobs.gold.history``/``dims``), overwritten whole. The history holds every committed change,
  so the dimension "as of the interval's end" is contained in it, and a rebuild is idempotent: the same
  bronze gives the same rows (surrogate keys derive from the key and the version's source position).
* ``fct_orders``: orders placed in [start, end) from silver, ``replaceWhere`` on ``order_date``.
* ``fct_daily_sales``: from ``gold.fct_orders`` of the interval, ``replaceWhere`` on ``order_date``.
* ``fct_daily_funnel``: from ``silver.events`` of the interval, ``replaceWhere`` on ``event_date``.

``replaceWhere`` replaces exactly the interval's partitions, so a re-run that finds no rows clears the
day, and re-runs and backfills give identical rows. Writers: one Airflow pool per gold table keeps two
runs (scheduled or backfill) from writing the same table at once, and every write goes through the
stack's one Spark Connect driver (single writer per table on S3, DESIGN.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING

from spark_jobs.contracts.tables import REPLACE_PARTITION, LakeTable, gold_steps, lake_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from spark_jobs.settings import Settings

log = logging.getLogger(__name__)

#: Build order, from the table registry (spark_jobs/contracts/tables.py): each after the gold tables it reads.
STEPS = tuple(t.short for t in gold_steps())
#: The date column each fact is partitioned and replaced on (the registry; dimensions are replaced whole).
PARTITION = {t.short: t.partitioned_by[0] for t in gold_steps() if t.write_mode == REPLACE_PARTITION}


class IntervalError(ValueError):
    """A run whose data interval cannot be computed (says why and what to do)."""


class RunParamError(ValueError):
    """A run parameter that cannot be used (says which and what to give instead)."""


@dataclass(frozen=True)
class Interval:
    """A data interval [start, end) of whole UTC days."""

    start: datetime
    end: datetime

    @property
    def days(self) -> list[date]:
        d, out = self.start.date(), []
        while d < self.end.date():
            out.append(d)
            d += timedelta(days=1)
        return out

    def predicate(self, column: str) -> str:
        return f"{column} >= DATE'{self.start.date().isoformat()}' AND {column} < DATE'{self.end.date().isoformat()}'"

    def __str__(self) -> str:
        return f"[{self.start.isoformat()}, {self.end.isoformat()})"


def _utc(value: datetime | str | None, what: str) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError as exc:
            raise IntervalError(f"{what} {value!r} is not an ISO-8601 date or timestamp") from exc
    if value.tzinfo is None:
        raise IntervalError(f"{what} {value.isoformat()} has no time zone; give it in UTC (e.g. ...T00:00:00+00:00)")
    return value.astimezone(UTC)


def resolve_interval(start: datetime | str | None, end: datetime | str | None, day: str | None = None) -> Interval:
    """The interval a run computes: ``day`` (YYYY-MM-DD) when given, else [start, end) of the run.

    Raises :class:`IntervalError` naming the problem: a run without an interval (a plain cron schedule or
    an asset-triggered run gives start == end in Airflow 3), or one that is not whole UTC days.
    """
    if day:
        try:
            d = date.fromisoformat(day)
        except ValueError as exc:
            raise IntervalError(f"day {day!r} is not a date; use YYYY-MM-DD") from exc
        midnight = datetime(d.year, d.month, d.day, tzinfo=UTC)
        return Interval(midnight, midnight + timedelta(days=1))
    s, e = _utc(start, "data interval start"), _utc(end, "data interval end")
    if s is None or e is None:
        raise IntervalError("the run has no data interval: trigger it with a logical date, or set the 'day' param "
                            "(YYYY-MM-DD) to the day to compute")
    if e <= s:
        raise IntervalError(f"the run's data interval {s.isoformat()} .. {e.isoformat()} is empty (start >= end): the "
                            "DAG needs a CronDataIntervalTimetable, or set the 'day' param (YYYY-MM-DD)")
    for t, what in ((s, "start"), (e, "end")):
        if (t.hour, t.minute, t.second, t.microsecond) != (0, 0, 0, 0):
            raise IntervalError(f"the data interval {what} {t.isoformat()} is not midnight UTC: gold partitions are "
                                "whole UTC days")
    return Interval(s, e)


# ------------------------------------------------------------------------------------------- steps


def step_table(step: str) -> LakeTable:
    """The registry entry of gold table ``step`` (``fct_orders``), or a :class:`RunParamError` naming the choices."""
    if step not in STEPS:
        raise RunParamError(f"unknown gold step {step!r}; choose from {', '.join(STEPS)}")
    return lake_table(f"gold.{step}")


def compute(spark: SparkSession, step: str, interval: Interval) -> DataFrame:
    """The DataFrame of gold table ``step`` for ``interval`` (reads the lake; writes nothing): the registry's
    transform, given the tables it declares it reads."""
    import importlib

    table = step_table(step)
    module, _, function = table.transform.partition(":")
    transform = getattr(importlib.import_module(module), function)

    def read(name: str) -> DataFrame:
        if name not in table.reads:
            raise ValueError(f"{table.name}'s transform {table.transform} reads {name}, which its registry entry "
                             f"does not declare (reads: {', '.join(table.reads)}): add it there")
        return spark.table(name)

    frame: DataFrame = transform(read, interval.start, interval.end)
    conform(frame, table)
    return frame


def conform(frame: DataFrame, table: LakeTable) -> None:
    """Refuse a gold frame whose columns or types differ from the table's registry schema (its contract), naming
    the differences: a transform changed without its declaration would otherwise publish them."""
    if table.schema is None:
        return
    got = [(f.name, f.dataType.simpleString()) for f in frame.schema.fields]
    want = [(f.name, f.dataType.simpleString()) for f in table.schema.fields]
    if got != want:
        missing = [f"{n} {t}" for n, t in want if (n, t) not in got]
        extra = [f"{n} {t}" for n, t in got if (n, t) not in want]
        raise RunParamError(f"{table.name}: the transform {table.transform} returns columns that differ from the "
                            f"table's schema in spark_jobs/contracts/tables.py (missing or other type: "
                            f"{', '.join(missing) or 'none'}; not declared: {', '.join(extra) or 'none'}"
                            f"{'; same columns in another order' if not missing and not extra else ''}): change the "
                            "transform or the declaration")


@dataclass
class StepResult:
    table: str
    interval: Interval
    rows: int
    version: int | None
    seconds: float
    skipped: bool = False
    #: seconds per phase (compute, validate, write), in the order they ran
    phases: dict[str, float] = field(default_factory=dict)

    def line(self) -> str:
        if self.skipped:
            return (f"gold.{self.table}: up to date (Delta version {self.version}, {self.rows} row(s)): its bronze "
                    f"history and transforms are unchanged since that build ({self.seconds:.1f} s)")
        scope = f"for {self.interval}" if self.table in PARTITION else "(whole table, rebuilt from the CDC history)"
        split = ", ".join(f"{k} {v:.1f} s" for k, v in self.phases.items())
        return (f"gold.{self.table}: {self.rows} row(s) {scope} written (Delta version {self.version}) in "
                f"{self.seconds:.1f} s" + (f" ({split})" if split else ""))


def write(df: DataFrame, settings: Settings, step: str, interval: Interval, metadata: str | None = None) -> None:
    """Publish ``df`` as ``gold.<step>`` by its registry write mode (:func:`spark_jobs.table_io.publish`): the
    interval's partitions or the whole table."""
    from spark_jobs.table_io import publish

    table = step_table(step)
    predicate = interval.predicate(table.partitioned_by[0]) if table.write_mode == REPLACE_PARTITION else None
    publish(df, settings, table.name, predicate=predicate, metadata=metadata)


def dimension_inputs(spark: SparkSession, step: str) -> str:
    """What a whole-table gold step is built from: the Delta version of each table it reads (the registry's
    ``reads``) and the gold transforms' source.

    Recorded as the commit's ``userMetadata``: when neither changed, a rebuild would write the same rows, so the
    task skips it (a 7-day backfill rebuilds each dimension once, not seven times).
    """
    import hashlib
    import json
    from pathlib import Path

    versions: dict[str, int | None] = {}
    for name in step_table(step).reads:
        row = spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").select("version").first()
        versions[name] = None if row is None else int(row[0])
    code = hashlib.sha256()
    for module in sorted((Path(__file__).resolve().parent.parent / "gold").glob("*.py")):
        code.update(module.read_bytes())
    return json.dumps({"reads": versions, "code": code.hexdigest()[:16]}, sort_keys=True)


def _latest_commit(spark: SparkSession, name: str) -> tuple[int, str | None, int] | None:
    """Version, ``userMetadata`` and rows written (``numOutputRows``) of the table's newest commit."""
    if not spark.catalog.tableExists(name):
        return None
    row = spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").select("version", "userMetadata", "operationMetrics").first()
    if row is None:
        return None
    # A write of no rows (a day that now has none: replaceWhere clears it) records no metrics at all.
    return int(row[0]), row[1], int((row[2] or {}).get("numOutputRows", 0))


def run_step(spark: SparkSession, settings: Settings, step: str, interval: Interval,
             validate: Callable[[DataFrame, str], DataFrame] | None = None) -> StepResult:
    """Compute, optionally validate (returns the rows to publish, raises to block), write; report rows and version.

    A dimension whose inputs (:func:`dimension_inputs`) are those of its current version is left as it is.
    """
    t0 = time.monotonic()
    name = f"gold.{step}"
    inputs = None
    if step not in PARTITION:
        inputs = dimension_inputs(spark, step)
        latest = _latest_commit(spark, name)
        if latest is not None and latest[1] == inputs:
            # A dimension's commit is a whole-table overwrite: its numOutputRows is the table's row count.
            return StepResult(step, interval, latest[2], latest[0], time.monotonic() - t0, skipped=True)
    phases: dict[str, float] = {}
    computed = compute(spark, step, interval)
    if validate is None:
        write(computed, settings, step, interval, inputs)
        phases["compute+write"] = time.monotonic() - t0
    else:
        from pyspark import StorageLevel

        # Materialise the computed rows once (a day of a fact, one dimension: small): every expectation's
        # Spark job then reads them instead of recomputing the silver views and joins, and the validated
        # rows are the rows published. Released explicitly: a Connect localCheckpoint is released by a
        # finaliser RPC, which hung the CLI at interpreter exit.
        computed = computed.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            computed.count()
            phases["compute"] = time.monotonic() - t0
            publish = validate(computed, name)
            phases["validate"] = time.monotonic() - t0 - sum(phases.values())
            write(publish, settings, step, interval, inputs)
            phases["write"] = time.monotonic() - t0 - sum(phases.values())
        finally:
            computed.unpersist()
    # The rows and version of what was published come from the write's own commit (numOutputRows of a
    # replaceWhere is the interval's rows; of a whole-table overwrite, the table's): no second scan.
    latest = _latest_commit(spark, name)
    if latest is None:
        raise RuntimeError(f"{name}: the write left no commit in DESCRIBE HISTORY")
    return StepResult(step, interval, latest[2], latest[0], time.monotonic() - t0, phases=phases)


def run(settings: Settings, interval: Interval, steps: Sequence[str] = STEPS,
        spark: SparkSession | None = None, progress: Callable[[str], None] | None = None) -> list[StepResult]:
    """Build ``steps`` for ``interval`` on the stack's Spark Connect server (or the given session)."""
    from spark_jobs.session import connect_session

    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        raise ValueError(f"unknown gold table(s) {', '.join(unknown)}; choose from {', '.join(STEPS)}")
    session = spark or connect_session(settings)
    run_id = "manual__" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    results = []
    for step in [s for s in STEPS if s in steps]:
        gate = quality_gate(session, settings, step, interval, run_id=run_id, dag_id="lake gold build", task_id=step)
        result = run_step(session, settings, step, interval, gate)
        results.append(result)
        if progress:
            progress(result.line())
    return results


def run_task(step: str, day: str | None, start: datetime | str | None, end: datetime | str | None, *,
             run_id: str, dag_id: str, task_id: str, drill: str | None = None) -> str:
    """One task of the gold DAG: resolve its interval, build ``gold.<step>`` on Spark Connect, return the report line.

    ``drill`` (the DAG's ``dq_drill`` param) names a gold table whose computed rows get one duplicated row, a
    fault that breaks its unique-key ``block`` expectation: the gate must then fail the task and publish
    nothing (a fire drill for the gate; nothing wrong reaches the table). Raises :class:`IntervalError` or
    :class:`RunParamError` (not worth a retry) when the run has no usable interval or drill.
    """
    from spark_jobs.session import connect_session
    from spark_jobs.settings import load_settings

    interval = resolve_interval(start, end, day)
    if drill and drill not in STEPS:
        raise RunParamError(f"dq_drill {drill!r} is not a gold table; give one of {', '.join(STEPS)} or leave it empty")
    settings = load_settings()
    log.info(f"{dag_id}.{task_id} ({run_id}): building gold.{step} for {interval} on Spark Connect "
             f"{settings.host}:{settings.spark_connect_port}")
    spark = connect_session(settings)
    gate = quality_gate(spark, settings, step, interval, run_id=run_id, dag_id=dag_id, task_id=task_id)
    if drill == step:
        log.info(f"DQ drill: one computed row of gold.{step} is duplicated before the gate; its unique-key block "
                 "expectation must fail this task and nothing may be published")
        clean_gate = gate

        def gate(df: DataFrame, table: str) -> DataFrame:
            return clean_gate(df.unionByName(df.limit(1)), table)

    result = run_step(spark, settings, step, interval, gate)
    log.info(result.line())
    return result.line()


def quality_gate(spark: SparkSession, settings: Settings, step: str, interval: Interval, *, run_id: str,
                 dag_id: str, task_id: str) -> Callable[[DataFrame, str], DataFrame]:
    """The data-quality gate before publishing: validate the computed rows with ``expectations/gold.<step>.yml``.

    Every verdict goes to ``ops.dq_results``; rows failing a ``quarantine`` expectation go to
    ``quarantine.dq_gold_<step>`` and are not published; a failed ``block`` expectation raises
    :class:`~spark_jobs.quality.runner.DqBlocked` before anything is written (the task fails, its Asset is not
    updated). The task log shows the summary: table, interval, expectation, count, up to 20 sample rows.
    """

    def gate(df: DataFrame, table: str) -> DataFrame:
        from spark_jobs.quality.runner import DqBlocked, validate
        from spark_jobs.quality.store import write_quarantine, write_results

        scope = (interval.start, interval.end) if step in PARTITION else None
        outcome = validate(spark, df, table, interval=scope, run_id=run_id, dag_id=dag_id, task_id=task_id)
        write_results(spark, settings, outcome)
        write_quarantine(spark, settings, outcome)
        log.info(outcome.summary())
        if outcome.blocked:
            raise DqBlocked(outcome.summary())
        return outcome.passed

    return gate
