"""Hot views over the clickstream: pure window aggregates and how a batch adds to them.

Three tumbling event-time windows, each a Delta table in ``hot``:

* ``hot.sales_per_minute``: ``orders`` and exact ``revenue`` from purchases per minute;
* ``hot.active_users_5m``: distinct users per 5 minutes (exact: the window keeps
  its ``user_ids`` set, bounded by the number of shop customers);
* ``hot.funnel_15m``: page views -> carts -> checkouts -> purchases per 15 minutes.

The streaming app feeds each batch's *new* unique events (duplicates already
removed) to :class:`HotWindows`, the driver-side state of each table, and
commits the table whole in one idempotent overwrite from the driver
(``spark_jobs.driver_delta``, Delta transaction = query id + batch id: a batch
replayed after a crash is skipped whole). Counts are additive and the user set
is a union, so a window equals the aggregation of all its events however they
were split into batches. ``_last_batch`` is the last batch that changed a
window. Why in the driver: the aggregation of a batch's few thousand narrow
rows (already collected for de-duplication) takes milliseconds and a delta-rs
commit ~50 ms, where a Spark overwrite of the same table was 2-10 s of job and
state-reconstruction overhead on two cores. Cost: each batch rewrites every
window of the table, which grows by one row per window length (1,440 rows a
day for ``hot.sales_per_minute``); fine for days of windows, not for years
(retention is not built yet).

Late data: an event whose ``event_time`` is older than the watermark in force
when it arrived (``_late``) is kept in ``silver.events`` but is not added to its
window's metrics (its window is closed); it is counted in ``late_events``
instead. So for every window:
``metrics(hot) = aggregate(silver.events WHERE NOT _late)`` and
``late_events(hot) = count(silver.events WHERE _late)``; ``batch_aggregate``
computes that side for checks and reconciliation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    import pyarrow as pa


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


def hot_schema(view: HotView) -> StructType:
    """Columns of a hot table."""
    fields = [StructField("window_start", TimestampType(), False), StructField("window_end", TimestampType(), False)]
    fields += [StructField(name, _TYPES[sql_type]) for name, sql_type in view.metrics]
    if view.user_set:
        fields.append(StructField("user_ids", ArrayType(LongType())))
    fields += [StructField("late_events", LongType()), StructField("updated_at", TimestampType()),
               StructField("_last_batch", LongType())]
    return StructType(fields)


def _metric_exprs(view: HotView) -> list[Column]:
    is_purchase = F.col("event_type") == "purchase"
    exprs: dict[str, Column] = {
        "orders": F.count(F.when(is_purchase, F.lit(1))),
        "revenue": F.coalesce(F.sum(F.when(is_purchase, F.col("revenue"))), F.lit(0)).cast("decimal(38,2)"),
        "page_views": F.count(F.when(F.col("event_type") == "page_view", F.lit(1))),
        "add_to_carts": F.count(F.when(F.col("event_type") == "add_to_cart", F.lit(1))),
        "checkouts": F.count(F.when(F.col("event_type") == "checkout", F.lit(1))),
        "purchases": F.count(F.when(is_purchase, F.lit(1))),
    }
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


#: Metric -> the event type it counts (orders/revenue: purchases); see ``_metric_exprs``.
_COUNTED = {"orders": "purchase", "page_views": "page_view", "add_to_carts": "add_to_cart",
            "checkouts": "checkout", "purchases": "purchase"}


class HotWindows:
    """One hot table's windows held in the driver, updated per batch, written whole (driver-side twin of
    :func:`window_deltas`).

    The streaming app keeps every window of a hot table in memory (one row per
    window, bounded like the table), adds each batch's new unique events to it
    (:meth:`add`: counts add, the user set is a union, late events only count)
    and commits :meth:`rows` as one overwrite of the table. After a restart it
    is loaded back from the table (:meth:`load`), whose Delta transaction
    version says which batch it holds. ``tests/unit/test_hot_events.py`` checks
    that any split of the events into batches gives exactly what
    :func:`batch_aggregate` (Spark) computes from the same events.
    """

    def __init__(self, view: HotView) -> None:
        self.view = view
        self.windows: dict[int, dict[str, Any]] = {}  # window start (epoch microseconds) -> row
        self._length = view.minutes * 60_000_000

    def load(self, rows: Iterable[dict[str, Any]]) -> None:
        """Replace the state with the table's rows (``hot_schema`` columns)."""
        self.windows = {}
        for row in rows:
            window = dict(row)
            if self.view.user_set:
                window["user_ids"] = set(window.get("user_ids") or ())
            self.windows[epoch_micros(window["window_start"])] = window

    def add(self, events: Iterable[tuple[str, int | None, datetime, Decimal | None, bool]], batch_id: int,
            now: datetime) -> int:
        """Add ``(event_type, user_id, event_time, revenue, late)`` events; returns how many windows changed."""
        import pyarrow as pa

        rows = list(events)
        table = pa.table({
            "event_type": pa.array([r[0] for r in rows], pa.string()),
            "user_id": pa.array([r[1] for r in rows], pa.int64()),
            "event_us": pa.array([epoch_micros(r[2]) for r in rows], pa.int64()),
            "revenue": pa.array([r[3] for r in rows], pa.decimal128(18, 2)),
            "late": pa.array([r[4] for r in rows], pa.bool_()),
        })
        return self.add_arrow(table, batch_id, now)

    def add_arrow(self, events: pa.Table, batch_id: int, now: datetime) -> int:
        """Add a batch's events (Arrow: ``event_type``, ``user_id``, ``event_us`` = event time in epoch
        microseconds, ``revenue``, ``late``), aggregated per window by Arrow; returns how many windows changed."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if events.num_rows == 0:
            return 0
        micros = events.column("event_us").to_numpy()
        on_time = pc.invert(events.column("late"))
        etype = events.column("event_type")
        columns: dict[str, Any] = {
            "start": pa.array(micros - micros % self._length),
            "late_events": pc.cast(events.column("late"), pa.int64()),
        }
        aggs: list[tuple[str, str]] = [("late_events", "sum")]
        for name in self.view.metric_names:
            if name == "revenue":
                is_purchase = pc.and_(on_time, pc.equal(etype, "purchase"))
                columns[name] = pc.if_else(is_purchase, events.column("revenue"), None)
                aggs.append((name, "sum"))
            elif name in _COUNTED:
                columns[name] = pc.cast(pc.and_(on_time, pc.equal(etype, _COUNTED[name])), pa.int64())
                aggs.append((name, "sum"))
        if self.view.user_set:
            columns["users"] = pc.if_else(on_time, events.column("user_id"), None)
            aggs.append(("users", "distinct"))
        grouped = pa.table(columns).group_by("start").aggregate(aggs).to_pylist()
        for g in grouped:
            start = int(g["start"])
            window = self.windows.get(start)
            if window is None:
                window = self._empty(start)
                self.windows[start] = window
            window["late_events"] += int(g["late_events_sum"] or 0)
            for name in self.view.metric_names:
                if name == "revenue":
                    window[name] += g["revenue_sum"] or Decimal("0.00")
                elif name in _COUNTED:
                    window[name] += int(g[f"{name}_sum"] or 0)
            if self.view.user_set:
                window["user_ids"].update(u for u in g["users_distinct"] if u is not None)
                window["active_users"] = len(window["user_ids"])
            window["updated_at"] = now
            window["_last_batch"] = batch_id
        return len(grouped)

    def rows(self) -> list[dict[str, Any]]:
        """Every window as a ``hot_schema`` row, ordered by window start."""
        out = []
        for start in sorted(self.windows):
            row = dict(self.windows[start])
            if self.view.user_set:
                row["user_ids"] = sorted(row["user_ids"])
            out.append(row)
        return out

    def _empty(self, start: int) -> dict[str, Any]:
        begin = from_epoch_micros(start)
        window: dict[str, Any] = {"window_start": begin, "window_end": begin + timedelta(minutes=self.view.minutes)}
        for name, sql_type in self.view.metrics:
            window[name] = Decimal("0.00") if sql_type.startswith("DECIMAL") else 0
        if self.view.user_set:
            window["user_ids"] = set()
        window["late_events"] = 0
        return window


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
