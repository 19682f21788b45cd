"""The pure planner of ``lake loadgen history``: a seeded, deterministic past of the shop.

:func:`plan_history` turns ``(seed, days, end_date, orders_per_day, events_per_day)``
into a :class:`HistoryPlan`: the PostgreSQL transactions (:class:`Tx`, each a
tuple of row-level :class:`Change` values with explicit simulated timestamps)
sorted by simulated time, and the clickstream events per day. It touches no
service and never reads the clock: ``end_date`` anchors the window (day 1 =
``end_date - days`` ... day N = ``end_date - 1``, UTC), all content comes from
``random.Random`` streams derived from the seed, and every time is a whole
millisecond (so a purchase event's ``event_time`` equals its order's ``placed_at``).

Ids: seed K owns ``[ID_SPAN * (K + 1), ID_SPAN * (K + 2))`` in customers,
products and orders (:func:`id_range`); ``lake loadgen cdc`` starts its ids
above the current maximum and the migration's rows are 1-3, 10-12 and 100-101.

The story: products open the shop in the first minute of day 1 and some change
price on later days; customers sign up (a batch in the first hour, more every
day), some change country or loyalty tier, a few are deleted (after an update
that moves ``updated_at`` to the delete time, so the delete's before-image
carries it) and re-created under the same id; orders follow an intraday curve
(evening peak) and move pending -> paid -> shipped, some cancelled or refunded,
at later times (transitions past the window's end are left out). Forced edge
cases for the SCD2 dimension: one customer changes country and tier in one
statement, one in two statements of one transaction, one changes only
untracked columns (notes, profile).
"""

from __future__ import annotations

import bisect
import itertools
import json
import random
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from spark_jobs.contracts.clickstream import SCHEMA_VERSION, format_event_time
from spark_jobs.loadgen.cdc.rows import CITIES, COUNTRIES, NAMES, PRODUCT_NAMES, TIERS
from spark_jobs.loadgen.history_model import (
    CENT,
    ID_SPAN,
    MAX_DAYS,
    MAX_SEED,
    Change,
    HistoryPlan,
    PlanError,
    Tx,
    id_range,
    line_amount,
)

__all__ = ["ID_SPAN", "Change", "HistoryPlan", "PlanError", "Tx", "id_range", "line_amount", "plan_history",
           "validate_args"]

N_PRODUCTS = 40
DISCOUNTS = (None, None, None, None, None, None, Decimal("0.05"), Decimal("0.05"), Decimal("0.10"))
CURRENCIES = ("EUR",) * 6 + ("USD",)
# Orders and sessions per UTC hour: quiet at night, peak in the evening.
HOUR_WEIGHTS = (2, 1, 1, 1, 1, 2, 3, 4, 5, 6, 6, 7, 7, 6, 6, 6, 7, 8, 10, 12, 13, 11, 7, 4)
_CUM_HOURS = list(itertools.accumulate(HOUR_WEIGHTS))
PAGES = ("/", "/search?q=coffee", "/category/kitchen", "/category/gifts", "/deals", "/cart", "/account")
MS = timedelta(milliseconds=1)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _between(rng: random.Random, a: datetime, b: datetime) -> datetime:
    """A whole-millisecond instant in ``[a, b)`` (``a`` when the span is shorter than 1 ms)."""
    span = (b - a) // MS
    return a + rng.randrange(span) * MS if span > 0 else a


def _curve_time(rng: random.Random, day_start: datetime) -> datetime:
    hour = rng.choices(range(24), cum_weights=_CUM_HOURS)[0]
    return day_start + timedelta(hours=hour, milliseconds=rng.randrange(3_600_000))


