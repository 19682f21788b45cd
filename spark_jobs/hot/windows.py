"""Hot views over the clickstream: pure window aggregates and how a batch adds to them.

Three tumbling event-time windows, each a Delta table in ``hot``:

* ``hot.sales_per_minute``: ``orders`` and exact ``revenue`` from purchases per minute;
* ``hot.active_users_5m``: distinct users per 5 minutes (exact: the window keeps
  its ``user_ids`` set, bounded by the number of shop customers);
* ``hot.funnel_15m``: page views -> carts -> checkouts -> purchases per 15 minutes.

Per micro-batch the streaming app aggregates its new unique events per window
on the executors (one Spark job: per Kafka partition and base window,
:func:`base_aggregates`; only these few rows reach the driver, which adds them
up to each view's windows, :func:`rollup_deltas`, the rows :func:`batch_deltas`
gives), reads the current rows of the windows that changed from
the hot table, adds the deltas (:func:`apply_deltas`) and upserts those rows
from the driver (``spark_jobs.table_io.driver``: one delta-rs MERGE of a few rows,
Delta transaction = query id + batch id, so a batch replayed after a crash is
skipped). The hot table is the window state: nothing of it is kept in memory
between batches. ``_last_batch`` is the last batch that changed a window.

Late data: an event whose ``event_time`` is older than the watermark in force
when it arrived (``_late``) is kept in ``silver.events`` but is not added to its
window's metrics (its window is closed); it is counted in ``late_events``
instead. So for every window:
``metrics(hot) = aggregate(silver.events WHERE NOT _late)`` and
``late_events(hot) = count(silver.events WHERE _late)``; ``batch_aggregate``
computes that side for checks and reconciliation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DecimalType,
    LongType,
    StructField,
    StructType,
    TimestampType,
)


@dataclass(frozen=True)
class HotView:
    """One hot table: name, window length, metric columns (additive) and whether it keeps a user set."""

    table: str
    minutes: int
    metrics: tuple[tuple[str, str], ...]  # (column, Spark SQL type)
    user_set: bool = False

    @property
    def window(self) -> str:
        return f"{self.minutes} minute{'s' if self.minutes > 1 else ''}"

    @property
    def metric_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.metrics)


SALES_PER_MINUTE = HotView("hot.sales_per_minute", 1, (("orders", "BIGINT"), ("revenue", "DECIMAL(38,2)")))
ACTIVE_USERS_5M = HotView("hot.active_users_5m", 5, (("active_users", "BIGINT"),), user_set=True)
FUNNEL_15M = HotView("hot.funnel_15m", 15, (("page_views", "BIGINT"), ("add_to_carts", "BIGINT"),
                                              ("checkouts", "BIGINT"), ("purchases", "BIGINT")))
HOT_VIEWS: tuple[HotView, ...] = (SALES_PER_MINUTE, ACTIVE_USERS_5M, FUNNEL_15M)

_TYPES = {"BIGINT": LongType(), "DECIMAL(38,2)": DecimalType(38, 2)}
#: The finest window every hot view's window is a whole number of (1 minute): the stream aggregates a batch once
#: per base window (:func:`base_aggregates`) and rolls those few rows up to each view's windows on the driver
#: (:func:`rollup_deltas`).
BASE_MINUTES = math.gcd(*(view.minutes for view in HOT_VIEWS))


def hot_schema(view: HotView) -> StructType:
    """Columns of a hot table."""
    fields = [StructField("window_start", TimestampType(), False), StructField("window_end", TimestampType(), False)]
    fields += [StructField(name, _TYPES[sql_type]) for name, sql_type in view.metrics]
    if view.user_set:
        fields.append(StructField("user_ids", ArrayType(LongType())))
    fields += [StructField("late_events", LongType()), StructField("updated_at", TimestampType()),
               StructField("_last_batch", LongType())]
    return StructType(fields)


def _additive_metrics(counted: Column) -> dict[str, Column]:
    """Every additive hot metric as an aggregate over the rows where ``counted`` holds (one rule per metric)."""
    is_purchase = counted & (F.col("event_type") == "purchase")

    def count_of(event_type: str) -> Column:
        return F.count(F.when(counted & (F.col("event_type") == event_type), F.lit(1)))

    return {
        "orders": F.count(F.when(is_purchase, F.lit(1))),
        "revenue": F.coalesce(F.sum(F.when(is_purchase, F.col("revenue"))), F.lit(0)).cast("decimal(38,2)"),
        "page_views": count_of("page_view"),
        "add_to_carts": count_of("add_to_cart"),
        "checkouts": count_of("checkout"),
        "purchases": count_of("purchase"),
    }


def _metric_exprs(view: HotView) -> list[Column]:
    exprs = _additive_metrics(F.lit(True))
    out = [exprs[name].alias(name) for name in view.metric_names if name != "active_users"]
    if view.user_set:
        out.append(F.array_sort(F.collect_set("user_id")).alias("user_ids"))
        out.append(F.size(F.collect_set("user_id")).cast("bigint").alias("active_users"))
    return out


def window_deltas(events: DataFrame, view: HotView) -> DataFrame:
    """Per window of ``view``: the batch's contribution (on-time metrics, late count).

    ``events`` are new unique events with ``event_time``, ``event_type``,
    ``user_id``, ``revenue`` and the boolean ``_late``. On-time events feed the
    metrics; late ones only ``late_events``.
    """
    w = F.window("event_time", view.window)
    on_time = events.where(~F.col("_late"))
    metrics = on_time.groupBy(w.alias("w")).agg(*_metric_exprs(view))
    late = events.where(F.col("_late")).groupBy(w.alias("w")).agg(F.count(F.lit(1)).alias("late_events"))
    joined = metrics.join(late, "w", "full_outer")
    cols = [F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end")]
    for name, sql_type in view.metrics:
        cols.append(F.coalesce(F.col(name), F.lit(0).cast(_TYPES[sql_type])).alias(name))
    if view.user_set:
        cols.append(F.coalesce(F.col("user_ids"), F.array().cast("array<bigint>")).alias("user_ids"))
    cols.append(F.coalesce(F.col("late_events"), F.lit(0)).cast("bigint").alias("late_events"))
    return joined.select(*cols)


def batch_aggregate(silver: DataFrame, view: HotView) -> DataFrame:
    """The same aggregation computed in batch from ``silver.events`` (what a closed hot window must equal)."""
    return window_deltas(silver, view)


def batch_deltas(events: DataFrame) -> DataFrame:
    """Every hot view's per-window contribution of a batch, in one frame (one Spark job to collect).

    Columns: ``table`` (the view's table), ``window_start``, ``window_end``,
    every metric of :data:`HOT_VIEWS` (NULL where the view has no such
    metric), ``user_ids`` (the window's distinct on-time users; NULL unless
    the view keeps a user set), ``late_events`` and, when ``events`` carry the records' ``kafka_timestamp``,
    ``newest_kafka_time`` (the hot tables' watermark and freshness). Grain: one row per
    (view, window) the batch touches: a handful, whatever the batch size.

    One aggregation pass: each event is expanded to one row per view (its window in that view), grouped by
    (view, window) with each metric as a conditional aggregate; the same values as :func:`window_deltas` per
    view (a unit test holds them equal), at one shuffle instead of two aggregations and a join per view.
    """
    stamped = "kafka_timestamp" in events.columns
    rows = events.select(F.explode(F.array(*view_windows(F.col("event_time")))).alias("vw"), "event_type",
                         "user_id", "revenue", "_late", *(["kafka_timestamp"] if stamped else []))
    grouped = rows.groupBy(F.col("vw.v").alias("v"), F.col("vw.w").alias("w")).agg(
        *delta_aggregates(F.lit(True), stamped))
    return grouped.select(*delta_columns(stamped))


def view_windows(event_time: Column) -> list[Column]:
    """An event's window in each of :data:`HOT_VIEWS`: ``struct(v: the view's index, w: struct(start, end))``, one
    per view (:func:`batch_deltas` explodes them: each event once per view)."""
    def window(view: HotView) -> Column:  # F.window's tumbling window, as arithmetic (one F.window per select)
        start = window_start_micros(event_time, view.minutes)
        return F.struct(F.timestamp_micros(start).alias("start"),
                        F.timestamp_micros(start + view.minutes * 60 * 1_000_000).alias("end"))

    return [F.struct(F.lit(i).alias("v"), window(view).alias("w")) for i, view in enumerate(HOT_VIEWS)]


def window_start_micros(event_time: Column, minutes: int) -> Column:
    """The start of an event's tumbling window of ``minutes``, in epoch microseconds (the windows of every view, and
    the base window :func:`base_window`)."""
    width = minutes * 60 * 1_000_000
    return F.floor(F.unix_micros(event_time) / width) * width


def base_window(event_time: Column) -> Column:
    """The start of an event's base window (:data:`BASE_MINUTES`) in epoch microseconds."""
    return window_start_micros(event_time, BASE_MINUTES)


