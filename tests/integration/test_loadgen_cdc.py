"""The CDC load generator against the running shop database.

Checks the report against PostgreSQL's own counters (pg_stat_user_tables),
the final rows against the planner's model, foreign keys, the edge cases, and
that the executed sequence is exactly the seeded plan.
"""

from __future__ import annotations

import copy
import time
from decimal import Decimal

import psycopg2
import pytest

from spark_jobs.loadgen.cdc.execute import LoadgenError, LoadReport
from spark_jobs.loadgen.cdc.model import NEW_ID_FLOOR, Item, ShopState, load_state
from spark_jobs.loadgen.cdc.plan import TABLES, plan_digest
from spark_jobs.loadgen.cdc.planner import plan_ops
from spark_jobs.loadgen.cdc.rows import order_total
from spark_jobs.loadgen.cdc.runner import run
from spark_jobs.settings import Settings
from spark_jobs.verify import diff_tables, pg_rows

SEED = 1
# Enough ops that the default four sessions run many of them at once (the checks below then
# show that the concurrent run left exactly the plan's rows).
MAX_CHANGES = 3000


def _copy(state: ShopState) -> ShopState:
    return copy.deepcopy(state)


def _stats(conn) -> dict[str, tuple[int, int, int]]:
    with conn.cursor() as cur:
        cur.execute("SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables "
                    "WHERE schemaname = 'public' AND relname = ANY (%s)", (list(TABLES),))
        out = {r[0]: (int(r[1]), int(r[2]), int(r[3])) for r in cur.fetchall()}
    conn.rollback()  # pg_stat values are cached per transaction
    return out


def _expected_delta(report: LoadReport) -> dict[str, tuple[int, int, int]]:
    # pg_stat counts rows written by aborted transactions too: committed + rolled back.
    return {t: tuple(report.changes[t][k] + report.rolled_back_changes[t][k]  # type: ignore[misc]
                     for k in ("insert", "update", "delete")) for t in TABLES}


@pytest.fixture(scope="module")
def loaded(stack: Settings) -> dict[str, object]:
    """Run the workload once (seed 1, 3000 changes, four sessions); keep what the tests below look at."""
    conn = psycopg2.connect(stack.pg_dsn(stack.pg_shop_db))
    try:
        with conn.cursor() as cur:
            start_state = load_state(cur)
        conn.rollback()
        before = _stats(conn)
        report = run(stack, rate=5000, duration=120, seed=SEED, max_changes=MAX_CHANGES, connections=4)
        # The loadgen's backends flush their counters when they exit, a moment after close.
        expected = _expected_delta(report)
        deadline = time.monotonic() + 15
        while True:
            after = _stats(conn)
            delta = {t: tuple(a - b for a, b in zip(after[t], before[t], strict=True)) for t in TABLES}
            if delta == expected or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        with conn.cursor() as cur:
            end_state = load_state(cur)
        conn.rollback()
    finally:
        conn.close()
    return {"start": start_state, "end": end_state, "report": report, "delta": delta, "expected": expected}


def test_report_counts_match_pg_stat(loaded):
    report: LoadReport = loaded["report"]
    print(report.summary())
    assert report.stopped_by == "max-changes"
    assert MAX_CHANGES - 15 <= report.total_changes <= MAX_CHANGES
    assert loaded["delta"] == loaded["expected"], "pg_stat deltas differ from the report (another writer on shop?)"


def test_executed_sequence_is_the_seeded_plan(stack, loaded):
    report: LoadReport = loaded["report"]
    n_ops = sum(report.ops.values())
    planned_state = _copy(loaded["start"])
    ops = plan_ops(planned_state, SEED, n_ops)
    assert plan_digest(ops) == report.digest
    # The planner's model after those ops is what the database now holds:
    # rolled-back work left no trace, every reinsert/PK change landed where planned.
    assert planned_state.snapshot() == loaded["end"].snapshot(), \
        "database differs from the planner's model (another writer on shop during the run?)"