@dataclass
class _Customer:
    cid: int
    created: datetime
    row: dict[str, Any]
    churn: tuple[datetime, datetime] | None = None  # (deleted at, re-created at)

    def alive(self, a: datetime, b: datetime) -> bool:
        """Whether the row exists during the whole of ``[a, b]``."""
        if a < self.created:
            return False
        return self.churn is None or b < self.churn[0] or a >= self.churn[1]

    @property
    def orders_from(self) -> datetime:  # a customer to be deleted places no order before it is re-created
        return self.created if self.churn is None else self.churn[1]


def validate_args(days: int, orders_per_day: int, events_per_day: int, seed: int) -> None:
    """Raise :class:`PlanError` naming the first bad option."""
    if not 1 <= days <= MAX_DAYS:
        raise PlanError(f"--days must be between 1 and {MAX_DAYS}, got {days}")
    if not 0 <= seed <= MAX_SEED:
        raise PlanError(f"--seed must be between 0 and {MAX_SEED} (it picks the id range), got {seed}")
    if orders_per_day < 0 or days * orders_per_day >= ID_SPAN:
        raise PlanError(f"--orders-per-day must be >= 0 and days x orders-per-day below {ID_SPAN:,} "
                        f"(the ids one seed owns), got {orders_per_day} x {days} days")
    if events_per_day < 0:
        raise PlanError(f"--events-per-day must be >= 0, got {events_per_day}")


