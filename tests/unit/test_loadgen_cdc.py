"""Pure parts of the CDC load generator and of the silver-vs-PostgreSQL comparison (no services)."""

from __future__ import annotations

import random
from collections import Counter
from decimal import Decimal

import pytest

from spark_jobs.loadgen.cdc.model import Item, Pool
from spark_jobs.loadgen.cdc.pacing import TokenBucket
from spark_jobs.loadgen.cdc.plan import Op, Stmt, iter_changes, plan_digest
from spark_jobs.loadgen.cdc.planner import OP_WEIGHTS, PRELUDE, Planner, WeightedChooser, plan_ops
from spark_jobs.loadgen.cdc.rows import BIG_TEXT_CHARS, order_total
from tests.unit.shop_snapshot import seeded_state

# --- choosing operations


def test_weighted_chooser_same_seed_same_sequence():
    a = WeightedChooser(OP_WEIGHTS)
    b = WeightedChooser(OP_WEIGHTS)
    ra, rb = random.Random(7), random.Random(7)
    assert [a.pick(ra) for _ in range(500)] == [b.pick(rb) for _ in range(500)]


def test_weighted_chooser_follows_weights():
    chooser = WeightedChooser({"a": 1, "b": 3, "never": 0})
    rng = random.Random(0)
    counts = Counter(chooser.pick(rng) for _ in range(20_000))
    assert counts["never"] == 0
    assert 2.8 < counts["b"] / counts["a"] < 3.2


def test_weighted_chooser_rejects_bad_weights():
    with pytest.raises(ValueError, match="positive sum"):
        WeightedChooser({"a": 0})
    with pytest.raises(ValueError, match="non-negative"):
        WeightedChooser({"a": 2, "b": -1})


def test_pool_choice_is_deterministic_after_removals():
    def build() -> Pool[int]:
        pool = Pool(range(10))
        pool.discard(3)
        pool.discard(9)
        pool.add(42)
        return pool

    assert [build().choice(random.Random(1)) for _ in range(3)] == [build().choice(random.Random(1))] * 3
    pool = build()
    assert sorted(pool) == [0, 1, 2, 4, 5, 6, 7, 8, 42] and 3 not in pool and len(pool) == 9


# --- the plan


def test_plan_is_deterministic_for_a_seed():
    first, second = plan_ops(seeded_state(), 1, 400), plan_ops(seeded_state(), 1, 400)
    assert [op.signature() for op in first] == [op.signature() for op in second]
    assert plan_digest(first) == plan_digest(second)


def test_other_seed_other_plan():
    assert plan_digest(plan_ops(seeded_state(), 1, 50)) != plan_digest(plan_ops(seeded_state(), 2, 50))


def test_plan_starts_with_the_edge_case_prelude_and_a_rollback():
    ops = plan_ops(seeded_state(), 3, len(PRELUDE) * 3)
    assert [op.name for op in ops[::3]] == list(PRELUDE)
    assert ops[4].rollback


def test_plan_covers_every_operation_and_keeps_ids_above_floor():
    ops = plan_ops(seeded_state(), 5, 3000)
    names = Counter(op.name for op in ops)
    assert set(names) == set(OP_WEIGHTS)
    inserted_customer_ids = {s.params[0] for op in ops for s in op.statements
                             if s.kind == "insert" and s.table == "customers" and op.name == "insert_customer"}
    assert min(inserted_customer_ids) > 1000


def test_plan_model_keeps_foreign_keys_valid():
    st = seeded_state()
    plan_ops(st, 11, 3000)
    for oid, order in st.orders.items():
        assert order.customer_id in st.customers, oid
        for item in order.items.values():
            assert item.product_id in st.products
    for cid in st.customers:
        n = sum(1 for o in st.orders.values() if o.customer_id == cid)
        assert st.customer_orders[cid] == n
        assert (cid in st.orderless) == (n == 0)


def test_customer_pk_change_only_for_customers_without_orders():
    st = seeded_state()
    planner = Planner(st, 0, prelude=False)
    op, apply = planner._plan_customer_pk_change() or pytest.fail("customer 2 has no orders")
    assert op.statements[0].params[2] == 2  # the only orderless seeded customer
    apply()
    assert 2 not in st.customers and 2 in st.deleted_customers and op.statements[0].params[0] in st.customers


def test_rolled_back_op_leaves_model_untouched():
    st = seeded_state()
    planner = Planner(st, 0)
    planner.count = 4  # the next op is the forced rollback
    before = st.snapshot()
    op = planner.next_op()
    assert op.rollback and op.committed_changes() == 0
    assert st.snapshot() == before


def test_big_text_is_toast_sized():
    op = Planner(seeded_state(), 0, prelude=False)._plan_customer_big_notes()[0]
    notes = op.statements[0].params[0]
    assert notes is None or len(notes.encode("utf-8")) > 8192 >= BIG_TEXT_CHARS - 4000


def test_order_total_is_exact():
    items = {1: Item(10, 3, Decimal("18.90"), None), 2: Item(11, 1, Decimal("24.00"), Decimal("0.3333"))}
    # 56.70 + 24.00 * 0.6667 = 56.70 + 16.0008 -> 16.00
    assert order_total(items) == Decimal("72.70")
    assert str(order_total({})) == "0.00"


def test_change_counting_with_cascade_and_savepoint():
    op = Op("x", (
        Stmt("delete", "orders", "DELETE ...", rows=1, cascade_items=3),
        Stmt("savepoint", "", "SAVEPOINT s"),
        Stmt("insert", "customers", "INSERT ...", rows=1),
        Stmt("rollback_to_savepoint", "", "ROLLBACK TO SAVEPOINT s"),
        Stmt("update", "customers", "UPDATE ...", rows=1),
    ))
    changes = sorted(iter_changes(op))
    assert changes == [("customers", "insert", 1, False), ("customers", "update", 1, True),
                       ("order_items", "delete", 3, True), ("orders", "delete", 1, True)]
    assert op.committed_changes() == 5
    assert Op("x", op.statements, rollback=True).committed_changes() == 0


# --- pacing


def test_token_bucket_spends_burst_then_waits_for_the_rate():
    bucket = TokenBucket(rate=100, burst=10, now=0.0)
    assert bucket.take(10, now=0.0) == 0.0
    assert bucket.take(5, now=0.0) == pytest.approx(0.05)  # 5 tokens short at 100/s


def test_token_bucket_long_run_rate():
    bucket = TokenBucket(rate=1000, burst=50, now=0.0)
    now = 0.0
    for _ in range(2000):  # 2000 transactions of 3 changes, slept exactly as asked
        now += bucket.take(3, now)
    assert now == pytest.approx(6000 / 1000 - 50 / 1000, rel=1e-6)


def test_token_bucket_caps_saved_tokens():
    bucket = TokenBucket(rate=10, burst=5, now=0.0)
    assert bucket.take(5, now=100.0) == 0.0  # idle for 100 s saves 5 tokens, not 1000
    assert bucket.take(1, now=100.0) == pytest.approx(0.1)


def test_token_bucket_rejects_non_positive_rate():
    with pytest.raises(ValueError, match="rate must be > 0"):
        TokenBucket(rate=0, burst=1, now=0.0)