def test_same_seed_same_start_state_same_plan(loaded):
    end = loaded["end"]
    first = plan_ops(_copy(end), SEED, 200)
    second = plan_ops(_copy(end), SEED, 200)
    assert plan_digest(first) == plan_digest(second)
    assert plan_digest(first) != plan_digest(plan_ops(_copy(end), SEED + 1, 200))


def test_edge_cases_happened(loaded):
    report: LoadReport = loaded["report"]
    ops = report.ops
    assert ops["customer_pk_change"] >= 1 and ops["item_renumber"] >= 1
    assert ops["customer_delete"] >= 1 and ops["customer_reinsert"] >= 1
    assert ops["order_delete"] + ops["item_delete"] >= 1 and ops["order_reinsert"] + ops["item_reinsert"] >= 1
    assert ops["customer_big_notes"] + ops["product_big_description"] >= 1
    assert ops["interleaved"] >= 1 and ops["order_twice"] >= 1
    assert report.rollbacks >= 1 and report.savepoint_rollbacks >= 1
    assert report.total_rolled_back >= 1


def test_toast_sized_text_is_stored_out_of_line(shop):
    with shop.cursor() as cur:
        # A tuple cannot exceed a page: a stored size above 8 kB means TOASTed out of line.
        cur.execute("SELECT count(*) FROM customers WHERE pg_column_size(notes) > 8192")
        row = cur.fetchone()
    assert row is not None and row[0] >= 1


def test_foreign_keys_hold_and_new_order_totals_are_exact(shop):
    with shop.cursor() as cur:
        cur.execute("SELECT count(*) FROM order_items i LEFT JOIN orders o USING (order_id) WHERE o.order_id IS NULL")
        assert cur.fetchone() == (0,)
        cur.execute("SELECT count(*) FROM orders o LEFT JOIN customers c USING (customer_id) WHERE c.customer_id IS NULL")
        assert cur.fetchone() == (0,)
        cur.execute("SELECT count(*) FROM order_items i LEFT JOIN products p USING (product_id) WHERE p.product_id IS NULL")
        assert cur.fetchone() == (0,)
        cur.execute("SELECT o.order_id, o.total, i.line_no, i.product_id, i.quantity, i.unit_price, i.discount "
                    "FROM orders o LEFT JOIN order_items i USING (order_id) WHERE o.order_id > %s", (NEW_ID_FLOOR,))
        rows = cur.fetchall()
    totals: dict[int, Decimal] = {}
    items: dict[int, dict[int, Item]] = {}
    for oid, total, line_no, pid, qty, price, discount in rows:
        totals[oid] = total
        items.setdefault(oid, {})
        if line_no is not None:
            items[oid][line_no] = Item(pid, qty, price, discount)
    assert totals
    assert {oid: order_total(items[oid]) for oid in totals} == totals


def test_pg_rows_are_normalised_and_comparable(stack):
    customers = pg_rows(stack, "customers")
    assert customers == sorted(customers, key=lambda r: r["customer_id"])
    for row in customers:
        assert row["created_at"].utcoffset().total_seconds() == 0
        assert row["profile"] is None or isinstance(row["profile"], dict)
    items = pg_rows(stack, "order_items")
    assert all(isinstance(r["unit_price"], Decimal) for r in items)
    orders = pg_rows(stack, "orders")
    assert all(len(r["currency"]) == 3 for r in orders)
    assert diff_tables(orders, [dict(r) for r in orders], ["order_id"], list(orders[0])) == []
    with pytest.raises(ValueError, match=r"no table public\.nope"):
        pg_rows(stack, "nope")


def test_connection_failure_names_endpoint_and_fix(stack):
    bad = stack.model_copy(update={"pg_port": 1})
    with pytest.raises(LoadgenError, match=r"(?s)PostgreSQL at 127\.0\.0\.1:1 .*`lake stack up`"):
        run(bad, rate=10, duration=1, seed=0)
