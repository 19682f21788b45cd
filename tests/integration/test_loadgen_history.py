"""``lake loadgen history`` against the running stack: what it prints is what PostgreSQL holds.

The seed's id range must be free; the stack's state outlives a test session,
so the test takes the first free seed from 7001 on (seeds 7001-7100 are used
by no other test).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from spark_jobs.loadgen.history import rows_in_range
from spark_jobs.loadgen.history_plan import plan_history
from tests.integration.lakehelpers import run_lake

DAYS, ORDERS, EVENTS = 2, 25, 150


def _free_seed(conn: Any) -> int:
    with conn.cursor() as cur:
        for seed in range(7001, 7101):
            if not any(rows_in_range(cur, seed).values()):
                conn.rollback()
                return seed
    raise AssertionError("seeds 7001-7100 all hold history rows; wipe the stack (`make clean`)")


def test_history_rows_match_what_it_printed(shop: Any) -> None:
    seed = _free_seed(shop)
    end = datetime.now(UTC).date()
    proc = run_lake("loadgen", "history", "--days", str(DAYS), "--seed", str(seed), "--orders-per-day", str(ORDERS),
                    "--events-per-day", str(EVENTS), "--end-date", end.isoformat(), "--json", timeout=300)
    printed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "day 2/2" in proc.stderr  # progress
    low, high = printed["id_range"]
    start, stop = (datetime.fromisoformat(t) for t in printed["window"])
    assert printed["seed"] == seed and printed["days"] == DAYS and stop.date() == end

    with shop.cursor() as cur:
        # rows per table, as printed and as planned
        held = rows_in_range(cur, seed)
        assert held == {t: c["rows"] for t, c in printed["tables"].items()}
        plan = plan_history(seed, DAYS, end, orders_per_day=ORDERS, events_per_day=EVENTS)
        assert held == {t: c["insert"] - c["delete"] for t, c in plan.counts().items()}  # the plan's final rows
        assert printed["plan_sha256"] == plan.digest()
        assert held["orders"] == DAYS * ORDERS

        # times: inside the window, and the newest is the last planned change
        cur.execute("SELECT min(created_at), max(updated_at) FROM customers WHERE customer_id >= %s AND customer_id < %s",
                    (low, high))
        c_min, c_max = cur.fetchone()
        cur.execute("SELECT min(placed_at), max(placed_at), max(updated_at) FROM orders "
                    "WHERE order_id >= %s AND order_id < %s", (low, high))
        o_min, o_max, o_upd = cur.fetchone()
        cur.execute("SELECT max(updated_at) FROM products WHERE product_id >= %s AND product_id < %s", (low, high))
        p_upd = cur.fetchone()[0]
        assert start <= c_min and start <= o_min and o_max < stop
        assert max(c_max, o_upd, p_upd) == datetime.fromisoformat(printed["last_change_at"])
        assert max(c_max, o_upd, p_upd) < stop

        # the customers are exactly the planned rows (same seed -> identical rows)
        model: dict[int, dict[str, Any]] = {}
        for tx in plan.txs:
            for ch in tx.changes:
                if ch.table == "customers":
                    cid = ch.key["customer_id"]
                    if ch.kind == "delete":
                        model.pop(cid)
                    else:
                        model.setdefault(cid, {}).update(ch.values)
        cur.execute("SELECT customer_id, email, country, loyalty_tier, created_at, updated_at FROM customers "
                    "WHERE customer_id >= %s AND customer_id < %s ORDER BY customer_id", (low, high))
        assert cur.fetchall() == [(cid, r["email"], r["country"], r["loyalty_tier"], r["created_at"], r["updated_at"])
                                  for cid, r in sorted(model.items())]

        # totals follow the shop's rule (round half even per line), and statuses moved
        cur.execute("SELECT o.order_id, o.total, i.quantity, i.unit_price, i.discount FROM orders o "
                    "JOIN order_items i USING (order_id) WHERE o.order_id >= %s AND o.order_id < %s", (low, high))
        totals: dict[int, Decimal] = {}
        stored: dict[int, Decimal] = {}
        for oid, total, qty, price, disc in cur.fetchall():
            line = (Decimal(qty) * price * (1 - (disc or Decimal(0)))).quantize(Decimal("0.01"), ROUND_HALF_EVEN)
            totals[oid] = totals.get(oid, Decimal(0)) + line
            stored[oid] = total
        assert stored == totals and len(stored) == DAYS * ORDERS
        cur.execute("SELECT count(*) FROM orders WHERE order_id >= %s AND order_id < %s AND status <> 'pending'",
                    (low, high))
        assert cur.fetchone()[0] > 0
    shop.rollback()

    ev = printed["events"]
    assert ev["sent"] == ev["delivered"] == DAYS * EVENTS
    assert ev["by_type"]["purchase"] > 0

    # a second run of the same seed refuses, naming the seed and the fix
    again = run_lake("loadgen", "history", "--days", str(DAYS), "--seed", str(seed), "--end-date", end.isoformat(),
                     check=False)
    assert again.returncode == 2
    assert f"seed {seed}'s id range" in again.stderr and "make clean" in again.stderr
