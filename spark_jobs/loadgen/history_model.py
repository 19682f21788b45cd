"""What ``lake loadgen history`` writes: planned row changes, transactions and the plan that holds them.

:func:`spark_jobs.loadgen.history_plan.plan_history` builds a :class:`HistoryPlan`;
:mod:`spark_jobs.loadgen.history` writes it.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any, Literal, Protocol

ID_SPAN = 1_000_000  # ids per seed and table
MAX_SEED = 999_999  # keeps ids < 10**12
MAX_DAYS = 3660
CENT = Decimal("0.01")


class DaySource(Protocol):
    """Makes one day's clickstream events on demand (the planner: a long plan's events are not all held)."""

    def day_events(self, d: int) -> list[dict[str, Any]]: ...


Kind = Literal["insert", "update", "delete"]


class PlanError(ValueError):
    """Bad arguments for the history plan; the message names the option and the allowed range."""


@dataclass(frozen=True)
class Change:
    """One row-level change: ``key`` identifies the row, ``values`` are the columns written (all, for inserts)."""

    table: str
    kind: Kind
    key: dict[str, int]
    values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Tx:
    """One planned PostgreSQL transaction at simulated time ``at`` (``label`` says what it is)."""

    at: datetime
    seq: int
    label: str
    changes: tuple[Change, ...]


@dataclass(frozen=True)
class HistoryPlan:
    """Everything one run writes: ``txs`` sorted by (time, seq), ``events[d]`` the events of day ``d`` (0-based)."""

    seed: int
    start: datetime  # first simulated instant (day 1, 00:00 UTC)
    end: datetime  # exclusive (end_date, 00:00 UTC)
    id_low: int
    id_high: int  # exclusive
    txs: list[Tx]
    _planner: DaySource = field(repr=False, compare=False)

    @property
    def days(self) -> int:
        return (self.end - self.start).days

    def day_events(self, d: int) -> list[dict[str, Any]]:
        """The clickstream events of day ``d`` (0-based), sorted by ``event_time``; made on each call."""
        if not 0 <= d < self.days:
            raise IndexError(f"day {d} is outside the plan's {self.days} day(s)")
        return self._planner.day_events(d)

    @property
    def events(self) -> list[list[dict[str, Any]]]:
        """Every day's events (``events[d]``): for tests and small plans; the writer goes day by day."""
        return [self.day_events(d) for d in range(self.days)]

    def counts(self) -> dict[str, dict[str, int]]:
        """``{table: {"insert": n, "update": n, "delete": n}}`` over every planned change."""
        out: dict[str, dict[str, int]] = {t: {"insert": 0, "update": 0, "delete": 0}
                                          for t in ("customers", "products", "orders", "order_items")}
        for tx in self.txs:
            for ch in tx.changes:
                out[ch.table][ch.kind] += 1
        return out

    def event_counts(self) -> dict[str, int]:
        """Planned events by type (generates every day's events)."""
        return dict(Counter(e["event_type"] for day in self.events for e in day))

    def digest(self) -> str:
        """SHA-256 over every change and event: equal digests mean identical rows and events."""
        h = hashlib.sha256()
        for tx in self.txs:
            h.update(repr((tx.at.isoformat(), tx.label, [(c.table, c.kind, sorted(c.key.items()),
                                                           sorted((k, str(v)) for k, v in c.values.items()))
                                                          for c in tx.changes])).encode())
        for day in self.events:
            for e in day:
                h.update(json.dumps(e, sort_keys=True).encode())
        return h.hexdigest()


def id_range(seed: int) -> tuple[int, int]:
    """``[low, high)``: the customer, product and order ids seed ``seed`` may use."""
    return ID_SPAN * (seed + 1), ID_SPAN * (seed + 2)


def line_amount(quantity: int, unit_price: Decimal, discount: Decimal | None) -> Decimal:
    """The shop's rule for one order line: ``round_half_even(quantity * unit_price * (1 - discount), 2)``."""
    return (Decimal(quantity) * unit_price * (1 - (discount or Decimal(0)))).quantize(CENT, ROUND_HALF_EVEN)