def base_aggregates(counted: Column) -> list[Column]:
    """Per base window, over the rows where ``counted`` holds (rows as for :func:`delta_aggregates`): every additive
    metric of the on-time events, their users (a set), the late events and the newest Kafka time: what
    :func:`rollup_deltas` adds up to each view's windows. One row per event, where :func:`batch_deltas` explodes
    each event into one row per view."""
    on_time = counted & ~F.col("_late")
    exprs = _additive_metrics(on_time)
    return [*[exprs[name].alias(name) for name, _t in _metrics() if name != "active_users"],
            F.collect_set(F.when(on_time, F.col("user_id"))).alias("_users"),
            F.count(F.when(counted & F.col("_late"), F.lit(1))).cast("bigint").alias("late_events"),
            F.max(F.when(counted, F.col("kafka_timestamp"))).alias("newest_kafka_time")]


def rollup_deltas(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """:func:`batch_deltas`' rows (stamped) from :func:`base_aggregates` rows, each with its base window's start in
    epoch microseconds as ``_base`` (several rows may share one: one per Kafka partition, say). Every metric adds up
    and the user sets unite, so a view's window is the sum of its base windows. Timestamps come out as a collect
    gives them (naive, the driver's local time)."""
    names = [name for name, _t in _metrics()]
    out: dict[tuple[int, int], dict[str, Any]] = {}
    users: dict[tuple[int, int], set[int]] = {}
    for row in rows:
        for index, view in enumerate(HOT_VIEWS):
            width = view.minutes * 60 * 1_000_000
            start = int(row["_base"]) // width * width
            acc = out.get((index, start))
            if acc is None:
                acc = out[(index, start)] = {
                    "table": view.table, "window_start": _collected_time(start),
                    "window_end": _collected_time(start + width), **dict.fromkeys(names), "user_ids": None,
                    "late_events": 0, "newest_kafka_time": None,
                    **{name: Decimal("0.00") if sql_type.startswith("DECIMAL") else 0
                       for name, sql_type in view.metrics if name != "active_users"}}
                users[(index, start)] = set()
            for name, _t in view.metrics:
                if name != "active_users":
                    acc[name] += row[name]
            users[(index, start)].update(row["_users"] or ())
            acc["late_events"] += int(row["late_events"])
            newest = row["newest_kafka_time"]
            if newest is not None and (acc["newest_kafka_time"] is None or newest > acc["newest_kafka_time"]):
                acc["newest_kafka_time"] = newest
    for (index, start), acc in out.items():
        if HOT_VIEWS[index].user_set:
            acc["user_ids"] = sorted(users[(index, start)])
            acc["active_users"] = len(acc["user_ids"])
    return list(out.values())


def _collected_time(micros: int) -> datetime:
    """Epoch microseconds as PySpark collects a timestamp: a naive datetime in the driver's local time."""
    return datetime.fromtimestamp(micros // 1_000_000).replace(microsecond=micros % 1_000_000)


def _metrics() -> list[tuple[str, str]]:
    return sorted({(name, sql_type) for view in HOT_VIEWS for name, sql_type in view.metrics})


def delta_aggregates(counted: Column, stamped: bool) -> list[Column]:
    """The aggregates of :func:`batch_deltas` per (view, window) over the rows where ``counted`` holds (rows with
    ``event_type``, ``user_id``, ``revenue``, ``_late`` and, when ``stamped``, ``kafka_timestamp``)."""
    on_time = counted & ~F.col("_late")
    late = counted & F.col("_late")
    exprs = _additive_metrics(on_time)
    users = F.array_sort(F.collect_set(F.when(on_time, F.col("user_id"))))
    return [*[exprs[name].alias(name) for name, _t in _metrics() if name != "active_users"],
            users.alias("_users"), F.count(F.when(late, F.lit(1))).cast("bigint").alias("late_events"),
            *([F.max(F.when(counted, F.col("kafka_timestamp"))).alias("newest_kafka_time")] if stamped else [])]


def delta_columns(stamped: bool) -> list[Column]:
    """:func:`batch_deltas`'s columns from a frame grouped by ``v`` (the view's index), ``w`` (the window) with
    :func:`delta_aggregates`."""
    view_of = F.col("v")
    table = F.element_at(F.array(*[F.lit(view.table) for view in HOT_VIEWS]), view_of + 1)
    keeps_users = F.element_at(F.array(*[F.lit(view.user_set) for view in HOT_VIEWS]), view_of + 1)
    cols: list[Column] = [table.alias("table"), F.col("w.start").alias("window_start"),
                          F.col("w.end").alias("window_end")]
    for name, sql_type in _metrics():
        has = F.element_at(F.array(*[F.lit(name in view.metric_names) for view in HOT_VIEWS]), view_of + 1)
        value = F.size("_users").cast("bigint") if name == "active_users" else F.col(name)
        cols.append(F.when(has, value).otherwise(F.lit(None).cast(_TYPES[sql_type])).alias(name))
    cols.append(F.when(keeps_users, F.col("_users")).otherwise(F.lit(None).cast("array<bigint>")).alias("user_ids"))
    cols.append(F.col("late_events"))
    if stamped:
        cols.append(F.col("newest_kafka_time"))
    return cols


def apply_deltas(view: HotView, current: Iterable[dict[str, Any]], deltas: Iterable[dict[str, Any]],
                 batch_id: int, now: datetime) -> list[dict[str, Any]]:
    """The hot rows of the windows a batch changed: their current rows (``hot_schema``; absent = new window)
    plus the batch's :func:`batch_deltas` rows for ``view``.

    Counts and revenue add, the user set is a union (``active_users`` its size),
    ``late_events`` adds; ``updated_at`` and ``_last_batch`` record the batch.
    Since every metric is additive (or a union), a window equals the
    aggregation of all its events however they were split into batches.
    """
    by_start = {epoch_micros(row["window_start"]): dict(row) for row in current}
    out = []
    for delta in sorted(deltas, key=lambda d: epoch_micros(d["window_start"])):
        start = epoch_micros(delta["window_start"])
        row = by_start.get(start) or _empty(view, delta["window_start"])
        for name, sql_type in view.metrics:
            if name == "active_users":
                continue
            zero = Decimal("0.00") if sql_type.startswith("DECIMAL") else 0
            row[name] = (row.get(name) or zero) + (delta.get(name) or zero)
        if view.user_set:
            users = sorted(set(row.get("user_ids") or ()) | set(delta.get("user_ids") or ()))
            row["user_ids"], row["active_users"] = users, len(users)
        row["late_events"] = int(row.get("late_events") or 0) + int(delta.get("late_events") or 0)
        row["updated_at"], row["_last_batch"] = now, batch_id
        out.append(row)
    return out


def _empty(view: HotView, start: datetime) -> dict[str, Any]:
    start = start if start.tzinfo else start.replace(tzinfo=UTC)
    row: dict[str, Any] = {"window_start": start, "window_end": start + timedelta(minutes=view.minutes)}
    for name, sql_type in view.metrics:
        row[name] = Decimal("0.00") if sql_type.startswith("DECIMAL") else 0
    if view.user_set:
        row["user_ids"] = []
    row["late_events"] = 0
    return row


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def epoch_micros(value: datetime) -> int:
    """Epoch microseconds of an instant (naive datetimes are UTC, as Arrow hands them over)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_epoch_micros(micros: int) -> datetime:
    """The UTC instant ``micros`` microseconds after the epoch."""
    return _EPOCH + timedelta(microseconds=micros)


def closed_windows(frame: DataFrame, watermark_column: Column) -> DataFrame:
    """Rows of a per-window frame whose window the watermark has passed."""
    return frame.where(F.col("window_end") <= watermark_column)


def comparable(frame: DataFrame, view: HotView) -> DataFrame:
    """The columns two per-window frames of ``view`` must agree on (no bookkeeping columns)."""
    cols: Sequence[str] = ("window_start", "window_end", *view.metric_names, "late_events")
    return frame.select(*cols)