class _Planner:
    def __init__(self, seed: int, days: int, end_date: date, orders_per_day: int, events_per_day: int) -> None:
        self.seed, self.n_days = seed, days
        self.orders_per_day, self.events_per_day = orders_per_day, events_per_day
        self.end = datetime.combine(end_date, time(0), UTC)
        self.start = self.end - timedelta(days=days)
        self.low, self.high = id_range(seed)
        # A reproducible workload, not secrets: hence random.Random (S311).
        self.rng = random.Random(f"history:{seed}")  # noqa: S311
        self.txs: list[Tx] = []
        self.seq = itertools.count()
        self.prices: dict[int, list[tuple[datetime, Decimal]]] = {}
        self.customers: list[_Customer] = []
        self.by_created: list[_Customer] = []
        self.created: list[datetime] = []
        self.by_id: dict[int, _Customer] = {}
        self.orders_by_day: list[list[tuple[datetime, int, int, list[tuple[int, int, Decimal]], Decimal, str]]] = [
            [] for _ in range(days)]

    def tx(self, at: datetime, label: str, *changes: Change) -> None:
        self.txs.append(Tx(at, next(self.seq), label, changes))

    def day_start(self, d: int) -> datetime:
        return self.start + timedelta(days=d)

    # -- products ---------------------------------------------------------------------------

    def products(self) -> None:
        rng = self.rng
        for i in range(N_PRODUCTS):
            pid, at = self.low + 1 + i, self.start + timedelta(seconds=i)
            price = (Decimal(rng.randint(199, 24_999)) / 100).quantize(CENT)
            self.prices[pid] = [(at, price)]
            row = {"product_id": pid, "sku": f"H{self.seed}-{i + 1}", "name": rng.choice(PRODUCT_NAMES),
                   "description": f"history product {i + 1}", "price": price,
                   "attributes": _json({"origin": rng.choice(CITIES)}), "active": True, "updated_at": at}
            self.tx(at, "product_insert", Change("products", "insert", {"product_id": pid}, row))
        changes = [(d, pid) for d in range(self.n_days) for pid in self.prices if rng.random() < 0.08]
        if not changes:
            changes = [(self.n_days - 1, self.low + 1)]
        for d, pid in changes:
            at = max(_curve_time(rng, self.day_start(d)), self.start + timedelta(minutes=1))
            if any(t == at for t, _ in self.prices[pid]):
                continue  # two changes of one product in one millisecond: keep the first
            old = self.price_at(pid, at)
            new = max(Decimal("0.50"), (old * Decimal(rng.randint(80, 125)) / 100).quantize(CENT, ROUND_HALF_EVEN))
            if new == old:
                new += CENT
            bisect.insort(self.prices[pid], (at, new))
            self.tx(at, "product_price", Change("products", "update", {"product_id": pid},
                                                {"price": new, "updated_at": at}))

    def price_at(self, pid: int, at: datetime) -> Decimal:
        hist = self.prices[pid]
        return hist[bisect.bisect_right(hist, (at, Decimal("Infinity"))) - 1][1]

    # -- customers ----------------------------------------------------------------------------

    def customer_row(self, cid: int, at: datetime) -> dict[str, Any]:
        rng = self.rng
        return {"customer_id": cid, "email": f"h{self.seed}-{cid - self.low}@history.example",
                "full_name": rng.choice(NAMES), "country": rng.choice(COUNTRIES),
                "loyalty_tier": rng.choice((None, *TIERS)), "profile": _json({"newsletter": rng.random() < 0.5}),
                "notes": None, "created_at": at, "updated_at": at}

    def customers_plan(self) -> None:
        rng, first_hour = self.rng, self.start + timedelta(minutes=1)
        times = [_between(rng, first_hour, self.start + timedelta(hours=1))
                 for _ in range(max(8, self.orders_per_day // 2))]
        for d in range(self.n_days):
            times += [max(first_hour, _curve_time(rng, self.day_start(d))) for _ in range(max(1, self.orders_per_day // 10))]
        times.sort()
        self.customers = [_Customer(self.low + 1 + i, at, self.customer_row(self.low + 1 + i, at))
                          for i, at in enumerate(times)]
        first = self.customers[:8]  # the edge cases use the first sign-ups: they exist for the whole window
        both, two_stmts, untracked = first[0], first[1], first[2]
        late = self.end - timedelta(seconds=2)
        pool = [c for c in self.customers[4:] if c.created < late - timedelta(hours=2)]
        churners = [first[3], *rng.sample(pool, max(0, min(len(pool), len(self.customers) // 50 - 1)))]
        for c in churners:  # deleted at least 10 min after sign-up, re-created at least 1 min later
            deleted = _between(rng, c.created + timedelta(minutes=10), late - timedelta(hours=1))
            c.churn = (deleted, _between(rng, deleted + timedelta(minutes=1), late))
        for c in self.customers:
            plans: list[tuple[datetime, str]] = []
            if c.created + timedelta(minutes=1) >= late:
                self.customer_timeline(c, plans)  # signed up in the last minute: no time left for changes
                continue
            if c is both or c is two_stmts or c is untracked:
                plans.append((_between(rng, c.created + timedelta(minutes=1), late),
                              {both.cid: "both", two_stmts.cid: "two_statements"}.get(c.cid, "untracked")))
            for _ in range(rng.choice((0, 0, 0, 0, 1, 1, 2))):
                plans.append((_between(rng, c.created + timedelta(minutes=1), late),
                              rng.choice(("country", "tier", "tier", "untracked"))))
            if c.churn:
                plans = [p for p in plans if not c.churn[0] <= p[0] <= c.churn[1]]
            self.customer_timeline(c, sorted(plans))

    def customer_timeline(self, c: _Customer, plans: list[tuple[datetime, str]]) -> None:
        rng, key = self.rng, {"customer_id": c.cid}
        row = dict(c.row)
        self.tx(c.created, "customer_insert", Change("customers", "insert", key, dict(row)))
        pending = [(*p, "change") for p in plans]
        if c.churn:
            pending += [(c.churn[0], "", "delete"), (c.churn[1], "", "recreate")]
        for at, what, step in sorted(pending):
            if step == "delete":
                self.tx(at, "customer_delete", Change("customers", "update", key, {"updated_at": at}),
                        Change("customers", "delete", key))
                continue
            if step == "recreate":
                row = {**self.customer_row(c.cid, at), "email": row["email"], "full_name": row["full_name"]}
                self.tx(at, "customer_recreate", Change("customers", "insert", key, dict(row)))
                continue
            country = rng.choice([x for x in COUNTRIES if x != row["country"]])
            tier = rng.choice([x for x in TIERS if x != row["loyalty_tier"]])
            if what == "both":
                sets = [{"country": country, "loyalty_tier": tier}]
            elif what == "two_statements":
                sets = [{"country": country}, {"loyalty_tier": tier}]
            elif what == "country":
                sets = [{"country": country}]
            elif what == "tier":
                sets = [{"loyalty_tier": tier}]
            else:
                sets = [{"notes": f"called support on {at:%Y-%m-%d}",
                         "profile": _json({"newsletter": rng.random() < 0.5, "langs": ["en"]})}]
            for s in sets:
                row.update(s)
            self.tx(at, f"customer_{what}", *(Change("customers", "update", key, {**s, "updated_at": at}) for s in sets))

    # -- orders -------------------------------------------------------------------------------

    def orders(self) -> None:
        rng = self.rng
        by_start = sorted(self.customers, key=lambda c: c.orders_from)
        starts = [c.orders_from for c in by_start]
        pids = sorted(self.prices)
        placed: list[datetime] = []
        for d in range(self.n_days):
            day = [_curve_time(rng, self.day_start(d)) for _ in range(self.orders_per_day)]
            placed += sorted(max(t, starts[0] + MS) for t in day)
        for i, at in enumerate(placed):
            oid = self.low + 1 + i
            cust = by_start[rng.randrange(bisect.bisect_right(starts, at))]
            items: list[tuple[int, int, Decimal]] = []
            changes: list[Change] = []
            total = Decimal("0.00")
            for line_no, pid in enumerate(rng.sample(pids, rng.choice((1, 1, 2, 2, 3, 4))), start=1):
                qty, price, disc = rng.choice((1, 1, 1, 2, 3)), self.price_at(pid, at), rng.choice(DISCOUNTS)
                total += line_amount(qty, price, disc)
                items.append((pid, qty, price))
                changes.append(Change("order_items", "insert", {"order_id": oid, "line_no": line_no},
                                      {"order_id": oid, "line_no": line_no, "product_id": pid, "quantity": qty,
                                       "unit_price": price, "discount": disc}))
            currency = rng.choice(CURRENCIES)
            order = {"order_id": oid, "customer_id": cust.cid, "status": "pending", "currency": currency,
                     "total": total, "shipping": _json({"city": rng.choice(CITIES)}), "note": None,
                     "placed_at": at, "updated_at": at}
            self.tx(at, "order_placed", Change("orders", "insert", {"order_id": oid}, order), *changes)
            self.orders_by_day[(at - self.start).days].append((at, oid, cust.cid, items, total, currency))
            self.transitions(oid, at)

    def transitions(self, oid: int, at: datetime) -> None:
        rng, steps = self.rng, []
        if rng.random() < 0.1:
            steps.append(("cancelled", timedelta(minutes=rng.randint(15, 720))))
        else:
            steps.append(("paid", timedelta(minutes=rng.randint(1, 120))))
            if rng.random() < 0.05:
                steps.append(("refunded", timedelta(hours=rng.randint(1, 48))))
            else:
                steps.append(("shipped", timedelta(hours=rng.randint(4, 36))))
                if rng.random() < 0.04:
                    steps.append(("refunded", timedelta(hours=rng.randint(24, 72))))
        for status, delay in steps:
            at = at + delay + rng.randrange(1000) * MS
            if at >= self.end:  # never write the future: the order waits in its last status
                return
            self.tx(at, f"order_{status}", Change("orders", "update", {"order_id": oid},
                                                  {"status": status, "updated_at": at}))

    # -- clickstream --------------------------------------------------------------------------

    def event(self, ids: random.Random, at: datetime, event_type: str, user: int, session: str,
              props: dict[str, Any]) -> dict[str, Any]:
        return {"event_id": str(uuid.UUID(int=ids.getrandbits(128), version=4)), "event_type": event_type,
                "user_id": user, "session_id": session, "event_time": format_event_time(at),
                "properties": props, "schema_version": SCHEMA_VERSION}

    def day_events(self, d: int) -> list[dict[str, Any]]:
        """Day ``d``'s events sorted by ``event_time``: a session per order (ending in its purchase), then browsing.

        Each day has its own random streams, so a day's events are made when they are sent, not all held at once.
        """
        # A reproducible workload, not secrets: hence random.Random (S311).
        rng = random.Random(f"history:{self.seed}:events:{d}")  # noqa: S311
        ids = random.Random(f"history:{self.seed}:event-id:{d}")  # noqa: S311
        day0, budget, day, sessions = self.day_start(d), self.events_per_day, [], itertools.count(1)
        orders = list(self.orders_by_day[d])
        rng.shuffle(orders)
        for at, oid, cid, items, total, currency in orders:
            if budget < len(items) + 3:
                continue
            budget -= len(items) + 3
            sid = f"h{self.seed}-d{d + 1}-s{next(sessions)}"
            t0 = max(day0, self.by_id[cid].orders_from, at - timedelta(minutes=rng.randint(2, 20)))
            steps: list[tuple[str, dict[str, Any]]] = [("page_view", {"page": rng.choice(PAGES)})]
            steps += [("add_to_cart", {"product_id": pid, "quantity": q, "price": str(p)}) for pid, q, p in items]
            steps.append(("checkout", {"cart_value": str(total)}))
            gap = (at - t0) / len(steps) // MS * MS
            day += [self.event(ids, t0 + k * gap, et, cid, sid, props) for k, (et, props) in enumerate(steps)]
            day.append(self.event(ids, at, "purchase", cid, sid,
                                  {"order_id": str(oid), "revenue": str(total), "currency": currency}))
        pids = sorted(self.prices)
        while budget > 0:
            n = min(budget, rng.randint(1, 8))
            t0 = max(_curve_time(rng, day0), self.start + timedelta(hours=1))
            gaps = [rng.randint(5_000, 90_000) * MS for _ in range(n)]
            t_end = t0 + sum(gaps, timedelta())
            if t_end >= day0 + timedelta(days=1):
                continue
            cust = self.by_created[rng.randrange(bisect.bisect_right(self.created, t0))]
            if not cust.alive(t0, t_end):
                continue  # deleted meanwhile: pick another visitor
            budget -= n
            sid, t, cart = f"h{self.seed}-d{d + 1}-s{next(sessions)}", t0, Decimal("0.00")
            for k in range(n):
                pid = rng.choice(pids)
                if k and rng.random() < 0.3:
                    price = self.price_at(pid, t)
                    cart += price
                    day.append(self.event(ids, t, "add_to_cart", cust.cid, sid,
                                          {"product_id": pid, "quantity": 1, "price": str(price)}))
                elif k == n - 1 and cart:
                    day.append(self.event(ids, t, "checkout", cust.cid, sid, {"cart_value": str(cart)}))
                else:
                    day.append(self.event(ids, t, "page_view", cust.cid, sid, {"page": f"/p/{pid}"}))
                t += gaps[k]
        day.sort(key=lambda e: e["event_time"])
        return day


def plan_history(seed: int, days: int, end_date: date, *, orders_per_day: int = 200,
                 events_per_day: int = 2000) -> HistoryPlan:
    """The ordered writes of ``days`` UTC days before ``end_date`` for ``seed``; pure and deterministic."""
    validate_args(days, orders_per_day, events_per_day, seed)
    p = _Planner(seed, days, end_date, orders_per_day, events_per_day)
    p.products()
    p.customers_plan()
    p.orders()
    p.by_created = sorted(p.customers, key=lambda c: c.created)
    p.created = [c.created for c in p.by_created]
    p.by_id = {c.cid: c for c in p.customers}
    txs = sorted(p.txs, key=lambda tx: (tx.at, tx.seq))
    return HistoryPlan(seed, p.start, p.end, p.low, p.high, txs, p)
